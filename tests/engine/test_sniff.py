"""Content sniffing (engine.data.sniff) and the text/table import path that uses it (issue 37, point 4)."""

from __future__ import annotations

import gzip
import io
import struct
import wave
import zipfile

import numpy as np
import pytest
from PIL import Image

from engine.data import import_source, inspect_source, load_dataset
from engine.data.sniff import sniff
from engine.errors import DatasetError

TEXT = "text,label\nhello there,a\ncafé au lait,b\n日本語の文,a\n"


def _zip(parts: dict[str, bytes], first: tuple[str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        if first is not None:
            z.writestr(zipfile.ZipInfo(first[0]), first[1])  # stored, first: as ODF/EPUB write "mimetype"
        for name, data in parts.items():
            z.writestr(name, data)
    return buf.getvalue()


def _image(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), (10, 20, 30)).save(buf, fmt)
    return buf.getvalue()


def _wav() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000)
        w.writeframes((np.sin(np.arange(800) / 5) * 8000).astype(np.int16).tobytes())
    return buf.getvalue()


def _flac_ogg(fmt: str) -> bytes:
    import soundfile as sf  # noqa: PLC0415 (only the audio cases need soundfile)

    buf = io.BytesIO()
    sf.write(buf, np.zeros(800, np.float32), 8000, format=fmt)
    return buf.getvalue()


CT = b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>'

FORMATS = {
    "utf-8-bom": (b"\xef\xbb\xbf" + TEXT.encode(), "text", "UTF-8 text with a byte-order mark", "utf-8"),
    "utf-16-le-bom": (TEXT.encode("utf-16"), "text", "UTF-16 LE text with a byte-order mark", "utf-16-le"),
    "utf-16-be-bom": (b"\xfe\xff" + TEXT.encode("utf-16-be"), "text", "UTF-16 BE text with a byte-order mark", "utf-16-be"),
    "utf-16-le": (TEXT.encode("utf-16-le"), "text", "UTF-16 LE text (no BOM)", "utf-16-le"),
    "utf-16-be": (TEXT.encode("utf-16-be"), "text", "UTF-16 BE text (no BOM)", "utf-16-be"),
    "utf-32-le-bom": (TEXT.encode("utf-32"), "text", "UTF-32 LE text with a byte-order mark", "utf-32-le"),
    "utf-32-be-bom": (b"\x00\x00\xfe\xff" + TEXT.encode("utf-32-be"), "text", "UTF-32 BE text with a byte-order mark", "utf-32-be"),
    "utf-32-le": (TEXT.encode("utf-32-le"), "text", "UTF-32 LE text (no BOM)", "utf-32-le"),
    "utf-8": (TEXT.encode(), "text", "UTF-8 text", "utf-8"),
    "latin-1": (TEXT.encode("latin-1", "replace"), "text", "text in an 8-bit encoding, not UTF-8", None),
    "xlsx": (_zip({"[Content_Types].xml": CT, "xl/workbook.xml": b"<workbook/>"}), "document", "Excel workbook (OOXML)", None),
    "docx": (_zip({"[Content_Types].xml": CT, "word/document.xml": b"<w/>"}), "document", "Word document (OOXML)", None),
    "pptx": (_zip({"[Content_Types].xml": CT, "ppt/presentation.xml": b"<p/>"}), "document", "PowerPoint file (OOXML)", None),
    "ods": (
        _zip({"content.xml": b"<x/>"}, ("mimetype", b"application/vnd.oasis.opendocument.spreadsheet")),
        "document",
        "OpenDocument spreadsheet (.ods)",
        None,
    ),
    "zip": (_zip({"a.txt": b"hello"}), "archive", "zip archive", None),
    "gzip": (gzip.compress(TEXT.encode()), "archive", "gzip-compressed file", None),
    "pdf": (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n", "document", "PDF document", None),
    "xls": (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504), "document", "legacy Office file (.xls, .doc or .ppt)", None),
    "png": (_image("PNG"), "image", "PNG image", None),
    "jpeg": (_image("JPEG"), "image", "JPEG image", None),
    "gif": (_image("GIF"), "image", "GIF image", None),
    "webp": (_image("WEBP"), "image", "WebP image", None),
    "bmp": (_image("BMP"), "image", "BMP image", None),
    "tiff": (_image("TIFF"), "image", "TIFF image", None),
    "wav": (_wav(), "audio", "WAV audio", None),
    "flac": (_flac_ogg("FLAC"), "audio", "FLAC audio", None),
    "ogg": (_flac_ogg("OGG"), "audio", "Ogg audio", None),
    "mp3-id3": (b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff\xfb\x90\x64" + bytes(400), "audio", "MP3 audio", None),
    "mp3-frame": (b"\xff\xfb\x90\x64" + bytes(400), "audio", "MP3 audio", None),
    "m4a": (struct.pack(">I", 24) + b"ftypM4A \x00\x00\x00\x00M4A isom", "audio", "MP4/M4A media file", None),
    "parquet": (b"PAR1\x15\x04\x15\x10" + bytes(64) + b"PAR1", "data", "Parquet file", None),
    "sqlite": (b"SQLite format 3\x00" + bytes(84), "data", "SQLite database", None),
    "npy": (b"\x93NUMPY\x01\x00v\x00{'descr': '<f8'}", "data", "NumPy array file (.npy)", None),
    "binary": (bytes(range(256)) * 4, "binary", "binary file", None),
    "empty": (b"", "empty", "empty file", None),
}


@pytest.mark.parametrize("name", list(FORMATS))
def test_sniff_names_every_format_from_its_content(name, tmp_path):
    data, kind, detail, encoding = FORMATS[name]
    for source in (data, tmp_path / "renamed.csv"):  # bytes, and a file whose extension says otherwise
        (tmp_path / "renamed.csv").write_bytes(data)
        got = sniff(source)
        assert (got.kind, got.detail, got.encoding) == (kind, detail, encoding), source


def test_text_that_starts_like_a_signature_is_still_text():
    for data in (b"BM,score\nBMW,3\n", b"ID,text\n1,hello\n", "Ögg,1\n".encode()):
        assert sniff(data).kind == "text", data


ENCODED = {"utf-8-bom": ("UTF-8", True), "utf-16-le-bom": ("UTF-16 LE", True), "utf-16-be-bom": ("UTF-16 BE", True),
           "utf-16-le": ("UTF-16 LE", False), "utf-16-be": ("UTF-16 BE", False), "utf-32-le-bom": ("UTF-32 LE", True),
           "utf-32-be-bom": ("UTF-32 BE", True), "utf-32-le": ("UTF-32 LE", False)}  # fmt: skip


@pytest.mark.parametrize("name", list(ENCODED))
@pytest.mark.parametrize("ext", [".csv", ".tsv", ".txt"])
def test_unicode_encodings_are_converted_and_reported(workspace, tmp_path, name, ext):
    data = FORMATS[name][0]
    enc = FORMATS[name][3]
    if ext == ".tsv":
        data = data[: FORMATS[name][0].index(TEXT[:1].encode(enc))] + TEXT.replace(",", "\t").encode(enc)
    path = tmp_path / f"notepad{ext}"
    path.write_bytes(data)
    codec, bom = ENCODED[name]
    plan = inspect_source(path)
    report = import_source(path, "notepad")
    for notes in (plan.notes, report.notes):
        text = " ".join(notes)
        assert (f"converted from {codec} to UTF-8" in text) == (codec != "UTF-8"), notes
        assert ("byte-order mark (BOM) was removed" in text) == bom, notes
        assert "notepad" + ext in text
    assert f"converted from {codec}" in report.summary() or codec == "UTF-8"
    texts = set(load_dataset("notepad").texts())
    if ext == ".txt":
        assert texts == set(TEXT.strip().split("\n"))
    else:
        assert texts == {"hello there", "café au lait", "日本語の文"}
        assert report.roles.text == "text" and report.roles.label == "label"


def test_utf16_txt_members_of_a_zip_are_converted_and_named(workspace, tmp_path):
    path = tmp_path / "docs.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("docs/a/one.txt", "Première note".encode("utf-16"))
        z.writestr("docs/b/two.txt", "second note".encode())
        z.writestr("docs/b/sheet.txt", FORMATS["xlsx"][0])
    report = import_source(path)
    assert report.accepted == 2
    assert any("converted from UTF-16 LE to UTF-8" in n and "docs/a/one.txt" in n for n in report.notes), report.notes
    assert report.rejected == [
        (
            "docs/b/sheet.txt",
            "the content is an Excel workbook (OOXML), not text: save it as "
            "CSV UTF-8 from Excel (File > Save As > CSV UTF-8), or export the sheet as .csv",
        )
    ]
    assert set(load_dataset("docs").texts()) == {"Première note", "second note"}


MISNAMED = {
    "xlsx": ("data.csv", "an Excel workbook (OOXML), not text: save it as CSV UTF-8 from Excel"),
    "xls": ("data.csv", "a legacy Office file (.xls, .doc or .ppt), not text: save it as CSV UTF-8"),
    "ods": ("data.tsv", "an OpenDocument spreadsheet (.ods), not text: save it as CSV (UTF-8)"),
    "docx": ("notes.txt", "a Word document (OOXML), not text: save it as Plain Text"),
    "pdf": ("paper.txt", "a PDF document, not text: copy its text out"),
    "png": ("data.csv", "a PNG image, not text: import images as a .zip or folder"),
    "jpeg": ("data.jsonl", "a JPEG image, not text"),
    "wav": ("data.tsv", "a WAV audio, not text: import audio as"),
    "zip": ("data.csv", "a zip archive, not text: unpack it, or give a zip its .zip extension"),
    "gzip": ("data.csv", "a gzip-compressed file, not text: unpack it"),
    "parquet": ("data.csv", "a Parquet file, not text: export it as CSV or JSONL"),
    "binary": ("data.txt", "a binary file, not text"),
}


@pytest.mark.parametrize("name", list(MISNAMED))
def test_another_format_under_a_text_extension_is_refused_saying_what_it_is(workspace, tmp_path, name):
    fname, says = MISNAMED[name]
    path = tmp_path / fname
    path.write_bytes(FORMATS[name][0])
    for call in (lambda: inspect_source(path, source_label=fname), lambda: import_source(path, "x", source_label=fname)):
        with pytest.raises(DatasetError) as e:
            call()
        assert str(e.value).startswith(f"{fname}: the content is {says}"), str(e.value)
        assert "UTF-8 at" not in str(e.value)
    assert not (workspace / "datasets" / "x").exists()


def test_audio_manifest_in_utf16_is_read(workspace, tmp_path):
    path = tmp_path / "clips.zip"
    with zipfile.ZipFile(path, "w") as z:
        for i in range(4):
            z.writestr(f"clips/{i}.wav", _wav())
        z.writestr("clips/labels.csv", "file,label\n0.wav,yes\n1.wav,no\n2.wav,yes\n3.wav,no\n".encode("utf-16"))
    report = import_source(path, "clips")
    assert report.accepted == 4 and set(load_dataset("clips").info.class_names) == {"yes", "no"}
    assert any("labels.csv: converted from UTF-16 LE to UTF-8" in n for n in report.notes), report.notes


def test_paired_captions_in_utf16_are_read_and_a_workbook_caption_is_named(workspace, tmp_path):
    pngs = {f"pics/{i}.png": _image("PNG") for i in range(4)}
    table = tmp_path / "table.zip"
    with zipfile.ZipFile(table, "w") as z:
        for name, data in pngs.items():
            z.writestr(name, data)
        rows = "".join(f"{i}.png,a picture number {i}\n" for i in range(4))
        z.writestr("pics/captions.csv", ("file,caption\n" + rows).encode("utf-16"))
    report = import_source(table, "tablepairs", image_size=8)
    assert report.accepted == 4, report.rejected
    assert any("captions.csv: converted from UTF-16 LE to UTF-8" in n for n in report.notes), report.notes
    txt = tmp_path / "txt.zip"
    with zipfile.ZipFile(txt, "w") as z:
        for i, (name, data) in enumerate(pngs.items()):
            z.writestr(name, data)
            z.writestr(name.replace(".png", ".txt"), f"caption {i}\n".encode("utf-16" if i else "utf-8"))
        z.writestr("pics/4.png", _image("PNG"))
        z.writestr("pics/4.txt", FORMATS["pdf"][0])
    report = import_source(txt, "txtpairs", image_size=8)
    assert report.accepted == 4
    assert report.rejected == [("pics/4.txt", "caption the content is a PDF document, not text: copy its text out or "
                                              "export it as plain text (.txt, UTF-8)")]  # fmt: skip
    assert sorted(load_dataset("txtpairs").texts()) == [f"caption {i}" for i in range(4)]
