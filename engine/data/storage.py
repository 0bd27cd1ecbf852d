"""Registered datasets on disk: ``<workspace>/datasets/<name>/meta.json`` + ``data.npz``.

``data.npz`` (uncompressed, no pickles) holds the arrays of the dataset's class
(:data:`engine.data.dataset.DATASET_TYPES` by ``meta.json``'s ``modality``): images: ``images``
uint8 ``[N, H, W, C]``; text: ``text_bytes`` uint8 ``[total]``, ``text_offsets`` int64 ``[N + 1]``
and optionally ``groups`` int64 ``[N]``; both: ``labels`` int64 ``[N]`` and ``split`` uint8 ``[N]``.
A dataset is written once into a hidden temporary folder in ``datasets/`` and then renamed into
place (:func:`engine.workspace.publish_folder`), so readers see a whole dataset or none, and a failed
write leaves nothing behind. Replacing (``overwrite=True``) moves the old folder aside, renames the
new one in, then deletes the old one; if the second rename fails the old folder is put back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from engine.data.dataset import (
    DATASET_TYPES,
    NAME_RE,
    Dataset,
    DatasetInfo,
    ImageDataset,
    LabelledRows,
    validate_name,
)
from engine.errors import DatasetError
from engine.messages import describe_error
from engine.workspace import atomic_write_json, publish_folder, read_json, workspace_root

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
        raise DatasetError(f"{path}: bad dataset metadata ({describe_error(e)}); delete {folder}, add it again") from e


def dataset_type(info: DatasetInfo, where: Path | str) -> type[LabelledRows]:
    """The dataset class of ``info.modality``. Raises DatasetError naming ``where`` for an unknown one."""
    try:
        return DATASET_TYPES[info.modality]
    except KeyError:
        raise DatasetError(
            f"{where}: unknown modality {info.modality!r} (known: {', '.join(DATASET_TYPES)})"
        ) from None


def read_dataset(name: str, workspace: str | os.PathLike[str] | None = None) -> Dataset:
    """Load a registered dataset (read-only: nothing is written).

    Returns:
        An :class:`~engine.data.dataset.ImageDataset` or :class:`~engine.data.dataset.TextDataset`,
        by ``meta.json``'s ``modality``.
    Raises:
        DatasetError: naming the file when ``meta.json`` or ``data.npz`` is missing, unreadable, of
            an unknown modality, or its arrays do not match the metadata (shapes, dtypes, label
            range, split sizes, text offsets, group ids).
    """
    folder = datasets_dir(workspace) / name
    info = read_info(folder)
    cls = dataset_type(info, folder / META)
    path = folder / DATA
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files if k in cls.ARRAYS + cls.OPTIONAL_ARRAYS}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
        raise DatasetError(f"{path}: cannot read dataset arrays ({describe_error(e)}); delete {folder}, add it again") from e
    problems = cls.problems(info, arrays)
    if problems:
        raise DatasetError(f"{path}: does not match {folder / META}: " + "; ".join(problems))
    return cls.from_arrays(info, arrays)


def content_hash(arrays: dict[str, np.ndarray]) -> str:
    """sha256 (hex) of a dataset's arrays: for each array in name order, its name, dtype, shape and
    bytes. The same data (split included) always gives the same hash, whatever the modality."""
    h = hashlib.sha256()
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        h.update(f"{key}|{a.dtype.str}|{a.shape}|".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def save_dataset(ds: Dataset, workspace: str | os.PathLike[str] | None = None, *, overwrite: bool = False) -> Path:
    """Register a dataset of any modality atomically (see the module docstring); return its folder.

    The stored ``meta.json`` is ``ds.info`` with ``source_hash`` set to :func:`content_hash` of the
    stored arrays (read it back with :func:`read_info`).

    Raises:
        DatasetError: invalid name; arrays that do not match ``ds.info`` (a bug in the caller); the
            name exists and ``overwrite`` is False (also when another process registered it first).
    """
    info = ds.info
    validate_name(info.name)
    cls = dataset_type(info, f"dataset {info.name!r}")
    arrays = ds.arrays()
    problems = cls.problems(info, arrays)
    if problems:
        raise DatasetError(f"dataset {info.name!r}: arrays do not match its metadata: " + "; ".join(problems))
    info = dataclasses.replace(info, source_hash=content_hash(arrays))
    root = datasets_dir(workspace)
    target = root / info.name

    def fill(tmp: Path) -> None:
        with open(tmp / DATA, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        atomic_write_json(tmp / META, info.to_dict())

    try:
        published = publish_folder(target, fill, marker=META, overwrite=overwrite)
    except OSError as e:
        raise DatasetError(f"cannot register dataset {info.name!r} at {target}: {describe_error(e)}") from e
    if not published:
        raise DatasetError(
            f"dataset {info.name!r} already exists in {root}; choose another name or replace it"
            f" (`data add --overwrite`, or tick 'Replace' on the Data page)"
        )
    return target


def write_dataset(
    info: DatasetInfo,
    images: np.ndarray,
    labels: np.ndarray,
    split: np.ndarray,
    workspace: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Register an image dataset atomically and return its folder (:func:`save_dataset` of an
    :class:`~engine.data.dataset.ImageDataset`).

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
    return save_dataset(ImageDataset(info, images, labels, split), workspace, overwrite=overwrite)
