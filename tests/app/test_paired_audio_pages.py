"""Audio-text pairs in the pages (issue 11) in AppTest on the real engine: real FSDD clips imported
with a transcript column (the digit's English word) and a completed 2-step ``paired`` run on them.
Run detail shows each clip's spectrograms and players with its caption lines and answers the
retrieval box with spectrograms; Runs, Compare, New run, Mask lab and Data open without a traceback
and show the clip-transcript pairs. New run and Mask lab offer the ``paired`` task on an audio dataset
(the text source: transcripts, or the class as a word), preview both masks on real clips with their
texts, keep the fields in the URL, and New run launches a run that trains."""

from __future__ import annotations

import re
import time
import zipfile

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from bench.fsdd import WORDS
from engine.data import ImportOptions, import_source
from engine.runner.launcher import cancel
from engine.store import get_run, list_runs, load_samples
from engine.tasks import get_task
from tests.app.pages import ENTRY, captions, figure_columns, n_images, open_with, page_html
from tests.stamps import completed_run

NUM_VIS = 4
CFG = {"task": "paired_audio", "data": {"dataset": "spoken", "audio": {"n_mels": 32, "clip_seconds": 0.5},
                                  "tokenizer": {"vocab_size": 100, "max_len": 8}},
       "model": {"preset": "tiny", "patch_size": 4},
       "train": {"steps": 2, "batch_size": 8, "eval_interval": 2, "checkpoint_interval": 2, "num_vis": NUM_VIS,
                 "warmup_steps": 0}}


@pytest.fixture(scope="module")
def env(tmp_path_factory, shared_runs):
    """The module's copy of the session's audio-text workspace (tests/runs.py; its tests add runs to
    it): ``spoken``, 24 real FSDD clips (digits 0-3, jackson and theo, 3 takes each) with their words
    as transcripts, split by speaker, and a completed 2-step ``paired`` run on it; the workspace is
    ``$MASKLAB_WORKSPACE`` while the module's tests run. Yields ``(workspace, run id)``."""
    ws, ids = shared_runs.copy("paired_audio_text", dest=tmp_path_factory.mktemp("paired-audio-pages") / "workspace")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(ws))
        yield ws, ids["paired_audio_text"]


def test_run_detail_shows_spectrograms_with_their_texts_and_answers_retrieval(env):
    ws, run_id = env
    at = open_with("../pages/run_detail.py", {"run": run_id})
    assert any(h.value == "Joint reconstructions of validation pairs" for h in at.subheader)
    assert {"log-mel MSE ↓", "text→audio R@5 ↑", "audio→text R@5 ↑"} <= figure_columns(at), figure_columns(at)
    s = load_samples(run_id, workspace=ws)
    caps = captions(at)
    assert caps.count("original") == NUM_VIS and caps.count("reconstruction") == NUM_VIS
    assert len([c for c in caps if c.startswith("masked (") and c.endswith(" cells)")]) == NUM_VIS
    assert len(at.get("audio")) == 2 * NUM_VIS  # the recording and Griffin-Lim of the reconstruction
    body = page_html(at)
    for label in ("masked caption", "model's tokens", "caption from the audio alone"):
        assert body.count(label) == NUM_VIS, label
    assert any(c.value.startswith(f"Step 2 · {NUM_VIS} fixed validation clips with their texts") and
               f"of {int(s['text_mask'].sum())} hidden tokens right" in c.value for c in at.caption)
    # the retrieval box: a word finds clips (drawn as spectrograms), ✓ where the text is the query's own
    box = at.text_input(key=f"ret_text_{run_id}")
    assert box.value == s.meta["captions"][0] and box.value in WORDS
    found = [c for c in captions(at) if c[:1].isdigit()]
    assert len(found) == 5 and all(c.split("“")[1].split("”")[0] in WORDS for c in found)
    box.set_value("two").run()
    assert not at.error and not at.exception and len([c for c in captions(at) if c[:1].isdigit()]) == 5
    at.selectbox(key=f"ret_img_{run_id}").set_value(1).run()
    assert not at.exception
    table = at.dataframe[-1].value
    assert list(table["rank"]) == [1, 2, 3, 4, 5] and set(table["caption"]) <= set(WORDS)


def test_runs_presentation_and_compare_show_audio_text_runs(env):
    ws, run_id = env
    open_with("../pages/runs.py", {})
    at = open_with("../pages/present.py", {"run": run_id})
    assert page_html(at).count("caption from the audio alone") == NUM_VIS
    other = completed_run({**CFG, "name": "other", "train": {**CFG["train"], "seed": 1}}, ws)
    at = open_with("../pages/compare.py", {"runs": f"{run_id},{other}"})
    table = next(d.value for d in at.dataframe if "caption" in d.value.columns)
    assert len(table) == NUM_VIS and len([c for c in table.columns if "from the audio (step 2)" in c]) == 2
    assert set(table["caption"]) <= set(WORDS)
    assert n_images(at) == 1 + 2 * 2  # originals, then masked + reconstruction per run


def test_new_run_mask_lab_and_data_show_the_clips_with_their_transcripts(env):
    at = open_with("../pages/data.py", {"dataset": "spoken"})
    assert any(w in (c or "") for c in captions(at) + [m.value for m in at.markdown] for w in WORDS)
    at = open_with("../pages/new_run.py", {"dataset": "spoken", "task": "audio_mae", "data.audio.n_mels": "32"})
    assert any(f"“{w}”" in c for c in captions(at) for w in WORDS)  # each preview clip with its transcript
    at = open_with("../pages/mask_lab.py", {"dataset": "spoken", "task": "audio_mae", "data.audio.n_mels": "32"})
    assert any(f"“{w}”" in c for c in captions(at) for w in WORDS)


PAIRED_URL = {"dataset": "spoken", "task": "paired_audio", "data.audio.n_mels": "32", "data.audio.clip_seconds": "0.5",
              "model.patch_size": "4", "data.tokenizer.vocab_size": "100", "data.tokenizer.max_len": "8",
              "train.steps": "2", "train.batch_size": "8", "train.eval_interval": "2", "train.checkpoint_interval": "2",
              "train.warmup_steps": "0", "train.num_vis": "4"}


def _url(at) -> dict[str, str]:
    return {k: (v[0] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}


def test_new_run_offers_the_paired_task_on_an_audio_dataset_and_previews_both_masks(env):
    at = open_with("../pages/new_run.py", {"dataset": "spoken", "task": "paired_audio"})
    assert "paired_audio" in at.selectbox(key="nr_task_audio").options and at.selectbox(key="nr_task_audio").value == "paired_audio"
    source = at.selectbox(key="nr_m_source")
    assert source.options[0].startswith("the clip's transcript") and source.value == "text"  # transcripts first
    assert len(source.options) == 3  # and the class as a word (digits 0-3), or the name as it is
    at = open_with("../pages/new_run.py", PAIRED_URL)
    cap = next(c.value for c in at.caption if "fixed validation clips" in c.value)
    assert "spectrogram random at 0.75" in cap and "text random at 0.15" in cap and "4x4 mel bins x frames" in cap
    caps = captions(at)
    # the val clips (theo's 12), 8 of them: the spectrogram, then the same with the run's mask
    assert caps.count("spectrogram") == 8 and caps.count("masked") == 8
    body = page_html(at)
    assert body.count("background:#ffd54f") >= 8  # every text hides a token at least
    assert sum(body.count(w) for w in WORDS) >= 8  # the transcripts' words
    assert not next(b for b in at.button if b.label == "Launch").disabled  # passes the launcher's pre-flight
    url = _url(at)
    assert url["task"] == "paired_audio" and url["task_params.text_source"] == "text" and url["data.audio.n_mels"] == "32"
    assert url["model.arch"] == get_task("paired_audio").archs[0] and url["model.patch_size"] == "4"  # the default arch
    assert not [w.value for w in at.warning if "nothing masked" in w.value]
    # SpecAugment's time bands on short clips: some spectrograms get none, as Mask lab and audio runs say
    at = open_with("../pages/new_run.py", {**PAIRED_URL, "masking.strategy": "time_mask"})
    note = next(w.value for w in at.warning if "nothing masked" in w.value)
    # (no "at 0.75": SpecAugment's budget is its parameters', not the ratio)
    assert "spectrogram time_mask (T=40 frames = 10 columns of 4 frames) (" in next(
        c.value for c in at.caption if "fixed validation clips" in c.value)
    assert re.match(r"[2-8] of 8 previewed clips have nothing masked, so their spectrograms train nothing \(their "
                    r"texts still do\)", note), note


def _label_source_form():
    """New run opened on an audio-text link, its text source changed to the class label, then
    reopened from the URL that change wrote (a reload)."""
    at = open_with("../pages/new_run.py", {**PAIRED_URL, "task_params.text_source": "digit_word",
                                           "masking.ratio": "0.5", "name": "audio-text from new run"})
    assert at.selectbox(key="nr_m_source").value == "digit_word"
    cap = next(c.value for c in at.caption if "fixed validation clips" in c.value)
    assert "spectrogram random at 0.5" in cap
    at.selectbox(key="nr_m_source").set_value("label").run()  # the class name as it is: "0" .. "3"
    assert not at.exception and _url(at)["task_params.text_source"] == "label"
    return open_with("../pages/new_run.py", _url(at))


def test_new_run_keeps_the_text_source_in_the_url(env):
    reopened = _label_source_form()
    assert reopened.selectbox(key="nr_m_source").value == "label"
    assert _url(reopened)["masking.ratio"] == "0.5"


@pytest.mark.slow
def test_new_run_launches_an_audio_text_run_that_trains(env):
    """CI tier (a worker process trains the run: 5 to 8 s); the default suite launches from New run
    in tests/app/test_pages_apptest.py."""
    ws, _ = env
    reopened = _label_source_form()
    before = {r.run_id for r in list_runs(ws)}
    next(b for b in reopened.button if b.label == "Launch").click().run()
    assert not reopened.exception and not reopened.error, [e.value for e in reopened.error]
    (run_id,) = {r.run_id for r in list_runs(ws)} - before
    try:
        deadline = time.time() + 300
        while get_run(run_id, ws).is_active and time.time() < deadline:
            time.sleep(0.5)
        rec = get_run(run_id, ws)
        assert rec.status == "completed", rec.error
        c = rec.config
        assert c["task"] == "paired_audio" and c["task_params"]["text_source"] == "label" and c["masking"]["ratio"] == 0.5
        assert c["data"]["audio"]["n_mels"] == 32 and rec.step == 2
        assert np.isfinite(rec.latest["val_t2i_r5"]) and np.isfinite(rec.latest["val_mse"])
        assert load_samples(run_id, workspace=ws).meta["captions"][0] in "0123"
    finally:
        if get_run(run_id, ws).is_active:
            cancel(run_id, ws)


def test_mask_lab_previews_the_joint_masks_of_an_audio_text_dataset(env):
    at = open_with("../pages/mask_lab.py", {"dataset": "spoken", "task": "paired_audio", "data.audio.n_mels": "32",
                                            "data.audio.clip_seconds": "0.5", "model.patch_size": "4",
                                            "task_params.text_source": "digit_word", "n": "16"})
    assert at.selectbox(key="ml_task").value == "paired_audio" and at.selectbox(key="ml_source").value == "digit_word"
    heads = [h.value for h in at.subheader]
    assert {"Masks on real clips and their texts", "Statistics of the spectrogram masks",
            "Statistics of the text masks"} <= set(heads), heads
    caps = captions(at)
    assert caps.count("spectrogram") == 8 and caps.count("masked") == 8
    assert sum(page_html(at).count(w) for w in WORDS) >= 8  # the digits' words
    assert any("spectrogram masks over the first windows of real train clips of **spoken**" in c.value for c in at.caption)
    assert any("caption masks over real train clip texts of **spoken**" in c.value for c in at.caption)
    assert _url(at)["task_params.text_source"] == "digit_word"


def test_an_audio_dataset_without_any_text_is_refused_in_words(env, shared_data):
    ws, _ = env
    z = ws.parent / "bare.zip"
    with zipfile.ZipFile(z, "w") as f:  # clips at the top: no label, no transcript
        for name in ("0_jackson_0", "1_jackson_0", "2_theo_0", "3_theo_0", "0_theo_1", "1_theo_1"):
            f.write(shared_data / "fsdd" / "recordings" / f"{name}.wav", f"{name}.wav")
    import_source(z, "bare", ImportOptions(sample_rate=8000, val_fraction=0.34), workspace=ws)
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    at.run().switch_page("../pages/new_run.py")
    at.query_params.clear()
    at.query_params["dataset"], at.query_params["task"] = "bare", "paired_audio"
    at.run()
    assert not at.exception
    (err,) = [e.value for e in at.error]
    assert err.startswith("**bare** has no text to pair with its clips: no transcripts and no class name")
    assert next(b for b in at.button if b.label == "Launch").disabled
    assert not [c for c in at.caption if "fixed validation clips" in c.value]
