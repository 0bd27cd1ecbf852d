"""Images and players inline as data: URLs (app/components/media.py): none served from Streamlit's
media files, which a rerun drops, sometimes before a loaded browser fetched them (issue 38)."""

from __future__ import annotations

import ast
import base64
import io

import numpy as np
import pytest
import soundfile as sf
from PIL import Image
from streamlit.testing.v1 import AppTest

from app.components.media import png_bytes, show_audio, wav_bytes
from tests.app.pages import REPO, served_media


def _drawn_calls() -> list[str]:
    """Every ``<x>.image(...)``, ``<x>.audio(...)`` and ``<x>.video(...)`` call in the dashboard's code."""
    found = []
    for path in sorted([*(REPO / "app").rglob("*.py"), *(REPO / "pages").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in {"image", "audio", "video"}):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_every_image_and_player_of_the_dashboard_is_drawn_by_the_media_module():
    calls = _drawn_calls()
    assert calls and all(c.startswith("app/components/media.py:") for c in calls), calls


def _page():
    import numpy as np  # noqa: PLC0415 (AppTest runs this function's body as the page script)
    import streamlit as st  # noqa: PLC0415 (AppTest runs this function's body as the page script)

    from app.components.images import image_grid  # noqa: PLC0415 (AppTest runs this function's body as the page script)
    from app.components.media import show_audio  # noqa: PLC0415 (AppTest runs this function's body as the page script)

    image_grid(np.zeros((3, 8, 8, 1), np.uint8), ["a", "b", "c"])
    show_audio(st, np.zeros(800, np.int16), 8000)
    st.image(np.zeros((8, 8), np.uint8))  # the way the dashboard no longer draws: from the media files
    st.audio(np.full(800, 0.1, np.float32), sample_rate=8000)


def test_the_page_check_tells_inline_images_and_players_from_served_ones():
    at = AppTest.from_function(_page).run()
    assert not at.exception
    urls = [img.url for el in at.get("image") for img in el.proto.imgs]
    assert len(urls) == 4 and sum(u.startswith("data:image/png;base64,") for u in urls) == 3
    first = Image.open(io.BytesIO(base64.b64decode(urls[0].split(",", 1)[1])))
    assert first.size == (96, 96)  # the 8x8 image upscaled by the grid, carried whole in its URL
    assert at.get("audio")[0].proto.url.startswith("data:audio/wav;base64,")
    assert len(served_media(at)) == 2  # the plain st.image and st.audio: the check can fail


@pytest.mark.parametrize("shape", [(5, 7), (5, 7, 1), (5, 7, 3), (5, 7, 4)])
def test_png_bytes_keep_size_and_pixels(shape):
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, shape, dtype=np.uint8)
    back = np.asarray(Image.open(io.BytesIO(png_bytes(img))))
    assert np.array_equal(back, img[..., 0] if shape[-1:] == (1,) else img)


def test_png_bytes_scale_floats_and_refuse_what_is_no_image():
    back = np.asarray(Image.open(io.BytesIO(png_bytes(np.array([[0.0, 0.5, 2.0]])))))
    assert back.tolist() == [[0, 128, 255]]
    for bad in (np.zeros(4), np.zeros((2, 2, 2)), np.zeros((1, 2, 2, 3))):
        with pytest.raises(ValueError, match="not an image"):
            png_bytes(bad)


def test_wav_bytes_keep_rate_and_samples_and_a_clip_needs_its_rate():
    wave = (np.sin(np.arange(800) / 5) * 20000).astype(np.int16)
    back, rate = sf.read(io.BytesIO(wav_bytes(wave, 8000)), dtype="int16")
    assert rate == 8000 and np.abs(back.astype(int) - wave).max() <= 1
    with pytest.raises(ValueError, match="sample rate"):
        show_audio(None, wave)

