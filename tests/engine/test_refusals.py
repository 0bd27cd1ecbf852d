"""Refusals in masklab's words (issue 8, item 6): every refused member is named with a short reason
that says what to do; no library's own sentence reaches a user (Pillow, zipfile, csv, json,
pydantic, the OS). Each reason is checked word for word."""

from __future__ import annotations

import io
import json
import struct
import time
import zipfile

import pytest
from PIL import Image

from engine.config import RunConfig
from engine.data import import_archive, import_source, inspect_source
from engine.data.jobs import import_status, start_import
from engine.data.limits import ImportLimits
from engine.data.tabular import import_options
from engine.errors import ConfigError, DatasetError, NothingImportedError
from engine.messages import describe_error
from engine.tasks import resolve
from tests.engine.test_import import _huge_png, _raw_zip

#: Fragments of library messages that must never reach a reason.
LIBRARY_WORDS = ("Errno", "cannot identify", "exceeds limit", "decompression bomb", "Traceback", "Expecting",
                 "Input should", "image file is", "broken data stream", "BadZipFile", "Error -3", "field_size_limit")


def _png(size=(4, 4)) -> bytes:
    b = io.BytesIO()
    Image.new("L", size, 9).save(b, "PNG")
    return b.getvalue()


def _jpeg() -> bytes:
    b = io.BytesIO()
    Image.new("RGB", (4, 4), (1, 2, 3)).save(b, "JPEG")
    return b.getvalue()


EXPECTED = {
    b"ok/good.png": None,
    b"ok/empty.png": "empty file",
    b"ok/text.png": "its content is not an accepted image format (PNG, JPEG, WebP, BMP, TIFF, GIF); re-export it as one",
    b"ok/photo.png": "named .png (PNG) but its content is JPEG; rename it to match its content or convert it to PNG",
    b"ok/header.png": "damaged PNG file: its header cannot be read; re-export it",
    b"ok/cut.png": "damaged PNG file: its pixel data is truncated or cannot be decoded; re-export it",
    b"ok/huge.png": "declares 10000x10000 px; the limit is 40000000 px (MASKLAB_MAX_IMAGE_PIXELS): shrink the image "
                    "or raise the limit",
    b"../up.png": "path leaves the archive ('..' in the path); masklab uses names inside the archive only",
    b"/abs.png": "path leaves the archive (an absolute path); masklab uses names inside the archive only",
    b"ok/ctl\x01.png": "the name contains control characters (e.g. a NUL byte); rename the file",
}


def test_every_image_refusal_reads_as_specified(workspace, tmp_path):
    good = _png()
    data = {
        b"ok/good.png": good, b"ok/empty.png": b"", b"ok/text.png": b"hello, not an image",
        b"ok/photo.png": _jpeg(), b"ok/header.png": b"\x89PNG\r\n\x1a\n" + b"\0" * 20,
        b"ok/cut.png": _png((64, 64))[:60], b"ok/huge.png": _huge_png(10_000, 10_000),
        b"../up.png": good, b"/abs.png": good, b"ok/ctl\x01.png": good,
    }  # fmt: skip
    path = tmp_path / "all.zip"
    _raw_zip(path, list(data.items()))
    report = import_archive(path, val_fraction=0.0)
    got = dict(report.rejected)
    want = {k.decode(): v for k, v in EXPECTED.items() if v is not None}
    assert got == want
    assert report.accepted == 1
    for reason in got.values():
        assert not any(w in reason for w in LIBRARY_WORDS), reason
    assert set(report.details) <= set(got)  # the library's own text is kept apart, for the curious


def _bomb_headers(w: int, h: int) -> dict[str, bytes]:
    """A few dozen bytes per accepted format whose header declares ``w x h`` pixels."""
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, 0, 2835, 2835, 0, 0)
    tags = [(256, 4, 1, w), (257, 4, 1, h), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1), (273, 4, 1, 8),
            (278, 4, 1, h), (279, 4, 1, w * h)]
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes(4) + (w - 1).to_bytes(3, "little") + (h - 1).to_bytes(3, "little")
    return {
        "png": _huge_png(w, h),
        "gif": b"GIF89a" + struct.pack("<HHBBB", w, h, 0, 0, 0) + b"," + struct.pack("<HHHHB", 0, 0, w, h, 0)
               + b"\x02\x02\x4c\x01\x00;",
        "bmp": b"BM" + struct.pack("<IHHI", 14 + 40 + 16, 0, 0, 54) + info + bytes(16),
        "jpg": b"\xff\xd8\xff\xc0" + struct.pack(">HBHHB", 11, 8, h, w, 1) + b"\x01\x11\x00\xff\xd9",
        "tif": b"II*\0" + struct.pack("<IH", 8, len(tags)) + b"".join(struct.pack("<HHII", *t) for t in tags) + bytes(4),
        "webp": b"RIFF" + struct.pack("<I", 4 + len(vp8x)) + b"WEBP" + vp8x,
    }  # fmt: skip


def test_an_image_beyond_pillows_own_limit_is_refused_with_its_declared_size_in_every_format(workspace, tmp_path):
    """16000 x 16000 = 256 Mpx: past masklab's limit and past Pillow's hard limit (179 Mpx), where
    Pillow refuses to open the file at all without saying its size. The reason gives the sides the
    header declares (WebP's parser checks the limit itself: there the pixel count)."""
    path = tmp_path / "bombs.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ok/good.png", _png())
        for ext, data in _bomb_headers(16_000, 16_000).items():
            z.writestr(f"ok/big.{ext}", data)
    got = dict(import_archive(path, name="bombs", image_size=4).rejected)
    tail = " px; the limit is 40000000 px (MASKLAB_MAX_IMAGE_PIXELS): shrink the image"
    assert got == {f"ok/big.{ext}": f"declares {'256000000' if ext == 'webp' else '16000x16000'}{tail}"
                   for ext in ("png", "gif", "bmp", "jpg", "tif", "webp")}


def test_text_refusals_read_as_specified(workspace, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "fine"}\n[1, 2]\n{"text": oops}\n', encoding="utf-8")
    plan = inspect_source(rows)
    assert plan.rejected == [
        (f"{rows}:2", "a JSON list, not an object"),
        (f"{rows}:3", 'not valid JSON at column 10: each line must be one JSON object, e.g. {"text": "...", "label": "..."}'),
    ]
    bad = tmp_path / "bad.csv"
    bad.write_text('text,label\nfine,y\n"an open quote,x\nswallowed,z\n', encoding="utf-8")
    plan = inspect_source(bad)
    assert plan.rejected == [(f"{bad}:3", "1 field where the header has 2: a quote left open, or a separator "
                                          "missing or too many")]
    with pytest.raises(DatasetError) as e:
        import_source(tmp_path / "missing.zip")
    assert str(e.value).endswith("missing.zip: no such file or folder")


def test_a_damaged_zip_and_an_unknown_file_type_are_refused_in_our_words(workspace, tmp_path):
    broken = tmp_path / "broken.zip"
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w") as z:
        z.writestr("a/1.png", _png())
    raw = good.read_bytes()
    broken.write_bytes(raw[:-30] + b"\0" * 30)  # the end record destroyed
    with pytest.raises(DatasetError) as e:
        import_source(broken)
    assert "Errno" not in str(e.value) and str(e.value) == (
        f"{broken}: named .zip but not a zip archive (damaged, cut short, or another kind of file renamed); make the zip again")
    # Every other member of the kind: another file renamed .zip, an empty one, an unknown type, empty or not.
    fake, empty = tmp_path / "notazip.zip", tmp_path / "empty.zip"
    fake.write_text("just some text")
    empty.write_bytes(b"")
    pdf, empty_pdf = tmp_path / "report.pdf", tmp_path / "blank.pdf"
    pdf.write_bytes(b"%PDF-1.4")
    empty_pdf.write_bytes(b"")
    unknown = ("not a file type masklab imports; give a .zip (images, audio clips or .txt documents), a text file "
               "(.txt, .csv, .tsv, .jsonl) or an audio clip (.wav, .wave, .flac, .ogg, .oga, .opus)")
    for path, reason in [(fake, "named .zip but not a zip archive (damaged, cut short, or another kind of file renamed); "
                                "make the zip again"),
                         (empty, "the file is empty (0 bytes)"), (pdf, unknown), (empty_pdf, "the file is empty (0 bytes)")]:
        with pytest.raises(DatasetError) as e:
            import_source(path)
        assert str(e.value) == f"{path}: {reason}"


@pytest.mark.parametrize(("config", "message"), [
    ({"masking": {"ratio": 1.5}}, "masking.ratio: must be at most 1.0 (got 1.5)"),
    ({"train": {"steps": -1}}, "train.steps: must be at least 0 (got -1)"),
    ({"train": {"batch_size": 0}}, "train.batch_size: must be at least 1 (got 0)"),
    ({"train": {"steps": "many"}}, "train.steps: must be a whole number (got 'many')"),
    ({"train": {"lr": "fast"}}, "train.lr: must be a number (got 'fast')"),
    ({"masking": {"schedule": "zigzag"}}, "masking.schedule: must be one of 'constant', 'linear' or 'cosine' (got 'zigzag')"),
    ({"train": {"deterministic": "maybe"}}, "train.deterministic: must be true or false (got 'maybe')"),
    ({"train": {"stepz": 1}}, "train.stepz: unknown field"),
    ({"train": 5}, "train: must be a section of key: value pairs (got 5)"),
    ({"masking": {"strategy": "block", "params": {"min_patches": 0}}}, "masking.params.min_patches: must be at least 1 (got 0)"),
    ({"masking": {"params": {"x": 1}}}, "masking.params.x: unknown parameter of strategy 'random' (its parameters: none)"),
])  # fmt: skip
def test_config_errors_are_our_sentences_not_pydantics(config, message):
    with pytest.raises(ConfigError) as e:
        resolve(RunConfig.from_dict(config))
    assert str(e.value) == f"invalid run config: {message}"


def test_limits_and_options_errors_are_our_sentences():
    with pytest.raises(DatasetError) as e:
        ImportLimits.from_env({"MASKLAB_MAX_IMAGE_PIXELS": "0"})
    assert str(e.value) == "MASKLAB_MAX_IMAGE_PIXELS='0': must be at least 1"

    with pytest.raises(DatasetError) as e:
        import_options(val_fraction=2.0)
    assert str(e.value) == "import options: val_fraction: must be less than 1.0 (got 2.0)"


def test_describe_error_uses_no_library_sentence(tmp_path):
    try:
        json.loads('{"a": }')
    except json.JSONDecodeError as e:
        assert describe_error(e) == "not valid JSON (line 1, column 7)"
    try:
        open(tmp_path / "nope")
    except OSError as e:
        assert describe_error(e) == "the file is missing"
    try:
        b"\xff".decode("utf-8")
    except UnicodeDecodeError as e:
        assert describe_error(e) == "not UTF-8 text (byte 0)"
    try:
        zipfile.ZipFile(io.BytesIO(b"not a zip"))
    except zipfile.BadZipFile as e:
        assert describe_error(e) == "damaged (not a valid zip container)"
    assert describe_error(RuntimeError("Error while loading: something deep in Rust")) == \
        "damaged or not in the expected format"


@pytest.mark.parametrize("modality, members", [
    ("image", {"a/text.png": b"hello, not an image", "a/empty.png": b""}),
    ("text", {"a/latin1.txt": "café au lait".encode("latin-1"), "b/bad.txt": b"ok\n\xff\xfe\n"}),
    ("audio", {"a/empty.wav": b"", "a/noise.wav": b"RIFF not really a wave file"}),
    ("paired", {"p/a.png": _png(), "p/a.txt": b"", "p/b.png": _png(), "p/b.txt": b" \n"}),
])
def test_an_import_that_refuses_every_file_lists_each_one(workspace, tmp_path, modality, members):
    """Nothing importable: the error names the source and the first reasons, and carries every
    refused file with its reason (the Data page shows them as the table of a partial import);
    the background import job keeps them in its result."""
    path = tmp_path / f"{modality}.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    with pytest.raises(NothingImportedError) as err:
        import_source(path, workspace=workspace)
    rejected = dict(err.value.rejected)
    assert str(err.value).startswith(f"{path}: no ")  # the source, then what it lacks
    want = {"image": {"a/text.png", "a/empty.png"}, "text": {"a/latin1.txt", "b/bad.txt"},
            "audio": {"a/empty.wav", "a/noise.wav"}, "paired": {"p/a.txt", "p/b.txt"}}[modality]
    assert set(rejected) == want and all(rejected.values())
    for reason in rejected.values():
        assert not any(w in reason for w in LIBRARY_WORDS), reason

    job_id = start_import(path, workspace=workspace)

    deadline = time.time() + 120
    while (job := import_status(job_id, workspace)).active:
        assert time.time() < deadline
        time.sleep(0.2)
    assert job.state == "failed" and job.error == str(err.value)
    assert dict(job.rejected) == rejected
