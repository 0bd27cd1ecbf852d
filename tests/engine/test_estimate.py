"""How long a run should take before launch (engine/runner/estimate.py): from a completed run of the
same shape (the session's shared digits MAE run), or from a real short timing of a tiny config."""

from __future__ import annotations

import pytest

from engine.api import ConfigError, RunConfig, get_run, read_evaluations, read_metrics
from engine.runner.estimate import EstimateError, RunEstimate, Timing, estimate_run, eval_cost, human_s, validations

#: A tiny digits MAE config: cheap to time (tiny model, 8x8 images, one thread, no evaluation).
TINY = {"task": "image_mim", "data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
        "evaluation": {"auto": False},
        "train": {"steps": 50, "batch_size": 16, "eval_interval": 20, "warmup_steps": 2, "device": "cpu",
                  "num_threads": 1}}


def _budget() -> float:
    return RunConfig().evaluation.budget  # the default, 0.5


def _measured(run_id: str, ws):
    """The run's figures straight from its store: training seconds, step times of steps 1..N, the
    end of step 1 (unix s)."""
    rec = get_run(run_id, workspace=ws)
    df = read_metrics([run_id], ["step_time"], max_points=None, workspace=ws, cache=False)
    df = df[df["step"] >= 1].sort_values("step")
    return rec, rec.ended_at - rec.started_at, df["value"].tolist(), float(df["wall_time"].iloc[0])


def test_estimate_of_a_run_own_config_is_its_measured_training_time(shared_runs):
    run = shared_runs.get("image_mae")
    rec, train_s, times, _ = _measured(run.run_id, run.workspace)
    est = estimate_run(rec.config, run.workspace, allow_timing=False)
    assert isinstance(est, RunEstimate)
    assert est.train_s == pytest.approx(train_s, abs=1e-5)  # unix seconds: float64 keeps about 0.2 µs
    steps = rec.config["train"]["steps"]
    assert est.timing.source == run.run_id and est.timing.steps == steps and len(times) == steps
    assert f"from run {run.run_id}: {steps:,} steps at {est.timing.step_s:.3g} s/step" in est.text()


def test_more_steps_scale_by_the_measured_step_time(shared_runs):
    """Twice the steps at the same eval interval: the run's time + N more steps (mean ``step_time``
    plus the mean wall time between two steps that do not validate) + as many more validations
    (what the gaps after validating steps and after the last step took beyond that, per validation)."""
    run = shared_runs.get("image_mae")
    rec, train_s, times, _ = _measured(run.run_id, run.workspace)
    t = rec.config["train"]
    n, every = t["steps"], t["eval_interval"]
    assert n % every == 0  # the fixture: 20 steps, a validation every 10 (steps 10 and 20)
    df = read_metrics([run.run_id], ["step_time"], max_points=None, workspace=run.workspace, cache=False)
    ends = df[df["step"] >= 1].sort_values("step")["wall_time"].tolist()
    gaps = {k: ends[k] - times[k] - ends[k - 1] for k in range(1, n)}  # after step k (1-based)
    plain = [g for k, g in gaps.items() if k % every]
    o = sum(plain) / len(plain)
    step_s = sum(times[1:]) / (n - 1) + o
    val_s = (sum(g - o for k, g in gaps.items() if k % every == 0) + rec.ended_at - ends[-1]) / (n // every)
    longer = {**rec.config, "train": {**t, "steps": 2 * n}}
    est = estimate_run(longer, run.workspace, allow_timing=False)
    assert est.train_s == pytest.approx(train_s + n * step_s + (n // every) * val_s, abs=1e-5)
    # other step-independent fields (lr, seed) leave the shape as it is
    reseeded = {**rec.config, "train": {**t, "seed": 7, "lr": 1e-4}}
    assert estimate_run(reseeded, run.workspace, allow_timing=False).train_s == pytest.approx(train_s)


def test_evaluation_estimate_from_the_run_own_evaluation(shared_runs):
    run = shared_runs.get("image_mae")
    rec, train_s, _, _ = _measured(run.run_id, run.workspace)
    ev = read_evaluations(run.run_id, workspace=run.workspace)[0][-1]
    cheap = ev.seconds - sum(f["finetune_seconds"] for f in ev.downstream.values())
    half = {**rec.config, "evaluation": {**rec.config["evaluation"], "budget": 0.5}}  # the shared runs' is None
    est = estimate_run(half, run.workspace, allow_timing=False)
    budget = 0.5
    assert est.eval_s == pytest.approx(max(cheap, budget * train_s))
    assert est.eval_bound == (cheap < budget * train_s)
    assert run.run_id in est.eval_basis
    # a budget the fine-tune's whole recipe fits (the shared run fine-tuned by its full recipe): what
    # that evaluation took, not the bound
    tune = sum(f["finetune_seconds"] for f in ev.downstream.values())
    assert ev.budget["finetune_steps"] == ev.budget["recipe_steps"] > 0 and cheap + tune < 50 * train_s
    roomy = estimate_run({**half, "evaluation": {**half["evaluation"], "budget": 50}}, run.workspace, allow_timing=False)
    assert roomy.eval_s == pytest.approx(ev.seconds) and not roomy.eval_bound
    assert f"full recipe as in run {run.run_id}" in roomy.eval_basis
    # another model's fine-tune costs what it costs: only the cheap phases are learnt from the run
    other = eval_cost(RunConfig.from_dict({**half, "model": {**half["model"], "preset": "small"}}), run.workspace)
    assert other.source == run.run_id and other.cheap_s == pytest.approx(cheap) and other.finetune_s is None
    off = {**rec.config, "evaluation": {**rec.config["evaluation"], "auto": False}}
    no_eval = estimate_run(off, run.workspace, allow_timing=False)
    assert no_eval.eval_s is None and "evaluation" not in no_eval.text()
    assert estimate_run(rec.config, run.workspace, allow_timing=False).eval_s is None  # no limit: not estimated


def test_another_shape_is_not_learnt_from(shared_runs):
    run = shared_runs.get("image_mae")
    cfg = get_run(run.run_id, workspace=run.workspace).config
    for changed in ({**cfg, "train": {**cfg["train"], "batch_size": 8}},
                    {**cfg, "masking": {**cfg["masking"], "ratio": 0.5}},
                    {**cfg, "train": {**cfg["train"], "num_threads": 2}}):
        assert estimate_run(changed, run.workspace, allow_timing=False) is None


def test_short_timing_when_no_run_exists(workspace):
    """A real timing: a child process trains 1 + 5 steps of the tiny config."""
    est = estimate_run(TINY, workspace)
    tm = est.timing
    assert tm.source == "" and tm.steps == 6
    assert tm.step_s > 0 and tm.startup_s >= 0 and tm.val_s > 0
    assert est.train_s == pytest.approx(tm.startup_s + 50 * tm.step_s + validations(50, 20) * tm.val_s)
    assert est.eval_s is None and "from a 5-step timing just now" in est.text()
    # a 2-step run is timed on as many steps; no evaluation to learn from: the budget is the bound
    short = {**TINY, "evaluation": {"auto": True}, "train": {**TINY["train"], "steps": 2}}
    with_eval = estimate_run(short, workspace)
    tm = with_eval.timing
    assert tm.steps == 6 and with_eval.train_s == pytest.approx(tm.startup_s + 2 * tm.step_s + tm.val_s)
    assert with_eval.eval_bound and with_eval.eval_s == pytest.approx(_budget() * with_eval.train_s)
    assert "at most" in with_eval.text()
    assert estimate_run(TINY, workspace, allow_timing=False) is None


def test_failed_timing_says_why(workspace):
    with pytest.raises(EstimateError, match="short timing of image_mim failed: .*nope"):
        estimate_run({**TINY, "data": {"dataset": "nope"}}, workspace)


def test_unknown_task_is_named(workspace):
    with pytest.raises(ConfigError, match="task: unknown task 'nope'; known tasks: .*image_mim"):
        estimate_run({**TINY, "task": "nope"}, workspace)


def test_pieces():
    assert [validations(20, 10), validations(21, 10), validations(5, 10)] == [2, 3, 1]
    assert Timing(0.5, 2.0, 1.0).train_s(20, 10) == pytest.approx(2.0 + 10.0 + 2.0)
    assert [human_s(x) for x in (0.4, 42, 60, 130, 3600, 3900)] == [
        "under 1 s", "42 s", "1 min", "2 min 10 s", "1 h", "1 h 5 min"]
    est = RunEstimate(130.0, 65.0, "from run r", "half", True)
    assert est.text() == "Training ≈ 2 min 10 s, evaluation at most ≈ 1 min 5 s (from run r; evaluation: half)"
