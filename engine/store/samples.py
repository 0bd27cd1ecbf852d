"""Reconstruction samples: the fixed validation images, their masks and the model's output.

The worker saves one ``samples/recon-NNNNNNN.npz`` per eval (atomically); the run detail page
reads the latest with :func:`load_samples`.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import DamagedFileError
from engine.store.runs import run_dir
from engine.workspace import atomic_write_bytes

SAMPLES_DIR = "samples"


@dataclass(frozen=True)
class ReconSample:
    """Reconstructions of the run's fixed validation images at one step.

    Attributes:
        step: optimizer step at which they were made.
        images: float32 [N, C, H, W] in [0, 1], the originals.
        mask: bool [N, h, w], True = masked (hidden from the encoder).
        pred_img: float32 [N, C, H, W] in [0, 1], the decoder's reconstruction of every patch.
        pasted: float32 [N, C, H, W], reconstruction with the visible patches pasted back.
        labels: int64 [N]; class_names: the dataset's class names; patch_size: P in pixels.
    """

    step: int
    images: np.ndarray
    mask: np.ndarray
    pred_img: np.ndarray
    pasted: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]
    patch_size: int


def save_samples(d: Path, s: ReconSample) -> Path:
    """Write ``s`` to ``d/samples/recon-<step>.npz`` atomically; returns the path.

    Raises:
        StorageError: the file cannot be written (disk full...); no temporary file is left.
    """
    buf = io.BytesIO()
    np.savez_compressed(
        buf, step=s.step, images=s.images.astype(np.float32), mask=s.mask.astype(bool),
        pred_img=s.pred_img.astype(np.float32), pasted=s.pasted.astype(np.float32),
        labels=s.labels.astype(np.int64), class_names=json.dumps(list(s.class_names)),
        patch_size=s.patch_size,
    )
    path = Path(d) / SAMPLES_DIR / f"recon-{s.step:07d}.npz"
    atomic_write_bytes(path, buf.getvalue(), what=f"reconstruction samples of step {s.step}")
    return path


def sample_steps(run_id: str, workspace=None) -> list[int]:
    """Steps at which samples exist, ascending."""
    return sorted(int(p.stem.split("-")[1]) for p in (run_dir(run_id, workspace) / SAMPLES_DIR).glob("recon-*.npz"))


def load_samples(run_id: str, step: int | None = None, workspace=None) -> ReconSample | None:
    """Samples at ``step`` (the latest when None); None if the run has none yet.

    Raises:
        RunNotFoundError: unknown run.
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
    try:
        with np.load(path, allow_pickle=False) as z:
            return ReconSample(
                step=int(z["step"]), images=z["images"], mask=z["mask"], pred_img=z["pred_img"],
                pasted=z["pasted"], labels=z["labels"], class_names=tuple(json.loads(str(z["class_names"]))),
                patch_size=int(z["patch_size"]),
            )
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
        raise DamagedFileError(f"{path}: unreadable reconstruction samples ({e}); "
                               f"`python -m engine doctor` reports damaged files") from None
