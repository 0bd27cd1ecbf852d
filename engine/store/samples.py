"""Reconstruction samples: what a task shows of its fixed validation rows at one eval step.

The worker saves one ``samples/recon-NNNNNNN.npz`` per eval (atomically, no pickles): a ``kind``
naming the view that draws it (the task's modality view: ``image``, ``text_mlm``...), named arrays
and a small JSON ``meta``. The run detail page reads them with :func:`load_samples` and hands them
to the modality's view; the store never interprets the arrays.

Files written before samples had a kind (image runs of the first format) load as kind ``image``.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import DamagedFileError
from engine.messages import describe_error
from engine.store.paths import run_dir
from engine.workspace import atomic_write_bytes

SAMPLES_DIR = "samples"
_KIND, _META = "__kind__", "__meta__"


@dataclass(frozen=True)
class Sample:
    """A task's reconstruction samples at one step.

    Attributes:
        step: optimizer step at which they were made.
        kind: the view that draws them (``image``, ``text_mlm``, ``text_span``...).
        arrays: named numpy arrays. The ``image`` kind has ``images`` float32 ``[N, C, H, W]`` in
            [0, 1], ``mask`` bool ``[N, h, w]`` (True = masked), ``pred_img`` and ``pasted`` float32
            ``[N, C, H, W]`` (the prediction of every patch; the prediction at masked patches with the
            originals pasted at visible ones) and ``labels`` int64 ``[N]``.
        meta: JSON-safe extras (``class_names``, ``patch_size``...).
    """

    step: int
    kind: str
    arrays: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]


def save_samples(d: Path, s: Sample) -> Path:
    """Write ``s`` to ``d/samples/recon-<step>.npz`` atomically; returns the path.

    Raises:
        ValueError: an array name collides with the reserved ``__kind__`` / ``__meta__``, or an
            array has object dtype (it would need a pickle).
        StorageError: the file cannot be written (disk full...); no temporary file is left.
    """
    for k, a in s.arrays.items():
        if k in (_KIND, _META) or np.asarray(a).dtype == object:
            raise ValueError(f"sample array {k!r}: reserved name or object dtype")
    buf = io.BytesIO()
    np.savez_compressed(buf, **{_KIND: s.kind, _META: json.dumps(s.meta), "step": s.step}, **s.arrays)
    path = Path(d) / SAMPLES_DIR / f"recon-{s.step:07d}.npz"
    atomic_write_bytes(path, buf.getvalue(), what=f"reconstruction samples of step {s.step}")
    return path


def sample_steps(run_id: str, workspace=None) -> list[int]:
    """Steps at which samples exist, ascending."""
    return sorted(int(p.stem.split("-")[1]) for p in (run_dir(run_id, workspace) / SAMPLES_DIR).glob("recon-*.npz"))


def sample_files(run_id: str, workspace=None) -> dict[int, int]:
    """Step -> the samples file's modification time (ns) of every saved evaluation, ascending by
    step: which steps exist, and a version that changes when a resume writes a step again.

    Raises:
        RunNotFoundError: unknown run id.
    """
    out = {}
    for p in (run_dir(run_id, workspace) / SAMPLES_DIR).glob("recon-*.npz"):
        try:
            out[int(p.stem.split("-")[1])] = p.stat().st_mtime_ns
        except (ValueError, OSError):  # a stray name, or a file removed by a resume meanwhile
            continue
    return dict(sorted(out.items()))


def delete_samples_after(d: Path, step: int) -> int:
    """Delete the run folder ``d``'s samples of steps after ``step`` (a resume from ``step`` makes them
    again). Only for the holder of the run lock. Returns how many files were removed."""
    n = 0
    for p in (Path(d) / SAMPLES_DIR).glob("recon-*.npz"):
        try:
            later = int(p.stem.split("-")[1]) > step
        except ValueError:
            continue
        if later:
            p.unlink(missing_ok=True)
            n += 1
    return n


def read_sample_file(path: Path) -> Sample:
    """The samples in ``path``. Raises DamagedFileError naming ``path`` when it cannot be read."""
    try:
        return _decode(path)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
        raise DamagedFileError(f"{path}: unreadable reconstruction samples ({describe_error(e)}); "
                               f"`python -m engine doctor` reports damaged files") from None


def _decode(path: Path) -> Sample:
    with np.load(path, allow_pickle=False) as z:
        names = set(z.files)
        if _KIND in names:
            arrays = {k: z[k] for k in names - {_KIND, _META, "step"}}
            return Sample(int(z["step"]), str(z[_KIND]), arrays, json.loads(str(z[_META])))
        # first format (image runs only): fixed keys, class names as a JSON string
        arrays = {k: z[k] for k in ("images", "mask", "pred_img", "pasted", "labels")}
        meta = {"class_names": json.loads(str(z["class_names"])), "patch_size": int(z["patch_size"])}
        return Sample(int(z["step"]), "image", arrays, meta)


def load_samples(run_id: str, step: int | None = None, workspace=None) -> Sample | None:
    """Samples at ``step`` (the latest when None); None if the run has none (at that step) yet.

    Raises:
        RunNotFoundError: unknown run id.
        DamagedFileError: the samples file cannot be read (the message names it).
    """
    d = run_dir(run_id, workspace) / SAMPLES_DIR
    if step is None:
        files = sorted(d.glob("recon-*.npz"))
        if not files:
            return None
        path = files[-1]
    else:
        path = d / f"recon-{step:07d}.npz"
        if not path.exists():
            return None
    return read_sample_file(path)
