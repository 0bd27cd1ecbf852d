"""The text tasks (text_mlm, text_span) through the real engine on real text: config resolution,
what is masked and labelled, tiny corpora, samples, interactive inference, the example configs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from engine.config import RunConfig, load_config
from engine.data import ImportOptions, import_source
from engine.errors import ConfigError
from engine.eval.inference import load_model
from engine.models.span_infill import shift_right
from engine.runner.worker import execute_run
from engine.store import create_run, get_run, load_samples, read_metrics
from engine.store.checkpoints import list_checkpoints, load_checkpoint_state
from engine.tasks import build_task, resolve
from engine.tasks.text.common import ensure_one_masked, whole_words
from engine.tasks.text.inference import complete_span, fill_in
from engine.text.stored import StoredEncoded
from engine.training.loop import epoch_order

SHORT = {"steps": 6, "batch_size": 8, "eval_interval": 3, "checkpoint_interval": 6, "warmup_steps": 1, "device": "cpu"}


@pytest.fixture
def trec(workspace, shared_data, tmp_path):
    """The first 400 questions of TREC imported as dataset 'trec' (test data, read in place)."""
    rows = (shared_data / "trec" / "train.tsv").read_text(encoding="utf-8").splitlines()[:401]
    src = tmp_path / "trec400.tsv"
    src.write_text("\n".join(rows) + "\n", encoding="utf-8")
    import_source(src, "trec", ImportOptions(label_column="label"))
    return "trec"


def _cfg(task: str, dataset: str, **extra) -> RunConfig:
    d = {"task": task, "data": {"dataset": dataset, "tokenizer": {"vocab_size": 500, "max_len": 48}},
         "model": {"preset": "tiny"}, "train": dict(SHORT)}
    d["masking"] = {"strategy": "sentence_span"} if task == "text_span" else {"strategy": "random", "ratio": 0.15}
    for k, v in extra.items():
        d[k] = {**d.get(k, {}), **v} if isinstance(v, dict) else v
    return resolve(RunConfig.from_dict(d))


def test_text_tasks_fill_their_defaults():
    mlm = resolve(RunConfig.from_dict({"task": "text_mlm", "masking": {"ratio": 0.15}}))
    assert (mlm.model.arch, mlm.objective.loss, mlm.model.patch_size) == ("bert", "cross_entropy", None)
    assert mlm.data.tokenizer.kind == "wordpiece" and mlm.task_params["mask_share"] == 0.8
    assert (mlm.task_params["random_share"], mlm.task_params["target"]) == (0.1, "token")  # plain BERT MLM
    assert resolve(RunConfig.from_dict(mlm.to_dict())).to_dict() == mlm.to_dict()
    assert resolve(RunConfig.from_dict({"task": "text_span"})).model.arch == "t5_span"
    with pytest.raises(ConfigError, match=r"model\.patch_size: text tasks have no patches"):
        resolve(RunConfig.from_dict({"task": "text_mlm", "model": {"patch_size": 4}}))
    with pytest.raises(ConfigError, match=r"data\.tokenizer: image tasks have no tokenizer"):
        resolve(RunConfig.from_dict({"data": {"tokenizer": {}}}))
    with pytest.raises(ConfigError, match=r"task_params\.mask_share: .*\(got 1\.5\)"):
        resolve(RunConfig.from_dict({"task": "text_mlm", "task_params": {"mask_share": 1.5}}))
    with pytest.raises(ConfigError, match=r"task_params\.bogus: unknown parameter of task 'text_mlm'"):
        resolve(RunConfig.from_dict({"task": "text_mlm", "task_params": {"bogus": 1}}))


def test_padding_and_special_tokens_are_never_masked_or_labelled(trec):
    torch.manual_seed(0)
    task = build_task(_cfg("text_mlm", trec, masking={"strategy": "random", "ratio": 0.9}))
    b = task.rows(task.train, torch.arange(32))
    special = ~b["attention"] | (b["ids"] <= 4)  # [PAD] [CLS] [SEP] [MASK] [UNK] = ids 0..4
    assert special.any() and (~b["attention"]).any()  # the batch has padding and specials
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        mask = ensure_one_masked(task._mask(b, g, 0.9), b["eligible"], g)
        assert not (mask & ~b["eligible"]).any()
        assert not (mask & special & (b["ids"] != 4)).any()  # [UNK] in the text may be predicted, others never
        _, labels = task._corrupt(b, mask, g, **task.shares)
        assert ((labels != -100) == mask).all()  # labelled exactly where masked
    for b_, mask, _ in task.eval_batches:
        assert not (mask & ~b_["eligible"]).any() and mask.any(dim=1)[b_["eligible"].any(dim=1)].all()


def test_whole_word_masking_masks_every_piece_of_a_word(trec):
    torch.manual_seed(0)
    task = build_task(_cfg("text_mlm", trec, masking={"strategy": "whole_word", "ratio": 0.4}))
    b = task.rows(task.train, torch.arange(len(task.train)))
    multi = b["word_ids"][:, 1:] == b["word_ids"][:, :-1]
    assert (multi & (b["word_ids"][:, 1:] >= 0)).any()  # the small vocabulary splits some words into pieces
    mask = task._mask(b, torch.Generator().manual_seed(1), 0.4)
    for w in range(int(b["word_ids"].max()) + 1):
        pieces = b["word_ids"] == w
        hit = (mask & pieces).any(dim=1, keepdim=True)
        assert ((mask & pieces) == (pieces & hit)).all()  # all pieces of a word or none


def test_span_masks_one_whole_word_segment(trec):
    torch.manual_seed(0)
    task = build_task(_cfg("text_span", trec))
    b = task.rows(task.train, torch.arange(64))
    span = task._mask(b, torch.Generator().manual_seed(2), 0.0)
    assert torch.equal(span, whole_words(span, b["word_ids"]))
    runs = (span[:, 1:] & ~span[:, :-1]).sum(1) + span[:, 0].long()
    assert (runs == 1).all()  # exactly one contiguous span per text


def test_one_line_four_word_corpus_with_batch_1_trains_without_nan(workspace, tmp_path):
    src = tmp_path / "tiny.txt"
    src.write_text("the cat sat down\n", encoding="utf-8")
    rep = import_source(src, "tiny", ImportOptions(val_fraction=0.0))
    assert rep.accepted == 1
    for task in ("text_mlm", "text_span"):
        cfg = _cfg(task, "tiny", data={"tokenizer": {"vocab_size": 50, "min_frequency": 1, "max_len": 16}},
                   train={**SHORT, "batch_size": 1, "steps": 8, "eval_interval": 4, "checkpoint_interval": 8})
        run_id, d = create_run(cfg.to_dict())
        assert execute_run(d) == "completed", get_run(run_id).error
        loss = read_metrics([run_id], ["loss", "val_loss"], max_points=None)
        assert len(loss) == 8 + 3 and torch.isfinite(torch.tensor(loss.value.tolist())).all(), task


def test_mlm_run_logs_accuracy_baselines_samples_and_answers_the_fill_in_box(trec):
    run_id, d = create_run(_cfg("text_mlm", trec).to_dict())
    assert execute_run(d) == "completed", get_run(run_id).error
    rec = get_run(run_id)
    for k in ("val_loss", "val_ppl", "val_top1", "val_top5", "baseline/unigram_top1", "baseline/position_top1",
              "baseline/bigram_top1", "mask_ratio"):
        assert k in rec.latest, k
    assert 0 <= rec.latest["val_top1"] <= rec.latest["val_top5"] <= 1
    s = load_samples(run_id)
    assert s.kind == "text_mlm" and s["tokens"].shape == s["mask"].shape and s["top_tokens"].shape[2] == 3
    assert (s["top_probs"][s["mask"]] > 0).all() and (s["top_probs"][~s["mask"]] == 0).all()
    loaded = load_model(run_id)
    preds = fill_in(loaded, "what is the [MASK] of china ?")
    assert len(preds) == 1 and len(preds[0].candidates) == 3
    assert all(t not in ("[PAD]", "[CLS]", "[SEP]", "[MASK]") for t, _ in preds[0].candidates)
    assert sum(p for _, p in preds[0].candidates) <= 1.0 + 1e-6


def test_span_run_logs_span_metrics_and_completes_a_passage(trec):
    run_id, d = create_run(_cfg("text_span", trec).to_dict())
    assert execute_run(d) == "completed", get_run(run_id).error
    rec = get_run(run_id)
    for k in ("val_loss", "val_span_acc", "val_exact", "baseline/unigram_acc", "baseline/position_acc",
              "baseline/bigram_acc"):
        assert k in rec.latest, k
    assert "val_span_acc_pos" not in rec.latest  # trained without decoder-input masking: not meaningful
    s = load_samples(run_id)
    assert s.kind == "text_span" and s["target"].shape == s["generated"].shape
    assert isinstance(complete_span(load_model(run_id), "what is the [MASK] ?"), str)


def test_span_decoder_input_masking_hides_a_drawn_share_and_logs_per_position_accuracy(trec):
    with pytest.raises(ConfigError, match="decoder_input_mask"):
        resolve(RunConfig.from_dict({**_cfg("text_span", trec).to_dict(), "task_params": {"decoder_input_mask": 1.5}}))
    cfg = _cfg("text_span", trec).to_dict()
    cfg["task_params"] = {"decoder_input_mask": 1.0}
    task = build_task(resolve(RunConfig.from_dict(cfg)), "cpu")
    b = task.rows(task.train, torch.arange(64))
    ex = task._example(b, task._mask(b, torch.Generator().manual_seed(0), 0.5))
    shown = task._masked_input(ex, torch.Generator().manual_seed(1))
    inside = ex.tgt_mask.clone()
    inside[:, 0] = False  # bos: always shown
    hidden = shown == task.tok.mask_id
    assert not (hidden & ~inside).any()
    assert (shown[:, 0] == task.tok.cls_id).all()
    share = hidden.sum(1) / inside.sum(1).clamp_min(1)
    assert 0.3 < float(share.mean()) < 0.7 and float(share.max()) > 0.8 and float(share.min()) < 0.2  # share ~ U(0, 1)
    assert torch.equal(shown[~hidden], shift_right(ex.tgt_ids, task.tok.cls_id)[~hidden])
    run_id, d = create_run(cfg)
    assert execute_run(d) == "completed", get_run(run_id).error
    latest = get_run(run_id).latest
    assert 0.0 <= latest["val_span_acc_pos"] <= 1.0
    for k in ("unigram", "position", "bigram"):  # the figure table's baselines: the headline's, same spans
        assert latest[f"baseline/{k}_acc/span_acc_pos"] == latest[f"baseline/{k}_acc"]


def test_example_configs_validate_and_point_at_an_imported_set(trec):
    for path in ("configs/mlm-fortunes.yaml", "configs/mlm-span-fortunes.yaml", "configs/method-data2vec-text.yaml"):
        cfg = resolve(load_config(path, ["data.dataset=trec"]))
        assert cfg.data.dataset == "trec" and cfg.task in ("text_mlm", "text_span")


@pytest.mark.slow
def test_mlm_fortunes_config_runs_from_the_cli(trec):
    """`python -m engine run configs/mlm-fortunes.yaml --set data.dataset=NAME`, shortened."""
    out = subprocess.run([sys.executable, "-m", "engine", "run", "configs/mlm-fortunes.yaml", "--set", "data.dataset=trec",
                          "--set", "train.steps=20", "--set", "train.eval_interval=10"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "completed: step 20/20" in out.stdout


def test_text_batches_are_cut_to_their_longest_row(trec):
    """Dynamic padding: a batch of texts is as wide as its longest text, whatever data.tokenizer.max_len is."""
    for name in ("text_mlm", "text_span"):
        torch.manual_seed(0)
        task = build_task(_cfg(name, trec))
        lengths = task.train_lengths()
        # the train split is encoded into <workspace>/encoded and read through memory maps
        assert isinstance(task.train, StoredEncoded) and task.train.folder.parent.name == "encoded"
        assert torch.equal(lengths, torch.from_numpy(np.asarray(task.train.attention_mask).sum(1)))
        assert task.train.input_ids.shape[1] == 48
        order = torch.argsort(lengths)
        for idx in (order[:8], order[-8:], torch.arange(8)):
            b = task.rows(task.train, idx)
            assert b["ids"].shape[1] == int(lengths[idx].max()), name
            assert b["attention"][:, -1].any() and torch.equal(b["attention"].sum(1), lengths[idx])
        assert task.rows(task.train, order[:8])["ids"].shape[1] < 16  # the shortest questions: no padding to 48


def test_training_batches_group_texts_of_similar_length(trec):
    """The loop orders an epoch with engine.training.loop.epoch_order over the task's text lengths
    (train.group_by_length, on by default); off, the order is a plain random permutation."""
    torch.manual_seed(0)
    lengths = build_task(_cfg("text_mlm", trec)).train_lengths()
    perms = {}
    for group in (True, False):
        cfg = _cfg("text_mlm", trec, train={**SHORT, "group_by_length": group, "seed": 7})
        run_id, d = create_run(cfg.to_dict())
        assert execute_run(d) == "completed", get_run(run_id).error
        perms[group] = load_checkpoint_state(list_checkpoints(d)[-1])["loop"]["perm"].long()
    g = lambda: torch.Generator().manual_seed(7 + 1)  # noqa: E731  the loop's g_data
    assert torch.equal(perms[True], epoch_order(len(lengths), 8, g(), lengths))
    assert torch.equal(perms[False], torch.randperm(len(lengths), generator=g()))
    width = lambda perm: sum(int(lengths[perm[i : i + 8]].max()) for i in range(0, len(perm) - 7, 8))  # noqa: E731
    assert width(perms[True]) < 0.8 * width(perms[False])  # tokens a padded epoch costs
