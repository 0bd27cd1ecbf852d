"""PNGs whose text metadata exceeds Pillow's text limits import with their pixels (issue 37)."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from engine.data import import_archive, load_dataset
from engine.data.images import NOTE_PNG_TEXT, without_png_text

BIG = 2 * PngImagePlugin.MAX_TEXT_CHUNK  # decompressed text over Pillow's per-chunk limit


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def _text_chunk(kind: str) -> bytes:
    text = b"x" * BIG
    if kind == "iTXt":  # keyword, NUL, compressed flag, method, language tag NUL, translated keyword NUL
        return _chunk(b"iTXt", b"XML:com.adobe.xmp\x00\x01\x00\x00\x00" + zlib.compress(text))
    if kind == "iTXt-plain":
        return _chunk(b"iTXt", b"Comment\x00\x00\x00\x00\x00" + text)
    if kind == "zTXt":
        return _chunk(b"zTXt", b"Comment\x00\x00" + zlib.compress(text))
    return _chunk(b"tEXt", b"Comment\x00" + text)


def _png(arr: np.ndarray, mode: str, chunk: bytes, where: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr, mode).save(buf, "PNG")
    data = buf.getvalue()
    at = data.index(b"IDAT") - 4 if where == "before" else data.index(b"IEND") - 4
    return data[:at] + chunk + data[at:]


def _png16(arr16: np.ndarray, chunk: bytes) -> bytes:
    """A 16-bit RGB PNG (colour type 2, depth 16) with ``chunk`` before its IDAT."""
    h, w, _ = arr16.shape
    raw = b"".join(b"\x00" + arr16[y].astype(">u2").tobytes() for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)) + chunk
            + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b""))  # fmt: skip


CASES = {  # chunk kind, before/after the pixels, Pillow limit it exceeds
    "compressed iTXt before IDAT": ("iTXt", "before", None),
    "zTXt before IDAT": ("zTXt", "before", None),
    "compressed iTXt after IDAT": ("iTXt", "after", None),
    "zTXt after IDAT": ("zTXt", "after", None),
    "plain iTXt over MAX_TEXT_MEMORY": ("iTXt-plain", "before", "memory"),
    "tEXt over MAX_TEXT_MEMORY": ("tEXt", "before", "memory"),
    "tEXt after IDAT over MAX_TEXT_MEMORY": ("tEXt", "after", "memory"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_png_with_text_over_pillows_limit_imports_its_pixels(workspace, tmp_path, monkeypatch, case):
    kind, where, limit = CASES[case]
    if limit == "memory":  # Pillow's total is 64 MB; a lower bound makes the same failure cheap to build
        monkeypatch.setattr(PngImagePlugin, "MAX_TEXT_MEMORY", BIG // 2)
    rng = np.random.default_rng(0)
    pics = {f"scribbles/{c}/{i}.png": rng.integers(0, 256, (8, 8), dtype=np.uint8) for c in "ab" for i in range(2)}
    path = tmp_path / "scribbles.zip"
    with zipfile.ZipFile(path, "w") as z:  # stored: a plain text chunk would trip the zip's ratio limit
        for name, arr in pics.items():
            chunk = _text_chunk(kind) if name == "scribbles/a/0.png" else b""
            z.writestr(name, _png(arr, "L", chunk, where) if chunk else _png(arr, "L", b"", where))
    report = import_archive(path, "scribbles")
    assert report.rejected == [] and report.accepted == 4, report.rejected
    assert ("scribbles/a/0.png", NOTE_PNG_TEXT) in report.converted
    assert NOTE_PNG_TEXT in report.summary()
    ds = load_dataset("scribbles")
    got = {bytes(x.ravel()) for x in ds.images}
    assert got == {bytes(a.ravel()) for a in pics.values()}  # every pixel kept, the odd one included


def test_16bit_png_with_huge_itxt_decodes_at_full_depth(workspace, tmp_path):
    arr = np.arange(4 * 4 * 3, dtype=np.uint16).reshape(4, 4, 3) * 1000
    path = tmp_path / "deep.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("deep/x.png", _png16(arr, _text_chunk("iTXt")))
        z.writestr("deep/y.png", _png16(arr, b""))
    report = import_archive(path, "deep")
    assert report.rejected == [] and report.accepted == 2, report.rejected
    assert ("deep/x.png", NOTE_PNG_TEXT) in report.converted
    imgs = load_dataset("deep").images
    expect = np.floor(arr / 257 + 0.5).astype(np.uint8)
    assert all(np.array_equal(np.asarray(x).reshape(expect.shape), expect) for x in imgs)


def test_without_png_text_drops_only_text_chunks():
    arr = np.full((3, 3), 7, np.uint8)
    plain = _png(arr, "L", b"", "before")
    with_text = _png(arr, "L", _text_chunk("zTXt") + _chunk(b"tEXt", b"a\x00b"), "before")
    assert without_png_text(with_text) == plain
    assert without_png_text(plain) is None
