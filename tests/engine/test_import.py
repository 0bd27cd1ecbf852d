"""Exact and bounded image import (issues 12 and 13): every Pillow mode to exact uint8 values, zip
member names in every encoding, formats by content, limits checked before decoding, unsafe paths.

Every case goes through a real zip (or folder), the real ``import_archive`` and the stored dataset;
expected values are worked out by hand from the rules in ``engine/data/images.py``.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageCms, ImageFile

from engine.data import import_archive, load_dataset
from engine.data.archive import NameDecoding
from engine.data.images import NOTE_CMYK_ICC, NOTE_CMYK_NAIVE, NOTE_LOST_ON_FILL, NOTE_SCALED, NOTE_TIFF16
from engine.data.importer import scan_archive
from engine.data.limits import ImportLimits
from engine.errors import DatasetError

W = 4  # every test image is W x W, imported at image_size=W: no resampling, values stay exact


def _rows(values, dtype=np.uint8) -> np.ndarray:
    """A W x W array whose every row is ``values`` (W values, or W tuples for several channels)."""
    return np.tile(np.asarray(values, dtype=dtype)[None], (W, 1) + (1,) * (np.ndim(values) - 1))


def _img(mode: str, values, dtype=np.uint8) -> Image.Image:
    """A W x W image of ``mode`` whose every row holds ``values`` (raw samples in the mode's layout)."""
    return Image.frombytes(mode, (W, W), _rows(values, dtype).tobytes())


def _save(im: Image.Image, fmt: str, **params) -> bytes:
    b = io.BytesIO()
    im.save(b, fmt, **params)
    return b.getvalue()


def _png(arr: np.ndarray, color_type: int, trns: bytes | None = None) -> bytes:
    """A 16-bit PNG written by hand (Pillow cannot write 16-bit colour): ``arr`` uint16 [H, W, C]."""
    h, w = arr.shape[:2]
    raw = b"".join(b"\0" + arr[y].astype(">u2").tobytes() for y in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0))
    extra = chunk(b"tRNS", trns) if trns is not None else b""
    return b"\x89PNG\r\n\x1a\n" + ihdr + extra + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def _tiff16_rgb(arr: np.ndarray) -> bytes:
    """An uncompressed little-endian 16-bit RGB TIFF written by hand: ``arr`` uint16 [H, W, 3]."""
    h, w = arr.shape[:2]
    pixels = arr.astype("<u2").tobytes()
    n_tags = 10
    bits_at = 8 + 2 + 12 * n_tags + 4
    data_at = bits_at + 6
    tags = [(256, 3, 1, w), (257, 3, 1, h), (258, 3, 3, bits_at), (259, 3, 1, 1), (262, 3, 1, 2),
            (273, 4, 1, data_at), (277, 3, 1, 3), (278, 3, 1, h), (279, 4, 1, len(pixels)), (284, 3, 1, 1)]
    ifd = struct.pack("<H", n_tags) + b"".join(
        struct.pack("<HHI", t, k, c) + (struct.pack("<HH", v, 0) if k == 3 and c == 1 else struct.pack("<I", v))
        for t, k, c, v in tags) + struct.pack("<I", 0)  # fmt: skip
    return b"II*\x00" + struct.pack("<I", 8) + ifd + struct.pack("<HHH", 16, 16, 16) + pixels


def _cmyk_profile() -> bytes:
    """A minimal ICC v2 CMYK output profile (lut8 A2B0) that maps every CMYK value to one Lab grey,
    so its conversion is far from Pillow's naive one (which makes CMYK 0,0,0,0 white)."""

    def s15(x: float) -> bytes:
        return struct.pack(">i", round(x * 65536))

    text = b"masklab test CMYK\0"
    desc = b"desc" + bytes(4) + struct.pack(">I", len(text)) + text + bytes(4 + 4 + 2 + 1 + 67)
    wtpt = b"XYZ " + bytes(4) + s15(0.9642) + s15(1.0) + s15(0.8249)
    cprt = b"text" + bytes(4) + b"none\0"
    identity = s15(1) + s15(0) + s15(0) + s15(0) + s15(1) + s15(0) + s15(0) + s15(0) + s15(1)
    ramp = bytes(range(256))
    a2b0 = b"mft1" + bytes(4) + bytes([4, 3, 2, 0]) + identity + ramp * 4 + bytes([128, 128, 128]) * 16 + ramp * 3
    tags = [(b"desc", desc), (b"wtpt", wtpt), (b"cprt", cprt), (b"A2B0", a2b0)]
    offset, table, data = 128 + 4 + 12 * len(tags), b"", b""
    for sig, body in tags:
        data += bytes(-len(data) % 4)
        table += sig + struct.pack(">II", offset + len(data), len(body))
        data += body
    body = struct.pack(">I", len(tags)) + table + data
    header = (struct.pack(">I", 128 + len(body)) + bytes(4) + bytes([2, 0x10, 0, 0]) + b"prtr" + b"CMYK"
              + b"Lab " + bytes(12) + b"acsp" + bytes(24) + bytes(4) + s15(0.9642) + s15(1.0) + s15(0.8249)
              + bytes(48))  # fmt: skip
    assert len(header) == 128
    return header + body


def _import_one(tmp_path: Path, filename: str, data: bytes, **kw):
    """Import a zip holding one file; returns (stored image uint8 [W, W, C], report)."""
    path = tmp_path / "one.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(filename, data)
    report = import_archive(path, name="one", image_size=W, val_fraction=0.0, overwrite=True, **kw)
    assert report.rejected == [], report.rejected
    return load_dataset("one").images[0], report


# ---------------------------------------------------------------- every mode to exact values

LA = _img("LA", [[0, 255], [200, 100], [100, 0], [50, 128]])
RGBA = _img("RGBA", [(200, 100, 50, 128), (10, 20, 30, 255), (1, 2, 3, 0), (0, 0, 0, 255)])
I16 = _img("I;16", [0, 386, 32896, 65535], np.uint16)
CMYK = _img("CMYK", [(0, 0, 0, 0), (255, 0, 0, 0), (100, 0, 0, 50), (0, 0, 0, 255)])


def _palette_image(**info) -> Image.Image:
    im = _img("P", [0, 1, 2, 3])
    im.putpalette([10, 20, 30, 200, 100, 50, 0, 0, 0, 255, 255, 255])
    im.info.update(info)
    return im


GRAY_CASES = {
    # id: (file name, file bytes, fill, expected row)
    "1 PNG": ("a.png", _save(_img("L", [0, 1, 1, 0]).point(lambda v: 255 * v).convert("1"), "PNG"),
              "white", [0, 255, 255, 0]),
    "L PNG": ("a.png", _save(_img("L", [0, 17, 128, 255]), "PNG"), "white", [0, 17, 128, 255]),
    "L PNG transparent 17": ("a.png", _save(_img("L", [0, 17, 128, 255]), "PNG", transparency=17),
                             "white", [0, 255, 128, 255]),
    "LA PNG over white": ("a.png", _save(LA, "PNG"), "white", [0, 233, 255, 152]),
    "LA PNG over black": ("a.png", _save(LA, "PNG"), "black", [0, 78, 0, 25]),
    "LA TIFF": ("a.tif", _save(LA, "TIFF"), "white", [0, 233, 255, 152]),
    "I;16 PNG": ("a.png", _save(I16, "PNG"), "white", [0, 2, 128, 255]),
    # the example: a 16-bit grey PNG with a transparent colour must not become all white
    "I;16 PNG transparent 32896 white": ("a.png", _save(I16, "PNG", transparency=32896), "white", [0, 2, 255, 255]),
    "I;16 PNG transparent 32896 black": ("a.png", _save(I16, "PNG", transparency=32896), "black", [0, 2, 0, 255]),
    "I;16 TIFF little-endian": ("a.tif", _save(I16, "TIFF"), "white", [0, 2, 128, 255]),
    "I;16B TIFF": ("a.tif", _save(_img("I;16B", [0, 386, 32896, 65535], ">u2"), "TIFF"),
                   "white", [0, 2, 128, 255]),
    # 32-bit: (v - min) * 255 / (max - min), half up: 0 -> 63.75 -> 64, 1000 -> 127.5 -> 128
    "I TIFF": ("a.tif", _save(_img("I", [-1000, 0, 1000, 3000], np.int32), "TIFF"),
               "white", [0, 64, 128, 255]),
    "I TIFF constant": ("a.tif", _save(_img("I", [7, 7, 7, 7], np.int32), "TIFF"),
                        "white", [7, 7, 7, 7]),
    # F: min/max over finite values 0.25..1.0; 0.5 -> 85; NaN -> 0
    "F TIFF": ("a.tif", _save(_img("F", [0.25, 0.5, 1.0, np.nan], np.float32), "TIFF"),
               "white", [0, 85, 255, 0]),
    "F TIFF constant above 255": ("a.tif", _save(_img("F", [300.0] * 4, np.float32), "TIFF"),
                                  "white", [255, 255, 255, 255]),
    # 16-bit grey + 16-bit alpha (Pillow would keep only high bytes, as RGBA): libpng path.
    # (32896 a + 255 * 257 * (65535 - a)) / (65535 * 257) at a = 16384: 223.25 -> 223; 1000 / 257 -> 4
    "LA 16-bit PNG": ("a.png", _png(_rows([(0, 65535), (32896, 16384), (65535, 0), (1000, 65535)], np.uint16), 4),
                      "white", [0, 223, 255, 4]),
    "L BMP": ("a.bmp", _save(_img("L", [0, 17, 128, 255]), "BMP"), "white", [0, 17, 128, 255]),
    "L JPEG constant": ("a.jpg", _save(_img("L", [77] * 4), "JPEG", quality=100), "white", [77] * 4),
}


@pytest.mark.parametrize("case", list(GRAY_CASES))
def test_gray_modes_decode_to_exact_values(workspace, tmp_path, case):
    filename, data, fill, row = GRAY_CASES[case]
    got, report = _import_one(tmp_path, filename, data, fill=fill)
    assert report.dataset.image_shape == (1, W, W)
    assert np.array_equal(got[..., 0], _rows(row)), got[..., 0]
    scaled = [n for _, n in report.converted if n == NOTE_SCALED]
    assert len(scaled) == (1 if case.startswith(("I TIFF", "F TIFF")) else 0)


def _pa_tiff() -> bytes:
    pa = _palette_image().convert("PA")
    alpha = Image.fromarray(_rows([255, 128, 0, 255]))
    pa.putalpha(alpha)
    return _save(pa, "TIFF")


TRNS = bytes([255, 0, 128, 255])  # per-entry alpha of the palette
RGB_ROW = [(200, 100, 50), (10, 20, 30), (1, 2, 3), (0, 0, 0)]
PALETTE_ROW = [(10, 20, 30), (200, 100, 50), (0, 0, 0), (255, 255, 255)]
COLOR_CASES = {
    "RGB PNG": ("a.png", _save(RGBA.convert("RGB"), "PNG"), "white", RGB_ROW),
    "RGB PNG transparent colour": ("a.png", _save(RGBA.convert("RGB"), "PNG", transparency=(10, 20, 30)), "white",
                                   [(200, 100, 50), (255, 255, 255), (1, 2, 3), (0, 0, 0)]),
    # (200 * 128 + 255 * 127) / 255 = 227.4 -> 227; over black 200 * 128 / 255 = 100.4 -> 100
    "RGBA PNG over white": ("a.png", _save(RGBA, "PNG"), "white",
                            [(227, 177, 152), (10, 20, 30), (255, 255, 255), (0, 0, 0)]),
    "RGBA PNG over black": ("a.png", _save(RGBA, "PNG"), "black", [(100, 50, 25), (10, 20, 30), (0, 0, 0), (0, 0, 0)]),
    "RGBA PNG over #102030": ("a.png", _save(RGBA, "PNG"), "#102030",
                              [(108, 66, 49), (10, 20, 30), (16, 32, 48), (0, 0, 0)]),
    "RGBA WebP lossless": ("a.webp", _save(RGBA, "WEBP", lossless=True, exact=True), "white",
                           [(227, 177, 152), (10, 20, 30), (255, 255, 255), (0, 0, 0)]),
    "RGB BMP": ("a.bmp", _save(RGBA.convert("RGB"), "BMP"), "white", RGB_ROW),
    "RGBA TIFF": ("a.tiff", _save(RGBA, "TIFF"), "white", [(227, 177, 152), (10, 20, 30), (255, 255, 255), (0, 0, 0)]),
    "P PNG": ("a.png", _save(_palette_image(), "PNG"), "white", PALETTE_ROW),
    "P PNG transparent index": ("a.png", _save(_palette_image(), "PNG", transparency=1), "black",
                                [(10, 20, 30), (0, 0, 0), (0, 0, 0), (255, 255, 255)]),
    "P PNG alpha per entry": ("a.png", _save(_palette_image(), "PNG", transparency=TRNS), "white",
                              [(10, 20, 30), (255, 255, 255), (127, 127, 127), (255, 255, 255)]),
    "P GIF transparent index": ("a.gif", _save(_palette_image(), "GIF", transparency=1), "white",
                                [(10, 20, 30), (255, 255, 255), (0, 0, 0), (255, 255, 255)]),
    "P BMP": ("a.bmp", _save(_palette_image(), "BMP"), "white", PALETTE_ROW),
    "PA TIFF": ("a.tif", _pa_tiff(), "white", [(10, 20, 30), (227, 177, 152), (255, 255, 255), (255, 255, 255)]),
    # LA over a colour fill is no longer grey: R from the white composite, G and B from the black one
    "LA PNG over red": ("a.png", _save(LA, "PNG"), "red", [(0, 0, 0), (233, 78, 78), (255, 0, 0), (152, 25, 25)]),
    # naive CMYK: R = round((255 - C)(255 - K) / 255): C=100, K=50 -> round(124.6) = 125
    "CMYK TIFF without profile": ("a.tif", _save(CMYK, "TIFF"), "white",
        [(255, 255, 255), (0, 255, 255), (125, 205, 205), (0, 0, 0)]),
    # JFIF: R = Y + 1.402 (Cr - 128) = 228.9 -> 229; G = 128 - 0.714136 * 72 = 76.6 -> 77
    "YCbCr TIFF": ("a.tif", _save(_img("YCbCr", [(100, 128, 128), (128, 128, 200), (50, 200, 60), (255, 128, 128)]),
                                  "TIFF"), "white",
        [(100, 100, 100), (229, 77, 128), (0, 74, 178), (255, 255, 255)]),
    # 16-bit colour PNG (libpng path): round(v / 257); the tRNS colour is compared at 16 bits
    "RGB 16-bit PNG transparent colour": ("a.png", _png(
        _rows([(0, 0, 0), (65535, 32896, 386), (30000, 1, 2), (255, 256, 65535)], np.uint16), 2,
        struct.pack(">HHH", 30000, 1, 2)), "white", [(0, 0, 0), (255, 128, 2), (255, 255, 255), (1, 1, 255)]),
    # 16-bit RGBA at alpha 16384 over white: G = 128 * a/A + 255 * (1 - a/A) = 223.25 -> 223; B -> 191
    "RGBA 16-bit PNG": ("a.png", _png(
        _rows([(65535, 32896, 0, 16384), (0, 0, 0, 65535), (5, 5, 5, 0), (65535, 65535, 65535, 65535)], np.uint16), 6),
        "white", [(255, 223, 191), (0, 0, 0), (255, 255, 255), (255, 255, 255)]),
    # 16-bit colour TIFF: Pillow keeps the high byte, v >> 8 (386 -> 1, 255 -> 0), noted in the report
    "RGB 16-bit TIFF": ("a.tif", _tiff16_rgb(
        _rows([(0, 0, 0), (65535, 32896, 386), (255, 256, 511), (65535, 65535, 65535)], np.uint16)), "white",
        [(0, 0, 0), (255, 128, 1), (0, 1, 1), (255, 255, 255)]),
}


@pytest.mark.parametrize("case", list(COLOR_CASES))
def test_color_modes_decode_to_exact_values(workspace, tmp_path, case):
    filename, data, fill, row = COLOR_CASES[case]
    got, report = _import_one(tmp_path, filename, data, fill=fill)
    assert report.dataset.image_shape == (3, W, W)
    assert np.array_equal(got, _rows(row)), got[0]
    notes = [n for _, n in report.converted]
    if case.startswith("CMYK"):
        assert notes == [NOTE_CMYK_NAIVE] and "1 x CMYK without an ICC profile" in report.summary()
    else:
        assert notes == ([NOTE_TIFF16] if case == "RGB 16-bit TIFF" else [])


def test_cmyk_with_embedded_icc_profile_converts_through_it(workspace, tmp_path):
    profile = _cmyk_profile()
    cmyk = CMYK
    got, report = _import_one(tmp_path, "a.tif", _save(cmyk, "TIFF", icc_profile=profile))
    src = ImageCms.ImageCmsProfile(io.BytesIO(profile))
    expected = ImageCms.profileToProfile(cmyk, src, ImageCms.createProfile("sRGB"), outputMode="RGB",
                                         renderingIntent=ImageCms.getDefaultIntent(src))  # fmt: skip
    assert np.array_equal(got, np.asarray(expected))
    assert not np.array_equal(got, np.asarray(cmyk.convert("RGB")))  # the profile made a difference
    assert got[0, 0].tolist() != [255, 255, 255]  # the naive conversion would give white here
    assert [n for _, n in report.converted] == [NOTE_CMYK_ICC]


def test_modes_no_allowed_format_can_store_decode_by_the_same_rules(workspace, tmp_path):
    # La (premultiplied grey + alpha) comes from TIFFs with associated alpha; written here by patching
    # the ExtraSamples tag of an LA TIFF from 2 (unassociated) to 1 (associated).
    premult = _img("LA", [[0, 255], [78, 100], [0, 0], [25, 128]])
    data = bytearray(_save(premult, "TIFF"))
    tag = struct.pack("<HHI", 338, 3, 1)  # ExtraSamples, SHORT, count 1, value follows
    i = data.index(tag)
    data[i + 8 : i + 10] = struct.pack("<H", 1)
    assert Image.open(io.BytesIO(bytes(data))).mode == "La"
    got, _ = _import_one(tmp_path, "a.tif", bytes(data))
    # premultiplied: out = c + round(255 (255 - a) / 255) = c + 255 - a
    assert np.array_equal(got[..., 0], _rows([0, 233, 255, 152]))


def test_exif_orientation_is_applied(workspace, tmp_path):
    im = Image.fromarray(np.arange(16, dtype=np.uint8).reshape(4, 4) * 10)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated: turn it 90 degrees clockwise
    got, _ = _import_one(tmp_path, "a.png", _save(im, "PNG", exif=exif))
    assert np.array_equal(got[..., 0], np.rot90(np.asarray(im), -1))


def test_grey_and_colour_images_make_a_colour_dataset_with_grey_replicated(workspace, tmp_path):
    path = tmp_path / "mixed.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("g/a.png", GRAY_CASES["I;16 PNG transparent 32896 white"][1])
        z.writestr("c/b.png", COLOR_CASES["RGB PNG"][1])
    report = import_archive(path, image_size=W, val_fraction=0.0)
    ds = load_dataset(report.dataset.name)
    assert ds.info.image_shape == (3, W, W) and ds.info.class_names == ("c", "g")
    grey = ds.images[ds.labels == 1][0]
    assert np.array_equal(grey, np.repeat(_rows([0, 2, 255, 255])[..., None], 3, -1))


# ---------------------------------------------------------------- geometry

RED, GREEN, BLUE = (255, 0, 0), (0, 255, 0), (0, 0, 255)


def _photo_640x480() -> bytes:
    """A 640x480 RGB PNG: columns 0-79 red, 80-559 green (exactly the centre 480x480), 560-639 blue."""
    a = np.zeros((480, 640, 3), np.uint8)
    a[:, :80], a[:, 80:560], a[:, 560:] = RED, GREEN, BLUE
    return _save(Image.fromarray(a), "PNG")


def _import_photo(tmp_path, name, **kw):
    path = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("photos/p.png", _photo_640x480())
    report = import_archive(path, name=name, image_size=48, val_fraction=0.0, **kw)
    return load_dataset(name).images[0], report


def test_photo_is_centre_cropped_by_default(workspace, tmp_path):
    img, report = _import_photo(tmp_path, "crop")
    assert img.shape == (48, 48, 3)
    assert (img == GREEN).all()  # the centre 480x480 is all green: no red or blue bleeds in at the borders
    assert report.geometry == "crop" and dict(report.geometry_counts) == {"cropped": 1}
    assert report.source_sizes == {"640x480": 1}
    assert "centre crop to 48x48: 1 centre-cropped" in report.summary()


def test_photo_is_stretched_with_its_sides_at_the_borders(workspace, tmp_path):
    img, report = _import_photo(tmp_path, "stretch", geometry="stretch")
    assert img.shape == (48, 48, 3)
    assert (img[:, 0] == RED).all() and (img[:, -1] == BLUE).all()  # 80 of 640 columns = 6 of 48
    assert (img[:, 24] == GREEN).all()
    assert dict(report.geometry_counts) == {"stretched": 1}


@pytest.mark.parametrize("fill", ["#102030", "edge", "mean"])
def test_photo_is_padded_with_the_chosen_fill(workspace, tmp_path, fill):
    img, report = _import_photo(tmp_path, f"pad-{fill.strip('#')}", geometry="pad", pad_fill=fill)
    # 640x480 -> 48x36, 6 rows above and 6 below
    body = img[6:42]
    assert (body[:, 0] == RED).all() and (body[:, -1] == BLUE).all() and (body[:, 24] == GREEN).all()
    top, bottom = img[:6], img[42:]
    if fill == "#102030":
        assert (top == (16, 32, 48)).all() and (bottom == (16, 32, 48)).all()
    elif fill == "edge":
        assert (top == body[0]).all() and (bottom == body[-1]).all()
    else:  # the scaled image's mean colour, rounded half up; about 80/640 red, 480/640 green, 80/640 blue
        mean = np.floor(body.reshape(-1, 3).astype(np.float64).mean(axis=0) + 0.5)
        assert (top == mean).all() and (bottom == mean).all()
        assert np.abs(mean - (32, 191, 32)).max() <= 1
    assert dict(report.geometry_counts) == {"padded": 1}


def test_square_images_are_kept_or_resized_and_auto_size_is_the_datas_own(workspace, tmp_path):
    path = tmp_path / "sq.zip"
    with zipfile.ZipFile(path, "w") as z:
        for i in range(3):
            z.writestr(f"a/{i}.png", _save(Image.new("L", (28, 28), 40 * i), "PNG"))
    report = import_archive(path, val_fraction=0.0)  # image_size=None: every image is 28x28
    assert report.dataset.image_shape == (1, 28, 28) and report.image_size == 28
    assert dict(report.geometry_counts) == {"kept": 3} and "auto: every image is 28x28" in report.size_rule
    report = import_archive(path, name="sq16", image_size=16, geometry="pad", val_fraction=0.0)
    assert dict(report.geometry_counts) == {"resized": 3}  # square: the geometry does not matter


def test_auto_size_of_mixed_sizes_and_grey_images_padded_with_a_colour(workspace, tmp_path):
    path = tmp_path / "mixed.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("a/wide.png", _save(Image.new("L", (40, 20), 0), "PNG"))
        z.writestr("a/square.png", _save(Image.new("L", (30, 30), 0), "PNG"))
    report = import_archive(path, val_fraction=0.0, geometry="pad", pad_fill="#404040")
    assert report.image_size == 64 and "sizes differ" in report.size_rule
    ds = load_dataset("mixed")
    assert ds.info.image_shape == (1, 64, 64)  # a grey fill keeps a grey dataset
    wide = ds.images[[i for i in range(2) if ds.images[i, 0, 0, 0] == 64][0], ..., 0]
    assert (wide[:16] == 64).all() and (wide[16:48] == 0).all() and (wide[48:] == 64).all()
    report = import_archive(path, name="mixed-red", val_fraction=0.0, geometry="pad", pad_fill="red")
    assert load_dataset("mixed-red").info.image_shape == (3, 64, 64)  # a colour fill makes the padded image colour


def test_bad_geometry_options_are_refused_in_our_words(workspace, tmp_path):
    path = tmp_path / "w.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("a.png", _save(Image.new("L", (4, 2), 0), "PNG"))
    with pytest.raises(DatasetError, match="geometry 'squash' is not one of crop, stretch, pad"):
        import_archive(path, geometry="squash")
    with pytest.raises(DatasetError, match="pad fill 'nope' is not 'edge', 'mean' or a colour"):
        import_archive(path, geometry="pad", pad_fill="nope")
    with pytest.raises(DatasetError, match="image size must be a whole number of pixels from 4 to 1024"):
        import_archive(path, image_size=2)
    with pytest.raises(DatasetError, match="not a colour"):
        import_archive(path, name="w2", fill="nope")


# ---------------------------------------------------------------- formats by content


def test_format_is_decided_by_content_and_mismatches_are_refused(workspace, tmp_path):
    rgb = RGBA.convert("RGB")
    path = tmp_path / "formats.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ok/a.png", _save(rgb, "PNG"))
        z.writestr("ok/b.JPEG", _save(rgb, "JPEG"))
        z.writestr("bad/tiff.png", _save(rgb, "TIFF"))
        z.writestr("bad/bmp.jpg", _save(rgb, "BMP"))
        z.writestr("bad/ppm.png", _save(rgb, "PPM"))  # Pillow reads PPM, but it is not allowed
        z.writestr("bad/noise.gif", bytes(range(256)) * 4)
        z.writestr("bad/cut.png", _save(rgb, "PNG")[:60])
        z.writestr("other/photo.heic", _save(rgb, "PNG"))  # image content, no image extension
    report = import_archive(path, image_size=W)
    assert report.accepted == 2
    rejected = dict(report.rejected)
    assert rejected["bad/tiff.png"] == ("named .png (PNG) but its content is TIFF; rename it to match its "
                                        "content or convert it to PNG")  # fmt: skip
    assert rejected["bad/bmp.jpg"].startswith("named .jpg (JPEG) but its content is BMP")
    allowed = "its content is not an accepted image format (PNG, JPEG, WebP, BMP, TIFF, GIF)"
    assert rejected["bad/ppm.png"].startswith(allowed) and rejected["bad/noise.gif"].startswith(allowed)
    assert rejected["bad/cut.png"].startswith("damaged PNG file: its pixel data is truncated")
    assert "bad/cut.png" in report.details  # Pillow's own words, kept apart
    assert dict(report.skipped)["other/photo.heic"] == "not an image file (.heic)"


# ---------------------------------------------------------------- member names


def _raw_zip(path: Path, entries: list[tuple[bytes, bytes]], *, utf8_flag: bool = False,
             extra: dict[bytes, bytes] | None = None) -> None:
    """A stored (uncompressed) zip whose member names are exactly the given bytes (APPNOTE 4.3)."""
    flag = 0x800 if utf8_flag else 0
    out, central = b"", b""
    for name, data in entries:
        ext = (extra or {}).get(name, b"")
        crc = zlib.crc32(data)
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flag, 0, 0, 0, crc, len(data), len(data),
                           len(name), len(ext)) + name + ext + data  # fmt: skip
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, flag, 0, 0, 0, crc, len(data),
                               len(data), len(name), len(ext), 0, 0, 0, 0, offset) + name + ext  # fmt: skip
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), len(out), 0)
    path.write_bytes(out + central + end)


PNG_BYTES = _save(Image.new("L", (W, W), 9), "PNG")
CP932_CLASSES = ["猫", "犬", "鳥", "写真", "ソフト", "いぬ", "花", "車", "家", "山"]  # ソ is 0x83 0x5C in cp932


@pytest.mark.parametrize(
    ("encoding", "classes", "how"),
    [
        ("utf-8", ["Café", "日本", "Ñandú"], "utf-8"),  # UTF-8 without the flag (macOS, Linux zip)
        ("cp932", CP932_CLASSES, "detected"),
        ("cp437", ["Müller", "Größe", "Über"], "ambiguous"),  # short: the zip default cp437 is the guess
    ],
)
def test_unflagged_names_decode_to_the_right_classes(workspace, tmp_path, encoding, classes, how):
    path = tmp_path / f"{encoding}.zip"
    _raw_zip(path, [(f"{c}/{i}.png".encode(encoding), PNG_BYTES) for i, c in enumerate(classes)])
    report = import_archive(path, image_size=W, val_fraction=0.0)
    assert report.dataset.class_names == tuple(sorted(classes))
    assert report.names.encoding == encoding and report.rejected == []
    if how is not None:
        assert report.names.how == how
    assert encoding in report.summary() or encoding == "utf-8"


def test_cp1252_short_names_are_ambiguous_and_the_override_decides(workspace, tmp_path):
    path = tmp_path / "spanish.zip"
    _raw_zip(path, [("Café/1.png".encode("cp1252"), PNG_BYTES), ("Ñandú/2.png".encode("cp1252"), PNG_BYTES)])
    scan = scan_archive(path)
    assert scan.names.ambiguous and "cp1252" in scan.names.candidates
    guessed = import_archive(path, image_size=W, val_fraction=0.0)
    assert guessed.names.ambiguous and "detection was ambiguous" in guessed.summary()
    assert "--name-encoding" in guessed.summary()

    chosen = import_archive(path, name="spanish-2", image_size=W, val_fraction=0.0, name_encoding="cp1252")
    assert chosen.dataset.class_names == ("Café", "Ñandú")
    assert chosen.names == NameDecoding("cp1252", "chosen", (), 2)
    assert "member names: cp1252 (chosen)" in chosen.summary()
    assert scan_archive(path, name_encoding="cp1252").class_names == ("Café", "Ñandú")
    with pytest.raises(DatasetError, match="unknown name encoding 'klingon'"):
        import_archive(path, name="x", name_encoding="klingon")
    with pytest.raises(DatasetError, match=r"not valid ascii; choose another name encoding"):
        import_archive(path, name="x", name_encoding="ascii")


def test_flagged_utf8_and_unicode_path_extra_field(workspace, tmp_path):
    path = tmp_path / "flagged.zip"
    _raw_zip(path, [("Café/1.png".encode(), PNG_BYTES), ("日本/2.png".encode(), PNG_BYTES)], utf8_flag=True)
    assert import_archive(path, image_size=W).dataset.class_names == ("Café", "日本")

    legacy = "Caf\x82/1.png".encode("latin-1")  # cp437 bytes of "Café/1.png"
    utf8 = "Crème/1.png".encode()  # what the Info-ZIP Unicode Path field says (it wins when its CRC matches)
    field = struct.pack("<HHBI", 0x7075, 5 + len(utf8), 1, zlib.crc32(legacy)) + utf8
    path = tmp_path / "infozip.zip"
    _raw_zip(path, [(legacy, PNG_BYTES), (b"Plain/2.png", PNG_BYTES)], extra={legacy: field})
    assert import_archive(path, image_size=W).dataset.class_names == ("Crème", "Plain")


def test_names_that_leave_the_archive_are_refused(workspace, tmp_path):
    path = tmp_path / "evil.zip"
    _raw_zip(path, [(b"../evil.png", PNG_BYTES), (b"/etc/evil.png", PNG_BYTES), (b"C:\\evil.png", PNG_BYTES),
                    (b"a/../../evil.png", PNG_BYTES), (b"good/./ok.png", PNG_BYTES)])  # fmt: skip
    report = import_archive(path, image_size=W)
    rejected = dict(report.rejected)
    assert set(rejected) == {"../evil.png", "/etc/evil.png", "C:/evil.png", "a/../../evil.png"}
    assert all(r.startswith("path leaves the archive") for r in rejected.values()), rejected
    assert report.accepted == 1 and report.dataset.class_names == ("unlabeled",)
    assert not (tmp_path / "evil.png").exists() and not (workspace.parent / "evil.png").exists()


# ---------------------------------------------------------------- limits, before decoding


def _huge_png(w: int, h: int) -> bytes:
    """A PNG of a few dozen bytes whose header declares w x h pixels (its data is a token IDAT)."""
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))  # fmt: skip


def test_bombs_are_refused_from_headers_and_directory_before_decoding(workspace, tmp_path, monkeypatch):
    path = tmp_path / "bombs.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("x/ok1.png", PNG_BYTES)
        z.writestr("x/ok2.png", PNG_BYTES)
        z.writestr("x/wide.png", _huge_png(10_000, 10_000))  # 100 Mpx
        z.writestr("x/giant.png", _huge_png(100_000, 100_000))  # beyond Pillow's own hard limit
        z.writestr("x/zeros.bmp", bytes(20 * 2**20))  # 20 MiB of zeros
    assert path.stat().st_size < 64 * 1024

    loaded, opened = [], []
    real_load, real_open = ImageFile.ImageFile.load, zipfile.ZipFile.open

    def load(self):
        assert self.size == (W, W), f"decoding was attempted for a {self.size} image"
        loaded.append(self.size)
        return real_load(self)

    def zopen(self, name, *a, **kw):
        opened.append(getattr(name, "filename", name))
        return real_open(self, name, *a, **kw)

    monkeypatch.setattr(ImageFile.ImageFile, "load", load)
    monkeypatch.setattr(zipfile.ZipFile, "open", zopen)
    report = import_archive(path, image_size=W)
    assert report.accepted == 2 and set(loaded) == {(W, W)}
    assert "x/zeros.bmp" not in opened  # refused from the directory's sizes, never inflated
    rejected = dict(report.rejected)
    assert rejected["x/wide.png"] == ("declares 10000x10000 px; the limit is 40000000 px "
                                      "(MASKLAB_MAX_IMAGE_PIXELS): shrink the image or raise the limit")  # fmt: skip
    assert rejected["x/giant.png"] == ("declares 100000x100000 px; the limit is 40000000 px "
                                       "(MASKLAB_MAX_IMAGE_PIXELS): shrink the image")  # beyond Pillow's limit too
    zeros = rejected["x/zeros.bmp"]
    assert zeros.startswith("compressed 1") and "the limit is 200:1 (MASKLAB_MAX_COMPRESSION_RATIO)" in zeros
    for reason in rejected.values():
        assert "exceeds limit" not in reason and "decompression bomb DOS" not in reason  # masklab's words only


def test_total_decoded_bytes_and_member_limits_come_from_the_environment(workspace, tmp_path, monkeypatch):
    path = tmp_path / "many.zip"
    big = _save(Image.new("RGB", (100, 100), (1, 2, 3)), "PNG")  # Pillow holds RGB in 4 bytes: 40,000 each
    with zipfile.ZipFile(path, "w") as z:
        for i in range(5):
            z.writestr(f"a/{i}.png", big)
    monkeypatch.setenv("MASKLAB_MAX_DECODED_BYTES", "100000")
    report = import_archive(path, image_size=W)
    assert report.accepted == 2, report.rejected  # each costs its file, its 40,000 pixel bytes and 48 stored
    assert [p for p, _ in report.rejected] == ["a/2.png", "a/3.png", "a/4.png"]
    assert all("MASKLAB_MAX_DECODED_BYTES" in r for _, r in report.rejected)

    monkeypatch.setenv("MASKLAB_MAX_MEMBERS", "4")
    with pytest.raises(DatasetError, match=r"5 entries, over the limit of 4 \(MASKLAB_MAX_MEMBERS\)"):
        import_archive(path, name="many-2")
    monkeypatch.setenv("MASKLAB_MAX_IMAGE_PIXELS", "lots")
    with pytest.raises(DatasetError, match="MASKLAB_MAX_IMAGE_PIXELS='lots' is not a number"):
        import_archive(path, name="many-3")
    monkeypatch.delenv("MASKLAB_MAX_MEMBERS")  # an explicit ImportLimits replaces the environment's
    with pytest.raises(DatasetError, match=r"5 files refused: a/0.png: declares 100x100 px; the limit is 9900 px"):
        import_archive(path, name="many-4", limits=ImportLimits(max_image_pixels=9900))


def test_member_that_inflates_past_its_declared_size_is_refused(workspace, tmp_path):
    path = tmp_path / "liar.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("ok.png", PNG_BYTES)
        z.writestr("liar.png", PNG_BYTES + bytes(2**20))
    data = bytearray(path.read_bytes())
    real = len(PNG_BYTES) + 2**20
    for sig in (b"PK\x03\x04", b"PK\x01\x02"):  # the declared uncompressed size, in both headers
        at = 22 if sig == b"PK\x03\x04" else 24
        i = data.index(sig, data.index(sig) + 1)  # the second member's header
        assert struct.unpack_from("<I", data, i + at)[0] == real
        struct.pack_into("<I", data, i + at, len(PNG_BYTES))
    path.write_bytes(bytes(data))
    report = import_archive(path, image_size=W)
    assert dict(report.rejected) == {
        "liar.png": "damaged in the archive (its data does not match the directory); re-create the archive"}
    assert report.accepted == 1


def test_folder_links_that_leave_the_folder_are_refused(workspace, tmp_path):
    outside = tmp_path / "secret.png"
    outside.write_bytes(PNG_BYTES)
    folder = tmp_path / "linked"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "ok.png").write_bytes(PNG_BYTES)
    (folder / "a" / "inside.png").symlink_to(folder / "a" / "ok.png")
    (folder / "a" / "outside.png").symlink_to(outside)
    report = import_archive(folder, image_size=W)
    assert report.accepted == 2
    assert report.rejected == [("a/outside.png", "path leaves the folder (a symbolic link to a file outside it)")]


# ---------------------------------------------------------------- content lost on the fill colour

def _bolt(shared_data: Path) -> Image.Image:
    """A real white Tux Paint stamp with transparency (../shared/data/tuxpaint-stamps), 64x64."""
    path = shared_data / "tuxpaint-stamps" / "images" / "naturalforces__lightningbolt.png"
    return Image.open(path).convert("RGBA").resize((64, 64), Image.Resampling.NEAREST)


def _keyed(bolt: Image.Image) -> bytes:
    """The bolt as RGB with a transparent colour (tRNS key): black where it was transparent."""
    a = np.asarray(bolt)
    rgb = np.where(a[..., 3:] > 0, a[..., :3], 0).astype(np.uint8)
    return _save(Image.fromarray(rgb, "RGB"), "PNG", transparency=(0, 0, 0))


LOST_CASES = {
    "RGBA PNG": lambda b: _save(b, "PNG"),
    "LA PNG": lambda b: _save(b.convert("LA"), "PNG"),
    "PA (palette + alpha) PNG": lambda b: _save(b.quantize(64, method=Image.Quantize.FASTOCTREE), "PNG"),
    "RGB PNG with a transparent colour": _keyed,
    "RGBA 16-bit PNG": lambda b: _png(np.asarray(b).astype(np.uint16) * 257, 6),
    "gray + alpha 16-bit PNG": lambda b: _png(np.asarray(b.convert("LA")).astype(np.uint16) * 257, 4),
    "RGBA WebP": lambda b: _save(b, "WEBP", lossless=True),
    "RGBA TIFF": lambda b: _save(b, "TIFF"),
}


@pytest.mark.parametrize("case", list(LOST_CASES))
def test_an_image_that_vanishes_on_the_fill_colour_is_reported_in_every_transparent_mode(workspace, tmp_path, shared_data,
                                                                                       case):
    """A white stamp over a white fill keeps next to nothing visible: the report says so, names the
    fix, and the same image over gray imports with no such note."""
    data = LOST_CASES[case](_bolt(shared_data))
    name = "bolt." + {"WebP": "webp", "TIFF": "tif"}.get(case.split()[-1], "png")
    _, white = _import_one(tmp_path, name, data, fill="white")
    assert [n for _, n in white.converted] == [NOTE_LOST_ON_FILL], white.converted
    assert "another colour under transparency" in white.summary()
    assert "one.zip: 1 image accepted, 0 rejected" in white.summary()  # counted, never "1 images"
    assert white.dataset.description.startswith("Imported from one.zip: 1 image in 1 class;"), white.dataset.description
    # the dataset keeps it for later visits to the Data page, which show the description
    assert white.dataset.description.endswith(f" 1 image vanishes on that colour ({name}): import again with another "
                                              "colour under transparency.")
    _, gray = _import_one(tmp_path, name, data, fill="#808080")
    assert NOTE_LOST_ON_FILL not in [n for _, n in gray.converted] and "vanish" not in gray.dataset.description
