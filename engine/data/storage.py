"""Registered datasets on disk: ``<workspace>/datasets/<name>/meta.json`` + one ``<array>.npy`` per array.

Each array of the dataset's class (:attr:`engine.modalities.Modality.dataset_type` by ``meta.json``'s
``modality``) is one uncompressed NumPy file (no pickles) in the dataset's folder: images:
``images.npy`` uint8 ``[N, H, W, C]``; text: ``text_bytes.npy`` uint8 ``[total]``,
``text_offsets.npy`` int64 ``[N + 1]`` and optionally ``groups.npy`` int64 ``[N]``; audio:
``audio_pcm.npy`` int16 ``[total]``, ``audio_offsets.npy``, ``sample_rate.npy``; paired: images
and captions as above; all: ``labels.npy`` int64 ``[N]`` and ``split.npy`` uint8 ``[N]``.

Reading (:func:`read_dataset`) memory-maps the arrays (:data:`MAPPED`: pixels, text bytes,
PCM samples, and the per-row labels, split, offsets and groups) read-only with
``np.load(mmap_mode="r")``: nothing of them is read until rows are indexed, and a batch
(``ds.images[rows]``) reads only its rows from the page cache, so a training process's private
memory grows with the batch, not with the dataset.

Datasets written by masklab before the memory-mapped format keep one ``data.npz`` holding the
same arrays; they are still read (wholly into memory, since NumPy cannot memory-map the members
of a zip) and train exactly as before. Re-adding such a dataset (``overwrite``) writes the new format.

A dataset is written once into a hidden temporary folder in ``datasets/`` and then renamed into
place (:func:`engine.workspace.publish_folder`), so readers see a whole dataset or none, and a failed
write leaves nothing behind. Replacing (``overwrite=True``) moves the old folder aside, renames the
new one in, then deletes the old one; if the second rename fails the old folder is put back. A
process that still has the old folder's arrays mapped keeps reading the old data (the files
stay alive until it unmaps them).
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
    NAME_RE,
    Dataset,
    DatasetInfo,
    ImageDataset,
    LabelledRows,
    validate_name,
)
from engine.errors import DatasetError
from engine.messages import describe_error
from engine.modalities import MODALITY_REGISTRY, get_modality
from engine.workspace import atomic_write_json, publish_folder, read_json, workspace_root

log = logging.getLogger(__name__)

META = "meta.json"
LEGACY_DATA = "data.npz"
"""The single-archive format of datasets written before the memory-mapped one (read only)."""
MAPPED = frozenset({"images", "text_bytes", "audio_pcm", "labels", "split", "text_offsets", "audio_offsets", "groups"})
"""Arrays memory-mapped on read: the payload and the per-row arrays (a few bytes a row, but 8 bytes a
row for millions of short texts is as much private memory as the batches); only ``sample_rate`` is read."""


def array_path(folder: Path, key: str) -> Path:
    """``folder/<key>.npy``: where array ``key`` of a dataset is stored."""
    return folder / f"{key}.npy"


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
        return get_modality(info.modality).dataset_type()
    except DatasetError:
        raise DatasetError(
            f"{where}: unknown modality {info.modality!r} (known: {', '.join(MODALITY_REGISTRY)})"
        ) from None


def read_dataset(name: str, workspace: str | os.PathLike[str] | None = None) -> Dataset:
    """Load a registered dataset (read-only: nothing is written).

    Returns:
        The dataset class of ``meta.json``'s ``modality`` (:attr:`engine.modalities.Modality.dataset_type`);
        its :data:`MAPPED` arrays are read-only memory maps (old ``data.npz`` datasets: in memory).
    Raises:
        DatasetError: naming the file when ``meta.json`` or an array file is missing, unreadable, of
            an unknown modality, or its arrays do not match the metadata (shapes, dtypes, label
            range, split sizes, text offsets, group ids).
    """
    folder = datasets_dir(workspace) / name
    info = read_info(folder)
    cls = dataset_type(info, folder / META)
    legacy = folder / LEGACY_DATA
    if legacy.is_file():
        arrays, where = _read_npz(legacy, cls), legacy
    else:
        arrays, where = _read_npy(folder, cls), folder
    problems = cls.problems(info, arrays)
    if problems:
        raise DatasetError(f"{where}: does not match {folder / META}: " + "; ".join(problems))
    return cls.from_arrays(info, arrays)


def _read_npz(path: Path, cls: type[LabelledRows]) -> dict[str, np.ndarray]:
    """Every array of an old-format ``data.npz`` (read into memory). Raises DatasetError naming it."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files if k in cls.ARRAYS + cls.OPTIONAL_ARRAYS}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
        raise DatasetError(f"{path}: cannot read dataset arrays ({describe_error(e)}); "
                           f"delete {path.parent}, add it again") from e


def _read_npy(folder: Path, cls: type[LabelledRows]) -> dict[str, np.ndarray]:
    """The arrays of ``cls`` in ``folder`` (``<key>.npy``): :data:`MAPPED` ones memory-mapped
    read-only, the others read. Optional arrays may be absent.

    Raises:
        DatasetError: naming the file when a required one is missing, or one is truncated, has a
            malformed header or holds pickled objects.
    """
    arrays = {}
    for key in cls.ARRAYS + cls.OPTIONAL_ARRAYS:
        path = array_path(folder, key)
        if not path.is_file():
            if key in cls.ARRAYS:
                raise DatasetError(f"{path}: missing (the dataset's {key!r} array); delete {folder}, add it again")
            continue
        try:
            arrays[key] = np.load(path, mmap_mode="r" if key in MAPPED else None, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:  # truncated, bad header, pickled objects
            raise DatasetError(f"{path}: cannot read the dataset's {key!r} array ({describe_error(e)}); "
                               f"delete {folder}, add it again") from e
    return arrays


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
    stored arrays (read it back with :func:`read_info`); each array becomes ``<key>.npy``. An array
    of ``ds`` may itself be a memory map (e.g. a large set generated chunk by chunk into a scratch
    ``.npy`` opened with ``np.lib.format.open_memmap``): it is hashed and copied file to file,
    never held in memory whole (``bench/data_memory.py`` registers its 2 GB set so).

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
        for key, a in arrays.items():  # a memory-mapped source is copied file to file, not through RAM
            with open(array_path(tmp, key), "wb") as f:
                np.save(f, a, allow_pickle=False)
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
