"""Image members: format by content, header checks before decoding, and the decoding rules.

Formats (the image modality's allow-list, :data:`ALLOWED_FORMATS`): PNG, JPEG, WebP, BMP, TIFF and GIF,
recognised by their first bytes (:func:`sniff`), never by name. Only the decoder of the recognised
format is used (``Image.open(..., formats=[...])``). A file whose extension names another allowed
format than its content (a TIFF named ``.png``) is refused as mismatched; files whose extension is no
image extension are skipped unread by the importer. GIF and WebP give their first frame, TIFF its
first page.

Before any pixel is decoded, the header's size is checked: width x height against
``max_image_pixels`` and the bytes it decodes to (width x height x bytes per pixel of its mode)
against what is left of the import's ``max_decoded_bytes`` (see :mod:`engine.data.limits`).

Decoding rules: every image becomes 8-bit gray (``L``) or 8-bit ``RGB``, by its Pillow mode:

=====================  ===========================================================================
mode                   rule
=====================  ===========================================================================
``1``                  0 -> 0, 1 -> 255
``L``                  as is
``LA``, ``La``         gray + alpha (``La``: premultiplied), composited over the fill colour
``P``                  palette colours (RGB); a transparent index or per-entry alpha (``tRNS``)
                       composited over the fill colour
``PA``                 palette colours + alpha, composited over the fill colour
``RGB``, ``RGBX``      as is (``X`` dropped)
``RGBA``, ``RGBa``     composited over the fill colour (``RGBa``: premultiplied)
``CMYK``               through the embedded ICC profile to sRGB (littlecms via Pillow's ImageCms,
                       the profile's rendering intent); without a usable profile Pillow's naive
                       conversion R = round((255 - C)(255 - K) / 255) (G with M, B with Y), noted
``YCbCr``              JFIF full range: R = Y + 1.402 (Cr - 128), G = Y - 0.344136 (Cb - 128)
                       - 0.714136 (Cr - 128), B = Y + 1.772 (Cb - 128), rounded, clipped to 0-255
``LAB``, ``HSV``       Pillow's conversion to RGB
``I;16`` (``I;16L``,   16-bit gray: round(v / 257)
``I;16B``, ``I;16N``)
``I``, ``F``           32-bit integer / float: scaled linearly from the image's own minimum and
                       maximum to 0-255, round(255 (v - min) / (max - min)); a constant image keeps
                       its value clipped to 0-255; for ``F``, NaN and -inf -> 0, +inf -> 255 and
                       min/max are over the finite values. Noted in the report.
16-bit colour PNG      (Pillow keeps only the high byte) decoded with libpng through
                       ``torchvision.io.decode_png``: every sample round(v / 257), 16-bit alpha
                       composited at 16 bits
16-bit colour TIFF     Pillow's RGB/RGBA: the high byte of each sample (v >> 8, within 1 of
                       round(v / 257)); noted in the report
=====================  ===========================================================================

Transparency: alpha, and a transparent colour (the ``transparency`` info of ``1``, ``L``,
``I;16`` and ``RGB`` images, compared in the image's own bit depth, e.g. 16-bit values) is
composited over the fill colour ``f`` (white unless chosen):
``out = round((c a + f s (A - a)) / (A s))`` for a sample ``c`` of bit depth scale ``s`` (1 for 8 bits,
257 for 16) and alpha ``a`` of maximum ``A`` (255 or 65535). Rounding is half up; the denominators
are odd, so no value is halfway.

An image is grayscale after these rules when its mode is ``1``, ``L``, ``LA``, ``La``, ``I;16*``,
``I`` or ``F`` (or a 16-bit gray + alpha PNG) and, if it has transparency, the fill colour is gray;
palette images are colour. Then the EXIF orientation is applied.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from PIL import Image, ImageCms, ImageMode, UnidentifiedImageError

from engine.data.dataset import counted
from engine.data.limits import PILLOW_HARD_LIMIT, ImportLimits, budget_reason

ALLOWED_FORMATS = {"image": ("PNG", "JPEG", "WEBP", "BMP", "TIFF", "GIF")}
"""Formats accepted by content, per modality (Pillow format ids)."""

FORMAT_NAMES = {"PNG": "PNG", "JPEG": "JPEG", "WEBP": "WebP", "BMP": "BMP", "TIFF": "TIFF", "GIF": "GIF"}

EXTENSIONS = {
    ".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".jpe": "JPEG", ".jfif": "JPEG", ".webp": "WEBP",
    ".bmp": "BMP", ".dib": "BMP", ".tif": "TIFF", ".tiff": "TIFF", ".gif": "GIF",
}  # fmt: skip
"""Image file extensions (lower case) and the format each one names."""

NOTE_SCALED = "32-bit integer or float pixels scaled from the image's own min-max to 0-255"
NOTE_CMYK_ICC = "CMYK converted to sRGB through its embedded ICC profile"
NOTE_CMYK_NAIVE = "CMYK without an ICC profile: Pillow's naive conversion to RGB"
NOTE_CMYK_BAD_ICC = "CMYK whose ICC profile cannot be used: Pillow's naive conversion to RGB"
NOTE_TIFF16 = "16-bit colour TIFF: the high byte of each sample (Pillow), not round(v / 257)"
NOTE_LOST_ON_FILL = ("transparent image with next to nothing visible on the colour under transparency (its "
                     "visible pixels match it): import again with another colour under transparency, e.g. gray")
#: A mostly opaque pixel (alpha at least half) stands out from the fill when one of its samples
#: differs from the fill's by more than this (8-bit levels); an image where fewer than
#: :data:`LOST_SHARE` of those pixels stand out, or that has none, gets :data:`NOTE_LOST_ON_FILL`
#: (white stamps over white, black over black). A faint glow around a shape is not counted.
LOST_LEVELS = 24
LOST_SHARE = 0.2

NOTE_PNG_TEXT = ("its text metadata (tEXt/zTXt/iTXt chunks) is larger than Pillow's text limit and was ignored; "
                 "the pixels are read in full")
_PNG_TEXT_CHUNKS = (b"tEXt", b"zTXt", b"iTXt")
_TEXT_SKIPPED = "masklab: png text skipped"  # key in ``im.info`` of an image opened without its text chunks

_BLOCK = 1 << 20  # samples per block of the integer arithmetic, to bound its temporaries


class Refused(Exception):
    """A member cannot be used: ``reason`` in masklab's words, ``detail`` the library's text (or "")."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail

    def record(self, report, path: str) -> None:
        """Add this refusal of ``path`` to an import report's ``rejected`` (and ``details``)."""
        report.rejected.append((path, self.reason))
        if self.detail:
            report.details[path] = self.detail


T = TypeVar("T")
OUT_OF_MEMORY = ("ran out of memory while decoding it (the import's memory cap, MASKLAB_IMPORT_MEMORY_MB); "
                 "export it smaller or import it on its own with a higher cap")


def isolated(work: Callable[[], T]) -> T:
    """``work()``, with any failure of it turned into :class:`Refused`: one file's decoder running out
    of memory (``MemoryError``, or torch's "can't allocate memory") or failing in a way no rule
    foresaw refuses that file, named, and the import goes on with the others.

    Raises:
        Refused: ``work`` raised it, or any other ``Exception`` (its text kept as ``detail``).
    """
    try:
        return work()
    except Refused:
        raise
    except Exception as e:  # noqa: BLE001 - whatever fails on one file is that file's refusal, not the import's
        if isinstance(e, MemoryError) or "allocate memory" in str(e):
            raise Refused(OUT_OF_MEMORY, str(e)[:300]) from None
        raise Refused(f"could not be decoded ({type(e).__name__}); the other files were imported",
                      str(e)[:300]) from None


def sniff(data: bytes) -> str | None:
    """The allowed format whose signature ``data`` starts with (Pillow format id), or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    if data.startswith(b"BM"):
        return "BMP"
    if data[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):  # classic and BigTIFF
        return "TIFF"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    return None


def check_format(name: str, data: bytes) -> str:
    """The format of ``data`` (named ``name``), which must agree with the name's extension.

    Raises Refused: content of no allowed format, or of another format than the extension names.
    """
    ext = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
    named = EXTENSIONS.get(ext)
    fmt = sniff(data)
    allowed = ", ".join(FORMAT_NAMES[f] for f in ALLOWED_FORMATS["image"])
    if fmt is None:
        raise Refused(f"its content is not an accepted image format ({allowed}); re-export it as one")
    if named is not None and named != fmt:
        raise Refused(f"named {ext} ({FORMAT_NAMES[named]}) but its content is {FORMAT_NAMES[fmt]}; "
                      f"rename it to match its content or convert it to {FORMAT_NAMES[named]}")  # fmt: skip
    return fmt


def bytes_per_pixel(mode: str) -> int:
    """Bytes Pillow holds per pixel in ``mode``: 1 for ``1``, ``L``, ``P``; 4 for every other 8-bit mode
    (Pillow pads 2- and 3-band pixels to 4 bytes); 2 for ``I;16*``; 4 for ``I`` and ``F``."""
    desc = ImageMode.getmode(mode)
    size = np.dtype(desc.typestr).itemsize
    return 4 if size == 1 and len(desc.bands) > 1 else size


def _rawmode(im: Image.Image) -> str:
    """How the decoder unpacks the file's samples (e.g. ``"RGB;16B"``); "" once the image is loaded."""
    return str(im.tile[0].args) if im.tile else ""


def _png16_channels(im: Image.Image) -> int:
    """Channels of a 16-bit colour or gray+alpha PNG that Pillow reduces to 8 bits (0 if not one)."""
    if im.format != "PNG":
        return 0
    return {"RGB;16B": 3, "RGBA;16B": 4, "LA;16B": 2}.get(_rawmode(im), 0)


def _declared_size(data: bytes, fmt: str) -> str:
    """The size the header of ``data`` (a ``fmt`` file) declares, for a refusal when Pillow's pixel
    limit refused it (Pillow's error does not give the sides): ``"WxH"`` from the format's own header
    parser, which that limit does not guard in most formats; the pixel count where the parser checks
    the limit itself (WebP); ``"more than <Pillow's limit>"`` when neither can be read."""
    Image.init()
    factory = Image.OPEN.get(fmt, (None,))[0]
    try:
        if factory is not None:
            w, h = factory(io.BytesIO(data), "").size
            return f"{w}x{h}"
    except Image.DecompressionBombError as e:
        if found := re.search(r"\((\d+) pixels\)", str(e)):
            return found.group(1)
    except (SyntaxError, OSError, ValueError, IndexError, TypeError, EOFError):
        pass
    return f"more than {PILLOW_HARD_LIMIT}"


def without_png_text(data: bytes) -> bytes | None:
    """The PNG ``data`` with its text chunks (``tEXt``, ``zTXt``, ``iTXt``) left out, or None when it
    has none. Chunks are walked by their lengths; a cut-short tail is kept as it is."""
    out, pos, dropped = [data[:8]], 8, False
    while pos + 8 <= len(data):
        end = pos + 12 + int.from_bytes(data[pos : pos + 4], "big")
        kind = data[pos + 4 : pos + 8]
        if end > len(data):
            out.append(data[pos:])
            break
        if kind in _PNG_TEXT_CHUNKS:
            dropped = True
        else:
            out.append(data[pos:end])
        pos = end
        if kind == b"IEND":
            break
    return b"".join(out) if dropped else None


def _open_without_text(data: bytes, fmt: str, e: ValueError) -> Image.Image:
    """Reopen a PNG that Pillow refused over its text chunks (``MAX_TEXT_CHUNK`` / ``MAX_TEXT_MEMORY``)
    without them; re-raise ``e`` for any other file."""
    stripped = without_png_text(data) if fmt == "PNG" else None
    if stripped is None:
        raise e
    im = Image.open(io.BytesIO(stripped), formats=[fmt])
    im.info[_TEXT_SKIPPED] = stripped
    return im


def open_header(data: bytes, fmt: str, limits: ImportLimits, budget_left: int) -> tuple[Image.Image, int]:
    """Open ``data`` with the ``fmt`` decoder, reading only its header, and check its size.

    A PNG whose text metadata exceeds Pillow's text limits is opened without its text chunks
    (:func:`decode` then notes :data:`NOTE_PNG_TEXT`).

    Returns:
        The opened (not yet decoded) image and the bytes decoding it will take.
    Raises:
        Refused: a header that cannot be read, more than ``limits.max_image_pixels`` pixels, or more
            decoded bytes than ``budget_left``.
    """
    fname = FORMAT_NAMES[fmt]
    try:
        with warnings.catch_warnings():  # masklab's own pixel limit below replaces Pillow's warning
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            try:
                im = Image.open(io.BytesIO(data), formats=[fmt])
            except ValueError as e:  # a PNG text chunk over Pillow's limit: the pixels may be fine
                im = _open_without_text(data, fmt, e)
    except Image.DecompressionBombError as e:
        raise Refused(f"declares {_declared_size(data, fmt)} px; the limit is {limits.max_image_pixels} px "
                      "(MASKLAB_MAX_IMAGE_PIXELS): shrink the image", str(e)) from None
    except (UnidentifiedImageError, SyntaxError, OSError, ValueError, IndexError, TypeError, EOFError) as e:
        raise Refused(f"damaged {fname} file: its header cannot be read; re-export it", str(e)) from None
    w, h = im.size
    if w * h > limits.max_image_pixels:
        raise Refused(f"declares {w}x{h} px; the limit is {limits.max_image_pixels} px "
                      "(MASKLAB_MAX_IMAGE_PIXELS): shrink the image or raise the limit")  # fmt: skip
    need = w * h * max(bytes_per_pixel(im.mode), 2 * _png16_channels(im))
    if need > budget_left:
        raise Refused(budget_reason(need, budget_left, limits))
    return im, need


@dataclass
class Decoded:
    """One decoded image: uint8 ``[H, W]`` (gray) or ``[H, W, 3]`` (RGB), and a note for the report."""

    pixels: np.ndarray
    note: str | None = None

    @property
    def gray(self) -> bool:
        """True for a 1-channel image."""
        return self.pixels.ndim == 2


def _blocks(n_rows: int, row_samples: int):
    step = max(1, _BLOCK // max(1, row_samples))
    for r in range(0, n_rows, step):
        yield slice(r, r + step)


def composite(
    color: np.ndarray,
    alpha: np.ndarray | None,
    fill: tuple[int, int, int],
    *,
    scale: int = 1,
    alpha_max: int = 255,
    premultiplied: bool = False,
) -> np.ndarray:
    """8-bit samples of ``color`` over the ``fill`` colour (the module's rule), exact integer arithmetic.

    Args:
        color: ``[H, W]`` or ``[H, W, 3]`` samples in 0..255 * scale.
        alpha: ``[H, W]`` in 0..alpha_max, or None (opaque: just ``round(c / scale)``).
        fill: RGB 0..255; a gray output uses its first component (callers pass a gray fill then).
        scale: 1 for 8-bit samples, 257 for 16-bit.
        premultiplied: ``color`` is already multiplied by alpha (``La``, ``RGBa``).
    Returns:
        uint8 array of ``color``'s shape.
    """
    out = np.empty(color.shape, np.uint8)
    f = np.asarray(fill[0] if color.ndim == 2 else fill, dtype=np.int64)
    den = alpha_max * scale
    row = color[0].size if color.size else 1
    for sl in _blocks(color.shape[0], row):
        c = color[sl].astype(np.int64)
        if alpha is None:
            num, d = c, scale
        else:
            a = alpha[sl].astype(np.int64)
            if color.ndim == 3:
                a = a[..., None]
            num = (c * alpha_max if premultiplied else c * a) + f * scale * (alpha_max - a)
            d = den
        out[sl] = np.clip((2 * num + d) // (2 * d), 0, 255)
    return out


def _scaled(a: np.ndarray) -> np.ndarray:
    """32-bit integer or float pixels scaled from their own min-max to 0-255 (the module's rule)."""
    a = np.asarray(a)
    finite = np.isfinite(a) if a.dtype.kind == "f" else None
    vals = a[finite] if finite is not None else a
    out = np.zeros(a.shape, np.uint8)
    if vals.size == 0:
        return out
    lo, hi = float(vals.min()), float(vals.max())
    for sl in _blocks(a.shape[0], a.shape[1] if a.ndim > 1 else 1):
        v = a[sl].astype(np.float64)
        if hi > lo:
            r = np.floor((v - lo) * 255.0 / (hi - lo) + 0.5)  # exact for integers: ties stay ties
        else:
            r = np.full(v.shape, min(max(np.floor(lo + 0.5), 0.0), 255.0))
        if finite is not None:
            r = np.where(np.isnan(v), 0.0, np.where(np.isposinf(v), 255.0, np.where(np.isneginf(v), 0.0, r)))
        out[sl] = np.clip(r, 0, 255)
    return out


def _ycbcr(a: np.ndarray) -> np.ndarray:
    """JFIF 1.02 full-range YCbCr ``[H, W, 3]`` to RGB uint8, rounded half up and clipped."""
    y, cb, cr = (a[..., i].astype(np.float64) - (0, 128, 128)[i] for i in range(3))
    rgb = np.stack([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb], -1)
    return np.clip(np.floor(rgb + 0.5), 0, 255).astype(np.uint8)


def _cmyk(im: Image.Image) -> Decoded:
    icc = im.info.get("icc_profile")
    if not icc:
        return Decoded(np.asarray(im.convert("RGB")), NOTE_CMYK_NAIVE)
    try:
        src = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        rgb = ImageCms.profileToProfile(im, src, ImageCms.createProfile("sRGB"),
                                        renderingIntent=ImageCms.getDefaultIntent(src), outputMode="RGB")  # fmt: skip
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError):
        return Decoded(np.asarray(im.convert("RGB")), NOTE_CMYK_BAD_ICC)
    return Decoded(np.asarray(rgb), NOTE_CMYK_ICC)


def lost_on_fill_text(converted: list[tuple[str, str]], shown: int = 5) -> str:
    """What a dataset's description keeps of the images that vanished on the colour under
    transparency (``converted``: the import report's ``(file, note)``): ``""`` when none did, else
    e.g. ``" 1 image vanishes on that colour (stamps/bolt.png): import again with another colour
    under transparency."``."""
    files = [f for f, note in converted if NOTE_LOST_ON_FILL in note]
    if not files:
        return ""
    more = ", …" if len(files) > shown else ""
    verb = "vanishes" if len(files) == 1 else "vanish"
    return (f" {counted(len(files), 'image')} {verb} on that colour ({', '.join(files[:shown])}{more}): import "
            "again with another colour under transparency.")


def _over_fill(color: np.ndarray, alpha: np.ndarray | None, fill: tuple[int, int, int], note: str | None = None,
               **kw) -> Decoded:
    """:func:`composite`, with :data:`NOTE_LOST_ON_FILL` when the mostly opaque pixels vanish on
    ``fill`` (fewer than :data:`LOST_SHARE` of them differ from it by more than :data:`LOST_LEVELS`)."""
    out = composite(color, alpha, fill, **kw)
    if alpha is None:
        return Decoded(out, note)
    f = np.asarray(fill[0] if out.ndim == 2 else fill, dtype=np.int16)
    half = (kw.get("alpha_max", 255) + 1) // 2
    visible = apart = 0
    for sl in _blocks(out.shape[0], out[0].size if out.size else 1):
        vis = alpha[sl] >= half
        diff = np.abs(out[sl].astype(np.int16) - f)
        far = (diff.max(axis=-1) if diff.ndim == 3 else diff) > LOST_LEVELS
        visible, apart = visible + int(vis.sum()), apart + int((far & vis).sum())
    if apart < LOST_SHARE * visible or visible == 0:
        note = NOTE_LOST_ON_FILL if note is None else f"{note}; {NOTE_LOST_ON_FILL}"
    return Decoded(out, note)


def _key_alpha(values: np.ndarray, key: object) -> np.ndarray | None:
    """Alpha 0 where ``values`` equal the transparent colour ``key`` (int, or RGB tuple), else 255."""
    if isinstance(key, int):
        return np.where(values == key, 0, 255).astype(np.uint8) if values.ndim == 2 else None
    if isinstance(key, tuple) and values.ndim == 3 and len(key) == values.shape[2]:
        return np.where((values == np.asarray(key)).all(-1), 0, 255).astype(np.uint8)
    return None


def _png16(data: bytes, im: Image.Image, fill: tuple[int, int, int]) -> Decoded:
    """A 16-bit colour or gray+alpha PNG at full depth (libpng through torchvision)."""
    import torch  # noqa: PLC0415 (the data package serves the dashboard and import jobs without torch)
    from torchvision.io import ImageReadMode, decode_png  # noqa: PLC0415 (the data package serves the dashboard and import jobs without torch)

    t = decode_png(torch.frombuffer(bytearray(data), dtype=torch.uint8), ImageReadMode.UNCHANGED)
    a = t.permute(1, 2, 0).numpy().astype(np.int64)  # [H, W, C] in 0..65535
    if a.shape[2] in (2, 4):
        color, alpha = (a[..., 0] if a.shape[2] == 2 else a[..., :3]), a[..., -1]
    else:
        color, alpha = a, _key_alpha(a, im.info.get("transparency"))
        alpha = None if alpha is None else alpha.astype(np.int64) * 257
    if color.ndim == 2 and not fill[0] == fill[1] == fill[2]:
        color = np.repeat(color[..., None], 3, -1)
    return _over_fill(color, alpha, fill, scale=257, alpha_max=65535)


def _to_8bit(im: Image.Image, data: bytes, fill: tuple[int, int, int]) -> Decoded:
    """The decoding rules of the module docstring, before orientation."""
    mode, key, rawmode = im.mode, im.info.get("transparency"), _rawmode(im)
    gray_fill = fill[0] == fill[1] == fill[2]
    if _png16_channels(im):
        return _png16(data, im, fill)
    im.load()
    if mode in ("I", "F"):
        return Decoded(_scaled(np.asarray(im)), NOTE_SCALED)
    if mode == "CMYK":
        return _cmyk(im)
    if mode == "YCbCr":
        return Decoded(_ycbcr(np.asarray(im)))
    if mode in ("LAB", "HSV", "RGBX"):
        return Decoded(np.asarray(im.convert("RGB")))
    note = NOTE_TIFF16 if im.format == "TIFF" and ";16" in rawmode and mode in ("RGB", "RGBA") else None
    if mode in ("P", "PA"):
        rgba = np.asarray(im.convert("RGBA" if mode == "PA" or key is not None else "RGB"))
        if rgba.shape[2] == 3:
            return Decoded(rgba)
        return _over_fill(rgba[..., :3], rgba[..., 3], fill)
    scale = 257 if mode.startswith("I;16") else 1
    a = np.asarray(im)
    if mode == "1":
        a = a.astype(np.uint8) * 255
    if mode in ("LA", "La", "RGBA", "RGBa"):
        color, alpha = a[..., :-1], a[..., -1]
        if color.shape[-1] == 1:
            color = color[..., 0]
        premultiplied = mode in ("La", "RGBa")
    else:
        color, premultiplied = a, False
        if im.format == "PNG" and isinstance(key, int):  # Pillow keeps a gray tRNS at 2 or 4 bits for L;2/L;4
            key *= {"L;2": 85, "L;4": 17}.get(rawmode, 1)
        alpha = None if key is None else _key_alpha(a, key)
    if color.ndim == 2 and alpha is not None and not gray_fill:
        color = np.repeat(color[..., None], 3, -1)
    return _over_fill(color, alpha, fill, note, scale=scale, premultiplied=premultiplied)


_ORIENT = {
    2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}  # fmt: skip
"""EXIF orientation -> the transpose that undoes it (as ``ImageOps.exif_transpose``)."""


def decode(im: Image.Image, data: bytes, fill: tuple[int, int, int]) -> tuple[Image.Image, str | None]:
    """Decode an image opened by :func:`open_header` by the module's rules.

    Args:
        im: the opened image; ``data``: its file bytes; ``fill``: RGB of the fill colour.
    Returns:
        A mode ``L`` or ``RGB`` image, EXIF orientation applied, and a note for the report (or None;
        :data:`NOTE_PNG_TEXT` when PNG text metadata over Pillow's limit was ignored).
    Raises:
        Refused: the pixel data cannot be decoded (truncated or damaged).
    """
    fname = FORMAT_NAMES.get(im.format or "", im.format or "image")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            data = im.info.get(_TEXT_SKIPPED, data)
            try:
                out = _to_8bit(im, data, fill)
            except ValueError as e:  # a text chunk after the pixels over Pillow's limit
                if _TEXT_SKIPPED in im.info:
                    raise
                im = _open_without_text(data, im.format or "", e)
                out = _to_8bit(im, im.info[_TEXT_SKIPPED], fill)
            if _TEXT_SKIPPED in im.info:
                out.note = NOTE_PNG_TEXT if out.note is None else f"{out.note}; {NOTE_PNG_TEXT}"
            orientation = im.getexif().get(0x0112, 1)
    except Image.DecompressionBombError as e:  # more pixels than the header checked by open_header said
        raise Refused(f"decodes to more than {PILLOW_HARD_LIMIT} px, more than its header declares: re-export "
                      "the image at a smaller size", str(e)) from None  # fmt: skip
    except (OSError, SyntaxError, ValueError, IndexError, TypeError, EOFError, RuntimeError) as e:
        raise Refused(f"damaged {fname} file: its pixel data is truncated or cannot be decoded; re-export it",
                      str(e)) from None  # fmt: skip
    img = Image.fromarray(out.pixels, "L" if out.gray else "RGB")
    if orientation in _ORIENT:
        img = img.transpose(_ORIENT[orientation])
    return img, out.note


# --------------------------------------------------------------------------- geometry

GEOMETRIES = {"crop": "centre crop", "stretch": "stretch", "pad": "pad"}
"""How an image becomes ``size x size`` (see :func:`fit_square`), with the words reports use."""

PAD_FILLS = ("edge", "mean")
"""Pad fills besides a colour: repeat the edge pixels, or the image's mean colour."""

PadFill = str | tuple[int, int, int]


def fit_square(img: Image.Image, size: int, geometry: str, pad_fill: PadFill = "edge") -> tuple[Image.Image, str]:
    """Make a decoded ``L`` or ``RGB`` image ``size x size`` by the chosen geometry.

    Rules (Pillow LANCZOS for every resampling):

    - an image already ``size x size`` is kept as it is (``"kept"``); any other square image is
      resized (``"resized"``), whatever the geometry;
    - ``"crop"``: the centre square of side ``s = min(w, h)`` (``(w - s) // 2`` columns off the left,
      ``(h - s) // 2`` rows off the top) is cut out, then resized to ``size``: ``"cropped"``. The cut
      comes first, so no pixel outside the square bleeds in through the resampling filter (as it
      would with ``ImageOps.fit``'s crop box);
    - ``"stretch"``: resized to ``size x size``, the aspect ratio not kept: ``"stretched"``;
    - ``"pad"``: scaled so that its longer side is ``size`` (the shorter side
      ``max(1, round(short * size / long))``), then placed with ``(size - w) // 2`` columns left and
      ``(size - h) // 2`` rows above, the rest filled with ``pad_fill``: ``"edge"`` repeats the
      outermost pixels (``numpy.pad(mode="edge")``), ``"mean"`` is the scaled image's mean colour
      (rounded half up, per channel), or an RGB colour (a grey image becomes RGB for a colour that
      is not grey): ``"padded"``.

    Args:
        img: mode ``L`` or ``RGB``.
        size: output side in pixels.
        geometry: ``"crop"``, ``"stretch"`` or ``"pad"`` (:data:`GEOMETRIES`).
        pad_fill: ``"edge"``, ``"mean"`` or an RGB tuple (only used by ``"pad"``).

    Returns:
        ``(image, action)``: the ``size x size`` image (mode ``L`` or ``RGB``) and what was done.

    Raises:
        ValueError: an unknown geometry or pad fill.
    """
    if geometry not in GEOMETRIES:
        raise ValueError(f"geometry must be one of {', '.join(GEOMETRIES)}, not {geometry!r}")
    w, h = img.size
    lanczos = Image.Resampling.LANCZOS
    if (w, h) == (size, size):
        return img, "kept"
    if w == h:
        return img.resize((size, size), lanczos), "resized"
    if geometry == "crop":
        side = min(w, h)
        left, top = (w - side) // 2, (h - side) // 2
        square = img.crop((left, top, left + side, top + side))
        return (square if side == size else square.resize((size, size), lanczos)), "cropped"
    if geometry == "stretch":
        return img.resize((size, size), lanczos), "stretched"
    long = max(w, h)
    nw, nh = (size, max(1, round(h * size / long))) if w >= h else (max(1, round(w * size / long)), size)
    small = np.asarray(img.resize((nw, nh), lanczos))
    left, top = (size - nw) // 2, (size - nh) // 2
    pads = ((top, size - nh - top), (left, size - nw - left))
    if isinstance(pad_fill, str) and pad_fill == "edge":
        out = np.pad(small, pads + ((0, 0),) * (small.ndim - 2), mode="edge")
    else:
        if isinstance(pad_fill, str) and pad_fill == "mean":
            axes = (0, 1)
            colour = np.floor(small.astype(np.float64).mean(axis=axes) + 0.5).astype(np.uint8)
        elif isinstance(pad_fill, tuple) and len(pad_fill) == 3:
            colour = np.asarray(pad_fill, np.uint8)
            if small.ndim == 2 and len(set(pad_fill)) == 1:
                colour = colour[:1][0]
            elif small.ndim == 2:
                small = np.repeat(small[..., None], 3, -1)
        else:
            raise ValueError(f"pad fill must be 'edge', 'mean' or an RGB tuple, not {pad_fill!r}")
        out = np.empty((size, size) + small.shape[2:], np.uint8)
        out[...] = colour
        out[top : top + nh, left : left + nw] = small
    return Image.fromarray(out, "L" if out.ndim == 2 else "RGB"), "padded"
