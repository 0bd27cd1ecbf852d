"""Reading the members of a zip archive or a folder: their names, safety checks and bounded reads.

Names (every way a zip stores them):

1. Bit 11 of the member's flags set: the name is UTF-8 (APPNOTE 6.3.x, appendix D).
2. Else an Info-ZIP Unicode Path extra field (0x7075, version 1) whose CRC-32 matches the stored
   name bytes: its UTF-8 name (7-Zip and Info-ZIP write it beside a legacy name).
3. The other names ("unflagged") are decoded together, as one group, with one encoding:
   ``name_encoding`` when the user chose one; else ASCII when they are all ASCII; else UTF-8 when
   every one is valid UTF-8 (macOS and Linux tools write UTF-8 without the flag); else the encoding
   that `charset-normalizer <https://github.com/jawah/charset_normalizer>`_ detects over all their
   non-ASCII path components together, among :data:`NAME_ENCODINGS` (the code pages that archivers
   write). Detection *decides* only when its best candidate's chaos is at least
   :data:`DECISIVE_CHAOS_MARGIN` points below every candidate that decodes the names differently;
   otherwise it is *ambiguous*: the best guess is used (cp437, the zip default, when it is among the
   close candidates), :class:`NameDecoding` says so and lists the candidates, and the user can
   choose. Short names rarely decide (``Café``/``Ñandú`` fit cp1250, cp1252 and cp1257 alike).
   Folder names are the file system's bytes and follow rule 3.

Only after decoding are backslashes turned into ``/`` (a Shift-JIS name such as ``ソ`` contains the
byte 0x5C); reports say how many (:attr:`NameDecoding.backslashed`). A name that is absolute (``/x``, ``C:x``, ``//server``) or has a ``..`` component *leaves
the archive*: it is refused. Names never become paths: members are read in memory, never extracted.
A symbolic link inside a folder that points outside it is refused the same way.

Reads are bounded: a zip member is read with at most its declared uncompressed size (zipfile checks the
CRC-32 at that point, so a member that inflates to more than it declares is refused as damaged).
"""

from __future__ import annotations

import dataclasses
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from charset_normalizer import from_bytes

from engine.data.limits import ImportLimits, human_bytes
from engine.errors import DatasetError

NAME_ENCODINGS = (
    "cp437", "cp850", "cp852", "cp857", "cp866", "cp874", "cp1250", "cp1251", "cp1252", "cp1253",
    "cp1254", "cp1255", "cp1256", "cp1257", "cp1258", "cp932", "gb18030", "cp949", "big5", "koi8_r",
    "euc_jp", "mac_roman",
)  # fmt: skip
"""Encodings that detection chooses among: DOS/OEM and Windows code pages, the CJK ones, KOI8-R, Mac Roman."""

DECISIVE_CHAOS_MARGIN = 5.0
"""Chaos points (charset-normalizer's ``percent_chaos``) by which the best candidate must beat every
candidate that decodes the names differently for detection to decide."""

UTF8_FLAG = 0x800
UNICODE_PATH_EXTRA = 0x7075


@dataclass(frozen=True)
class NameDecoding:
    """How the member names of one archive were decoded.

    Attributes:
        encoding: codec of the unflagged names (``"ascii"``, ``"utf-8"``, ``"cp932"``...).
        how: ``"ascii"`` (nothing to decode), ``"utf-8"`` (flagged or valid UTF-8), ``"detected"``,
            ``"ambiguous"`` (detection could not decide: ``encoding`` is the best guess) or ``"chosen"``.
        candidates: for ``"ambiguous"``, the close candidates, best first (``encoding`` among them).
        n_names: unflagged names that needed an encoding (non-ASCII).
        backslashed: names holding ``\\``, read as the folder separator (Windows tools write it), and
            ``backslash_example`` the first of them.
    """

    encoding: str
    how: str
    candidates: tuple[str, ...] = ()
    n_names: int = 0
    backslashed: int = 0
    backslash_example: str = ""

    @property
    def ambiguous(self) -> bool:
        """True when detection could not decide and ``encoding`` is a guess."""
        return self.how == "ambiguous"

    @property
    def noteworthy(self) -> bool:
        """True when a report should say how the names were read: an encoding other than ASCII or
        UTF-8 was used, or a ``\\`` was read as a folder separator."""
        return self.how not in ("ascii", "utf-8") or self.backslashed > 0

    def describe(self) -> str:
        """One line for reports, e.g. ``member names: cp932 (detected over 12 names)``, and how many
        names use ``\\`` as the folder separator."""
        return self._encoding_text() + (
            f"; {self.backslashed} use \\ as the folder separator (as Windows tools write them), read as / "
            f"(e.g. {self.backslash_example})" if self.backslashed else "")  # fmt: skip

    def _encoding_text(self) -> str:
        if self.how == "ascii":
            return "member names: ASCII"
        if self.how == "utf-8":
            return "member names: UTF-8"
        if self.how == "chosen":
            return f"member names: {self.encoding} (chosen)"
        if self.how == "detected":
            return f"member names: {self.encoding} (detected over {self.n_names} names)"
        return (f"member names: {self.encoding}, a guess: detection was ambiguous between "
                f"{', '.join(self.candidates)} over {self.n_names} names; if the class names look wrong, "
                "choose the encoding (`--name-encoding`, or the Data page's select)")  # fmt: skip


@dataclass
class Member:
    """One file of an archive or folder, before its name is decoded.

    Attributes:
        raw_name: the stored name bytes (folder: the file system's bytes of the relative path).
        utf8: the archive marks the name as UTF-8 (flag or Unicode Path extra field).
        unicode_name: the name from the Unicode Path extra field, if any.
        size: uncompressed bytes (None: unknown, e.g. a broken link).
        compressed: compressed bytes (zip only).
        problem: a reason to refuse it that is known from the directory alone (encrypted, link).
        read: returns the content, at most ``size`` bytes.
        name: the decoded posix path inside the archive, set by :func:`decode_names`.
        head: ``head(n)`` returns the first ``n`` bytes at most (no CRC check), e.g. to read an image
            header; None: only :attr:`read` is available.
    """

    raw_name: bytes
    utf8: bool
    size: int | None
    read: Callable[[], bytes]
    compressed: int | None = None
    unicode_name: str | None = None
    problem: str | None = None
    name: str = field(default="")
    head: Callable[[int], bytes] | None = None


def unsafe_path(name: str) -> str | None:
    """Why ``name`` (decoded, ``/``-separated) must not be used, or None. Refuses absolute names and ``..``."""
    if name.startswith("/") or (len(name) > 1 and name[1] == ":" and name[0].isalpha()):
        return "path leaves the archive (an absolute path); masklab uses names inside the archive only"
    if ".." in name.split("/"):
        return "path leaves the archive ('..' in the path); masklab uses names inside the archive only"
    if any(ord(ch) < 32 for ch in name):
        return "the name contains control characters (e.g. a NUL byte); rename the file"
    return None


def skip_reason(rel: str, extensions, what: str) -> str | None:
    """Why a member is not a candidate of an import (it is skipped and listed), or None: macOS
    metadata (``__MACOSX/``), a hidden file or folder, or an extension not in ``extensions``
    (``what`` names the expected kind, e.g. ``"an image file"``)."""
    parts = PurePosixPath(rel).parts
    if parts and parts[0] == "__MACOSX":
        return "macOS metadata"
    if any(p.startswith(".") for p in parts):
        return "hidden file"
    ext = PurePosixPath(rel).suffix.lower()
    return None if ext in extensions else f"not {what} ({ext or 'no extension'})"


MAX_NAMED = 10
"""Files named per reason in a report's skipped lines (:func:`refusal_lines`), and by :func:`some_names`."""


def some_names(names: Sequence[str], n: int = MAX_NAMED) -> str:
    """``names`` joined by commas; beyond ``n`` the first ``n`` and how many there are
    (``"a, b, c (the first 3 of 5)"``), so a count and its list never disagree."""
    shown = ", ".join(names[:n])
    return shown if len(names) <= n else f"{shown} (the first {n} of {len(names)})"


def first_refusals(rejected: Sequence[tuple[str, str]], n: int = 3) -> str:
    """The first ``n`` refusals as ``"a.wav: why; b.wav: why"``, then ``"; and 2 more"`` when there
    are more (for an error message whose exception carries the whole list)."""
    shown = "; ".join(f"{p}: {r}" for p, r in rejected[:n])
    return shown + (f"; and {len(rejected) - n} more" if len(rejected) > n else "")


def refusal_lines(rejected: list[tuple[str, str]], skipped: list[tuple[str, str]], skipped_title: str) -> list[str]:
    """The end of an import report: every rejected file with its reason; skipped files by reason,
    each reason with its count and the files (:func:`some_names`)."""
    lines = []
    if rejected:
        lines.append("Rejected:")
        lines += [f"  {path}: {reason}" for path, reason in rejected]
    if skipped:
        lines.append(f"{skipped_title}:")
        by_reason: dict[str, list[str]] = {}
        for path, reason in skipped:
            by_reason.setdefault(reason, []).append(path)
        for reason, paths in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  {paths[0]}: {reason}" if len(paths) == 1 else f"  {len(paths)} x {reason}: {some_names(paths)}")
    return lines


def clean_path(name: str) -> str:
    """``name`` with ``\\`` turned into ``/``, and empty and ``.`` components dropped."""
    return "/".join(p for p in name.replace("\\", "/").split("/") if p not in ("", "."))


def _unicode_path(extra: bytes, raw_name: bytes) -> str | None:
    """The UTF-8 name of an Info-ZIP Unicode Path extra field (0x7075) whose CRC matches ``raw_name``."""
    i = 0
    while i + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, i)
        body = extra[i + 4 : i + 4 + size]
        if tag == UNICODE_PATH_EXTRA and len(body) >= 5 and body[0] == 1:
            if struct.unpack_from("<I", body, 1)[0] == zlib.crc32(raw_name):
                try:
                    return body[5:].decode("utf-8")
                except UnicodeDecodeError:
                    return None
        i += 4 + size
    return None


def _detect(names: Sequence[bytes]) -> NameDecoding:
    """Detect one encoding for ``names`` (non-ASCII, not UTF-8) with charset-normalizer."""
    parts = sorted({p for n in names for p in n.split(b"/") if not p.isascii()})  # not at 0x5C: see docstring
    matches = [m for m in from_bytes(b"\n".join(parts), cp_isolation=list(NAME_ENCODINGS))
               if m.encoding in NAME_ENCODINGS]  # fmt: skip
    if not matches:
        return NameDecoding("cp437", "ambiguous", ("cp437",), len(names))
    best = matches[0]
    text = str(best)
    rivals = [m for m in matches[1:] if str(m) != text]
    close = [m.encoding for m in rivals if m.percent_chaos - best.percent_chaos < DECISIVE_CHAOS_MARGIN]
    if not close:
        return NameDecoding(best.encoding, "detected", (), len(names))
    candidates = (best.encoding, *close)
    guess = "cp437" if "cp437" in candidates else best.encoding
    return NameDecoding(guess, "ambiguous", candidates, len(names))


def decode_names(members: list[Member], name_encoding: str | None = None) -> NameDecoding:
    """Set ``member.name`` for every member by the rules of the module docstring.

    Args:
        members: from :func:`open_members`.
        name_encoding: the user's choice for the unflagged names (any Python codec name), or None.
    Returns:
        How the unflagged names were decoded.
    Raises:
        DatasetError: unknown ``name_encoding``, or a name that is not valid in it (naming the bytes).
    """
    loose = [m for m in members if not m.utf8 and m.unicode_name is None]
    if name_encoding is not None:
        try:
            "".encode(name_encoding)
        except LookupError:
            raise DatasetError(f"unknown name encoding {name_encoding!r}; use e.g. cp437, cp1252, cp932, utf-8")
        how = NameDecoding(name_encoding, "chosen", (), sum(not m.raw_name.isascii() for m in loose))
    else:
        foreign = [m.raw_name for m in loose if not m.raw_name.isascii()]
        if not foreign:
            how = NameDecoding("ascii", "ascii")
        elif all(_is_utf8(n) for n in foreign):
            how = NameDecoding("utf-8", "utf-8", (), len(foreign))
        else:
            how = _detect(foreign)
    for m in members:
        if m.utf8:
            text = m.raw_name.decode("utf-8", errors="replace")
        elif m.unicode_name is not None:
            text = m.unicode_name
        else:
            try:
                text = m.raw_name.decode(how.encoding)
            except UnicodeDecodeError:
                raise DatasetError(f"member name {m.raw_name!r} is not valid {how.encoding}; "
                                   "choose another name encoding") from None  # fmt: skip
        m.name = text
    slashed = [m.name for m in members if "\\" in m.name]
    return dataclasses.replace(how, backslashed=len(slashed), backslash_example=slashed[0]) if slashed else how


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def declared_entries(path: Path) -> int | None:
    """Entries the zip's end of central directory record declares (zip64 too), read from the last
    64 KiB without parsing the directory; None when there is no such record (APPNOTE 4.3.14-16)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        tail_len = min(size, 22 + 65535)
        f.seek(size - tail_len)
        tail = f.read(tail_len)
        i = tail.rfind(b"PK\x05\x06")
        if i < 0 or len(tail) - i < 22:
            return None
        total = struct.unpack_from("<H", tail, i + 10)[0]
        if total == 0xFFFF and i >= 20 and tail[i - 20 : i - 16] == b"PK\x06\x07":
            f.seek(struct.unpack_from("<Q", tail, i - 20 + 8)[0])
            rec = f.read(56)
            if len(rec) == 56 and rec[:4] == b"PK\x06\x06":
                total = struct.unpack_from("<Q", rec, 32)[0]
        return total


def _zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Member:
    flagged = bool(info.flag_bits & UTF8_FLAG)
    raw = info.orig_filename.encode("utf-8" if flagged else "cp437")  # zipfile decoded unflagged names as cp437
    problem = None
    if info.flag_bits & 0x1:
        problem = "encrypted; re-create the archive without a password"
    elif info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16):
        problem = "a symbolic link; masklab does not follow links inside archives"

    def read() -> bytes:
        with zf.open(info) as f:  # read(n) inflates at most n bytes; the CRC is checked at the declared end
            return f.read(info.file_size)

    def head(n: int) -> bytes:
        with zf.open(info) as f:
            return f.read(min(n, info.file_size))

    return Member(raw, flagged, info.file_size, read, info.compress_size,
                  None if flagged else _unicode_path(info.extra, raw), problem, head=head)  # fmt: skip


def _file_head(p: Path) -> Callable[[int], bytes]:
    def head(n: int) -> bytes:
        with open(p, "rb") as f:
            return f.read(n)

    return head


def _folder_members(root: Path, label: str, limits: ImportLimits) -> list[Member]:
    top = root.resolve()
    out: list[Member] = []
    for dirpath, _dirs, files in os.walk(root):
        for n in files:
            p = Path(dirpath) / n
            raw = os.fsencode(p.relative_to(root).as_posix())
            try:
                size: int | None = p.stat().st_size
            except OSError:  # e.g. a broken link: read() says why
                size = None
            problem = None
            if p.is_symlink() and not p.resolve().is_relative_to(top):
                problem = "path leaves the folder (a symbolic link to a file outside it)"
            out.append(Member(raw, False, size, p.read_bytes, problem=problem, head=_file_head(p)))
            if len(out) > limits.max_members:
                raise DatasetError(f"{label}: more than {limits.max_members} files, over the limit "
                                   "(MASKLAB_MAX_MEMBERS); import a smaller folder or raise the limit")  # fmt: skip
    return out


class Members:
    """The members of a folder or zip, kept open for reading: ``with Members(path, label, limits) as ms``.

    Attributes:
        members: every file (not directories), in stored order; names not decoded yet.
    Raises (on entering):
        DatasetError: not a zip or folder, a damaged zip directory, or more entries than
            ``limits.max_members`` (read from the end record before the directory is parsed).
    """

    def __init__(self, path: Path, label: str, limits: ImportLimits):
        self.path, self.label, self.limits = path, label, limits
        self._zf: zipfile.ZipFile | None = None
        self.members: list[Member] = []

    def __enter__(self) -> Members:
        path, label, limits = self.path, self.label, self.limits
        if path.is_dir():
            self.members = _folder_members(path, label, limits)
            return self
        if not zipfile.is_zipfile(path):
            raise DatasetError(f"{label}: not a zip archive or a folder")
        n = declared_entries(path)
        if n is not None and n > limits.max_members:
            raise DatasetError(f"{label}: {n} entries, over the limit of {limits.max_members} "
                               "(MASKLAB_MAX_MEMBERS); split the archive or raise the limit")  # fmt: skip
        try:
            self._zf = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile, ValueError) as e:
            raise DatasetError(f"{label}: the zip directory is damaged; re-create the archive") from e
        infos = self._zf.infolist()
        if len(infos) > limits.max_members:
            raise DatasetError(f"{label}: {len(infos)} entries, over the limit of {limits.max_members} "
                               "(MASKLAB_MAX_MEMBERS); split the archive or raise the limit")  # fmt: skip
        self.members = [_zip_member(self._zf, i) for i in infos if not i.is_dir()]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._zf is not None:
            self._zf.close()


def read_problem(e: BaseException) -> str:
    """masklab's reason for an exception raised while reading a member's bytes."""
    if isinstance(e, NotImplementedError):
        return ("compressed with a method masklab cannot read; re-create the archive with the standard "
                "Deflate method")  # fmt: skip
    if isinstance(e, RuntimeError) and "encrypted" in str(e):
        return "encrypted; re-create the archive without a password"
    if isinstance(e, (zipfile.BadZipFile, zlib.error, EOFError)):
        return "damaged in the archive (its data does not match the directory); re-create the archive"
    if isinstance(e, PermissionError):
        return "cannot be read: permission denied"
    if isinstance(e, FileNotFoundError):
        return "cannot be read: the file or its link target is gone"
    return "cannot be read"


def _ratio_problem(m: Member, limits: ImportLimits) -> str | None:
    if m.compressed is None or m.size is None or m.size < limits.ratio_min_bytes:
        return None
    ratio = m.size / max(m.compressed, 1)
    if ratio <= limits.max_compression_ratio:
        return None
    return (f"compressed {ratio:.0f}:1 ({m.compressed} -> {m.size} bytes); the limit is "
            f"{limits.max_compression_ratio:g}:1 (MASKLAB_MAX_COMPRESSION_RATIO): such members are "
            "decompression bombs; re-create the archive without it")  # fmt: skip


def size_problem(m: Member, limits: ImportLimits) -> str | None:
    """Why a member is refused from the directory alone (empty, too large, compression ratio), or None."""
    if m.size == 0:
        return "empty file"
    if m.size is not None and m.size > limits.max_member_bytes:
        return (f"{human_bytes(m.size)} uncompressed; the limit is {human_bytes(limits.max_member_bytes)} "
                "(MASKLAB_MAX_MEMBER_BYTES): shrink the image or raise the limit")  # fmt: skip
    return _ratio_problem(m, limits)


def classify(members: list[Member], limits: ImportLimits,
             skip_reason: Callable[[str], str | None]) -> tuple[list[Member], list, list]:
    """Split decoded members into candidates (sorted by name), rejected and skipped ones, from their
    names and the directory alone, for any modality. Sets each member's ``name`` to its cleaned path.

    Args:
        members: with names decoded (:func:`decode_names`).
        limits: the size and compression-ratio limits (:func:`size_problem`).
        skip_reason: ``rel_path -> reason or None``: why a file is not a candidate of the importing
            modality (another extension, hidden, ``__MACOSX/``); skipped files are listed, not refused.

    Returns:
        ``(candidates, rejected [(path, reason)], skipped [(path, reason)])``; unsafe paths
        (:func:`unsafe_path`) and members over a limit are rejected.
    """
    candidates, rejected, skipped = [], [], []
    for m in members:
        raw = m.name.replace("\\", "/")
        if (why := unsafe_path(raw)) is not None:
            rejected.append((raw, why))
            continue
        m.name = clean_path(raw)
        if (why := skip_reason(m.name)) is not None:
            skipped.append((m.name, why))
        elif (why := m.problem or size_problem(m, limits)) is not None:
            rejected.append((m.name, why))
        else:
            candidates.append(m)
    return sorted(candidates, key=lambda m: m.name), rejected, skipped


# --------------------------------------------------------------------------- audit details of imports


def import_target(a: dict) -> str:
    """What an import acts on, for the audit log of every importer's ``@permission("data.import")``:
    the dataset name asked for, else the source."""
    return a.get("name") or a.get("source_label") or str(a.get("path"))


def import_outcome(report) -> dict:
    """The audit details of an import report (dataset name, counts)."""
    out = {"accepted": report.accepted, "rejected": len(report.rejected), "source": report.source}
    if report.dataset is not None:
        out["target"] = report.dataset.name
    return out
