"""Image datasets: bundled sets (digits, fashion-mnist), zip/folder import, registry, seeded split.

Datasets live in ``<workspace>/datasets/<name>/`` as ``meta.json`` (:class:`DatasetInfo`) and ``data.npz``
(images uint8 ``[N, H, W, C]``, labels int64 ``[N]``, split uint8 ``[N]`` with 0 = train, 1 = val), written
once and atomically. Bundled sets are registered on their first :func:`load_dataset`;
:func:`list_datasets` describes them before that without registering them.

    >>> ds = load_dataset("digits")
    >>> x, y = ds.tensors("train")      # float32 [N, 1, 8, 8] in [0, 1], int64 [N]
    >>> scan_archive("stamps.zip").class_names          # what an import would take, no pixel read
    >>> report = import_archive("stamps.zip", image_size=32); print(report.summary())
"""

from engine.data.bundled import BundledStatus, bundled_status
from engine.data.dataset import DatasetInfo, ImageDataset
from engine.data.importer import ArchiveScan, ImportReport, import_archive, scan_archive
from engine.data.limits import ImportLimits
from engine.data.registry import list_datasets, load_dataset

__all__ = [
    "ArchiveScan",
    "BundledStatus",
    "DatasetInfo",
    "ImageDataset",
    "ImportLimits",
    "ImportReport",
    "bundled_status",
    "import_archive",
    "list_datasets",
    "load_dataset",
    "scan_archive",
]
