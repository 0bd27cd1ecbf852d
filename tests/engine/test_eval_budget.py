"""The evaluation budget, its progress reports and its cancellation (issue 40): the fine-tune takes
what the cheap phases leave of ``evaluation.budget`` x the training time, the job file advances while
the evaluation runs (a heartbeat while a library call holds the main thread), a cancelled
evaluation keeps the phases it finished, and the figures of identical features are computed once."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from engine.config import RunConfig, parse_eval_budget
from engine.errors import ConfigError, EvaluationCancelled
from engine.eval import progress as progress_module
from engine.eval.budget import PLAN_SHARE, EvalBudget, step_seconds, training_seconds
from engine.eval.job import evaluate_and_save, evaluate_checkpoint
from engine.eval.prefetch import BASELINES_DIR
from engine.eval.progress import HEARTBEAT_S, EvalProgress
from engine.store import get_run
from engine.store.evaluations import (
    FIGURE_CACHE_DIR,
    PHASES,
    read_evaluations,
    read_job,
    write_job,
)
from engine.store.metrics import read_metrics_files
from engine.workspace import read_json


def test_the_finetune_takes_what_is_left_of_the_budget():
    b = EvalBudget(0.5, train_s=100.0)
    assert b.budget_s == 50.0
    # 0.85 x 50 s - 20 s spent - 2 encoders x 1000 rows x 1 ms = 20.5 s, for 2 encoders at 0.1 s a step
    assert PLAN_SHARE == 0.85
    assert b.plan_finetune(20.0, recipe_steps=300, step_s=0.1, row_s=0.001, rows_per_encoder=1000) == 102
    assert b.figures()["finetune_steps"] == 102 and b.figures()["cheap_s"] == 20.0
    assert b.plan_finetune(20.0, recipe_steps=60, step_s=0.1, row_s=0.001, rows_per_encoder=1000) == 60  # the recipe caps it
    assert b.plan_finetune(41.0, recipe_steps=300, step_s=0.1, row_s=0.001, rows_per_encoder=1000) == 0  # spent
    assert EvalBudget(0.0, 100.0).plan_finetune(0.0, 300, 0.1, 0.0, 0) == 0  # a budget of 0: no fine-tune
    assert EvalBudget(None, 100.0).plan_finetune(1e6, 300, 0.1, 0.0, 0) == 300  # no limit: the recipe
    assert EvalBudget(0.5, None).plan_finetune(1e6, 300, 0.1, 0.0, 0) == 300  # unknown training time
    # planned after the first encoder's head (0.5 s) and first step: the second encoder's head is paid
    # for too, and the step taken counts: (42.5 - 20 - 2 - 0.5 + 0.1) / 0.2 = 100.5
    assert b.plan_finetune(20.0, 300, 0.1, 0.001, 1000, head_s=0.5, steps_done=1) == 100
    assert b.plan_finetune(45.0, 300, 0.1, 0.001, 1000, head_s=0.5, steps_done=1) == 1  # never below what was done


def test_a_finetune_starts_only_when_its_rows_fit_the_budget():
    b = EvalBudget(0.5, train_s=20.0)  # 10 s
    assert b.room_for_finetune(6.0, 0.001, 2000)  # 6 s + 2 encoders x 2000 rows x 1 ms = 10 s
    assert not b.room_for_finetune(6.1, 0.001, 2000)
    assert b.figures()["finetune_steps"] == 0 and b.figures()["cheap_s"] == 6.1  # recorded as no fine-tune
    assert EvalBudget(None, 20.0).room_for_finetune(1e6, 1.0, 2000)  # no limit
    assert not EvalBudget(0.0, 20.0).room_for_finetune(0.0, 0.0, 0)  # a budget of 0


def test_a_budget_asked_for_is_a_share_full_or_the_runs():
    assert parse_eval_budget("2") == 2.0 and parse_eval_budget(0) == 0.0
    assert parse_eval_budget("full") is None and parse_eval_budget("run") == "run"
    for bad in ("-1", "101", "lots", float("nan")):
        with pytest.raises(ConfigError, match="evaluation budget .* between 0 and 100"):
            parse_eval_budget(bad)
    with pytest.raises(ConfigError, match="evaluation.budget"):
        RunConfig.from_dict({"evaluation": {"budget": -0.5}})


def test_training_time_is_the_runs_training_wall_time_else_its_step_times(shared_runs, tmp_path):
    ws, ids = shared_runs.copy("image_mae", dest=tmp_path / "ws")
    rec = get_run(ids["image_mae"], ws)
    d = rec.path
    assert training_seconds(d, 20) == pytest.approx(rec.duration_s)  # start to the end of training
    assert training_seconds(d, 10) == pytest.approx(rec.duration_s / 2)  # a checkpoint half way
    steps = read_metrics_files([d], ["step_time"], max_points=None)
    assert len(steps) == 20 and steps["value"].sum() < rec.duration_s  # one per optimiser step
    status = read_json(d / "status.json")
    (d / "status.json").write_text(json.dumps({k: v for k, v in status.items() if k != "started_at"}))
    assert training_seconds(d, 20) == pytest.approx(steps["value"].sum()) == step_seconds(d, 20)
    assert training_seconds(d, 10) == pytest.approx(steps[steps["step"] <= 10]["value"].sum())


def test_progress_advances_through_every_phase_and_the_result_is_stored(shared_runs, tmp_path, monkeypatch):
    ws, ids = shared_runs.copy("image_mae", dest=tmp_path / "ws")
    d = get_run(ids["image_mae"], ws).path
    written = []  # every write of the job file, as written (the real file is written too)

    def recording(run_dir, **state):
        write_job(run_dir, **state)
        written.append(read_json(run_dir / "evaluation" / "job.json"))

    monkeypatch.setattr(progress_module, "write_job", recording)
    ev = evaluate_and_save(d, 20, workspace=ws, budget=None)
    # every phase was reported, in order, with its counts ...
    phases = [s["phase"] for s in written]
    assert [p for i, p in enumerate(phases) if p != phases[i - 1] or not i] == list(PHASES)
    steps = int(ev.downstream["trained"]["finetune_steps"])
    assert [s["done"] for s in written if s["phase"] == "finetune" and s["total"] == 2 * steps][-1] == 2 * steps
    # ... and the file advanced (phase or count) at least every 30 s
    stamps = [s["updated_at"] for i, s in enumerate(written)
              if not i or (s["phase"], s["done"]) != (written[i - 1]["phase"], written[i - 1]["done"])]
    assert max(b - a for a, b in zip(stamps, stamps[1:])) <= 30
    assert read_job(ids["image_mae"], ws)["status"] == "completed"
    assert ev.complete and list(ev.phases) == list(PHASES) and ev.budget["share"] is None
    assert read_evaluations(ids["image_mae"], ws)[0][-1].phases == ev.phases


def test_the_job_file_is_rewritten_while_a_long_call_holds_the_evaluation(tmp_path):
    """A library call (a probe's cross-validation, t-SNE) cannot tick: the heartbeat thread rewrites
    the job file every HEARTBEAT_S seconds all the same."""
    d = tmp_path / "run"
    (d / "evaluation").mkdir(parents=True)
    with EvalProgress(d, 5) as progress:
        progress.enter("probe", total=3)
        first = read_json(d / "evaluation" / "job.json")["updated_at"]
        time.sleep(2.5 * HEARTBEAT_S)  # the main thread is busy
        later = read_json(d / "evaluation" / "job.json")
    assert later["phase"] == "probe" and later["updated_at"] >= first + HEARTBEAT_S
    assert later["phase_elapsed_s"] >= HEARTBEAT_S


def test_a_cancelled_evaluation_keeps_the_phases_it_finished(shared_runs, tmp_path):
    ws, ids = shared_runs.copy("image_mae", dest=tmp_path / "ws")
    run_id = ids["image_mae"]
    d = get_run(run_id, ws).path
    before = read_evaluations(run_id, ws)[0][-1]  # the complete evaluation the run got at its end

    def after_knn() -> bool:  # the user's click, once the page showed kNN done
        try:
            job = read_json(d / "evaluation" / "job.json")  # (the run's own evaluation left one, completed)
            return job["status"] == "running" and "knn" in job["phases_done"]
        except (OSError, ValueError):
            return False

    with pytest.raises(EvaluationCancelled):
        evaluate_and_save(d, 20, workspace=ws, budget=None, should_stop=after_knn)
    job = read_job(run_id, ws)
    assert job["status"] == "cancelled" and set(job["phases_done"]) == {"setup", "features", "reconstruction",
                                                                       "probe", "knn"}
    # the complete evaluation of step 20 is not overwritten by an unfinished one ...
    assert read_evaluations(run_id, ws)[0][-1] == before
    # ... which is kept beside it, and read when the step has no complete one
    (d / "evaluation" / "step-0000020.json").unlink()
    ev = read_evaluations(run_id, ws)[0][-1]
    assert ev.status == "cancelled" and set(ev.phases) == {"setup", "features", "reconstruction", "probe", "knn"}
    for enc in ("trained", "random_init", "raw_input"):
        assert set(ev.representation[enc]) == {"probe_acc", "knn_acc"}  # no k-means yet
        assert ev.representation[enc] == {k: before.representation[enc][k] for k in ("probe_acc", "knn_acc")}
    assert ev.downstream == {} and "cancelled during k-means" in ev.notes[-1]


def test_identical_features_are_scored_once_per_workspace(shared_runs, tmp_path):
    """The raw input's features are the same for every run on a dataset: figures come from the
    workspace's cache the second time (a changed cached value shows it was read, not recomputed), and
    a damaged entry is computed again."""
    ws, ids = shared_runs.copy("image_mae", dest=tmp_path / "ws")
    d = get_run(ids["image_mae"], ws).path
    cache = ws / FIGURE_CACHE_DIR
    shutil.rmtree(ws / BASELINES_DIR, ignore_errors=True)  # the run's prefetched baselines: the cache alone here
    first, _ = evaluate_checkpoint(d, 20, workspace=ws, budget=0)
    entries = sorted(cache.glob("*.json"))
    assert len(entries) == 9  # probe, kNN, k-means of three encoders
    for p in entries:
        if "probe_acc" in read_json(p):
            p.write_text('{"probe_acc": 0.123}', encoding="utf-8")
    again, _ = evaluate_checkpoint(d, 20, workspace=ws, budget=0)
    for enc in ("trained", "random_init", "raw_input"):
        assert again.representation[enc] == {**first.representation[enc], "probe_acc": 0.123}
    assert again.downstream == {} and first.downstream == {}  # a budget of 0: no fine-tune
    for p in cache.glob("*.json"):
        p.write_text("{not json", encoding="utf-8")
    third, _ = evaluate_checkpoint(d, 20, workspace=ws, budget=0)
    assert third.representation["raw_input"] == first.representation["raw_input"]
