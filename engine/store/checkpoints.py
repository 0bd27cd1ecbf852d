"""Checkpoints: ``checkpoints/step-NNNNNNN/`` = ``model.safetensors`` + ``state.pt`` + ``manifest.json``.

``model.safetensors`` holds the weights only (no pickle). ``state.pt`` loads with
``torch.load(weights_only=True)`` (plain tensors, dicts, lists, numbers and strings):

========== ==============================================================================
step       optimizer steps done
optimizer  ``optimizer.state_dict()`` (AdamW moments and step counts, param-group settings)
config     the resolved config the run trained with up to this step
rng        ``g_mask`` (training masks), ``g_data`` (batch order), ``cuda`` (on a CUDA run)
torch_rng  the global torch CPU RNG
loop       ``perm`` (this epoch's order, int32/int64 ``[n_train]``), ``pos`` (rows used),
           ``val_first`` / ``val_last`` (val loss at step 0 / latest)
task       :meth:`engine.tasks.Task.state_dict`; ``{}`` for most tasks
========== ==============================================================================

A checkpoint without ``loop`` or ``task`` still resumes (a new epoch order is drawn from the
restored ``g_data``). Complete when ``manifest.json`` (written last: sizes, and each file's SHA-256, checked on load) matches its files; format 1
checkpoints (no manifest) when both files are whole. Built in ``.tmp-step-NNNNNNN-<pid>`` and
renamed into place; a failed write removes it and raises :class:`~engine.errors.StorageError`.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import re
import shutil
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import DamagedFileError, FormatVersionError
from engine.messages import unpickling_reason
from engine.store.paths import run_dir
from engine.workspace import fsync_dir, storage_error, write_new_file

CKPT_DIR = "checkpoints"
WEIGHTS, STATE, MANIFEST = "model.safetensors", "state.pt", "manifest.json"
CKPT_FORMAT = 2
_STEP = re.compile(r"^step-(\d+)$")


def plain_state(obj: Any, where: str = "rng") -> Any:
    """``obj`` with every value made loadable by ``torch.load(weights_only=True)``.

    Tensors, dicts (string keys), lists, tuples, str, int, float, bool and None pass through;
    a ``torch.Generator`` becomes its state (uint8 tensor); numpy arrays become tensors, numpy
    scalars Python numbers; bytes a uint8 tensor. ``random.getstate()`` and
    ``numpy.random.get_state()`` are covered (tuples of those types).

    Raises:
        TypeError: anything else, naming where it is (e.g. ``rng.sampler``).
    """
    import torch  # noqa: PLC0415 (the store serves the dashboard without torch)

    if obj is None or isinstance(obj, (bool, int, float, str, torch.Tensor)):
        return obj
    if isinstance(obj, torch.Generator):
        return obj.get_state()
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj).copy())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (bytes, bytearray)):
        return torch.frombuffer(bytearray(obj), dtype=torch.uint8)
    if isinstance(obj, dict):
        return {str(k): plain_state(v, f"{where}.{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [plain_state(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    raise TypeError(f"{where}: {type(obj).__name__} cannot be stored in a checkpoint loadable with "
                    f"weights_only=True; store its state as tensors, numbers, strings, lists or dicts")


def save_checkpoint(run_dir: Path, step: int, model, optimizer, cfg, rng: dict, *, keep: int = 2,
                    loop: dict | None = None, task_state: dict | None = None) -> Path:
    """Write the checkpoint of ``step`` and delete all but the newest ``keep`` complete ones. Returns its folder.

    Args:
        run_dir: the run folder. step: optimizer steps done. model: its ``state_dict()`` goes to
        safetensors. optimizer: its ``state_dict()`` goes to ``state.pt``. cfg: a ``RunConfig``
        (``to_dict()`` is stored). rng: generator states etc., made loadable by :func:`plain_state`.
        keep: complete checkpoints kept (the newest ones). loop: the training loop's position
        (data order...). task_state: the task's own state. Both are stored through :func:`plain_state`.

    Raises:
        StorageError: a file cannot be written (disk full...); the temporary folder is removed and
            the earlier checkpoints are untouched.
        TypeError: ``rng`` holds something :func:`plain_state` cannot store.
    """
    import torch  # noqa: PLC0415 (the store serves the dashboard without torch)
    from safetensors.torch import save as save_tensors  # noqa: PLC0415 (the store serves the dashboard without torch)

    root = Path(run_dir) / CKPT_DIR
    final = root / f"step-{step:07d}"
    tmp = root / f".tmp-step-{step:07d}-{os.getpid()}"
    old = root / f".tmp-old-step-{step:07d}-{os.getpid()}"
    state = {"format": CKPT_FORMAT, "step": int(step), "optimizer": optimizer.state_dict(), "config": cfg.to_dict(),
             "rng": plain_state(rng), "torch_rng": torch.get_rng_state(),
             "loop": plain_state(loop or {}, "loop"), "task": plain_state(task_state or {}, "task")}
    current = final / WEIGHTS  # what is being written, for the error message
    try:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        blobs = {WEIGHTS: save_tensors(weights, metadata={"step": str(step), "format": str(CKPT_FORMAT)})}
        buf = io.BytesIO()
        torch.save(state, buf)
        blobs[STATE] = buf.getbuffer()
        for name, data in blobs.items():
            current = final / name
            write_new_file(tmp / name, data)
        current = final / MANIFEST
        manifest = {"format": CKPT_FORMAT, "step": int(step), "files": {k: len(v) for k, v in blobs.items()},
                    "sha256": {k: hashlib.sha256(v).hexdigest() for k, v in blobs.items()}}
        write_new_file(tmp / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
        fsync_dir(tmp)
        current = final
        if final.exists():  # the same step again (a stop right at a checkpoint step): swap it
            os.replace(final, old)
        try:
            os.replace(tmp, final)
        except OSError:
            if old.exists():
                os.replace(old, final)
            raise
        fsync_dir(root)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise storage_error(e, f"checkpoint step {step}", current) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    complete = [p for p in list_checkpoints(run_dir) if checkpoint_complete(p)]
    for stale in complete[:-keep]:
        shutil.rmtree(stale, ignore_errors=True)
    return final


def checkpoint_step(ckpt_dir: Path) -> int:
    """The step of a checkpoint folder (``step-0000500`` -> 500). Raises ValueError for another name."""
    m = _STEP.match(Path(ckpt_dir).name)
    if m is None:
        raise ValueError(f"{ckpt_dir}: not a checkpoint folder (step-NNNNNNN)")
    return int(m.group(1))


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoint folders of a run (complete or not), oldest first."""
    root = Path(run_dir) / CKPT_DIR
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if _STEP.match(p.name) and p.is_dir()), key=checkpoint_step)


def _safetensors_whole(path: Path) -> bool:
    """True when a safetensors file's header parses and the file holds every byte it announces."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8:
                return False
            header = json.loads(f.read(n))
    except (OSError, ValueError, struct.error):
        return False
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    return 8 + n + max(ends, default=0) <= size


def checkpoint_problem(ckpt_dir: Path) -> str | None:
    """Why ``ckpt_dir`` is not a complete checkpoint, or None if it is.

    Format 2: the manifest must parse and every listed file must have its listed size. Format 1
    (no manifest): both files must be whole (safetensors header and data, ``state.pt``'s zip index).
    """
    d = Path(ckpt_dir)
    weights, state = d / WEIGHTS, d / STATE
    try:
        manifest = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        manifest = None
    except (OSError, ValueError) as e:
        return f"unreadable {MANIFEST} ({e})"
    if manifest is not None:
        try:
            for name, size in manifest["files"].items():
                actual = (d / name).stat().st_size if (d / name).exists() else None
                if actual != size:
                    return f"{name}: {'missing' if actual is None else f'{actual} bytes, manifest says {size}'}"
        except (KeyError, AttributeError, TypeError) as e:
            return f"malformed {MANIFEST} ({e})"
    for f in (weights, state):
        if not f.is_file() or f.stat().st_size == 0:
            return f"{f.name} missing or empty"
    if not _safetensors_whole(weights):
        return f"{WEIGHTS} is truncated or not safetensors"
    if not zipfile.is_zipfile(state):
        return f"{STATE} is truncated or not a torch checkpoint"
    return None


def verify_hash(path: Path) -> None:
    """Check a checkpoint file against the SHA-256 its folder's manifest lists (manifests written
    before hashes were kept list none: nothing to check). Read in 1 MiB blocks.

    Raises:
        DamagedFileError: the file's hash differs (changed or damaged since it was written).
    """
    path = Path(path)
    try:
        listed = (json.loads((path.parent / MANIFEST).read_text(encoding="utf-8")).get("sha256") or {}).get(path.name)
    except (OSError, ValueError, AttributeError):
        return  # no manifest (format 1) or none readable: checkpoint_problem says so where it matters
    if not listed:
        return
    h = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for block in iter(lambda: f.read(2**20), b""):
                h.update(block)
    except OSError as e:
        raise DamagedFileError(f"{path}: unreadable ({e})") from None
    if h.hexdigest() != listed:
        raise DamagedFileError(f"{path}: its SHA-256 differs from the one its manifest lists (changed or damaged "
                               "since it was written); `python -m engine doctor` reports damaged files")


def checkpoint_complete(ckpt_dir: Path) -> bool:
    """True when :func:`checkpoint_problem` finds nothing wrong."""
    return checkpoint_problem(ckpt_dir) is None


def latest_complete_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint folder of a run (half-written or damaged ones skipped), or None."""
    for p in reversed(list_checkpoints(run_dir)):
        if checkpoint_complete(p):
            return p
    return None


def latest_checkpoint_step(run_id: str, workspace=None) -> int | None:
    """Step of the run's newest complete checkpoint (what a resume starts from), or None.
    Raises RunNotFoundError for an unknown run."""
    p = latest_complete_checkpoint(run_dir(run_id, workspace))
    return checkpoint_step(p) if p is not None else None


def load_checkpoint_state(ckpt_dir: Path) -> dict[str, Any]:
    """The non-weight state of a checkpoint (``step``, ``optimizer``, ``config``, ``rng``, ``torch_rng``,
    ``loop``, ``task``: see the module docstring; the last two may be missing in older checkpoints).

    Loaded with ``torch.load(weights_only=True)`` on CPU: nothing in the file can run code.

    Raises:
        DamagedFileError: ``state.pt`` is missing, truncated or holds something weights_only refuses.
        FormatVersionError: written by a newer masklab.
    """
    import torch  # noqa: PLC0415 (the store serves the dashboard without torch)

    path = Path(ckpt_dir) / STATE
    verify_hash(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:  # objects that need code to load: never loaded, never advised to
        raise DamagedFileError(f"{path}: holds more than plain tensors and numbers ({unpickling_reason(e)}); "
                               "masklab never runs a checkpoint's code") from None
    except (OSError, RuntimeError, EOFError, ValueError) as e:
        raise DamagedFileError(f"{path}: unreadable checkpoint state ({str(e).splitlines()[0][:200]})") from None
    if not isinstance(state, dict):
        raise DamagedFileError(f"{path}: expected a dict, found {type(state).__name__}")
    if int(state.get("format", 1)) > CKPT_FORMAT:
        raise FormatVersionError(f"{path}: checkpoint format {state['format']} is newer than this masklab "
                                 f"reads ({CKPT_FORMAT}); upgrade masklab")
    return state


def load_weights(ckpt_dir: Path) -> dict[str, Any]:
    """The model state dict stored in ``ckpt_dir/model.safetensors`` (CPU tensors).

    Raises:
        DamagedFileError: the file is missing or not whole safetensors.
    """
    from safetensors import SafetensorError  # noqa: PLC0415 (the store serves the dashboard without torch)
    from safetensors.torch import load_file  # noqa: PLC0415 (the store serves the dashboard without torch)

    path = Path(ckpt_dir) / WEIGHTS
    verify_hash(path)
    try:
        return load_file(str(path))
    except (OSError, SafetensorError) as e:
        raise DamagedFileError(f"{path}: unreadable model weights ({e})") from None


@dataclass(frozen=True)
class CheckpointWeights:
    """The weights file of a run's newest complete checkpoint, described from its header alone.

    Attributes:
        run_id, step: whose and which checkpoint.
        path: its ``model.safetensors``.
        n_params: numbers stored (sum over tensors of the product of their shapes).
        n_bytes: size of the file.
    """

    run_id: str
    step: int
    path: Path
    n_params: int
    n_bytes: int

    def read(self) -> bytes:
        """The file's bytes (e.g. for a download button)."""
        return self.path.read_bytes()


def checkpoint_weights(run_id: str, workspace=None) -> CheckpointWeights | None:
    """:class:`CheckpointWeights` of the run's newest complete checkpoint, or None when it keeps
    none. The parameter count is read from the safetensors header (no tensor is loaded, no torch).
    Raises RunNotFoundError for an unknown run."""
    p = latest_complete_checkpoint(run_dir(run_id, workspace))
    if p is None:
        return None
    weights = p / WEIGHTS
    try:
        with open(weights, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        count = sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    return CheckpointWeights(run_id, checkpoint_step(p), weights, int(count), weights.stat().st_size)
