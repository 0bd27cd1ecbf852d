"""Registered datasets on disk: ``<workspace>/datasets/<name>/meta.json`` + ``data.npz``.

``data.npz`` (uncompressed, no pickles) holds ``images`` uint8 ``[N, H, W, C]``, ``labels`` int64 ``[N]``
and ``split`` uint8 ``[N]``. A dataset is written once into a hidden temporary folder in ``datasets/``
and then renamed into place, so readers see a whole dataset or none, and a failed write leaves nothing
behind. Replacing (``overwrite=True``) moves the old folder aside, renames the new one in, then deletes
the old one; if the second rename fails the old folder is put back.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from engine.data.dataset import NAME_RE, DatasetInfo, ImageDataset, validate_name
from engine.errors import DatasetError
from engine.workspace import atomic_write_json, read_json, workspace_root

log = logging.getLogger(__name__)

META, DATA = "meta.json", "data.npz"


def datasets_dir(workspace: str | os.PathLike[str] | None = None) -> Path:
    """``<workspace>/datasets`` (created if missing)."""
    d = workspace_root(workspace) / "datasets"
    d.mkdir(parents=True, exist_ok=True)
    return d


def utc_now() -> str:
    """Current time, ISO-8601 UTC with seconds (``2025-01-31T12:00:00+00:00``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def is_registered(name: str, workspace: str | os.PathLike[str] | None = None) -> bool:
    """True when ``datasets/<name>/meta.json`` exists."""
    return (datasets_dir(workspace) / name / META).is_file()


def registered_infos(workspace: str | os.PathLike[str] | None = None) -> dict[str, DatasetInfo]:
    """Metadata of every registered dataset, sorted by name. Unreadable ones are logged and left out."""
    out: dict[str, DatasetInfo] = {}
    for meta in sorted(datasets_dir(workspace).glob(f"*/{META}")):
        if not NAME_RE.fullmatch(meta.parent.name):  # e.g. the hidden temporary folder of a running import
            continue
        try:
            out[meta.parent.name] = read_info(meta.parent)
        except DatasetError as e:
            log.warning("%s", e)
    return out


def read_info(folder: Path) -> DatasetInfo:
    """Read ``folder/meta.json``. Raises DatasetError naming the file if it is missing or malformed."""
    path = folder / META
    try:
        return DatasetInfo.from_dict(read_json(path))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DatasetError(f"{path}: bad dataset metadata ({e}); delete {folder}, add it again") from e


def read_dataset(name: str, workspace: str | os.PathLike[str] | None = None) -> ImageDataset:
    """Load a registered dataset (read-only: nothing is written).

    Raises DatasetError naming the file when ``meta.json`` or ``data.npz`` is missing, unreadable, or
    its arrays do not match the metadata (shapes, dtypes, label range, split sizes).
    """
    folder = datasets_dir(workspace) / name
    info = read_info(folder)
    path = folder / DATA
    try:
        with np.load(path, allow_pickle=False) as z:
            images, labels, split = z["images"], z["labels"], z["split"]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
        raise DatasetError(f"{path}: cannot read dataset arrays ({e}); delete {folder}, add it again") from e
    c, h, w = info.image_shape
    n = labels.shape[0] if labels.ndim == 1 else -1
    problems = []
    if images.dtype != np.uint8 or images.shape != (n, h, w, c):
        problems.append(f"images {images.dtype} {images.shape}, expected uint8 ({n}, {h}, {w}, {c})")
    if labels.dtype != np.int64 or (n and not 0 <= labels.min() <= labels.max() < info.n_classes):
        problems.append(f"labels must be int64 in [0, {info.n_classes})")
    if split.shape != (n,) or ((split == 0).sum(), (split == 1).sum()) != (info.n_train, info.n_val):
        problems.append(f"split does not give {info.n_train} train + {info.n_val} val rows")
    if problems:
        raise DatasetError(f"{path}: does not match {folder / META}: " + "; ".join(problems))
    return ImageDataset(info=info, images=images, labels=labels, split=split)


def write_dataset(
    info: DatasetInfo,
    images: np.ndarray,
    labels: np.ndarray,
    split: np.ndarray,
    workspace: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Register a dataset atomically (see the module docstring) and return its folder.

    Args:
        info: metadata; ``info.name`` is the folder name.
        images: uint8 ``[N, H, W, C]``.
        labels: int ``[N]`` (stored as int64).
        split: ``[N]`` 0 = train, 1 = val (stored as uint8).
        overwrite: replace an existing dataset of that name.
    Raises:
        DatasetError: invalid name, or the name exists and ``overwrite`` is False (also when another
            process registered it first).
    """
    validate_name(info.name)
    root = datasets_dir(workspace)
    target = root / info.name
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{info.name}-", dir=root))
    try:
        with open(tmp / DATA, "wb") as f:
            np.savez(
                f,
                images=np.ascontiguousarray(images, dtype=np.uint8),
                labels=np.asarray(labels, dtype=np.int64),
                split=np.asarray(split, dtype=np.uint8),
            )
            f.flush()
            os.fsync(f.fileno())
        atomic_write_json(tmp / META, info.to_dict())
        if not (target / META).exists():
            try:
                os.rename(tmp, target)  # fails if a non-empty target appeared meanwhile
                return target
            except OSError as e:
                if not (target / META).exists():
                    raise DatasetError(f"cannot register dataset {info.name!r} at {target}: {e}") from e
        if not overwrite:
            raise DatasetError(
                f"dataset {info.name!r} already exists in {root}; choose another name or replace it"
                f" (`data add --overwrite`, or tick 'Replace' on the Data page)"
            )
        old = Path(tempfile.mkdtemp(prefix=f".old-{info.name}-", dir=root))
        os.replace(target, old)  # `old` is an empty folder, so this rename succeeds
        try:
            os.rename(tmp, target)
        except OSError:
            os.replace(old, target)
            raise
        shutil.rmtree(old, ignore_errors=True)
        return target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # no-op once renamed into place
