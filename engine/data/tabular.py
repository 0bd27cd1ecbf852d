"""Tables with a header (CSV, TSV, JSONL) read into rows of strings, and the roles of their columns.

Modality-neutral: text corpora use the ``text`` / ``label`` / ``group`` columns, and audio
manifests and image-caption tables will use the ``file`` column through the same
:class:`ImportOptions` and :func:`detect_roles`.

Formats (UTF-8; UTF-16 and UTF-32 are converted and a leading byte-order mark removed, both noted
(:func:`text_problem`); invalid UTF-8 is refused with the line, and a file whose content is another
format (a workbook, a PDF, an image: :mod:`engine.data.sniff`) is refused saying what it is):

- ``.csv``: RFC 4180 (comma-separated, ``"``-quoted fields may hold commas, quotes and line breaks).
- ``.tsv``: tab-separated with **no quoting** (IANA ``text/tab-separated-values``: a field holds
  no tab or line break; a ``"`` is an ordinary character).
- ``.jsonl``: one JSON object per line; the columns are the keys in order of first appearance;
  strings are kept, ``null`` becomes ``""``, other values their JSON text (``1``, ``true``).

The first row of a CSV/TSV is the header. Blank lines are ignored. A row with another number of
fields than the header, or a JSONL line that is not a JSON object, is *rejected* (listed with its
line) and the other rows are kept.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.data.sniff import Sniffed, a_or_an, sniff
from engine.errors import DatasetError
from engine.messages import describe_error, format_problems

TABLE_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl"}
"""File extension -> table kind."""

MAX_TABLE_BYTES = 200 * 1024 * 1024
"""Largest table file read (bytes); larger ones are refused before reading."""

ROLES = ("file", "text", "label", "group")
"""Column roles, in the order :func:`detect_roles` decides them."""

NAME_HINTS = {
    "file": ("file", "path", "filename", "image", "audio", "clip"),
    "label": ("label", "class", "category", "target", "topic"),
    "group": ("group", "speaker", "author", "user", "source"),
    "caption": ("caption", "description", "text", "sentence", "transcript"),
}
"""Column names (or name parts) that suggest a role; ``caption`` is the text column of image-caption
pairs (:func:`caption_column`)."""

FILE_EXTENSIONS = (
    ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff",
    ".wav", ".flac", ".ogg", ".mp3", ".m4a", ".txt",
)  # fmt: skip
"""Extensions that make a column's values look like file paths."""

MAX_LABEL_VALUES = 100
"""A column with more distinct values is not taken as the label column by cardinality."""


class ImportOptions(BaseModel):
    """How to read a source: which columns play which role, the split and the length filters.

    A column option left at None is detected (:func:`detect_roles`); ``""`` means "no such
    column" (e.g. ``label_column=""`` imports without labels even if a ``category`` column exists).

    Attributes:
        file_column: column of relative file paths (audio manifests, image captions).
        text_column: column of the documents.
        label_column: column of the class names.
        group_column: column of group ids (speaker, author...): a group's rows stay in one split.
        val_fraction: fraction of rows put in the val split, in [0, 1).
        seed: split seed.
        min_chars: drop documents shorter than this many characters (after whitespace normalisation).
        max_chars: drop documents longer than this many characters.
        name_encoding: encoding of the member names a zip does not mark as UTF-8 (images, .txt
            and audio archives); default: detected (:mod:`engine.data.archive`).
        sample_rate: audio only: the pipeline rate in Hz every clip is resampled to (default
            16000, :data:`engine.data.audio.DEFAULT_SAMPLE_RATE`).
    Raises:
        pydantic.ValidationError (a ``ValueError``) naming the field: negative lengths,
        ``min_chars > max_chars``, ``val_fraction`` outside [0, 1), unknown fields.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    file_column: str | None = None
    text_column: str | None = None
    label_column: str | None = None
    group_column: str | None = None
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    seed: int = 0
    min_chars: int | None = Field(None, ge=0)
    max_chars: int | None = Field(None, ge=1)
    name_encoding: str | None = None
    sample_rate: int | None = Field(None, ge=1000, le=192_000)

    @model_validator(mode="after")
    def _lengths_ordered(self) -> ImportOptions:
        if self.min_chars is not None and self.max_chars is not None and self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) is larger than max_chars ({self.max_chars})")
        return self

    def given_columns(self) -> dict[str, str]:
        """``role -> column`` for the column options that are set (``""`` included)."""
        return {r: v for r in ROLES if (v := getattr(self, f"{r}_column")) is not None}


def import_options(**kwargs) -> ImportOptions:
    """:class:`ImportOptions` from keyword arguments; a bad value raises DatasetError naming the field."""
    try:
        return ImportOptions(**kwargs)
    except ValidationError as e:
        raise DatasetError(f"import options: {format_problems(e, empty_loc='options')}") from None


def utf8_problem(data: bytes) -> str | None:
    """Why ``data`` is not valid UTF-8 (naming the 1-based line and the bad byte), or None."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        return f"invalid UTF-8 at line {line}, byte {col} of the line (0x{data[e.start]:02x}); save it as UTF-8"
    return None


def text_notes(sniffed: Sniffed) -> list[str]:
    """What decoding a text file of this :func:`~engine.data.sniff.sniff` result did, for the report."""
    notes = []
    if sniffed.encoding not in (None, "utf-8"):
        notes.append(f"converted from {sniffed.detail.split(' text')[0]} to UTF-8")
    if sniffed.bom:
        notes.append("a byte-order mark (BOM) was removed")
    return notes


def text_problem(data: bytes) -> tuple[str | None, str | None, list[str]]:
    """``(text, None, notes)`` for ``data`` read as text (UTF-8, or UTF-16/32 found by
    :func:`engine.data.sniff.sniff`, converted; a byte-order mark removed; ``notes`` say so), or
    ``(None, why not, [])``: another format than text (saying which, and what to do), or bytes
    invalid in the encoding (with the line)."""
    found = sniff(data)
    if found.kind == "empty":
        return "", None, []
    if found.kind != "text":
        return None, f"the content is {a_or_an(found.detail)}, not text: {found.advice()}", []
    if found.encoding in (None, "utf-8"):
        problem = utf8_problem(data)
        if problem is not None:
            return None, problem, []
        text = data.decode("utf-8")
        if text.startswith("\ufeff"):
            return text[1:], None, text_notes(Sniffed("text", "UTF-8 text", "utf-8", 3))
        return text, None, []
    try:
        text = data[found.bom :].decode(found.encoding)
    except UnicodeDecodeError as e:
        return None, (f"looks like {found.detail} but byte {e.start + found.bom} is not valid "
                      f"{found.encoding.upper()}; save it as UTF-8"), []  # fmt: skip
    return text, None, text_notes(found)


def decode_utf8(data: bytes, where: str, notes: list[str] | None = None) -> str:
    """``data`` as text (:func:`text_problem`: UTF-8, or UTF-16/UTF-32 converted), without a
    byte-order mark; what was converted or removed is appended to ``notes`` (prefixed with ``where``).

    Raises:
        DatasetError: ``"<where>: invalid UTF-8 at line N ..."`` (1-based line of the first bad byte),
            or ``"<where>: the content is an Excel workbook (OOXML), not text: <what to do>"`` for a
            file of another format (:mod:`engine.data.sniff`).
    """
    text, problem, found = text_problem(data)
    if text is None:
        raise DatasetError(f"{where}: {problem}")
    if notes is not None:
        notes += [f"{where}: {n}" for n in found]
    return text


def read_utf8_file(path: Path, where: str, max_bytes: int, notes: list[str] | None = None) -> str:
    """The text of a file (:func:`decode_utf8`, its notes appended to ``notes``).

    Raises:
        DatasetError: naming ``where``: unreadable, larger than ``max_bytes``, invalid UTF-8 (with
            the line), or another format than text (saying which).
    """
    try:
        if path.stat().st_size > max_bytes:
            raise DatasetError(f"{where}: larger than {max_bytes // 2**20} MB")
        return decode_utf8(path.read_bytes(), where, notes)
    except OSError as e:
        raise DatasetError(f"{where}: cannot read the file ({describe_error(e)})") from e


@dataclass
class Table:
    """A table read by :func:`read_table`.

    Attributes:
        source: how messages name the file.
        kind: ``"csv"``, ``"tsv"`` or ``"jsonl"``.
        columns: column names in file order.
        rows: one list of ``len(columns)`` strings per kept row (a missing JSONL key is ``""``).
        lines: 1-based line where each kept row starts.
        rejected: ``("<source>:<line>", reason)`` for each row that was not kept.
        notes: how the file was decoded (``"<source>: converted from UTF-16 LE to UTF-8"``, a removed BOM).
    """

    source: str
    kind: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def column(self, name: str) -> list[str]:
        """Values of column ``name``, one per row. Raises KeyError for an unknown column."""
        if name not in self.columns:
            raise KeyError(name)
        j = self.columns.index(name)
        return [r[j] for r in self.rows]


def read_table(path: str | Path, source_label: str | None = None) -> Table:
    """Read a ``.csv``, ``.tsv`` or ``.jsonl`` file (see the module docstring for the formats).

    Args:
        path: the file; its extension gives the format.
        source_label: how messages name the file (default: the path).
    Raises:
        DatasetError: naming the file: unknown extension, unreadable, larger than
            :data:`MAX_TABLE_BYTES`, invalid UTF-8 (with the line), no header, an empty or
            duplicate column name, or a CSV syntax error (with the line).
    """
    path = Path(path)
    label = source_label or str(path)
    kind = TABLE_EXTENSIONS.get(path.suffix.lower())
    if kind is None:
        raise DatasetError(f"{label}: not a table (expected {', '.join(TABLE_EXTENSIONS)})")
    notes: list[str] = []
    table = _parse(read_utf8_file(path, label, MAX_TABLE_BYTES, notes), label, kind)
    table.notes = notes
    return table


def parse_table(data: bytes, source_label: str, kind: str) -> Table:
    """A table from its bytes (e.g. a manifest inside a zip), read as :func:`read_table` reads a file.

    Args:
        data: the file's bytes; source_label: how messages name it; kind: ``"csv"``, ``"tsv"`` or ``"jsonl"``.
    Raises:
        DatasetError: as :func:`read_table`.
    """
    if len(data) > MAX_TABLE_BYTES:
        raise DatasetError(f"{source_label}: larger than {MAX_TABLE_BYTES // 2**20} MB")
    notes: list[str] = []
    table = _parse(decode_utf8(data, source_label, notes), source_label, kind)
    table.notes = notes
    return table


def parse_table_rows(data: bytes, source_label: str, kind: str) -> Table:
    """A table read like :func:`parse_table`, except that invalid UTF-8 refuses only the rows that
    hold it: each such row is in ``rejected`` (``"<source>:<line>"``, naming the first bad byte) and
    the other rows are kept. For tables whose rows are independent items (an image's caption),
    where one badly saved row should not cost the rest.

    Raises:
        DatasetError: larger than :data:`MAX_TABLE_BYTES`, no header, an undecodable header, bad
            quoting (as :func:`parse_table`).
    """
    if len(data) > MAX_TABLE_BYTES:
        raise DatasetError(f"{source_label}: larger than {MAX_TABLE_BYTES // 2**20} MB")
    found = sniff(data)
    if found.kind not in ("text", "empty") or found.encoding not in (None, "utf-8"):
        return parse_table(data, source_label, kind)  # another format refused; UTF-16/32 converted whole
    text = data.decode("utf-8", "surrogateescape")  # a bad byte becomes a lone surrogate U+DC80..U+DCFF
    table = _parse(text[1:] if text.startswith("\ufeff") else text, source_label, kind)
    if text.startswith("\ufeff"):
        table.notes.append(f"{source_label}: a byte-order mark (BOM) was removed")
    bad = re.compile("[\udc80-\udcff]")
    if any(bad.search(c) for c in table.columns):
        raise DatasetError(f"{source_label}: the header row is not valid UTF-8; save the file as UTF-8")
    keep = [i for i, row in enumerate(table.rows) if not any(bad.search(v) for v in row)]
    for i in sorted(set(range(len(table.rows))) - set(keep)):
        byte = next(m.group() for v in table.rows[i] if (m := bad.search(v)))
        table.rejected.append((f"{source_label}:{table.lines[i]}", f"not valid UTF-8 (byte 0x{ord(byte) - 0xDC00:02x}); "
                                                                    "save the file as UTF-8"))
    table.rows, table.lines = [table.rows[i] for i in keep], [table.lines[i] for i in keep]
    return table


def _parse(text: str, label: str, kind: str) -> Table:
    return _read_jsonl(text, label) if kind == "jsonl" else _read_delimited(text, label, kind)


def _header(names: list[str], label: str) -> list[str]:
    """Column names stripped; an empty name becomes ``column<k>`` (1-based); duplicates are refused."""
    cols = [n.strip() or f"column{k + 1}" for k, n in enumerate(names)]
    dup = sorted({c for c in cols if cols.count(c) > 1})
    if dup:
        raise DatasetError(f"{label}: duplicate column name(s) in the header: {', '.join(map(repr, dup))}")
    return cols


def _read_delimited(text: str, label: str, kind: str) -> Table:
    if kind == "tsv":
        reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(io.StringIO(text, newline=""))
    csv.field_size_limit(max(csv.field_size_limit(), MAX_TABLE_BYTES))
    table: Table | None = None
    prev_line = 0
    try:
        for row in reader:
            start, prev_line = prev_line + 1, reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if table is None:
                table = Table(label, kind, _header(row, label))
            elif len(row) != len(table.columns):
                table.rejected.append(
                    (f"{label}:{start}", f"{len(row)} field{'s' if len(row) != 1 else ''} where the header has "
                                         f"{len(table.columns)}: a quote left open, or a separator missing or too many")
                )
            else:
                table.rows.append(row)
                table.lines.append(start)
    except csv.Error as e:
        raise DatasetError(f"{label}: not valid {kind.upper()} at line {reader.line_num}: its rows cannot be split "
                           "into fields; check the quoting") from e
    if table is None:
        raise DatasetError(f"{label}: empty file (no header row)")
    return table


def _json_cell(v: object) -> str:
    if v is None:
        return ""
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def _read_jsonl(text: str, label: str) -> Table:
    table = Table(label, "jsonl", [])
    objects: list[dict] = []
    for i, line in enumerate(re.split(r"\r\n|\r|\n", text), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            table.rejected.append((f"{label}:{i}", f"not valid JSON at column {e.colno}: each line must be one JSON "
                                   "object, e.g. {\"text\": \"...\", \"label\": \"...\"}"))
            continue
        if not isinstance(obj, dict):
            table.rejected.append((f"{label}:{i}", f"a JSON {type(obj).__name__}, not an object"))
            continue
        objects.append(obj)
        table.lines.append(i)
    table.columns = _header(list(dict.fromkeys(k for o in objects for k in o)), label) if objects else []
    table.rows = [[_json_cell(o.get(c)) for c in table.columns] for o in objects]
    return table


@dataclass
class ColumnRoles:
    """Which column plays each role (None: none), and why (:func:`detect_roles`).

    Attributes:
        file, text, label, group: column names or None.
        reasons: role -> a short human reason (``"given"``, ``"named like a label column"``, ...).
    """

    file: str | None = None
    text: str | None = None
    label: str | None = None
    group: str | None = None
    reasons: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line: ``text = 'text' (longest ...); label = 'label' (...); group: none (...)``."""
        parts = []
        for role in ROLES:
            col, why = getattr(self, role), self.reasons.get(role, "")
            parts.append(f"{role} = {col!r} ({why})" if col is not None else f"{role}: none ({why})")
        return "; ".join(parts)


def _name_tokens(name: str) -> list[str]:
    """Lower-case alphanumeric parts of a column name (``"Fine_Label"`` -> ``["fine", "label"]``)."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [t for t in re.split(r"[^a-z0-9]+", spaced.lower()) if t]


def _name_score(name: str, hints: tuple[str, ...]) -> int:
    """2 if the whole name is a hint (or its plural), 1 if one of its parts is, else 0."""
    forms = set(hints) | {h + "s" for h in hints}
    if re.sub(r"[^a-z0-9]", "", name.lower()) in forms:
        return 2
    return 1 if any(t in forms for t in _name_tokens(name)) else 0


def _by_name(columns: list[str], role: str) -> tuple[str, str] | None:
    """The best column named like ``role`` (first in file order on a tie), with the reason."""
    scored = [(-_name_score(c, NAME_HINTS[role]), k, c) for k, c in enumerate(columns)]
    best = min(scored, default=None)
    if best is None or best[0] == 0:
        return None
    return best[2], f"named like a {role} column"


def caption_column(table: Table, roles: ColumnRoles) -> tuple[str, str] | None:
    """The column named most like a caption (caption/description/text/sentence/transcript, as
    :func:`detect_roles` matches names) among those without a role, with the reason; None if none.
    Image-caption imports prefer it to :func:`detect_roles`' longest column (an ``id`` column of
    long file stems would otherwise win)."""
    taken = {getattr(roles, r) for r in ROLES if r != "text"}
    found = _by_name([c for c in table.columns if c not in taken], "caption")
    return None if found is None else (found[0], "named like a caption column")


def _is_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def _looks_like_paths(values: list[str]) -> str | None:
    """The most common extension when every non-empty value is a relative path with a known one."""
    exts = []
    for v in values:
        if not v:
            continue
        p = PurePosixPath(v.replace("\\", "/"))
        if "\n" in v or len(v) > 1000 or v.startswith("/") or p.suffix.lower() not in FILE_EXTENSIONS:
            return None
        exts.append(p.suffix.lower())
    return max(set(exts), key=exts.count) if exts else None


def detect_roles(table: Table, options: ImportOptions | None = None) -> ColumnRoles:
    """Decide which column is the file, text, label and group column.

    Columns given in ``options`` are used as given (``""``: no such column). The others are
    detected among the columns not yet taken, in this order:

    1. file: the column named most like file/path/filename/image/audio/clip (the whole name, or
       one of its ``_``/space/camelCase parts, with or without a plural ``s``; a whole-name match
       wins), else one whose non-empty values are all relative paths ending in
       :data:`FILE_EXTENSIONS`.
    2. label: the column named most like label/class/category/target/topic (so ``label`` wins
       over ``fine_label``).
    3. group: the column named most like group/speaker/author/user/source (by name only).
    4. text: the non-numeric column with the longest mean length in characters.
    5. label, when no column is named like one: the first non-numeric column (other than the text
       column) with 2 to :data:`MAX_LABEL_VALUES` distinct values, distinct values fewer than half
       of the rows.

    Args:
        table: from :func:`read_table`.
        options: the column options (default: detect everything).
    Returns:
        :class:`ColumnRoles` with a reason for each role.
    Raises:
        DatasetError: a column option names a column that does not exist (the message lists the
            columns), or one column is given for two roles.
    """
    options = options or ImportOptions()
    roles = ColumnRoles()
    given = options.given_columns()
    for role, col in given.items():
        if col and col not in table.columns:
            raise DatasetError(
                f"{table.source}: no column {col!r} for {role}_column; columns: {', '.join(map(repr, table.columns))}"
            )
        setattr(roles, role, col or None)
        roles.reasons[role] = "given" if col else "left out, as asked"
    taken = [c for c in given.values() if c]
    dup = sorted({c for c in taken if taken.count(c) > 1})
    if dup:
        raise DatasetError(f"{table.source}: column {dup[0]!r} is given for two roles")
    free = lambda: [c for c in table.columns if c not in {getattr(roles, r) for r in ROLES}]  # noqa: E731
    values = {c: table.column(c) for c in table.columns}
    numeric = {c: all(_is_number(v) for v in vals if v) and any(vals) for c, vals in values.items()}

    def settle(role: str, found: tuple[str, str] | None, missing: str) -> None:
        if role in given:
            return
        if found is None:
            roles.reasons[role] = missing
        else:
            setattr(roles, role, found[0])
            roles.reasons[role] = found[1]

    file = _by_name(free(), "file") if "file" not in given else None
    if file is None and "file" not in given:
        for c in free():
            if (ext := _looks_like_paths(values[c])) is not None:
                file = (c, f"values look like relative file paths ({ext})")
                break
    settle("file", file, "no column named file/path/... or holding relative file paths")
    settle("label", _by_name(free(), "label") if "label" not in given else None,
           "no column named label/class/category/target/topic")  # fmt: skip
    settle("group", _by_name(free(), "group") if "group" not in given else None,
           "no column named group/speaker/author/user/source")  # fmt: skip
    text = None
    if "text" not in given:
        lengths = {c: sum(map(len, values[c])) / max(1, len(table.rows)) for c in free() if not numeric[c]}
        lengths = {c: m for c, m in lengths.items() if m > 0}
        if lengths:
            c = max(lengths, key=lambda k: (lengths[k], -table.columns.index(k)))
            text = (c, f"longest mean length of the non-numeric columns ({lengths[c]:.1f} characters)")
    settle("text", text, "no non-numeric column with text")
    if roles.label is None and "label" not in given:
        n = len(table.rows)
        for c in free():
            distinct = len({v for v in values[c] if v})
            if not numeric[c] and 2 <= distinct <= MAX_LABEL_VALUES and distinct < 0.5 * n:
                roles.label = c
                roles.reasons["label"] = f"{distinct} distinct values in {n} rows"
                break
    return roles
