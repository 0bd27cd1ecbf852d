"""Images and sounds on the pages, inline as ``data:`` URLs.

Streamlit serves an image or sound given as an array or bytes from its media file manager, and drops
the file at the end of the rerun that replaced it (streamlit#4825). A live panel that redraws every
2 s, or a page rerun while a loaded browser is still fetching, then leaves the browser asking for a
file that is gone: an HTTP 404 and a broken image (``bench/load.py`` counted 24 in 10 minutes). A
``data:`` URL travels with the element itself, so there is nothing to fetch and nothing to drop.
Every image and player of the dashboard goes through :func:`show_image` and :func:`show_audio`
(``tests/app/test_media.py`` holds every page to it).
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import soundfile as sf
from PIL import Image


def data_url(data: bytes, mime: str) -> str:
    """``data`` as a ``data:`` URL of type ``mime`` (e.g. ``image/png``, ``audio/wav``)."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def png_bytes(img: Any) -> bytes:
    """One image ``[H, W]``, ``[H, W, 1]``, ``[H, W, 3]`` or ``[H, W, 4]`` (uint8, or floats in
    [0, 1], clipped) as PNG bytes, at its own size.

    Raises:
        ValueError: not a 2-D image or a 3-D one with 1, 3 or 4 channels.
    """
    a = np.asarray(img)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[..., 0]
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[2] in (3, 4))):
        raise ValueError(f"not an image: shape {a.shape} (expected [H, W] or [H, W, 1|3|4])")
    if a.dtype != np.uint8:
        a = np.round(np.clip(a.astype(np.float32), 0.0, 1.0) * 255.0).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(a)).save(buf, format="PNG")
    return buf.getvalue()


def png_url(img: Any) -> str:
    """:func:`png_bytes` of ``img`` as a ``data:image/png`` URL."""
    return data_url(png_bytes(img), "image/png")


def wav_bytes(wave: Any, rate: int) -> bytes:
    """A mono clip ``[n]`` (int16 PCM, or floats in [-1, 1], clipped) as 16-bit WAV bytes at ``rate`` Hz."""
    w = np.asarray(wave)
    w = w.astype(np.float32) / 32767.0 if w.dtype == np.int16 else w.astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, np.clip(w, -1.0, 1.0), int(rate), subtype="PCM_16", format="WAV")
    return buf.getvalue()


def show_image(target: Any, img: Any, caption: str | None = None, width: str | int = "stretch") -> None:
    """Draw one image inline on ``target`` (``st``, a column or a container).

    Args:
        img: an image array (see :func:`png_bytes`), PNG bytes, or a ``data:`` URL.
        caption: under the image. width: Streamlit's ``"stretch"`` (the column's width),
            ``"content"`` (its own size) or pixels.
    """
    if isinstance(img, bytes | bytearray):
        url = data_url(bytes(img), "image/png")
    elif isinstance(img, str):
        if not img.startswith("data:"):
            raise ValueError(f"show_image takes an array, PNG bytes or a data: URL, not {img[:40]!r}")
        url = img
    else:
        url = png_url(img)
    target.image(url, caption=caption, width=width)


def show_audio(target: Any, sound: Any, rate: int | None = None) -> None:
    """Draw one audio player inline on ``target``: ``sound`` is WAV bytes, or a clip ``[n]`` (see
    :func:`wav_bytes`) with its ``rate`` in Hz.

    Raises:
        ValueError: a clip without its rate.
    """
    if isinstance(sound, bytes | bytearray):
        data = bytes(sound)
    elif rate is None:
        raise ValueError("show_audio: a clip needs its sample rate")
    else:
        data = wav_bytes(sound, rate)
    target.audio(data_url(data, "audio/wav"), format="audio/wav")
