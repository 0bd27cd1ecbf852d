"""The evaluation job: automatic at the end of a run, on demand for a kept checkpoint (background
process, run lock, run slot), stored with the run; refusals; image and text tasks."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import torch

from engine.config import RunConfig
from engine.data import import_source
from engine.errors import EvaluationError, RunActiveError
from engine.eval.job import evaluate_checkpoint, run_job, validated_at
from engine.eval.prefetch import baselines_path, read_baselines
from engine.runner.launcher import cancel, evaluate, submit, worker_env
from engine.runner.prefetch import start_prefetch
from engine.runner.worker import _evaluate_final, execute_run
from engine.store import create_run, get_run, read_status, run_alive
from engine.store.checkpoints import load_weights
from engine.store.evaluations import ENCODERS, load_maps, read_evaluations, read_job
from engine.tasks import build_task, resolve

EVAL = {"max_rows": 400, "tsne_max_rows": 200, "finetune_epochs": 1, "budget": None}  # the whole recipe
IMAGE = {"name": "img", "data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
         "train": {"steps": 30, "batch_size": 64, "eval_interval": 15, "checkpoint_interval": 15, "warmup_steps": 2,
                   "seed": 3, "device": "cpu", "num_threads": 1}, "evaluation": EVAL}


def _run(cfg: dict) -> tuple[str, object]:
    run_id, d = create_run(resolve(RunConfig.from_dict(cfg)).to_dict())
    assert execute_run(d) == "completed"
    return run_id, d


def _check(ev, n_val: int):
    assert set(ev.representation) == {*ENCODERS, "chance"}
    for enc in ENCODERS:
        figs = ev.representation[enc]
        assert set(figs) == {"probe_acc", "knn_acc", "kmeans_nmi", "kmeans_ari"}
        assert all(0 <= figs[k] <= 1 for k in ("probe_acc", "knn_acc", "kmeans_nmi"))
    assert ev.rows["val"] == n_val and ev.seconds > 0
    # downstream fine-tune from the checkpoint and from the random init, the same recipe (1 epoch here)
    assert set(ev.downstream) == {"trained", "random_init"} and ev.notes == []
    for figs in ev.downstream.values():
        assert 0 <= figs["finetune_acc"] <= 1 and figs["finetune_epochs"] == pytest.approx(1, abs=0.2)
    # the FLOPs of a training step: forward and backward of one batch
    assert ev.cost["flops_per_step"] > ev.cost["forward_flops_per_step"] > 0


@pytest.mark.slow
def test_completed_image_run_is_evaluated_at_its_end_and_on_demand(workspace, one_thread, monkeypatch):
    monkeypatch.setenv("MASKLAB_AUTO_EVAL", "1")
    run_id, d = _run(IMAGE)
    assert get_run(run_id).status == "completed"
    evs, warnings = read_evaluations(run_id)
    assert warnings == [] and [e.step for e in evs] == [30]
    ev = evs[0]
    _check(ev, 179)  # digits: 1797 images, 10% val
    # pixels of 8x8 digits probe at about 90% from 400 train rows (88.8% with the raw input's seed, 0);
    # an untrained or barely trained ViT far above chance
    assert ev.representation["raw_input"]["probe_acc"] > 0.85
    assert ev.representation["random_init"]["probe_acc"] > 0.5 > ev.representation["chance"]["probe_acc"]
    assert set(ev.reconstruction) >= {"val_loss", "val_mse", "val_psnr"}
    assert ev.reconstruction["val_loss"] == pytest.approx(get_run(run_id).latest["val_loss"], rel=1e-5)
    assert set(ev.quality) == {"trained", "mean_image", "visible_mean", "biharmonic", "knn"}  # SSIM beside baselines
    maps = load_maps(run_id, 30)
    assert maps["pca"].shape == maps["tsne"].shape == (179, 2) and maps["labels"].shape == (179,)
    assert read_job(run_id)["status"] == "completed"
    # on demand, the earlier checkpoint, in the foreground job; the same init gives the same random_init figures

    assert run_job(d, 15) == 0
    evs, _ = read_evaluations(run_id)
    assert [e.step for e in evs] == [15, 30]
    assert evs[0].representation["random_init"] == evs[1].representation["random_init"]
    assert evs[0].representation["raw_input"] == evs[1].representation["raw_input"]
    with pytest.raises(EvaluationError, match=r"no complete checkpoint at step 7 to evaluate \(kept: 15, 30\)"):
        evaluate(run_id, 7)


def test_refusals_and_a_changed_dataset(workspace, one_thread, tmp_path):
    run_id, d = _run({**IMAGE, "train": {**IMAGE["train"], "steps": 10, "checkpoint_interval": 100}})
    assert read_evaluations(run_id) == ([], []) and read_job(run_id) is None  # MASKLAB_AUTO_EVAL=0
    queued_id, _ = create_run(resolve(RunConfig.from_dict(IMAGE)).to_dict())  # status queued, just created
    with pytest.raises(RunActiveError, match=rf"run {queued_id} is queued; its final checkpoint is evaluated"):
        evaluate(queued_id)
    # the dataset the run trained on is replaced by other content: the checkpoint is not evaluated on it

    (d / "task.json").write_text('{"dataset_hash": "0123456789abcdef"}', encoding="utf-8")
    with pytest.raises(EvaluationError, match=r"its dataset 'digits' changed since the run trained \(content hash 0123456789ab"):
        evaluate_checkpoint(d)


def test_the_prefetch_computes_the_baselines_figures_that_the_evaluation_reads(shared_runs, tmp_path, one_thread):
    """The worker's prefetch process (engine.eval.prefetch) computes the raw input's and the random
    init's figures while the run trains; the evaluation reads them (and the training's validation at
    the checkpoint's step) instead of computing them again, and gets the same figures either way."""
    ws, ids = shared_runs.copy("image_mae", dest=tmp_path / "ws")
    d = get_run(ids["image_mae"], ws).path
    shutil.rmtree(ws / "cache", ignore_errors=True)  # what the run's own prefetch and evaluation left
    proc = start_prefetch(d, worker_env(ws))
    assert proc.wait(timeout=300) == 0
    stored = json.loads(baselines_path(d).read_text())
    n = stored["max_rows"]
    assert set(stored["figures"]) == {"random_init", "raw_input"} and n == 300
    prefetched, _ = evaluate_checkpoint(d, 20, workspace=ws, budget=0)
    for enc, figs in stored["figures"].items():
        assert prefetched.representation[enc] == figs
    # stamped with what they were computed from: another row count or dataset is not read
    assert read_baselines(d, stored["dataset_hash"], n) == stored["figures"]
    assert read_baselines(d, stored["dataset_hash"], n - 1) == {} == read_baselines(d, "other", n)
    # without the prefetch's file and cache, the evaluation computes the same figures itself
    shutil.rmtree(ws / "cache")
    computed, _ = evaluate_checkpoint(d, 20, workspace=ws, budget=0)
    assert computed.representation == prefetched.representation
    # the reconstruction figures are the training's validation at step 20: the checkpoint's own
    cfg = RunConfig.from_dict(json.loads((d / "config.json").read_text()))
    task = build_task(cfg, "cpu", ws)
    task.model.load_state_dict(load_weights(d / "checkpoints" / "step-0000020"))
    task.model.eval()
    with torch.no_grad():
        again = task.evaluate()
    assert computed.reconstruction == validated_at(d, 20, cfg) == pytest.approx(again, rel=1e-6)
    assert validated_at(d, 19, cfg) == {}  # no validation logged at step 19
    # a prefetch that cannot run (no such run) fails alone, saying so: the evaluation computes them itself
    proc = start_prefetch(ws / "runs" / "nope", worker_env(ws))
    assert proc.wait(timeout=300) == 1


@pytest.mark.slow
def test_background_job_takes_a_slot_and_writes_with_the_run(workspace, one_thread):
    run_id, _ = _run(IMAGE)
    step = evaluate(run_id)
    assert step == 30 and read_job(run_id)["status"] in ("queued", "running")
    with pytest.raises(RunActiveError, match="already queued or running"):
        evaluate(run_id)
    end = time.time() + 300
    while read_job(run_id)["status"] in ("queued", "running") and time.time() < end:
        time.sleep(0.5)
    assert read_job(run_id)["status"] == "completed", read_job(run_id)
    _check(read_evaluations(run_id)[0][0], 179)


@pytest.mark.slow
def test_text_run_is_evaluated_with_tfidf_as_raw_input(workspace, one_thread, shared_data, monkeypatch):
    lines = (shared_data / "trec" / "train.tsv").read_text(encoding="utf-8").splitlines()[:601]
    path = workspace.parent / "trec-slice.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    import_source(path, "trec-slice")
    monkeypatch.setenv("MASKLAB_AUTO_EVAL", "1")
    run_id, _ = _run({"name": "txt", "task": "text_mlm",
                      "data": {"dataset": "trec-slice", "tokenizer": {"vocab_size": 400, "max_len": 32}},
                      "masking": {"ratio": 0.15}, "model": {"preset": "tiny"}, "evaluation": EVAL,
                      "train": {"steps": 20, "batch_size": 16, "eval_interval": 10, "checkpoint_interval": 10,
                                "warmup_steps": 2, "seed": 5, "device": "cpu", "num_threads": 1}})
    ev = read_evaluations(run_id)[0][0]
    _check(ev, ev.rows["val"])
    assert ev.rows["val"] > 30 and "val_top1" in ev.reconstruction
    assert ev.quality == {}  # text: masked-token top-1 is its reconstruction figure
    assert ev.representation["raw_input"]["probe_acc"] > ev.representation["chance"]["probe_acc"]


@pytest.mark.slow
def test_cancel_during_the_final_evaluation_stops_it_and_the_run_stays_completed(workspace, monkeypatch):
    """A background run whose training ended is evaluating its final checkpoint: Cancel stops the
    evaluation (the worker exits; the phases it finished are kept, marked cancelled), the job says
    why, and the run keeps its outcome, ``completed`` at its last step."""
    monkeypatch.setenv("MASKLAB_AUTO_EVAL", "1")  # the worker process inherits it
    cfg = {**IMAGE, "evaluation": {**EVAL, "max_rows": 2000, "finetune_epochs": 100}}  # a longer evaluation
    run_id = submit(resolve(RunConfig.from_dict(cfg)))
    d = get_run(run_id).path
    deadline = time.time() + 300
    while read_status(d).get("phase") != "evaluating":
        assert time.time() < deadline and get_run(run_id).status in ("queued", "running"), get_run(run_id).status
        time.sleep(0.05)
    assert cancel(run_id) is True
    deadline = time.time() + 300
    while run_alive(d) or get_run(run_id).status == "running":
        assert time.time() < deadline, "the worker did not stop"
        time.sleep(0.2)
    rec = get_run(run_id)
    assert rec.status == "completed" and rec.step == 30
    job = read_job(run_id)
    assert job["status"] == "cancelled" and job["step"] == 30 and "cancelled" in job["error"]
    # what it finished before the cancel is kept, marked cancelled; nothing reads as a complete evaluation
    evs, warnings = read_evaluations(run_id)
    assert warnings == [] and all(e.status == "cancelled" and "finetune" not in e.phases for e in evs)


def test_a_cancel_before_the_final_evaluation_starts_is_recorded_too(workspace):
    """The cancel can land between the status's ``evaluating`` phase and the job's start: the job is
    then recorded cancelled with the same reason, not left absent (a run that said "evaluating" and then
    nothing)."""
    run_id, d = create_run(resolve(RunConfig.from_dict(IMAGE)).to_dict())
    _evaluate_final(d, "cpu", workspace, 30, should_stop=lambda: True)
    job = read_job(run_id)
    assert job["status"] == "cancelled" and job["step"] == 30
    assert job["error"] == ("cancelled during the final evaluation; start one again from Compare or with "
                            f"python -m engine evaluate {run_id}")
    assert read_evaluations(run_id) == ([], [])
