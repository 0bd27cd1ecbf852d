"""Every audio mask keeps the masking library's edge-case behaviour (docs/architecture.md, "Edge
cases") on real clips of every length the importer accepts: from the 25 ms minimum, through clips
shorter than a span, a patch or the model's window, to clips longer than the window.

The clips are one real FSDD recording cut to each length, imported through the real importer; the
masks are drawn by the tasks' own function (:func:`engine.tasks.audio.train_masks`: first window of
each clip, silence padding not eligible), so these are the masks a run trains with.
"""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
import soundfile as sf
import torch

from engine.config import RunConfig
from engine.data import ImportOptions, import_source
from engine.data.audio import MIN_CLIP_SECONDS
from engine.masking import MASKING_REGISTRY, strategies_for
from engine.tasks import resolve
from engine.tasks.audio.preview import train_masks

RATE = 8000
#: clip lengths in seconds: the importer's minimum, a few frames, a span, about a patch, under and
#: over the 1 s window
LENGTHS = (MIN_CLIP_SECONDS, 0.03, 0.06, 0.1, 0.25, 0.6, 1.0, 1.5)
TASKS = {"audio_mae": 2, "audio_frames": 1}


@pytest.fixture(scope="module")
def ws(tmp_path_factory, shared_data):
    """A workspace holding ``lengths``: one real recording cut to every length in LENGTHS (train only)."""
    ws = tmp_path_factory.mktemp("audio-masks") / "workspace"
    x, sr = sf.read(shared_data / "fsdd" / "recordings" / "8_nicolas_3.wav", dtype="float32")
    x = np.tile(x, int(np.ceil(1.6 * sr / len(x))))  # long enough for the longest cut
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for k, s in enumerate(LENGTHS):
            w = io.BytesIO()
            sf.write(w, x[: round(s * sr)], sr, subtype="PCM_16", format="WAV")
            z.writestr(f"cut/{k:02d}.wav", w.getvalue())
    path = ws.parent / "lengths.zip"
    path.write_bytes(buf.getvalue())
    report = import_source(path, "lengths", ImportOptions(val_fraction=0.0, sample_rate=RATE), workspace=ws)
    assert report.accepted == len(LENGTHS) and not report.rejected
    return ws


def cases():
    for task, dims in TASKS.items():
        for name in strategies_for("audio", dims):
            yield task, name


def masks(ws, task, strategy, ratio, params=None, audio=None, patch=None):
    cfg = resolve(RunConfig.from_dict({"task": task, "data": {"dataset": "lengths", "audio": audio or {}},
                               "masking": {"strategy": strategy, "ratio": ratio, "params": params or {}},
                               "model": {"patch_size": patch} if patch else {}}))  # fmt: skip
    mask, eligible = train_masks(cfg, len(LENGTHS), ws)
    return mask.reshape(len(mask), -1), eligible.reshape(len(mask), -1)


@pytest.mark.parametrize("task, name", list(cases()))
def test_padding_is_never_masked_and_every_clip_keeps_its_grid(ws, task, name):
    for ratio in (0.1, 0.5, 0.9):
        mask, eligible = masks(ws, task, name, ratio)
        assert not (mask & ~eligible).any(), f"{name} masked silence padding at ratio {ratio}"
    # the 25 ms clip is 3 frames at a 10 ms hop: one 8-frame patch column of 8 mel rows, or two
    # 2-frame tokens; the longest clips fill the window; every length keeps its own grid
    counts = sorted(eligible.sum(dim=1).tolist())
    assert counts[0] == (8 if task == "audio_mae" else 2) and counts[-1] == eligible.shape[1]
    assert len(set(counts)) >= 5  # the cuts differ, stored in a shuffled order


@pytest.mark.parametrize("task, name", [c for c in cases() if MASKING_REGISTRY[c[1]].uses_ratio])
def test_ratio_zero_masks_nothing_and_one_every_maskable_position(ws, task, name):
    mask0, _ = masks(ws, task, name, 0.0)
    assert not mask0.any()
    mask1, eligible = masks(ws, task, name, 1.0)
    if "voiced" in MASKING_REGISTRY[name].needs:
        # unit strategies: every position inside a unit (a voiced column), nothing else
        assert mask1.any(dim=1).all() and not (mask1 & ~eligible).any()
    else:
        assert torch.equal(mask1, eligible)


@pytest.mark.parametrize("task, name", [c for c in cases() if MASKING_REGISTRY[c[1]].exact])
@pytest.mark.parametrize("ratio", [0.15, 0.5, 0.8])
def test_exact_strategies_mask_round_ratio_times_the_clips_positions(ws, task, name, ratio):
    mask, eligible = masks(ws, task, name, ratio)
    want = torch.round(ratio * eligible.sum(dim=1).double()).long()
    assert torch.equal(mask.sum(dim=1), want)


@pytest.mark.parametrize("task, name", [c for c in cases() if c[1] in ("bernoulli", "voiced")])
def test_bernoulli_and_unit_strategies_mask_at_least_one_position_of_every_clip(ws, task, name):
    for ratio in (0.05, 0.3):
        mask, eligible = masks(ws, task, name, ratio)
        assert mask.any(dim=1).all(), f"{name} at {ratio}: a clip with nothing masked"


@pytest.mark.parametrize("lengths", ["fixed", "geometric"])
def test_a_clip_shorter_than_a_span_gets_one_span_cut_to_the_budget(ws, lengths):
    mask, eligible = masks(ws, "audio_frames", "span", 0.5, {"max_len": 10, "lengths": lengths})
    n = eligible.sum(dim=1)
    for i in range(len(n)):
        want = round(0.5 * int(n[i]))
        assert int(mask[i].sum()) == want
        if int(n[i]) <= 10 and want:  # shorter than one span: one contiguous run of the budget
            idx = mask[i].nonzero().flatten()
            assert int(idx[-1] - idx[0]) + 1 == want


def test_span_starts_masks_every_clip_and_only_its_frames(ws):
    mask, eligible = masks(ws, "audio_frames", "span_starts", 0.0, {"p": 0.065, "length": 5, "min_spans": 1})
    assert mask.any(dim=1).all() and not (mask & ~eligible).any()
    # the 25 ms clip is two tokens, shorter than a span: its one span is cut at the clip's end
    shortest = int(eligible.sum(dim=1).argmin())
    assert int(eligible[shortest].sum()) == 2 and 1 <= int(mask[shortest].sum()) <= 2


def test_one_frame_spectrogram_gets_no_time_band_below_p_one_and_keeps_its_frequency_bands(ws):
    """A window of one patch column (T = 1 on the grid): time bands are at most floor(p * 1) wide."""
    audio = {"clip_seconds": 0.05}  # 5 frames -> one 8-frame patch column
    for strategy, params, masked in (("time_mask", {"T": 100, "mT": 2, "p": 0.9}, False),
                                     ("time_mask", {"T": 100, "mT": 5, "p": 1.0}, True),
                                     ("freq_mask", {"F": 8, "mF": 2}, True)):
        mask, eligible = masks(ws, "audio_mae", strategy, 0.5, params, audio)
        assert eligible.shape[1] == 8  # 8 mel-bin rows x 1 time column
        assert bool(mask.any()) is masked, (strategy, params)
        assert not (mask & ~eligible).any()
    mask, _ = masks(ws, "audio_frames", "time_mask", 0.5, {"T": 100, "mT": 2, "p": 0.9}, {"clip_seconds": 0.02}, patch=2)
    assert mask.shape[1] == 1 and not mask.any()  # one frame token, p < 1: nothing
