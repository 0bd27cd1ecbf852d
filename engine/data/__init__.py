"""Datasets: bundled sets (digits, fashion-mnist, fortunes, asterisk-prompts, tuxpaint-stamps), import of
images, text, audio and image-caption pairs, registry, seeded split.

Datasets live in ``<workspace>/datasets/<name>/`` as ``meta.json`` (:class:`DatasetInfo`) and one
``<array>.npy`` per array (old datasets: one ``data.npz``), written once and atomically; the payload
arrays are memory-mapped on read (:mod:`engine.data.storage`). Images: ``images`` uint8 ``[N, H, W, C]``; text: ``text_bytes`` uint8 +
``text_offsets`` int64 ``[N + 1]`` (UTF-8); audio: ``audio_pcm`` int16 + ``audio_offsets`` int64
``[N + 1]`` + ``sample_rate`` int64 ``[1]`` (mono clips at one rate); paired: ``images`` and
``text_bytes`` + ``text_offsets`` (one caption per image); all: ``labels`` int64 ``[N]``,
``split`` uint8 ``[N]`` with 0 = train, 1 = val. Bundled sets are registered on their first :func:`load_dataset`;
:func:`list_datasets` describes them before that without registering them.

    >>> ds = load_dataset("digits")
    >>> x, y = ds.tensors("train")      # float32 [N, 1, 8, 8] in [0, 1], int64 [N]
    >>> x, y = ds.rows_tensors(ds.indices("val")[:16])   # only these rows are read
    >>> load_dataset("fortunes").texts("train")[:2]
    >>> load_dataset("asterisk-prompts").clip(0)      # float32 [n] in [-1, 1] at .rate Hz
    >>> representative(ds.labels[ds.indices("val")], 8)   # the rows every sample view shows
    >>> scan_archive("stamps.zip").class_names          # what an image import would take, no pixel read
    >>> plan = inspect_source("trec.tsv")   # modality, detected columns, preview, classes
    >>> report = import_source("trec.tsv", "trec", ImportOptions(label_column="label")); print(report.summary())
"""

from engine.data.audio import AudioImportReport
from engine.data.bundled import BundledStatus, bundled_status
from engine.data.dataset import AudioDataset, DatasetInfo, ImageDataset, PairedDataset, TextDataset
from engine.data.importer import ArchiveScan, ImportReport, import_archive, scan_archive
from engine.data.ingest import SourcePlan, detect_modality, detect_source, import_source, inspect_source
from engine.data.limits import ImportLimits
from engine.data.paired import PairedImportReport
from engine.data.registry import delete_dataset, list_datasets, load_dataset
from engine.data.sampling import VIEW_SEED, representative
from engine.data.tabular import ColumnRoles, ImportOptions
from engine.data.text import CleaningCounts, TextImportReport

__all__ = [
    "ArchiveScan",
    "AudioDataset",
    "AudioImportReport",
    "BundledStatus",
    "CleaningCounts",
    "ColumnRoles",
    "DatasetInfo",
    "ImageDataset",
    "ImportLimits",
    "ImportOptions",
    "ImportReport",
    "PairedDataset",
    "PairedImportReport",
    "SourcePlan",
    "TextDataset",
    "TextImportReport",
    "VIEW_SEED",
    "bundled_status",
    "delete_dataset",
    "detect_modality",
    "detect_source",
    "import_archive",
    "import_source",
    "inspect_source",
    "list_datasets",
    "load_dataset",
    "representative",
    "scan_archive",
]
