"""The dataset registry: what the pages and workers call to list and load datasets."""

from __future__ import annotations

import logging
import os
import shutil

from engine.access.policy import permission
from engine.data import bundled, storage
from engine.data.catalog import BUNDLED, check_new_name  # noqa: F401  (check_new_name: public here too)
from engine.data.catalog import MODALITY as BUNDLED_MODALITY
from engine.data.dataset import Dataset, DatasetInfo, validate_name
from engine.errors import DatasetError
from engine.workspace import storage_error

log = logging.getLogger(__name__)
PathLike = str | os.PathLike[str] | None


def list_datasets(workspace: PathLike = None, modality: str | None = None) -> list[DatasetInfo]:
    """All datasets that :func:`load_dataset` can load: bundled ones first (``digits``, ``fashion-mnist``,
    ``fortunes``, ``asterisk-prompts``), then the registered ones by name. Check ``info.modality``
    (``"image"``, ``"text"``, ``"audio"``).

    Cheap: it reads ``meta.json`` files and, for a bundled set not yet registered, computes its info
    without loading pixels or registering it (Fashion-MNIST: only the IDX headers are read; fortunes:
    the topic files are parsed once per process, ~0.1 s; asterisk-prompts: the WAV headers, once per
    process); such an info has ``created_at == ""``. A bundled set whose files are missing is left out
    unless it was registered before. Datasets with an unreadable ``meta.json`` are logged and left out.

    ``modality`` (``"image"``, ``"text"``, ``"audio"``) keeps only the datasets of that modality (a page that
    draws images asks for ``modality="image"``); a bundled set of another modality is then not
    even read.
    """
    registered = storage.registered_infos(workspace)
    if modality is not None:
        registered = {n: i for n, i in registered.items() if modality in (None, i.modality)}
    out = []
    for name in BUNDLED:
        if name in registered:
            out.append(registered.pop(name))
        elif modality in (None, BUNDLED_MODALITY[name]) and bundled.is_available(name):
            try:
                out.append(bundled.bundled_info(name))
            except DatasetError as e:
                log.warning("%s", e)
    return out + list(registered.values())


def load_dataset(name: str, workspace: PathLike = None) -> Dataset:
    """Load dataset ``name`` from the workspace.

    A registered dataset is read as is (nothing is written). A bundled one (``digits``,
    ``fashion-mnist``, ``fortunes``, ``asterisk-prompts``) that is available but not registered yet is
    built, registered atomically in ``<workspace>/datasets/<name>/`` and then loaded; later calls only
    read it.

    Returns:
        An :class:`~engine.data.dataset.ImageDataset` (images uint8 ``[N, H, W, C]``), a
        :class:`~engine.data.dataset.TextDataset` (``text(i)``, ``texts(split)``) or an
        :class:`~engine.data.dataset.AudioDataset` (``clip(i)``, int16 PCM), by ``info.modality``;
        all have labels int64 ``[N]`` and split uint8 ``[N]``. Their payload arrays (pixels, text
        bytes, PCM) are read-only memory maps (:mod:`engine.data.storage`): index rows, e.g.
        ``ds.rows_tensors(ds.indices("val")[:16])``, rather than converting whole arrays.
    Raises:
        DatasetError: unknown name (the message lists the known names), a bundled set that is not
            available (the message says how to install it), an invalid name, or unreadable files
            (naming the file).
    """
    validate_name(name)
    if storage.is_registered(name, workspace):
        return storage.read_dataset(name, workspace)
    if name in BUNDLED:
        if not bundled.is_available(name):
            how = next(st.how_to_get for st in bundled.bundled_status() if st.name == name)
            raise DatasetError(f"bundled dataset {name!r} is not available on this machine: {how}")
        ds = bundled.build_bundled(name, created_at=storage.utc_now())
        try:
            storage.save_dataset(ds, workspace)
        except DatasetError:
            if not storage.is_registered(name, workspace):  # else another process registered it first
                raise
        return storage.read_dataset(name, workspace)
    known = ", ".join(info.name for info in list_datasets(workspace)) or "none"
    raise DatasetError(f"unknown dataset {name!r}; known datasets: {known}")


@permission("data.delete", lambda a: str(a["name"]))
def delete_dataset(name: str, workspace: PathLike = None) -> None:
    """Delete registered dataset ``name`` (its folder in ``<workspace>/datasets/``). Admins only.

    The folder is renamed to a hidden name first (readers stop listing it at that instant), then
    removed. Runs trained on it keep their results; resuming them is refused (their dataset is gone).

    Raises:
        DatasetError: an invalid name, a bundled dataset (it would come back on its next load), or
            no such dataset.
        PermissionDeniedError: ``actor`` is not an admin, or demo mode (checked first).
        StorageError: the folder cannot be renamed (read-only workspace...).
    """
    validate_name(name)
    if name in BUNDLED:
        raise DatasetError(f"{name!r} is a bundled dataset: it cannot be deleted (it is rebuilt on its next use)")
    if not storage.is_registered(name, workspace):
        raise DatasetError(f"no dataset {name!r} to delete")
    folder = storage.datasets_dir(workspace) / name
    gone = folder.with_name(f".deleted-{name}-{os.getpid()}")
    try:
        os.rename(folder, gone)
    except OSError as e:
        raise storage_error(e, f"dataset {name} (deleting it)", folder) from e
    shutil.rmtree(gone, ignore_errors=True)
