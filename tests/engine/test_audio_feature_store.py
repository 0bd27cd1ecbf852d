"""engine.audio.features: the log-mel frames kept in <workspace>/features and read through memory
maps give exactly what the in-memory frames give; the folder is reused, replaced when damaged,
and a folder that cannot be written (a full disk, a path that is not a folder) leaves the frames in
memory. Real FSDD clips throughout."""

from __future__ import annotations

import errno
import json
import logging

import numpy as np
import pytest
import soundfile as sf
import torch

from engine.audio.features import ClipFeatures, FeatureSpec, feature_store
from engine.config import AudioConfig

NAMES = ("0_jackson_0.wav", "7_theo_3.wav", "3_nicolas_10.wav", "9_yweweler_4.wav", "5_jackson_22.wav")


@pytest.fixture(scope="module")
def clips(shared_data):
    rec = shared_data / "fsdd" / "recordings"
    out = [sf.read(rec / n, dtype="float32")[0] for n in NAMES]
    out.append(out[0][:40])  # one frame: shorter than the reflect padding
    return out


@pytest.fixture(scope="module")
def spec():
    return FeatureSpec.from_config(AudioConfig(n_mels=32), 8000)


class NoDecode:
    """A clip sequence that refuses to decode: a mapped store must not need the clips."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        raise AssertionError("decoded a clip although the frames were stored")


def assert_same(a: ClipFeatures, b: ClipFeatures, T: int = 50) -> None:
    assert torch.equal(a.mean, b.mean) and torch.equal(a.std, b.std) and torch.equal(a.n_frames, b.n_frames)
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, len(a), (32,), generator=g)
    starts = torch.randint(0, 60, (32,), generator=g)  # some windows run past their clip's end
    wa, wb = a.window(rows, starts, T), b.window(rows, starts, T)
    for f in ("spec", "real", "voiced"):
        assert torch.equal(getattr(wa, f), getattr(wb, f)), f
    assert not wa.real.all() and wa.voiced.any()
    for r in range(len(a)):
        assert torch.equal(a.clip_logmel(r), b.clip_logmel(r))


def test_stored_frames_give_exactly_the_in_memory_batches(tmp_path, clips, spec):
    train = np.array([0, 1, 2, 5])
    mem = ClipFeatures(clips, spec, stats_rows=train)
    stored = ClipFeatures(clips, spec, stats_rows=train, store=tmp_path / "f")
    assert mem.stored is None and isinstance(stored.frames, np.memmap)
    assert stored.stored == tmp_path / "f"
    assert_same(mem, stored)
    # the statistics are the train frames' own (Bessel's std, like torch.std)
    raw = torch.cat([torch.from_numpy(np.array(mem.frames[int(mem.offsets[r]):int(mem.offsets[r + 1])])) for r in train])
    torch.testing.assert_close(mem.mean, raw.mean(0), rtol=0, atol=1e-5)
    torch.testing.assert_close(mem.std, raw.std(0).clamp_min(1e-3), rtol=0, atol=1e-5)
    # a second reader maps the same files without decoding a clip
    again = ClipFeatures(NoDecode(len(clips)), spec, stats_rows=train, store=tmp_path / "f")
    assert_same(mem, again)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # no temporary folder left


def test_a_damaged_store_is_computed_again_and_replaced(tmp_path, clips, spec):
    store = tmp_path / "f"
    ref = ClipFeatures(clips, spec)
    ClipFeatures(clips, spec, store=store)  # written, then unmapped (truncating a mapped file would fault its reader)
    with open(store / "frames.npy", "r+b") as f:  # cut the frames short
        f.truncate(f.seek(0, 2) // 2)
    fixed = ClipFeatures(clips, spec, store=store)
    assert fixed.stored == store and isinstance(fixed.frames, np.memmap)
    assert_same(ref, fixed)
    meta = json.loads((store / "meta.json").read_text())
    meta["n_clips"] += 1  # the folder of another clip list
    (store / "meta.json").write_text(json.dumps(meta))
    assert_same(ref, ClipFeatures(clips, spec, store=store))
    assert json.loads((store / "meta.json").read_text())["n_clips"] == len(clips)


@pytest.mark.parametrize("how", ["full disk", "not a folder"])
def test_a_store_that_cannot_be_written_leaves_the_frames_in_memory(tmp_path, clips, spec, monkeypatch, caplog, how):
    if how == "full disk":
        store = tmp_path / "features" / "f"

        def full(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(np.lib.format, "open_memmap", full)
    else:
        (tmp_path / "features").write_text("a file where the folder should be")
        store = tmp_path / "features" / "f"
    with caplog.at_level(logging.WARNING, logger="engine.workspace"):
        feats = ClipFeatures(clips, spec, store=store)
    assert feats.stored is None and not isinstance(feats.frames, np.memmap)
    assert "they stay in memory" in caplog.text and str(store) in caplog.text
    monkeypatch.undo()
    assert_same(ClipFeatures(clips, spec), feats)
    if how == "full disk":
        assert not any(p.name.startswith(".tmp-") for p in (tmp_path / "features").iterdir())


def test_the_store_folder_names_the_dataset_content_the_clip_count_and_the_spec(tmp_path, spec):
    a = feature_store("abc", spec, 10, tmp_path)
    assert a.parent == tmp_path / "features"
    assert a == feature_store("abc", spec, 10, tmp_path)
    other = FeatureSpec.from_config(AudioConfig(n_mels=40), 8000)
    assert len({a, feature_store("abd", spec, 10, tmp_path), feature_store("abc", spec, 11, tmp_path),
                feature_store("abc", other, 10, tmp_path)}) == 4
    assert feature_store("", spec, 10, tmp_path) is None  # no content hash: kept in memory
