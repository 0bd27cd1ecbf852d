"""Text corpora: read a source, clean it, split it and register it as a :class:`TextDataset`.

Sources (:func:`read_text_source`):

- ``.txt``: UTF-8. **Paragraph mode** when the file has at least one blank (whitespace-only)
  line, at least one paragraph (a run of non-blank lines) spans several lines, and the
  paragraphs average at most :data:`MAX_MEAN_PARAGRAPH_LINES` lines (so a stray blank line in a
  long one-document-per-line file does not merge it into two huge documents): each paragraph is
  a document. Otherwise **line mode**: each line is a document (blank lines are empty documents,
  dropped and counted). No labels (class ``unlabeled``).
- ``.csv`` / ``.tsv`` / ``.jsonl`` with a header (:mod:`engine.data.tabular`): one row per
  document; the text, label and group columns are given in :class:`ImportOptions` or detected
  (:func:`engine.data.tabular.detect_roles`). An empty label is the class ``unlabeled``; an empty
  group value is a group of its own name ``""``.
- a ``.zip`` or a folder of ``.txt`` files: each file is one document and its first sub-folder
  (after one top folder common to every file) is its label, as scikit-learn's ``load_files`` (files
  not in a sub-folder: ``unlabeled``). Other files are *skipped*; a file that is not UTF-8, larger
  than 50 MB or unreadable is *rejected* with the reason and the others are kept.

Invalid UTF-8 in a single ``.txt`` or table refuses the whole file, naming the file and the
1-based line of the first bad byte. Every file is sniffed first (:mod:`engine.data.sniff`): UTF-16
and UTF-32 text is converted and a byte-order mark removed (both noted in the report); a file whose
content is another format (a workbook saved as ``.csv``, a PDF named ``.txt``) is refused saying
what it is and what to do.

Cleaning (:func:`clean_texts`, counts in the report), in this order: whitespace normalised (every
run of Unicode whitespace, line breaks included, becomes one space; leading/trailing stripped);
empty documents dropped; documents shorter than ``min_chars`` or longer than ``max_chars``
characters dropped; exact duplicates (after normalisation) dropped, the first one kept. The split
is :func:`engine.data.dataset.seeded_split` (stratified by class, or by group with a group column)
over the kept documents in source order; they are then stored in the seeded order of
:func:`engine.data.sampling.import_order` (each with its split), so a class-ordered source gives no
class-ordered slice.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.access.policy import permission
from engine.data import importer, storage
from engine.data.archive import (
    Members,
    classify,
    decode_names,
    first_refusals,
    import_outcome,
    import_target,
    read_problem,
    refusal_lines,
    skip_reason,
    some_names,
)
from engine.data.catalog import check_new_name
from engine.data.dataset import DatasetInfo, TextDataset, classes_text, counted, seeded_split
from engine.data.images import Refused, isolated
from engine.data.limits import ImportLimits
from engine.data.sampling import import_order
from engine.data.tabular import (
    TABLE_EXTENSIONS,
    ColumnRoles,
    ImportOptions,
    detect_roles,
    read_table,
    read_utf8_file,
    text_problem,
)
from engine.errors import DatasetError, NothingImportedError

TEXT_EXTENSIONS = (".txt",)
"""Extensions of plain-text documents (a single file, or the files of a zip/folder)."""

MAX_TEXT_FILE_BYTES = 50 * 1024 * 1024
"""Largest ``.txt`` file read (bytes)."""

MAX_MEAN_PARAGRAPH_LINES = 20
"""Paragraph mode needs paragraphs of at most this many lines on average."""

PREVIEW_ROWS = 5
PREVIEW_CHARS = 300

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass
class CleaningCounts:
    """What :func:`clean_texts` did; every document is counted once, in the first rule that drops it.

    Attributes:
        read: documents before cleaning.
        whitespace_normalised: documents whose text changed by whitespace normalisation (kept or not).
        empty: dropped: nothing left after normalisation.
        too_short: dropped: fewer than ``min_chars`` characters.
        too_long: dropped: more than ``max_chars`` characters.
        duplicates: dropped: the same text as an earlier kept document.
        kept: documents left (``read - empty - too_short - too_long - duplicates``).
        dropped: rule (``"empty"``, ``"too_short"``, ``"too_long"``, ``"duplicates"``) -> the indices of
            the documents it dropped; for duplicates ``(index, index of the kept one)`` pairs. Not in
            :meth:`as_dict`.
    """

    read: int = 0
    whitespace_normalised: int = 0
    empty: int = 0
    too_short: int = 0
    too_long: int = 0
    duplicates: int = 0
    kept: int = 0
    dropped: dict[str, list] = field(default_factory=dict, repr=False)

    def as_dict(self) -> dict[str, int]:
        """The counts by name (JSON-ready)."""
        return {k: v for k, v in self.__dict__.items() if k != "dropped"}

    def dropped_lines(self, where: list[str]) -> list[str]:
        """One line per rule that dropped documents, naming them by ``where`` (a location per raw
        document: ``"line 4"``, a file), e.g. ``"dropped as empty: line 4"``; at most
        :data:`engine.data.archive.MAX_NAMED` named per rule, saying how many there are."""
        what = {"empty": "empty (nothing but whitespace)", "too_short": "too short", "too_long": "too long",
                "duplicates": "exact duplicates"}  # fmt: skip
        out = []
        for rule, idx in self.dropped.items():
            names = [f"{where[i]} (as {where[j]})" for i, j in idx] if rule == "duplicates" else [where[i] for i in idx]
            out.append(f"dropped as {what[rule]}: {some_names(names)}")
        return out

    def describe(self) -> str:
        """One line: ``5452 read; whitespace normalised in 0; dropped 0 empty, ... ; 5381 kept``."""
        return (f"{self.read} read; whitespace normalised in {self.whitespace_normalised}; dropped "
                f"{self.empty} empty, {self.too_short} too short, {self.too_long} too long, "
                f"{self.duplicates} exact duplicates; {self.kept} kept")  # fmt: skip


def normalise_whitespace(text: str) -> str:
    """Every run of whitespace (``str.isspace``: spaces, tabs, line breaks, NBSP...) -> one space; stripped."""
    return " ".join(text.split())


def clean_texts(
    texts: list[str], min_chars: int | None = None, max_chars: int | None = None
) -> tuple[list[int], list[str], CleaningCounts]:
    """Clean a corpus (the rules and their order are in the module docstring).

    Args:
        texts: ``N`` raw documents.
        min_chars: drop documents with fewer characters (after normalisation); None: no minimum.
        max_chars: drop documents with more characters; None: no maximum.
    Returns:
        ``(kept, cleaned, counts)``: indices into ``texts`` of the kept documents (increasing),
        their normalised texts, and the :class:`CleaningCounts`.
    """
    counts = CleaningCounts(read=len(texts))
    seen: dict[str, int] = {}  # text -> index of the document kept with it
    kept: list[int] = []
    cleaned: list[str] = []
    for i, raw in enumerate(texts):
        t = normalise_whitespace(raw)
        counts.whitespace_normalised += t != raw
        rule = ("empty" if not t else "too_short" if min_chars is not None and len(t) < min_chars
                else "too_long" if max_chars is not None and len(t) > max_chars else "duplicates" if t in seen else None)
        if rule is not None:
            setattr(counts, rule, getattr(counts, rule) + 1)
            counts.dropped.setdefault(rule, []).append((i, seen[t]) if rule == "duplicates" else i)
        else:
            seen[t] = i
            kept.append(i)
            cleaned.append(t)
    counts.kept = len(kept)
    return kept, cleaned, counts


def text_stats(texts: list[str]) -> dict[str, float | int]:
    """Length statistics of a corpus: ``docs``, ``chars_{mean,median,min,max}``,
    ``words_{mean,median,max}`` (characters and whitespace-separated words per document)."""
    chars = np.array([len(t) for t in texts], dtype=np.int64)
    words = np.array([len(t.split()) for t in texts], dtype=np.int64)
    if chars.size == 0:
        return {"docs": 0}
    return {
        "docs": int(chars.size),
        "chars_mean": round(float(chars.mean()), 2),
        "chars_median": float(np.median(chars)),
        "chars_min": int(chars.min()),
        "chars_max": int(chars.max()),
        "words_mean": round(float(words.mean()), 2),
        "words_median": float(np.median(words)),
        "words_max": int(words.max()),
    }


def sorted_names(values) -> tuple[str, ...]:
    """Distinct values sorted numerically when all are numbers (``"2" < "10"``), else as strings."""
    distinct = set(values)
    try:
        return tuple(sorted(distinct, key=lambda v: (float(v), v)))
    except ValueError:
        return tuple(sorted(distinct))


@dataclass
class TextSource:
    """A text source as read, before cleaning (:func:`read_text_source`).

    Attributes:
        source: how messages name the source.
        kind: ``"lines"``, ``"paragraphs"``, ``"csv"``, ``"tsv"``, ``"jsonl"`` or ``"txt files"``.
        texts: the raw documents, in source order.
        labels: class name of each document, or None (no labels).
        groups: group name of each document, or None (no groups).
        columns: the table's columns (``[]`` for other kinds).
        roles: the table's column roles (None for other kinds).
        preview: the first :data:`PREVIEW_ROWS` rows / documents (column -> value, values cut to
            :data:`PREVIEW_CHARS` characters).
        rejected: ``(file or file:line, reason)`` for files / rows that could not be used.
        skipped: ``(file, reason)`` for files that are not ``.txt`` documents.
        notes: how the source was read (e.g. why paragraph mode).
        where: where each raw document is (``"line 4"``, a file's path), for the report to name the
            documents cleaning drops; None: not known.
    """

    source: str
    kind: str
    texts: list[str]
    labels: list[str] | None = None
    groups: list[str] | None = None
    columns: list[str] = field(default_factory=list)
    roles: ColumnRoles | None = None
    preview: list[dict[str, str]] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    where: list[str] | None = None


def _cut(v: str) -> str:
    return v if len(v) <= PREVIEW_CHARS else v[: PREVIEW_CHARS - 1] + "…"


def split_documents(text: str) -> tuple[list[str], str, str]:
    """Documents of a ``.txt`` file's text: ``(documents, "lines" | "paragraphs", note)``.

    Paragraph mode when the text has a blank line and a paragraph of several lines (module docstring).
    """
    docs, _, kind, note = _split_documents(text)
    return docs, kind, note


def _split_documents(text: str) -> tuple[list[str], list[int], str, str]:
    """:func:`split_documents` with the 1-based line each document starts at."""
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":  # the file ends with a line break
        lines.pop()
    paragraphs: list[list[str]] = [[]]
    starts: list[int] = []
    for k, line in enumerate(lines, start=1):
        if line.strip():
            if not paragraphs[-1]:
                starts.append(k)
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    paragraphs = [p for p in paragraphs if p]
    blank = sum(1 for line in lines if not line.strip())
    multi = sum(1 for p in paragraphs if len(p) > 1)
    mean = (len(lines) - blank) / max(1, len(paragraphs))
    if blank and multi and mean <= MAX_MEAN_PARAGRAPH_LINES:
        note = (f"paragraph mode: blank lines separate {len(paragraphs)} paragraphs, {multi} of them "
                "span several lines; each paragraph is a document")  # fmt: skip
        return ["\n".join(p) for p in paragraphs], starts, "paragraphs", note
    if not blank:
        why = "no blank line"
    elif not multi:
        why = "no paragraph spans several lines"
    else:
        why = f"paragraphs would average {mean:.0f} lines, more than {MAX_MEAN_PARAGRAPH_LINES}"
    return lines, list(range(1, len(lines) + 1)), "lines", f"line mode ({why}): each line is a document"


def txt_skip_reason(rel: str) -> str | None:
    """Why a file of a zip/folder is not a text document candidate (skipped, listed), or None."""
    return skip_reason(rel, TEXT_EXTENSIONS, "a .txt file")


def _read_txt_tree(path: Path, label: str, name_encoding: str | None = None) -> TextSource:
    """A zip or folder of ``.txt`` files: one document per file, label = first sub-folder.

    Members are read with the image importer's safeguards (:mod:`engine.data.archive`): member names
    decoded by flag / UTF-8 / detection (or ``name_encoding``), unsafe paths and members over the
    size and compression-ratio limits refused, nothing extracted to disk."""
    src = TextSource(label, "txt files", [])
    paths: list[str] = []
    converted: dict[str, list[str]] = {}  # decoding note -> files
    limits = ImportLimits.from_env().model_copy(update={"max_member_bytes": MAX_TEXT_FILE_BYTES})
    with Members(path, label, limits) as ms:
        names = decode_names(ms.members, name_encoding)
        candidates, src.rejected, src.skipped = classify(ms.members, ms.limits, txt_skip_reason)
        for m in candidates:
            try:
                data = m.read()
            except Exception as e:  # noqa: BLE001 - a bad CRC, an unsupported compression, a broken link...
                src.rejected.append((m.name, read_problem(e)))
                continue
            try:
                text, problem, notes = isolated(functools.partial(text_problem, data))
            except Refused as r:
                text, problem = None, r.reason
            if text is None:
                src.rejected.append((m.name, problem))
                continue
            src.texts.append(text)
            for n in notes:
                converted.setdefault(n, []).append(m.name)
            paths.append(m.name)
    if names.noteworthy:
        src.notes.append(names.describe())
    src.notes += [f"{n} in {len(fs)} file(s): {some_names(fs, 5)}" for n, fs in converted.items()]
    if not src.texts:
        refused = first_refusals(src.rejected)
        raise NothingImportedError(f"{label}: no usable .txt files ({len(src.rejected)} rejected"
                                   f"{': ' + refused if refused else ''}, {len(src.skipped)} other files skipped)",
                                   src.rejected, src.skipped)  # fmt: skip
    src.labels, _ = importer.class_labels(paths)
    src.preview = [{"file": p, "label": c, "text": _cut(t)}
                   for p, c, t in zip(paths[:PREVIEW_ROWS], src.labels, src.texts)]  # fmt: skip
    src.notes.append("one document per .txt file; label = first sub-folder name")
    src.where = list(paths)
    return src


def _read_table_source(path: Path, label: str, options: ImportOptions) -> TextSource:
    table = read_table(path, label)
    roles = detect_roles(table, options)
    if roles.text is None:
        raise DatasetError(f"{label}: no text column found ({roles.reasons.get('text')}); columns: "
                           f"{', '.join(map(repr, table.columns)) or 'none'}; name one with text_column (--text-column)")  # fmt: skip
    src = TextSource(label, table.kind, table.column(roles.text), columns=table.columns, roles=roles,
                     rejected=list(table.rejected), notes=list(table.notes),
                     where=[f"line {k}" for k in table.lines])  # fmt: skip
    if roles.label is not None:
        src.labels = [v.strip() or importer.UNLABELED for v in table.column(roles.label)]
    if roles.group is not None:
        src.groups = [v.strip() for v in table.column(roles.group)]
    if roles.file is not None:
        src.notes.append(f"the file column {roles.file!r} is not used for a text dataset")
    src.preview = [{c: _cut(v) for c, v in zip(table.columns, row)} for row in table.rows[:PREVIEW_ROWS]]
    return src


def read_text_source(
    path: str | os.PathLike[str], options: ImportOptions | None = None, source_label: str | None = None
) -> TextSource:
    """Read a ``.txt``, ``.csv``, ``.tsv``, ``.jsonl`` file or a zip/folder of ``.txt`` files
    (rules in the module docstring). Nothing is cleaned or written.

    Args:
        path: the file or folder.
        options: column options for tables (refused for other sources).
        source_label: how messages name the source (default: the path).
    Raises:
        DatasetError: missing path, unsupported file type, invalid UTF-8 (file and line), a column
            option that is not a column (listing the columns), column options for a source
            without columns, no text column, no usable ``.txt`` file.
    """
    src = Path(path).expanduser()
    label = source_label or str(path)
    options = options or ImportOptions()
    if not src.exists():
        raise DatasetError(f"{label}: no such file or folder")
    ext = src.suffix.lower()
    if ext not in TABLE_EXTENSIONS and options.given_columns():
        given = ", ".join(f"{r}_column" for r in options.given_columns())
        raise DatasetError(f"{label}: {given} apply to tables (.csv, .tsv, .jsonl); this source has no columns")
    if ext in TABLE_EXTENSIONS and src.is_file():
        return _read_table_source(src, label, options)
    if ext in TEXT_EXTENSIONS and src.is_file():
        notes: list[str] = []
        docs, starts, kind, note = _split_documents(read_utf8_file(src, label, MAX_TEXT_FILE_BYTES, notes))
        return TextSource(label, kind, docs, preview=[{"text": _cut(d)} for d in docs[:PREVIEW_ROWS]],
                          notes=[*notes, note], where=[f"line {k}" for k in starts])  # fmt: skip
    return _read_txt_tree(src, label, options.name_encoding)


@dataclass
class PreparedText:
    """A cleaned corpus ready to split and store (:func:`prepare_text`).

    Attributes:
        source: the :class:`TextSource` it came from.
        texts: the kept, normalised documents (``N``), in source order.
        class_names: sorted class names (numerically when all are numbers); ``("unlabeled",)``
            without labels.
        labels: int64 ``[N]`` index into ``class_names``.
        group_names: sorted group names, ``()`` without groups.
        groups: int64 ``[N]`` index into ``group_names``, or None.
        cleaning: the :class:`CleaningCounts`.
    """

    source: TextSource
    texts: list[str]
    class_names: tuple[str, ...]
    labels: np.ndarray
    group_names: tuple[str, ...]
    groups: np.ndarray | None
    cleaning: CleaningCounts

    def label_counts(self) -> dict[str, int]:
        """Documents per class, in class order."""
        counts = np.bincount(self.labels, minlength=len(self.class_names))
        return {c: int(n) for c, n in zip(self.class_names, counts)}


def _index(names: list[str]) -> tuple[tuple[str, ...], np.ndarray]:
    vocab = sorted_names(names)
    pos = {n: k for k, n in enumerate(vocab)}
    return vocab, np.array([pos[n] for n in names], dtype=np.int64)


def prepare_text(
    path: str | os.PathLike[str], options: ImportOptions | None = None, source_label: str | None = None
) -> PreparedText:
    """Read (:func:`read_text_source`) and clean (:func:`clean_texts`) a source; nothing is written.

    Raises:
        DatasetError: as :func:`read_text_source`; or no document left after cleaning (with the counts).
    """
    options = options or ImportOptions()
    src = read_text_source(path, options, source_label)
    kept, texts, counts = clean_texts(src.texts, options.min_chars, options.max_chars)
    if src.where is not None:
        src.notes += counts.dropped_lines(src.where)
    if not texts:
        dropped = "".join(f"; {d}" for d in counts.dropped_lines(src.where)) if src.where is not None else ""
        raise DatasetError(f"{src.source}: no documents left after cleaning ({counts.describe()}{dropped})")
    raw_labels = [src.labels[i] for i in kept] if src.labels is not None else [importer.UNLABELED] * len(kept)
    class_names, labels = _index(raw_labels)
    group_names, groups = _index([src.groups[i] for i in kept]) if src.groups is not None else ((), None)
    return PreparedText(src, texts, class_names, labels, group_names, groups, counts)


@dataclass
class TextImportReport:
    """What :func:`import_text` did (the text counterpart of :class:`engine.data.importer.ImportReport`).

    Attributes:
        source: the file or folder as given.
        kind: how it was read (:attr:`TextSource.kind`).
        dataset: the registered dataset's info.
        accepted: documents in the dataset.
        rejected: ``(file or file:line, reason)`` for files / rows that could not be used.
        skipped: ``(file, reason)`` for files that are not ``.txt`` documents.
        cleaning: the cleaning counts.
        roles: the column roles of a table (None otherwise).
        label_counts: documents per class.
        notes: how the source was read.
    """

    source: str
    kind: str = ""
    dataset: DatasetInfo | None = None
    accepted: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    cleaning: CleaningCounts | None = None
    roles: ColumnRoles | None = None
    label_counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """Multi-line report: counts, columns, cleaning, the dataset, every rejected file/row, skipped files by reason."""
        lines = [f"Import of {self.source} ({self.kind}): {self.accepted} documents accepted, "
                 f"{len(self.rejected)} rejected, {len(self.skipped)} skipped."]  # fmt: skip
        lines += self.notes
        if self.roles is not None:
            lines.append(f"Columns: {self.roles.describe()}.")
        if self.cleaning is not None:
            lines.append(f"Cleaning: {self.cleaning.describe()}.")
        if self.dataset is not None:
            d = self.dataset
            per_class = ", ".join(f"{c} {n}" for c, n in self.label_counts.items())
            groups = f", {counted(len(d.group_names), 'group')}" if d.group_names else ""
            lines.append(f"Dataset {d.name!r}: {d.n_train} train + {d.n_val} val documents, "
                         f"{classes_text(len(d.class_names))} ({per_class}){groups}.")  # fmt: skip
        return "\n".join(lines + refusal_lines(self.rejected, self.skipped, "Skipped (not .txt documents)"))


@permission("data.import", import_target, import_outcome)
def import_text(
    path: str | os.PathLike[str],
    name: str | None = None,
    options: ImportOptions | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    source_label: str | None = None,
) -> TextImportReport:
    """Import a text source (module docstring) and register it as dataset ``name``.

    Args:
        path: a ``.txt``, ``.csv``, ``.tsv`` or ``.jsonl`` file, or a ``.zip`` / folder of ``.txt`` files.
        name: dataset name; default: the file name without extension, lower-cased, other characters
            than ``a-z0-9_-`` replaced by ``-``.
        options: columns, split (``val_fraction``, ``seed``, stratified by class or by group) and
            length filters.
        workspace: workspace folder (default ``$MASKLAB_WORKSPACE`` or ``./workspace``).
        overwrite: replace an existing dataset of that name (only once the import succeeded).
        source_label: how reports and errors name the source (the dashboard passes the uploaded
            file's name).
    Returns:
        A :class:`TextImportReport`; its ``dataset`` is the registered info (with ``source_hash``).
        A dataset of one document has no val row (as for images: :func:`~engine.data.dataset.n_val_for`).
    Raises:
        DatasetError: as :func:`prepare_text`; an invalid, reserved or existing name (without
            ``overwrite``). Nothing is written then.
    """
    src_path = Path(path).expanduser()
    options = options or ImportOptions()
    label = source_label or str(path)
    if not src_path.exists():
        raise DatasetError(f"{label}: no such file or folder")
    name = check_new_name(name if name is not None else importer.default_name(src_path), workspace, overwrite)
    prep = prepare_text(src_path, options, label)
    split = seeded_split(prep.labels, options.val_fraction, options.seed, prep.groups)
    src = prep.source
    cols = f"; text column {src.roles.text!r}" if src.roles is not None else ""
    if src.roles is not None and src.roles.label is not None:
        cols += f", label column {src.roles.label!r}"
    info = DatasetInfo(
        name=name,
        modality="text",
        source=f"upload:{src_path.name}",
        image_shape=None,
        class_names=prep.class_names,
        n_train=int((split == 0).sum()),
        n_val=int((split == 1).sum()),
        created_at=storage.utc_now(),
        description=f"Imported from {src_path.name} ({src.kind}{cols}): {len(prep.texts)} documents "
        f"in {classes_text(len(prep.class_names))}.",
        stats={**text_stats(prep.texts), "cleaning": prep.cleaning.as_dict()},
        group_names=prep.group_names,
    )
    order = import_order(len(prep.texts), options.seed)  # stored shuffled: no class-ordered slices
    ds = TextDataset.from_texts(info, [prep.texts[i] for i in order], prep.labels[order], split[order],
                                None if prep.groups is None else prep.groups[order])
    folder = storage.save_dataset(ds, workspace, overwrite=overwrite)
    return TextImportReport(
        source=label, kind=src.kind, dataset=storage.read_info(folder), accepted=len(prep.texts),
        rejected=src.rejected, skipped=src.skipped, cleaning=prep.cleaning, roles=src.roles,
        label_counts=prep.label_counts(), notes=src.notes,
    )  # fmt: skip
