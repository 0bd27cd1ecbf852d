"""Chained Ogg files (issue 37, point 4): libsndfile decodes the first stream only; the import
decodes every stream, one after another, and says so naming the file."""
from __future__ import annotations

import io

import numpy as np
import soundfile as sf

from engine.data.audio import ClipDecoder, import_audio, ogg_links
from engine.data.limits import ImportLimits
from engine.data.tabular import ImportOptions


def _ogg(n: int, rate: int, channels: int = 1) -> bytes:
    buf = io.BytesIO()
    x = (np.sin(np.arange(n) * 0.05) * 0.3).astype(np.float32)
    sf.write(buf, np.stack([x] * channels, 1) if channels > 1 else x, rate, format="OGG", subtype="VORBIS")
    return buf.getvalue()


def test_a_chained_ogg_is_split_into_its_links():
    a, b, c = _ogg(4000, 8000), _ogg(6000, 8000), _ogg(2000, 8000)
    assert ogg_links(a + b + c) == [a, b, c]
    assert ogg_links(a) == [a]
    assert ogg_links(a + b"junk") == [a + b"junk"]  # pages that cannot be walked: libsndfile decides
    assert sf.info(io.BytesIO(a + b)).frames == 4000  # what libsndfile alone reads


def test_a_chained_ogg_imports_whole_and_is_named(workspace, tmp_path):
    src = tmp_path / "clips"
    src.mkdir()
    (src / "chain.ogg").write_bytes(_ogg(4000, 8000) + _ogg(6000, 8000))
    (src / "single.ogg").write_bytes(_ogg(4000, 8000))
    (src / "mixed.ogg").write_bytes(_ogg(4000, 8000) + _ogg(4000, 16000))
    (src / "stereo_then_mono.ogg").write_bytes(_ogg(4000, 8000, 2) + _ogg(4000, 8000))
    rep = import_audio(src, "chains", ImportOptions(sample_rate=8000))
    assert rep.accepted == 2
    assert sorted(p for p, _ in rep.rejected) == ["mixed.ogg", "stereo_then_mono.ogg"]
    assert "chained Ogg file whose 2 streams differ in rate or channels (8000 Hz x 1, 16000 Hz x 1)" in \
        dict(rep.rejected)["mixed.ogg"]
    assert "chained Ogg files decoded whole, their streams one after another: chain.ogg (2 streams)" in rep.summary()
    assert ("chain.ogg", "a chained Ogg file: its streams decoded one after another") in rep.converted
    clip = ClipDecoder(8000, ImportLimits.from_env()).decode("chain.ogg", (src / "chain.ogg").read_bytes())
    assert (len(clip.pcm), clip.links) == (10000, 2)
