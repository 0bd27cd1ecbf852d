"""Audio-text pairs through the paired task (issue 11): real FSDD clips imported through the real
importer with a transcript column (the digit's English word, as FSDD's README says), one clip left
without a transcript; the config check, the masks (padding never hidden), a short run through the
real worker and store with its retrieval, caption and spectrogram figures, samples, the retrieval
index and the inference loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from bench.fsdd import WORDS, subset_zip
from engine.config import RunConfig, load_config
from engine.data import ImportOptions, import_source, load_dataset
from engine.errors import ConfigError
from engine.eval.inference import load_model
from engine.eval.job import evaluate_checkpoint
from engine.runner.resume import prepare_resume, resume_config
from engine.runner.worker import execute_run
from engine.store import create_run, get_run, load_samples, read_config_history
from engine.tasks import build_task, resolve
from engine.tasks.checks import check_run
from engine.tasks.paired.inference import retrieval_index
from engine.tasks.paired_audio.pairs import AudioTextPairs, label_text, text_sources
from engine.workspace import FORMAT, atomic_write_json, read_json, workspace_root

REPO = Path(__file__).resolve().parents[2]
BLANK = "recordings/2_theo_1.wav"  # imported without a transcript


@pytest.fixture(scope="module")
def imported(tmp_path_factory, shared_data):
    """``spoken``: 48 real FSDD clips (digits 0-3, jackson and theo, 6 takes each) with a ``words``
    transcript column (the digit's word; empty for :data:`BLANK`), split by speaker, at 8 kHz; and
    ``plain``: the same clips without transcripts."""
    root = tmp_path_factory.mktemp("paired-audio")
    ws = root / "workspace"
    ws.mkdir()
    words = subset_zip(shared_data, root / "spoken.zip", "0123", ("jackson", "theo"), 6,
                       transcript=lambda r: "" if r["path"] == BLANK else WORDS[int(r["label"])])
    opts = dict(group_column="speaker", sample_rate=8000, val_fraction=0.5)
    rep = import_source(words, "spoken", ImportOptions(text_column="words", **opts), workspace=ws)
    assert rep.accepted == 48
    import_source(subset_zip(shared_data, root / "plain.zip", "0123", ("jackson", "theo"), 6), "plain",
                  ImportOptions(**opts), workspace=ws)
    return ws, rep


@pytest.fixture
def ws(imported):
    return imported[0]


def cfg_of(**over) -> RunConfig:
    d = {"task": "paired_audio", "data": {"dataset": "spoken", "audio": {"n_mels": 32, "clip_seconds": 0.5},
                                    "tokenizer": {"vocab_size": 100, "max_len": 8}},
         "model": {"preset": "tiny", "patch_size": 4},
         "train": {"steps": 3, "batch_size": 8, "eval_interval": 3, "checkpoint_interval": 3, "num_vis": 2,
                   "warmup_steps": 1}}
    for k, v in over.items():
        d[k] = {**d.get(k, {}), **v} if isinstance(v, dict) else v
    return resolve(RunConfig.from_dict(d))


def test_a_clip_without_a_transcript_is_named_in_the_import_report_and_kept(imported):
    ws, rep = imported
    assert rep.untranscribed == [f"set/{BLANK}"] and not rep.rejected
    assert f"1 clip without a transcript (imported for the audio tasks; audio-text pairs leave them out): set/{BLANK}" \
        in rep.summary()
    ds = load_dataset("spoken", ws)
    texts = [ds.transcript(i) for i in range(len(ds))]
    assert texts.count("") == 1 and sorted(set(texts)) == ["", "one", "three", "two", "zero"]


def test_label_words():
    assert [label_text(n, "digit_word") for n in ("7", " 0", "12", "dog")] == ["seven", "zero", "12", "dog"]
    assert label_text("7", "label") == "7"


def test_the_check_refuses_an_audio_dataset_without_texts_naming_it(ws):
    with pytest.raises(ConfigError, match=r"data.dataset: 'plain' is an audio dataset without transcripts; the paired_audio "
                                          r"task needs a text for each clip: import it again with a transcript column"):
        check_run(cfg_of(data={"dataset": "plain"}), ws)
    check_run(cfg_of(data={"dataset": "plain"}, task_params={"text_source": "digit_word"}), ws)  # its labels are words
    with pytest.raises(ConfigError, match="model.patch_size: 5 does not divide the 32 mel bins"):
        check_run(cfg_of(model={"patch_size": 5}), ws)
    with pytest.raises(ConfigError, match="masking.strategy: 'superpixel' does not apply to the patch grid of paired"):
        check_run(cfg_of(masking={"strategy": "superpixel"}), ws)


def test_pairs_leave_out_the_clip_without_text_and_masks_never_hide_padding(ws):
    cfg = cfg_of(masking={"strategy": "random", "ratio": 0.9})
    pairs = AudioTextPairs(load_dataset("spoken", ws), cfg.data.audio, 4, "text")
    assert len(pairs) == 47 and "" not in pairs.texts() and pairs.info.image_shape == (1, 32, pairs.grid.frames)
    rows = np.arange(len(pairs))
    mask, eligible = pairs.masks(cfg, rows, torch.Generator().manual_seed(0)), pairs.eligible(rows)
    assert mask.any() and not (mask & ~eligible).any() and (~eligible).any()  # short clips: padding exists, never hidden
    x, y = pairs.rows_tensors(rows[:3])
    assert x.shape == (3, 1, 32, pairs.grid.frames) and y.tolist() == pairs.labels[:3].tolist()


def test_whole_spectrogram_hiding_leaves_the_padding_visible(ws):
    torch.manual_seed(0)
    task = build_task(cfg_of(task_params={"caption_completion": 0.0, "image_completion": 1.0}), "cpu", ws)
    _, logs = task.train_loss(torch.arange(8), torch.Generator().manual_seed(0), 0.75)
    assert float(logs["mask_ratio"]) == 1.0  # every patch of the clip hidden, and nothing else
    X, y = task.features("val", 5)  # probes: the pair encoded jointly, the spectrogram half then the text half
    assert X.shape == (5, 2 * task.model.patch_embed.out_channels) and np.isfinite(X).all() and len(y) == 5
    (Xt, _), (Xv, yv) = task.raw_features(5)  # flattened normalised log-mel next to the text's TF-IDF
    assert Xv.shape[0] == 5 and Xv.shape[1] > 32 * task._ds.grid.frames and (yv == y).all()
    feats = task._ds.feats  # the pairs' frames: mapped from the workspace, not held in memory
    assert feats.stored is not None and feats.stored.parent == ws / "features" and isinstance(feats.frames, np.memmap)
    assert len(feats) == len(task._ds) == 47
    assert task.train_enc.folder.parent == ws / "encoded" and len(task.train_enc) == len(task.train_rows)


def test_a_short_run_logs_retrieval_caption_and_spectrogram_figures(ws, monkeypatch):
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    cfg = cfg_of()
    check_run(cfg, ws)
    run_id, d = create_run(cfg.to_dict(), ws)
    assert execute_run(d) == "completed", get_run(run_id, ws).error
    latest = get_run(run_id, ws).latest
    for k in ("val_t2i_r5", "val_i2t_r5", "baseline/chance/t2i_r5", "baseline/cca/t2i_r5", "val_caption_acc",
              "val_caption_blank_acc", "baseline/position", "val_mse", "val_mse_no_caption", "baseline/mean_spec/mse",
              "baseline/interp_spec/mse", "loss/contrastive"):
        assert np.isfinite(latest[k]), k
    assert 0 < latest["baseline/chance/t2i_r1"] < 1  # 4 words among the val clips
    s = load_samples(run_id, workspace=ws)
    assert s.kind == "paired" and s.meta["stream"] == "audio" and s.meta["sample_rate"] == 8000
    n, F, T = s["spec"].shape
    assert (n, F) == (2, 32) and s["mask"].shape == s["pred"].shape == (n, F, T) and s["tokens"].shape[0] == n
    assert not (s["mask"] & ~s["real"][:, None, :]).any()  # padding never hidden
    assert s.meta["captions"] == [WORDS[int(y)] for y in s["labels"]]  # the transcripts, here the digits' words
    loaded = load_model(run_id, workspace=ws)
    index = retrieval_index(loaded, ws)
    assert index.images.shape[1:] == (1, F, T) and index.real.shape == (len(index.captions), T)
    assert index.image_emb.shape[0] == len(index.captions) and np.allclose(np.linalg.norm(index.text_emb, axis=1), 1, atol=1e-5)


def test_example_config_passes_the_preflight_on_an_imported_fsdd_subset(ws):
    cfg = load_config(REPO / "configs/paired-audio-fsdd.yaml", ["data.dataset=plain"])
    check_run(cfg, ws)


def test_text_sources_name_what_gives_each_train_clip_a_text(ws):
    spoken, plain = load_dataset("spoken", ws), load_dataset("plain", ws)
    n_train = int((plain.split == 0).sum())
    assert text_sources(plain) == {"digit_word": n_train, "label": n_train}  # no transcripts
    got = text_sources(spoken)
    assert list(got) == ["text", "digit_word", "label"] and got["label"] == n_train
    blank_in_train = sum(1 for i in range(len(spoken)) if not spoken.transcript(i) and spoken.split[i] == 0)
    assert got["text"] == n_train - blank_in_train  # the clip without a transcript has no text
    assert label_text("unlabeled", "label") == "" and label_text("unlabeled", "digit_word") == ""


def test_a_run_paired_with_one_character_class_names_completes_with_its_cca_baseline(ws, monkeypatch):
    """Class names "0" .. "3" as the texts: the CCA baseline's TF-IDF keeps one-character words."""
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    cfg = cfg_of(data={"dataset": "plain"}, task_params={"text_source": "label"})
    check_run(cfg, ws)
    run_id, d = create_run(cfg.to_dict(), ws)
    assert execute_run(d) == "completed", get_run(run_id, ws).error
    latest = get_run(run_id, ws).latest
    assert np.isfinite(latest["baseline/cca/t2i_r5"]) and np.isfinite(latest["val_t2i_r5"])
    assert set(load_samples(run_id, workspace=ws).meta["captions"]) <= set("0123")


def test_a_format_2_paired_run_on_audio_opens_resumes_and_evaluates_as_paired_audio(ws, monkeypatch):
    """Before workspace format 3 audio-text pairs were ``task: paired``. Such a stored run (trained, crashed
    after its step-2 checkpoint, its config, config history, status and ``VERSION`` written back as format 2
    wrote them) is renamed once when the workspace opens, then resumes with a changed config (resolved again
    under the new task) to completion and evaluates."""
    def crash_after_3(step: int) -> None:
        if step == 3:
            raise RuntimeError("simulated crash after step 3")

    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    cfg = cfg_of(train={"steps": 4, "eval_interval": 2, "checkpoint_interval": 2},
                 evaluation={"auto": False, "max_rows": 300, "tsne_max_rows": 0, "finetune_epochs": 1,
                             "budget": None})
    run_id, d = create_run(cfg.to_dict(), ws)
    assert execute_run(d, on_step=crash_after_3) == "failed"
    old = {**read_json(d / "config.json"), "task": "paired"}  # what format 2 stored
    atomic_write_json(d / "config.json", old)
    atomic_write_json(d / "config_history.json", [{"step": 0, "config": old, "changed": {}}])
    atomic_write_json(d / "status.json", {**read_json(d / "status.json"), "format": 2})
    (ws / "VERSION").write_text("2\n")

    workspace_root(ws)  # opening the workspace migrates it, once
    assert (ws / "VERSION").read_text() == f"{FORMAT}\n"
    rec = get_run(run_id, ws)
    assert rec.config["task"] == "paired_audio" and rec.status == "failed"
    assert {k: v for k, v in rec.config.items() if k != "task"} == {k: v for k, v in old.items() if k != "task"}
    assert [e["config"]["task"] for e in read_config_history(d)] == ["paired_audio"]

    assert prepare_resume(d, lambda c, step: resume_config(c, ["train.steps=6"], step).to_dict()) == 2
    assert execute_run(d) == "completed", get_run(run_id, ws).error
    rec = get_run(run_id, ws)
    assert rec.step == 6 and rec.config["task"] == "paired_audio" and np.isfinite(rec.latest["val_caption_acc"])
    assert [e["config"]["task"] for e in read_config_history(d)] == ["paired_audio", "paired_audio"]
    ev, _ = evaluate_checkpoint(d, workspace=ws)
    assert ev.step == 6
