"""What a run says about small or unlabelled data (issue 37, point 5), each member of each kind:

- a tokenizer far below its requested vocabulary is named with both numbers
  (:func:`engine.config.vocab_shortfall`);
- a set too small for a task's baselines is refused by pre-flight, naming the set, its size and the
  minimum (the paired tasks' CCA: both ``paired`` and ``paired_audio``), or the baseline is left out
  with a note (captions without a word for the CCA's TF-IDF);
- the evaluation of a set without what it scores (no labels, one class, no validation rows) skips
  the probe, kNN, k-means and fine-tune, says why, and completes the rest: every built-in task, on
  real data (TREC questions, Tux Paint stamps, FSDD clips) imported without labels; the raw input of
  a split with no rows, or of texts without a word, never fails it.

Runs train 2 steps of a tiny model on 6 items (about a second each, evaluation included).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.fsdd import subset_zip
from engine.config import RunConfig, vocab_shortfall, vocab_text
from engine.data import ImportOptions, import_source
from engine.errors import ConfigError, EvaluationError
from engine.eval.prefetch import prefetch_baselines
from engine.eval.representation import labels_problem, tfidf_splits
from engine.eval.retrieval import ONE_CHAR_WORDS, cca_embeddings, cca_problem
from engine.store import get_run, read_metrics
from engine.store.evaluations import latest_evaluation, read_job
from engine.tasks import build_task, resolve
from engine.tasks.checks import check_run
from tests.stamps import completed_run, pairs_zip

SHORT = {"batch_size": 4, "warmup_steps": 0, "device": "cpu", "num_threads": 1, "steps": 2, "eval_interval": 2,
         "checkpoint_interval": 2}
EVAL = {"auto": True, "max_rows": 300, "tsne_max_rows": 0, "finetune_epochs": 1, "budget": None}
AUDIO = {"n_mels": 32, "clip_seconds": 0.5}
#: task -> (dataset, the run's config fields besides task, dataset, train and evaluation).
TASKS = {
    "image_mim": ("stamps", {"model": {"preset": "tiny", "patch_size": 4}}),
    "text_mlm": ("notes", {"model": {"preset": "tiny"}, "masking": {"strategy": "random", "ratio": 0.15},
                           "data": {"tokenizer": {"vocab_size": 200, "max_len": 32}}}),
    "text_span": ("notes", {"model": {"preset": "tiny"}, "masking": {"strategy": "sentence_span"},
                            "data": {"tokenizer": {"vocab_size": 200, "max_len": 32}}}),
    "audio_mae": ("clips", {"model": {"preset": "tiny"}, "data": {"audio": AUDIO}}),
    "audio_frames": ("clips", {"data": {"audio": AUDIO}}),
    "paired": ("pairs", {"model": {"preset": "tiny", "patch_size": 4},
                         "data": {"tokenizer": {"vocab_size": 100, "max_len": 16}}}),
    "paired_audio": ("spoken", {"model": {"preset": "tiny", "patch_size": 4}, "task_params": {"text_ratio": 0.5},
                                "data": {"audio": AUDIO, "tokenizer": {"vocab_size": 100, "max_len": 8}}}),
}


def config(task: str, dataset: str | None = None, **over) -> dict:
    """A 2-step tiny run of ``task`` on its :data:`TASKS` dataset (or ``dataset``), evaluated at its end."""
    name, extra = TASKS[task]
    return {"task": task, **{k: v for k, v in extra.items() if k != "data"}, "train": SHORT, "evaluation": EVAL,
            "data": {"dataset": dataset or name, **extra.get("data", {})}, **over}


def trec_lines(shared_data: Path, n: int, start: int = 0) -> list[str]:
    rows = (shared_data / "trec" / "train.tsv").read_text(encoding="utf-8").splitlines()[1 + start : 1 + start + n]
    return [r.split("\t")[2] for r in rows]


def import_unlabelled(which: str, ws: Path, shared_data: Path, n: int = 6, val_fraction: float = 0.5):
    """Import ``n`` real items of kind ``which`` (a :data:`TASKS` dataset name) without labels; returns the report."""
    scratch = ws.parent
    opts = {"val_fraction": val_fraction, "label_column": ""}
    if which == "notes":
        src = scratch / f"notes{n}.txt"
        src.write_text("\n".join(trec_lines(shared_data, n)) + "\n", encoding="utf-8")
        opts.pop("label_column")  # a plain .txt has no columns
    elif which == "stamps":  # images at the top of the zip: no class folder
        root = shared_data / "tuxpaint-stamps"
        src = scratch / f"stamps{n}.zip"
        with zipfile.ZipFile(src, "w") as z:
            for p in sorted((root / "images").glob("animals__*.png"))[:n]:
                z.write(p, p.name)
        opts.pop("label_column")
    elif which == "pairs":
        src = pairs_zip(shared_data, scratch / f"pairs{n}.zip", n=n)
    else:  # FSDD clips of digits 0 and 1 (0 alone for one clip): "clips" without, "spoken" with the word as transcript
        words = {"transcript": lambda r: ("zero", "one")[int(r["label"])]} if which == "spoken" else {}
        digits = "01" if n > 1 else "0"
        src = subset_zip(shared_data, scratch / f"{which}{n}.zip", digits, ("jackson",), n // len(digits), **words)
        opts.update(sample_rate=8000, group_column="", **({"text_column": "words"} if words else {}))  # one speaker: no groups
    return import_source(src, f"{which}{n}" if n != 6 else which, ImportOptions(**opts), workspace=ws,
                         **({"image_size": 16, "geometry": "pad"} if which in ("stamps", "pairs") else {}))


@pytest.fixture(scope="module")
def small(tmp_path_factory, shared_data):
    """A workspace with every :data:`TASKS` dataset imported without labels (6 items, half for
    validation), and ``run(task)``: that task's run trained and evaluated there once (baselines'
    prefetch off: :func:`test_prefetch_of_an_unlabelled_set_caches_nothing_and_does_not_fail` runs it)."""
    ws = tmp_path_factory.mktemp("small") / "workspace"
    ws.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(ws))
        mp.setenv("MASKLAB_EVAL_PREFETCH", "0")
        for name in {d for d, _ in TASKS.values()}:
            assert import_unlabelled(name, ws, shared_data).accepted == 6
        runs: dict[str, str] = {}

        def run(task: str) -> str:
            if task not in runs:
                cfg = resolve(RunConfig.from_dict(config(task)))
                check_run(cfg, ws)  # pre-flight lets these sets through
                runs[task] = completed_run(cfg.to_dict(), ws, evaluate=True)
            return runs[task]

        yield ws, run


# --------------------------------------------------------------------------- vocabulary


def test_vocab_shortfall_names_both_sizes_and_what_to_do():
    asked = {"kind": "wordpiece", "vocab_size": 8000}
    msg = vocab_shortfall(asked, 9, "tiny")
    assert msg is not None
    assert "9 ids where 8,000 were asked (data.tokenizer.vocab_size)" in msg and "'tiny'" in msg
    assert "Ask for 9 or fewer" in msg and "import more text" in msg
    assert vocab_shortfall(asked, 3999) is not None and vocab_shortfall(asked, 4000) is None  # under half: far below
    assert vocab_shortfall(asked, 9000) is None and vocab_shortfall(asked, None) is None
    assert vocab_shortfall({"kind": "char", "vocab_size": 8000}, 9) is None  # a char tokenizer asks for no size
    assert [vocab_text(asked, n) for n in (None, 8000, 13)] == ["wordpiece 8000", "wordpiece 8000", "wordpiece 13 (8000 asked)"]
    assert vocab_text({"kind": "char"}, 57) == "char 57" and vocab_text({"kind": "char"}, None) == "char"


def test_a_text_run_records_the_vocabulary_its_tokenizer_reached(shared_runs):
    run = shared_runs.get("text_unlabelled")
    info = json.loads((run.workspace / "runs" / run.run_id / "task.json").read_text())
    cfg = get_run(run.run_id, run.workspace).config
    assert cfg["data"]["tokenizer"]["vocab_size"] == 8000 and 5 < info["vocab_size"] < 4000
    assert str(info["vocab_size"]) in vocab_shortfall(cfg["data"]["tokenizer"], info["vocab_size"], "notes")


def test_training_warns_of_a_vocabulary_far_below_its_request(workspace, shared_data, capfd):
    import_unlabelled("notes", workspace, shared_data)
    cfg = config("text_mlm", evaluation={**EVAL, "auto": False},
                 data={"dataset": "notes", "tokenizer": {"vocab_size": 8000, "max_len": 32}})
    run_id = completed_run(resolve(RunConfig.from_dict(cfg)).to_dict(), workspace)
    n = json.loads((workspace / "runs" / run_id / "task.json").read_text())["vocab_size"]
    assert f"masklab: warning: The tokenizer has {n} ids where 8,000 were asked" in capfd.readouterr().err  # the worker log


# --------------------------------------------------------------------------- baselines on small sets


@pytest.mark.parametrize("task", ["paired", "paired_audio"])
@pytest.mark.parametrize("n", [1, 2])
def test_preflight_refuses_a_set_too_small_for_the_cca_baseline(task, n, workspace, shared_data):
    info = import_unlabelled(TASKS[task][0], workspace, shared_data, n=n, val_fraction=0.5 if n == 2 else 0.0).dataset
    assert info.n_train == 1
    with pytest.raises(ConfigError) as e:
        check_run(resolve(RunConfig.from_dict(config(task, info.name))), workspace)
    msg = str(e.value)
    assert msg.startswith(f"data.dataset: {info.name!r} has ") and f"({info.n_train} for training, {info.n_val} for validation)" in msg
    assert f"task {task!r} needs at least 2 train pairs" in msg and "CCA" in msg and "Import more pairs" in msg
    assert ("validation fraction of 0" in msg) == (info.n_train + info.n_val >= 2)


def test_cca_problem_names_each_reason():
    assert "needs at least 2; there is 1" in cca_problem(1, ["a red frog"])
    assert "there are 0" in cca_problem(0, [])
    assert "no train caption has a word of two letters or digits" in cca_problem(3, ["a", "?", "\N{FROG FACE}"])
    assert cca_problem(3, ["a", "7"], ONE_CHAR_WORDS) is None  # a clip's class name "7" counts as a word there
    assert "a letter or digit" in cca_problem(3, ["?", "!"], ONE_CHAR_WORDS)
    assert cca_problem(2, ["a", "A frog."]) is None
    with pytest.raises(ValueError, match="CCA baseline cannot be fitted: it fits PCA and CCA"):
        cca_embeddings(np.zeros((1, 12)), ["a frog"], np.zeros((1, 12)), ["a frog"])


def test_paired_run_without_caption_words_leaves_the_cca_baseline_out_with_a_note(workspace, shared_data):
    root = shared_data / "tuxpaint-stamps"
    src = workspace.parent / "letters.zip"
    with zipfile.ZipFile(src, "w") as z:  # real stamps captioned with one letter each: no TF-IDF word
        table = "image,caption\n"
        for p, letter in zip(sorted((root / "images").glob("food__*.png"))[:4], "abcd"):
            z.write(p, f"images/{p.name}")
            table += f"images/{p.name},{letter}\n"
        z.writestr("captions.csv", table)
    import_source(src, "letters", ImportOptions(val_fraction=0.5), workspace=workspace, image_size=16, geometry="pad")
    run_id = completed_run(resolve(RunConfig.from_dict({**config("paired", "letters"), "evaluation": {
        **EVAL, "auto": False}})).to_dict(), workspace)
    info = json.loads((workspace / "runs" / run_id / "task.json").read_text())
    assert info["baseline_notes"] == ["no CCA retrieval baseline: no train caption has a word of two letters or digits "
                                      "for its TF-IDF, so the captions give it nothing to correlate"]
    keys = set(read_metrics([run_id], None, workspace=workspace)["key"])
    assert {"baseline/chance/t2i_r1", "baseline/unigram"} <= keys and not [k for k in keys if "/cca/" in k]


# --------------------------------------------------------------------------- evaluation without labels


@pytest.mark.parametrize("task", list(TASKS))
def test_evaluation_of_an_unlabelled_set_skips_what_needs_labels_and_completes(task, small):
    ws, run = small
    run_id = run(task)
    job = read_job(run_id, ws)
    assert job["status"] == "completed", job
    ev = latest_evaluation(run_id, ws)
    assert ev.complete and ev.representation == {} and ev.downstream == {}
    dataset = TASKS[task][0]
    why = (f"{dataset!r} has no labels (every row is 'unlabeled'); import it with a label column or one sub-folder "
           "per class to score how well the features separate them")
    fine_tunes = task not in ("paired", "paired_audio")  # the paired tasks have no fine-tune entry
    assert ev.skipped == dict.fromkeys(["probe", "knn", "clustering", *(["finetune"] if fine_tunes else [])], why)
    assert f"not computed: linear probes, kNN, k-means{', fine-tuning' if fine_tunes else ''}: {why}" in ev.notes
    assert "val_loss" in ev.reconstruction and ev.cost["flops_per_step"] > 0  # the rest completed
    assert {"features", "reconstruction", "map"} <= set(ev.phases) and not {"probe", "knn", "finetune"} & set(ev.phases)
    assert ev.rows["val"] == 3 and get_run(run_id, ws).status == "completed"


def test_prefetch_of_an_unlabelled_set_caches_nothing_and_does_not_fail(small):
    ws, run = small
    run_dir = ws / "runs" / run("image_mim")
    assert prefetch_baselines(run_dir, ws) == []  # was: EvaluationError "representation figures need labels"
    assert not (ws / "cache" / "eval-baselines" / f"{run_dir.name}.json").exists()


@pytest.mark.parametrize(("y_train", "y_val", "names", "expected"), [
    ([0, 0, 0], [0], ("unlabeled",), "'d' has no labels (every row is 'unlabeled')"),
    ([1, 1], [0], ("cat", "dog"), "the 2 labelled train rows of 'd' hold 1 class; these figures need 2 or more"),
    ([1, -1], [0], ("cat", "dog"), "the 1 labelled train row of 'd' holds 1 class;"),
    ([0, 1], [], ("cat", "dog"), "'d' has no labelled validation row to score them on; import it again with a "
                                 "validation fraction above 0"),
    ([0, 1], [-1], ("cat", "dog"), "no labelled validation row"),
])
def test_labels_problem_names_each_reason(y_train, y_val, names, expected):
    assert expected in labels_problem(np.array(y_train), np.array(y_val), names, "d")


def test_labels_problem_is_none_with_two_classes_and_a_validation_row():
    assert labels_problem(np.array([0, 1]), np.array([1]), ("cat", "dog"), "d") is None


def test_evaluation_without_a_validation_split_skips_the_probes_and_completes(workspace, shared_data, monkeypatch):
    monkeypatch.setenv("MASKLAB_EVAL_PREFETCH", "0")
    lines = trec_lines(shared_data, 6)
    src = workspace.parent / "two-classes.tsv"  # labelled, but every row in train
    src.write_text("text\tlabel\n" + "".join(f"{t}\t{'ab'[i % 2]}\n" for i, t in enumerate(lines)), encoding="utf-8")
    import_source(src, "noval", ImportOptions(val_fraction=0.0, label_column="label"), workspace=workspace)
    run_id = completed_run(resolve(RunConfig.from_dict(config("text_mlm", "noval"))).to_dict(), workspace, evaluate=True)
    assert read_job(run_id, workspace)["status"] == "completed"  # was: a TF-IDF of 0 validation texts failed it
    ev = latest_evaluation(run_id, workspace)
    assert set(ev.skipped) == {"probe", "knn", "clustering", "finetune"}
    assert "'noval' has no labelled validation row" in ev.skipped["probe"] and "val_loss" in ev.reconstruction


@pytest.mark.parametrize("task", ["text_mlm", "paired"])
def test_raw_input_of_a_set_without_validation_rows_has_an_empty_validation_split(task, workspace, shared_data):
    info = import_unlabelled(TASKS[task][0], workspace, shared_data, n=4, val_fraction=0.0).dataset
    cfg = resolve(RunConfig.from_dict(config(task, info.name)))
    (xtr, ytr), (xva, yva) = build_task(cfg, torch.device("cpu"), workspace).raw_features(300)
    assert xtr.shape[0] == len(ytr) == 4 and xva.shape == (0, xtr.shape[1]) and len(yva) == 0  # was: a TF-IDF error


def test_tfidf_of_texts_without_a_word_is_refused_in_words():
    with pytest.raises(EvaluationError, match="raw input: no train caption has a word its TF-IDF counts"):
        tfidf_splits(["a", "?"], [["a"], []], "caption")
    tr, va = tfidf_splits(["a red frog", "a blue car"], [["a red frog"], []])
    assert tr.shape == (1, 4) and va.shape == (0, 4)


def test_evaluation_leaves_out_raw_input_features_the_texts_cannot_give(workspace, monkeypatch):
    monkeypatch.setenv("MASKLAB_EVAL_PREFETCH", "0")
    src = workspace.parent / "letters.tsv"  # two classes of texts of one-letter words: no TF-IDF term
    src.write_text("text\tlabel\n" + "".join(f"{' '.join('abcdefgh'[(i + j) % 8] for j in range(6))}\t{'xy'[i % 2]}\n"
                                              for i in range(8)), encoding="utf-8")
    import_source(src, "letters", ImportOptions(val_fraction=0.5, label_column="label"), workspace=workspace)
    cfg = config("text_mlm", "letters", data={"dataset": "letters", "tokenizer": {"kind": "char", "max_len": 16}})
    run_id = completed_run(resolve(RunConfig.from_dict(cfg)).to_dict(), workspace, evaluate=True)
    assert read_job(run_id, workspace)["status"] == "completed"  # was: "empty vocabulary" failed it whole
    ev = latest_evaluation(run_id, workspace)
    assert list(ev.skipped) == ["raw_input"] and "no train text has a word its TF-IDF counts" in ev.skipped["raw_input"]
    assert ev.representation["raw_input"] == {} and "probe_acc" in ev.representation["trained"]
    assert "probe_acc" in ev.representation["random_init"] and "trained" in ev.downstream
