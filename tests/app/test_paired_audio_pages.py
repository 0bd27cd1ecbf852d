"""Audio-text pairs in the pages (issue 11) in AppTest on the real engine: real FSDD clips imported
with a transcript column (the digit's English word) and a completed 2-step ``paired`` run on them.
Run detail shows each clip's spectrograms and players with its caption lines and answers the
retrieval box with spectrograms; Runs, Compare, New run, Mask lab and Data open without a traceback
and show the clip-transcript pairs."""

from __future__ import annotations

import pytest

from engine.data import ImportOptions, import_source
from engine.store import load_samples
from tests.app.pages import captions, n_images, open_with, page_html
from tests.fsdd import WORDS, subset_zip
from tests.stamps import completed_run

NUM_VIS = 4
CFG = {"task": "paired", "data": {"dataset": "spoken", "audio": {"n_mels": 32, "clip_seconds": 0.5},
                                  "tokenizer": {"vocab_size": 100, "max_len": 8}},
       "model": {"preset": "tiny", "patch_size": 4},
       "train": {"steps": 2, "batch_size": 8, "eval_interval": 2, "checkpoint_interval": 2, "num_vis": NUM_VIS,
                 "warmup_steps": 0}}


@pytest.fixture(scope="module")
def env(tmp_path_factory, shared_data):
    """``spoken``: 24 real FSDD clips (digits 0-3, jackson and theo, 3 takes each) with their words as
    transcripts, split by speaker, and a completed 2-step ``paired`` run on it; the workspace is
    ``$MASKLAB_WORKSPACE`` while the module's tests run. Yields ``(workspace, run id)``."""
    ws = tmp_path_factory.mktemp("paired-audio-pages") / "workspace"
    ws.mkdir()
    z = subset_zip(shared_data, ws.parent / "spoken.zip", "0123", ("jackson", "theo"), 3,
                   transcript=lambda r: WORDS[int(r["label"])])
    rep = import_source(z, "spoken", ImportOptions(group_column="speaker", text_column="words", sample_rate=8000,
                                                   val_fraction=0.5), workspace=ws)
    assert rep.accepted == 24
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(ws))
        yield ws, completed_run(CFG, ws)


def test_run_detail_shows_spectrograms_with_their_texts_and_answers_retrieval(env):
    ws, run_id = env
    at = open_with("../pages/run_detail.py", {"run": run_id})
    assert any(h.value == "Joint reconstructions of validation pairs" for h in at.subheader)
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
    # a link asking New run for the paired task on this audio dataset opens on the audio tasks it offers
    at = open_with("../pages/new_run.py", {"dataset": "spoken", "task": "paired"})
    assert at.selectbox(key="nr_task_audio").value in ("audio_mae", "audio_frames")
    assert any("configs/paired-audio-fsdd.yaml --set data.dataset=spoken" in c.value for c in at.caption)
