"""The audio pages in AppTest on the real engine: Data (spectrograms, players, duration and rate
facts), New run and Mask lab (the run's masks on real spectrograms, state in the URL), Run detail
(original / masked / reconstructed spectrograms and three players per clip). A fresh AppTest is a
fresh browser session: the URL carries the state, as a reload or a link does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.components.masks import UNMASKED_WARN
from tests.app.pages import ENTRY, captions, open_with


@pytest.fixture(scope="module")
def audio_ws(shared_runs) -> Path:
    """The session's audio-frames workspace (tests/runs.py), read only: ``spoken``, 24 real FSDD clips
    (digits 0-3, jackson and theo, 3 takes each) split by speaker, and a completed, evaluated 2-step
    ``audio_frames`` run on it (3 fixed validation clips)."""
    return shared_runs.get("audio_frames").workspace


@pytest.fixture
def env(audio_ws, monkeypatch) -> Path:
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(audio_ws))
    return audio_ws


def players(at: AppTest) -> int:
    return len(at.get("audio"))


def test_data_page_shows_clips_with_players_and_duration_facts(env):
    at = open_with("../pages/data.py", {"dataset": "spoken"})
    assert at.selectbox(key="data_ds").value == "spoken"
    assert "spoken  (24 clips, 8 kHz)" in at.selectbox(key="data_ds").options
    caps = captions(at)
    assert len(caps) == 6 and players(at) == 6
    # three train and three val clips (in three columns), each captioned digit · split · seconds, class by class
    assert sorted(c.split(" · ")[1] for c in caps) == ["train"] * 3 + ["val"] * 3
    assert len({c.split(" · ")[0] for c in caps if " · train · " in c}) == 3 and all(c.endswith(" s") for c in caps)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Sample rate"] == "8,000 Hz" and metrics["Train clips"] == "12" and metrics["Val clips"] == "12"
    assert any("clip length" in c.value and "2 groups" in c.value for c in at.caption)
    assert any("recorded at 8,000 Hz (24 clips) · 24 clips with 1 channel (stored mono)" in c.value for c in at.caption)


@pytest.mark.parametrize("task, unit", [("audio_mae", "patches"), ("audio_frames", "frame tokens")])
def test_new_run_draws_the_runs_masks_on_real_spectrograms_from_the_url(env, task, unit):
    at = open_with("../pages/new_run.py", {"dataset": "spoken", "task": task, "data.audio.n_mels": "32",
                                           "data.audio.clip_seconds": "0.5", "model.preset": "tiny"})
    cap = next(c.value for c in at.caption if "fixed validation clips" in c.value)
    assert f"{unit} of" in cap and "chosen class by class" in cap
    caps = captions(at)
    assert len(caps) == 2 * 8 and players(at) == 8  # 8 of the 12 val clips: spectrogram, masked, player
    masked = [c for c in caps if c.startswith("masked: ")]
    assert len(masked) == 8 and any(int(c.split()[1]) > 0 for c in masked)
    for c in masked:  # "masked: 210 of 832 cells (25% of the clip)": the share Mask lab's statistics give
        hidden, cells, share = re.fullmatch(r"masked: (\d+) of (\d+) cells \((\d+)% of the clip\)", c).groups()
        assert int(share) == round(100 * int(hidden) / int(cells)), c
    url = {k: (v[0] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}
    assert url["task"] == task and url["data.audio.n_mels"] == "32" and url["data.audio.clip_seconds"] == "0.5"
    if task == "audio_frames":  # span starts at p = 0.065: the field shows every decimal of its default
        p = next(n for n in at.number_input if n.label == "p")
        assert p.value == 0.065 and p.proto.format == "%.3f", (p.value, p.proto.format)


@pytest.mark.parametrize("bad", ["abc", "nan", "-5e9", "7e12"])
def test_new_run_link_with_bad_audio_numbers_opens_and_names_them(env, bad):
    fields = ["data.audio.clip_seconds", "data.audio.window_ms", "data.audio.hop_ms", "data.audio.f_min"]
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    at.run().switch_page("../pages/new_run.py")
    for k, v in {"dataset": "spoken", "task": "audio_frames", **{f: bad for f in fields}}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    # clamped to their limits, the values may still not fit together (a 5 ms window at 8 kHz):
    # then the form says so in words, the field named, and Launch stays disabled
    assert all(e.value.startswith("data.audio.") for e in at.error), [e.value for e in at.error]
    warned = " ".join(w.value for w in at.warning)
    for f in fields:
        if f == "data.audio.f_min" and bad == "7e12":
            continue  # f_min has no upper bound in the form: the run's pre-flight check names it
        assert f"{f}=" in warned, (f, warned)


def test_mask_lab_draws_masks_and_statistics_for_audio(env):
    at = open_with("../pages/mask_lab.py", {"dataset": "spoken", "task": "audio_frames", "masking.strategy": "span_starts",
                                            "data.audio.n_mels": "32"})
    assert at.selectbox(key="ml_task").value == "audio_frames"
    assert any("masks over the first windows of real train clips" in c.value for c in at.caption)
    assert len([c for c in captions(at) if c.startswith("masked: ")]) == 8


def test_run_detail_shows_spectrograms_and_players_of_a_run(env, shared_runs):
    run_id = shared_runs.get("audio_frames").run_id
    at = open_with("../pages/run_detail.py", {"run": run_id})
    assert any(h.value == "Spectrograms and audio" for h in at.subheader)
    # the headline card names its figure in words, not by its log key (val_spec_mse)
    assert "log-mel MSE @ step 2" in [m.label for m in at.metric], [m.label for m in at.metric]
    caps = captions(at)
    assert caps.count("original") == 3 and caps.count("reconstruction") == 3
    assert len([c for c in caps if c.startswith("masked input (")]) == 3
    assert players(at) == 9  # the recording, Griffin-Lim of the original and of the reconstruction
    # a slider over the saved evaluations (steps 0 and 2): the first one shows step 0's sample
    slider = at.select_slider(key=f"audio_step_{run_id}")
    assert slider.options == ["0", "2"] and slider.value == 2
    slider.set_value(0).run()
    assert any(c.value.startswith("Step 0 · 3 fixed validation clips") for c in at.caption)


def test_mask_lab_warns_when_many_clips_get_no_mask(env):
    """SpecAugment's time bands are at most p x the clip's own length wide: on a grid of 8-frame
    patches a short spoken digit often gets none, and Mask lab says how many samples train nothing."""
    at = open_with("../pages/mask_lab.py", {"dataset": "spoken", "task": "audio_mae", "masking.strategy": "time_mask",
                                            "data.audio.n_mels": "32"})
    assert not at.exception
    notes = [w.value for w in at.warning if "nothing masked" in w.value]
    assert len(notes) == 1  # of the statistics' batch, not again of the 8 previewed clips
    note = next(w.value for w in at.warning if "samples have nothing masked" in w.value)
    empty, n = map(int, re.match(r"(\d+) of (\d+) samples have nothing masked", note).groups())
    assert empty > UNMASKED_WARN * n and "a larger T changes nothing: raise p or use patches of fewer frames" in note
    at = open_with("../pages/mask_lab.py", {"dataset": "spoken", "task": "audio_mae", "masking.strategy": "random",
                                            "masking.ratio": "0.8", "data.audio.n_mels": "32"})
    assert not [w.value for w in at.warning if "nothing masked" in w.value]


def test_new_run_warns_as_mask_lab_does_when_previewed_clips_get_no_mask(env):
    """The same rule on New run's 8 previewed clips, counted from the masks it draws (the captions'
    "masked: 0 of N cells")."""
    at = open_with("../pages/new_run.py", {"dataset": "spoken", "task": "audio_mae", "masking.strategy": "time_mask",
                                           "data.audio.n_mels": "32"})
    assert not at.exception
    cap = next(c.value for c in at.caption if "fixed validation clips" in c.value)
    assert "of 8x8 bins x frames) with the masks this run uses for its samples (time_mask: T=40 frames = 5 columns " \
           "of 8 frames)" in cap  # what SpecAugment's width comes to on this grid
    assert "104 frames = 1.04 s window (the 1.00 s asked for, rounded up to whole 8-frame patches)" in cap
    zeros = sum(c.startswith("masked: 0 of ") for c in captions(at))
    notes = [w.value for w in at.warning if "nothing masked" in w.value]
    assert zeros > 0.1 * 8 and notes == [f"{zeros} of 8 previewed clips have nothing masked, so they train nothing "
                                         "(the loss covers masked positions only): each time band is at most p x the "
                                         "clip's own frames (and at most T), so on short clips a larger T changes "
                                         "nothing: raise p or use patches of fewer frames."]
    # ... which holds: twice the T draws the very same masks, a larger p masks more clips
    masked = [c for c in captions(at) if c.startswith("masked: ")]
    base = {"dataset": "spoken", "task": "audio_mae", "masking.strategy": "time_mask", "data.audio.n_mels": "32"}
    wider = open_with("../pages/new_run.py", {**base, "masking.params.T": "80"})
    assert [c for c in captions(wider) if c.startswith("masked: ")] == masked
    longer = open_with("../pages/new_run.py", {**base, "masking.params.p": "0.6"})
    assert sum(c.startswith("masked: 0 of ") for c in captions(longer)) < zeros
    at = open_with("../pages/new_run.py", {"dataset": "spoken", "task": "audio_mae", "masking.strategy": "random",
                                           "data.audio.n_mels": "32"})
    assert not at.exception and not [w.value for w in at.warning if "nothing masked" in w.value]
