"""What a file is, from its first bytes, whatever its name says.

    >>> sniff(b"\\xff\\xfeh\\x00i\\x00")
    Sniffed(kind='text', detail='UTF-16 LE text', encoding='utf-16-le', bom=2)

Recognised (first match wins, in this order):

==========================  =========  ==================================================================
content                     kind       how
==========================  =========  ==================================================================
UTF-32 LE / BE with BOM     text       ``FF FE 00 00`` / ``00 00 FE FF``
UTF-8 with BOM              text       ``EF BB BF``
UTF-16 LE / BE with BOM     text       ``FF FE`` / ``FE FF``
PNG, JPEG, GIF              image      ``89 PNG``, ``FF D8 FF``, ``GIF87a`` / ``GIF89a``
WebP, WAV, other RIFF       image,     ``RIFF....WEBP``, ``RIFF....WAVE``, ``RIFF``
                            audio
BMP                         image      ``BM`` + a known DIB header size at byte 14
TIFF (and BigTIFF)          image      ``II*\\0``, ``MM\\0*``, ``II+\\0``, ``MM\\0+``
FLAC, Ogg, MP3 (ID3)        audio      ``fLaC``, ``OggS``, ``ID3``
MP4 / M4A                   audio      ``ftyp`` at byte 4
PDF                         document   ``%PDF-``
Excel / Word / PowerPoint   document   zip holding ``[Content_Types].xml`` and ``xl/`` / ``word/`` / ``ppt/``
OpenDocument, EPUB          document   zip whose first member ``mimetype`` names it
other zip                   archive    ``PK\\3\\4``, ``PK\\5\\6``
gzip, bzip2, xz, zstd,      archive    ``1F 8B``, ``BZh``, ``FD 7zXZ``, ``28 B5 2F FD``, ``7z BC AF``,
7z, RAR                                ``Rar!``
legacy Office (xls, doc)    document   OLE2 ``D0 CF 11 E0``
Parquet, Arrow, HDF5,       data       ``PAR1``, ``ARROW1``, ``89 HDF``, ``SQLite format 3``, ``93 NUMPY``
SQLite, NumPy
MP3 (frame sync)            audio      ``FF Ex`` with a valid layer, bitrate and rate
UTF-32 / UTF-16 (no BOM)    text       the pattern of NUL bytes in the first 4 KiB (ASCII-range text)
UTF-8 (no BOM)              text       decodes as UTF-8 (the whole head, a cut last character allowed)
other bytes with NUL        binary     a NUL byte in the first 4 KiB
other                       text       a legacy 8-bit encoding; ``encoding`` None
==========================  =========  ==================================================================
"""

from __future__ import annotations

import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

HEAD_BYTES = 8192
"""Bytes read from a file to sniff it."""

_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le", "UTF-32 LE"),
    (b"\x00\x00\xfe\xff", "utf-32-be", "UTF-32 BE"),
    (b"\xef\xbb\xbf", "utf-8", "UTF-8"),
    (b"\xff\xfe", "utf-16-le", "UTF-16 LE"),
    (b"\xfe\xff", "utf-16-be", "UTF-16 BE"),
)

_MAGIC = (
    (0, b"\x89PNG\r\n\x1a\n", "image", "PNG image"),
    (0, b"\xff\xd8\xff", "image", "JPEG image"),
    (0, b"GIF87a", "image", "GIF image"),
    (0, b"GIF89a", "image", "GIF image"),
    (0, b"II*\x00", "image", "TIFF image"),
    (0, b"MM\x00*", "image", "TIFF image"),
    (0, b"II+\x00", "image", "TIFF image"),
    (0, b"MM\x00+", "image", "TIFF image"),
    (0, b"fLaC", "audio", "FLAC audio"),
    (0, b"OggS", "audio", "Ogg audio"),
    (0, b"ID3", "audio", "MP3 audio"),
    (4, b"ftyp", "audio", "MP4/M4A media file"),
    (0, b"%PDF-", "document", "PDF document"),
    (0, b"\x1f\x8b", "archive", "gzip-compressed file"),
    (0, b"BZh", "archive", "bzip2-compressed file"),
    (0, b"\xfd7zXZ\x00", "archive", "xz-compressed file"),
    (0, b"\x28\xb5\x2f\xfd", "archive", "zstd-compressed file"),
    (0, b"7z\xbc\xaf\x27\x1c", "archive", "7-Zip archive"),
    (0, b"Rar!\x1a\x07", "archive", "RAR archive"),
    (0, b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "document", "legacy Office file (.xls, .doc or .ppt)"),
    (0, b"PAR1", "data", "Parquet file"),
    (0, b"ARROW1", "data", "Arrow/Feather file"),
    (0, b"\x89HDF\r\n\x1a\n", "data", "HDF5 file"),
    (0, b"SQLite format 3\x00", "data", "SQLite database"),
    (0, b"\x93NUMPY", "data", "NumPy array file (.npy)"),
)

_OOXML = (("xl/", "Excel workbook (OOXML)"), ("word/", "Word document (OOXML)"), ("ppt/", "PowerPoint file (OOXML)"))
_ODF = {
    b"application/vnd.oasis.opendocument.spreadsheet": "OpenDocument spreadsheet (.ods)",
    b"application/vnd.oasis.opendocument.text": "OpenDocument text (.odt)",
    b"application/vnd.oasis.opendocument.presentation": "OpenDocument presentation (.odp)",
    b"application/epub+zip": "EPUB book",
}

ADVICE = {
    "Excel workbook (OOXML)": "save it as CSV UTF-8 from Excel (File > Save As > CSV UTF-8), or export the sheet as .csv",
    "OpenDocument spreadsheet (.ods)": "save it as CSV (UTF-8) from LibreOffice Calc",
    "legacy Office file (.xls, .doc or .ppt)": "save it as CSV UTF-8 (a sheet) or Plain Text UTF-8 (a document) from Office",
    "Word document (OOXML)": "save it as Plain Text (.txt, UTF-8) from Word",
    "OpenDocument text (.odt)": "save it as Text (.txt, UTF-8) from LibreOffice Writer",
    "PDF document": "copy its text out or export it as plain text (.txt, UTF-8)",
    "Parquet file": "export it as CSV or JSONL (e.g. pandas.read_parquet(f).to_csv(...))",
    "Arrow/Feather file": "export it as CSV or JSONL (e.g. pandas.read_feather(f).to_csv(...))",
}
"""What to do with a file of this ``detail`` that should have been text."""

_KIND_ADVICE = {
    "image": "import images as a .zip or folder of image files, named by their real format",
    "audio": "import audio as a .wav, .flac or .ogg clip, or a .zip of clips, named by their real format",
    "archive": "unpack it, or give a zip its .zip extension",
    "document": "export its text as a .txt or .csv file in UTF-8",
    "data": "export it as CSV or JSONL in UTF-8",
    "binary": "it is not text; give a UTF-8 text file (.txt, .csv, .tsv, .jsonl)",
}


@dataclass(frozen=True)
class Sniffed:
    """What :func:`sniff` found.

    Attributes:
        kind: ``"text"``, ``"image"``, ``"audio"``, ``"document"``, ``"archive"``, ``"data"``, ``"binary"``
            or ``"empty"``.
        detail: what it is in words (``"UTF-16 LE text"``, ``"Excel workbook (OOXML)"``, ``"PNG image"``).
        encoding: text only: the Python codec (``"utf-8"``, ``"utf-16-le"``...), None for an unknown 8-bit one.
        bom: text only: length of the byte-order mark the file starts with (0 without).
    """

    kind: str
    detail: str
    encoding: str | None = None
    bom: int = 0

    def advice(self) -> str:
        """What to do when this file was expected to be text."""
        return ADVICE.get(self.detail) or _KIND_ADVICE.get(self.kind, "")


def _zip_detail(zf_source, head: bytes) -> str:
    if head[30:38] == b"mimetype":  # ODF / EPUB: a stored first member "mimetype" holding the media type
        n, extra = int.from_bytes(head[26:28], "little"), int.from_bytes(head[28:30], "little")
        start = 30 + n + extra
        for mime, detail in _ODF.items():
            if head[start : start + len(mime)] == mime:
                return detail
    try:
        with zipfile.ZipFile(zf_source) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return "zip archive"
    if "[Content_Types].xml" in names:
        for prefix, detail in _OOXML:
            if any(n.startswith(prefix) for n in names):
                return detail
        return "Office Open XML file"
    return "zip archive"


def _mp3_frame(h: bytes) -> bool:
    return (len(h) >= 4 and h[0] == 0xFF and h[1] & 0xE0 == 0xE0 and (h[1] >> 3) & 3 != 1 and (h[1] >> 1) & 3 != 0
            and h[2] >> 4 not in (0, 15) and (h[2] >> 2) & 3 != 3)  # fmt: skip


def _nul_pattern(h: bytes) -> Sniffed | None:
    """BOM-less UTF-32 / UTF-16 from where the NUL bytes are (text mostly in the ASCII range)."""
    n4 = len(h) // 4 * 4
    if n4 >= 8:
        col = [h[i:n4:4].count(0) / (n4 // 4) for i in range(4)]
        if col[3] > 0.95 and col[2] > 0.9 and col[0] < 0.1:  # byte 1 holds the code point's high bits
            return Sniffed("text", "UTF-32 LE text (no BOM)", "utf-32-le")
        if col[0] > 0.95 and col[1] > 0.9 and col[3] < 0.1:
            return Sniffed("text", "UTF-32 BE text (no BOM)", "utf-32-be")
    n2 = len(h) // 2 * 2
    if n2 >= 4:
        even, odd = h[0:n2:2].count(0) / (n2 // 2), h[1:n2:2].count(0) / (n2 // 2)
        if odd > 0.4 and even < 0.05:
            return Sniffed("text", "UTF-16 LE text (no BOM)", "utf-16-le")
        if even > 0.4 and odd < 0.05:
            return Sniffed("text", "UTF-16 BE text (no BOM)", "utf-16-be")
    return None


def sniff(source: bytes | str | os.PathLike[str]) -> Sniffed:
    """What a file is from its content (the module's table); ``source`` is its bytes or its path.

    Raises:
        OSError: the path cannot be read.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        head, zf_source = data[:HEAD_BYTES], io.BytesIO(data)
    else:
        with open(source, "rb") as f:
            head = f.read(HEAD_BYTES)
        zf_source = Path(source)
    if not head:
        return Sniffed("empty", "empty file")
    for bom, codec, name in _BOMS:
        if head.startswith(bom):
            return Sniffed("text", f"{name} text with a byte-order mark", codec, len(bom))
    for off, magic, kind, detail in _MAGIC:
        if head[off : off + len(magic)] == magic:
            return Sniffed(kind, detail)
    if head[:4] == b"RIFF":
        form = head[8:12]
        return {b"WEBP": Sniffed("image", "WebP image"), b"WAVE": Sniffed("audio", "WAV audio")}.get(
            form, Sniffed("binary", f"RIFF file ({form.decode('latin-1')!r})"))  # fmt: skip
    if head[:2] == b"BM" and len(head) >= 18 and int.from_bytes(head[14:18], "little") in (12, 40, 52, 56, 64, 108, 124):
        return Sniffed("image", "BMP image")
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        detail = _zip_detail(zf_source, head)
        return Sniffed("archive" if detail == "zip archive" else "document", detail)
    if _mp3_frame(head):
        return Sniffed("audio", "MP3 audio")
    if (found := _nul_pattern(head)) is not None:
        return found
    try:
        head.decode("utf-8")
        return Sniffed("text", "UTF-8 text", "utf-8")
    except UnicodeDecodeError as e:
        if e.start >= len(head) - 3 and len(head) == HEAD_BYTES and e.reason == "unexpected end of data":
            return Sniffed("text", "UTF-8 text", "utf-8")
    if 0 in head:
        return Sniffed("binary", "binary file")
    return Sniffed("text", "text in an 8-bit encoding, not UTF-8")


def a_or_an(detail: str) -> str:
    """``detail`` with its article (``"an Excel workbook"``, ``"a PNG image"``)."""
    return ("an " if detail[:1].lower() in "aeiou" or detail.startswith(("MP3", "MP4", "HDF5", "xz")) else "a ") + detail
