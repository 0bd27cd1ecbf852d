"""How long a run should take on this machine, before it is launched: training, then its automatic
evaluation.

**Training** is ``startup_s + steps x step_s + validations x val_s``, three figures taken from a
completed run of the same shape (:func:`run_shape`: task, data, model, masking, objective, batch,
threads, device) in the store, the latest one:

- ``step_s``: one optimiser step (its ``step_time`` metric) and the wall time between two steps
  that do not validate (logging, checkpoints);
- ``startup_s``: from ``started_at`` (the worker holds its slot, torch is loaded) to the end of
  step 1, less one ``step_s`` (building the task, step 0's baselines and validation, the first
  step's warm-up);
- ``val_s``: what a validation (samples, flushes, a checkpoint) adds, per validation after step 0
  (every ``eval_interval`` steps and at the end); details in :func:`run_timing`.

So the estimate of that run's own config is its measured training time (``ended_at - started_at``),
and another number of steps or another ``eval_interval`` scales from it. With no such run, the
same three figures come from a short timing (:func:`time_steps`): the task is built and a few real
steps are trained by :func:`engine.training.loop.fit` after one warm-up step, in a child process
(``python -m engine.runner.estimate``), so the caller's threads, RNG and memory stay as they were.

**Evaluation** (``evaluation.auto``): its cheap phases (features, probe, kNN, clustering, maps)
always run, and fine-tuning takes what is left of ``evaluation.budget`` (a share of the training's
compute, default 0.5): ``max(cheap_s, budget x train_s)``, a bound, or ``cheap_s + finetune_s`` when
the fine-tune's whole recipe fits that share. Both come from the latest evaluation of a run of the same
task and dataset (:func:`eval_cost`): ``cheap_s`` its ``seconds`` less its fine-tunes'
``finetune_seconds``; ``finetune_s`` its fine-tunes' seconds and the steps the budget left them at its
measured step time, when that run has the same model and fine-tune recipe.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.config import RunConfig
from engine.errors import MasklabError
from engine.runner.execution import configure_torch
from engine.runner.resources import resolve_threads
from engine.store import list_runs, read_metrics
from engine.store.evaluations import read_evaluations
from engine.tasks import resolve
from engine.training.loop import fit, resolve_device, setup, validate
from engine.training.writers import memory_writers
from engine.workspace import workspace_root

#: Steps :func:`time_steps` times after its warm-up step.
TIMED_STEPS = 5
#: Seconds the short timing's child process may take before it is given up.
TIMING_TIMEOUT_S = 180.0


class EstimateError(MasklabError):
    """No estimate could be made (the short timing failed or took too long); the message says why."""


@dataclass(frozen=True)
class Timing:
    """Three figures that make a training time (module docstring), and where they come from.

    Attributes:
        step_s: seconds per optimiser step. startup_s: seconds before the steps (s).
        val_s: seconds per validation after step 0. source: the run id, or "" for a short timing.
        steps: steps the figures were measured on.
    """
    step_s: float
    startup_s: float
    val_s: float
    source: str = ""
    steps: int = 0

    def train_s(self, steps: int, eval_interval: int) -> float:
        """Seconds to train ``steps`` steps validating every ``eval_interval`` steps and at the end."""
        return self.startup_s + steps * self.step_s + validations(steps, eval_interval) * self.val_s


@dataclass(frozen=True)
class RunEstimate:
    """How long a config should take here.

    Attributes:
        train_s: training (s). eval_s: the automatic evaluation (s), None when ``evaluation.auto`` is off.
        eval_bound: True when ``eval_s`` is an upper bound (fine-tuning may stop before its share).
        basis: where the training figure comes from, in words. eval_basis: the same for the evaluation.
        timing: the figures behind ``train_s``.
    """
    train_s: float
    eval_s: float | None
    basis: str
    eval_basis: str = ""
    eval_bound: bool = False
    timing: Timing | None = None

    def text(self) -> str:
        """``Training ≈ 2 min 10 s, evaluation at most ≈ 1 min 5 s (from run X: 300 steps at 0.42 s/step; evaluation: ...)``."""
        out = f"Training ≈ {human_s(self.train_s)}"
        if self.eval_s is not None:
            out += f", evaluation {'at most ' if self.eval_bound else ''}≈ {human_s(self.eval_s)}"
        why = self.basis + (f"; evaluation: {self.eval_basis}" if self.eval_s is not None and self.eval_basis else "")
        return f"{out} ({why})"


def human_s(seconds: float) -> str:
    """``0.4`` -> "under 1 s", ``42`` -> "42 s", ``130`` -> "2 min 10 s", ``3900`` -> "1 h 5 min"."""
    s = int(round(seconds))
    if s < 1:
        return "under 1 s"
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {(s % 3600) // 60} min" if (s % 3600) // 60 else "")


def validations(steps: int, eval_interval: int) -> int:
    """Validations after step 0 in a run of ``steps`` steps: every ``eval_interval`` steps and at the end."""
    return steps // eval_interval + (1 if steps % eval_interval else 0)


def run_shape(cfg: dict[str, Any], threads: int, device: str) -> str:
    """What sets the cost of one step of resolved config ``cfg`` (a dict), as a comparable string:
    its task, data, model, masking strategy and ratio, objective, task parameters, batch size, amp
    and compile, processes, and the torch ``threads`` and device type (``cpu``, ``cuda``) it trains with."""
    t, m, lc = cfg.get("train", {}), cfg.get("masking", {}), cfg.get("launch") or {}
    return json.dumps({
        "task": cfg.get("task"), "data": cfg.get("data"), "model": cfg.get("model"), "objective": cfg.get("objective"),
        "task_params": cfg.get("task_params"), "masking": [m.get("strategy"), m.get("ratio"), m.get("params")],
        "train": [t.get("batch_size"), t.get("amp"), t.get("compile")],
        "launch": [lc.get("nproc_per_node", 1), lc.get("nnodes", 1)], "threads": threads, "device": device.split(":")[0],
    }, sort_keys=True, default=str)


def _device(cfg: RunConfig) -> str:
    return resolve_device(cfg.train.device).type


def run_timing(run, workspace=None) -> Timing | None:
    """The :class:`Timing` measured by completed run record ``run`` (``RunRecord``), or None when it
    cannot say (not completed, resumed, fewer than 2 steps, ``step_time`` rows missing).

    With ``gap(k)`` the wall time between the end of step k and the start of step k + 1 (its row's
    ``wall_time`` less its ``step_time``): ``step_s`` is the mean ``step_time`` of steps 2..N plus
    the mean gap after a step that does not validate (logging, a checkpoint), ``val_s`` what the
    gaps after validating steps and the end (``ended_at`` less step N's end) took beyond that,
    per validation, and ``startup_s`` the end of step 1 less ``started_at`` and one ``step_s``. So the
    run's own config gives back its measured training time."""
    t = run.config.get("train", {})
    steps, every = int(t.get("steps", 0)), int(t.get("eval_interval", 1) or 1)
    if run.status != "completed" or run.started_at is None or run.ended_at is None or steps < 2 or run.extra.get("prior_s"):
        return None
    df = read_metrics([run.run_id], ["step_time"], max_points=None, workspace=workspace)
    df = df[df["step"] >= 1].sort_values("step")
    if df["step"].tolist() != list(range(1, steps + 1)):
        return None
    took, ended = df["value"].to_numpy(), df["wall_time"].to_numpy()  # steps 1..N
    gaps = ended[1:] - took[1:] - ended[:-1]  # after steps 1..N-1
    validating = (np.arange(1, steps) % every) == 0
    plain = float(gaps[~validating].mean()) if (~validating).any() else 0.0
    step_s = float(took[1:].mean()) + plain
    val_s = (float((gaps[validating] - plain).sum()) + run.ended_at - float(ended[-1])) / validations(steps, every)
    return Timing(step_s, float(ended[0]) - run.started_at - step_s, val_s, source=run.run_id, steps=steps)


def same_shape_timing(cfg: RunConfig, workspace=None) -> Timing | None:
    """The timing of the latest completed run with the shape of ``cfg`` (resolved) here, or None."""
    d = cfg.to_dict()
    want = run_shape(d, resolve_threads(d["train"], d.get("launch")), _device(cfg))
    runs = [r for r in list_runs(workspace) if r.status == "completed" and r.config.get("task") == cfg.task]
    for r in sorted(runs, key=lambda r: r.ended_at or 0.0, reverse=True):
        threads = r.extra.get("num_threads") or r.config.get("train", {}).get("num_threads") or 0
        if run_shape(r.config, int(threads), str(r.extra.get("device") or "cpu")) != want:
            continue
        timing = run_timing(r, workspace)
        if timing is not None:
            return timing
    return None


@dataclass(frozen=True)
class EvalCost:
    """What an earlier evaluation says of an evaluation's cost here (s).

    Attributes:
        cheap_s: its phases every evaluation runs (its ``seconds`` less its fine-tunes').
        source: the run id it comes from.
        finetune_s: the fine-tune's full recipe of both encoders: what it took when it ran the whole
            recipe, else what it took plus the steps it left at its measured step time; None when that
            run's model or fine-tune recipe differs from the config's, or it did not fine-tune.
    """
    cheap_s: float
    source: str
    finetune_s: float | None = None


def eval_cost(cfg: RunConfig, workspace=None) -> EvalCost | None:
    """The :class:`EvalCost` of the latest evaluation of a run of the same task and dataset; None when none."""
    d = cfg.to_dict()
    recipe = {k: d["evaluation"].get(k) for k in ("finetune_epochs", "max_rows")}
    runs = [r for r in list_runs(workspace) if r.config.get("task") == cfg.task
            and r.config.get("data", {}).get("dataset") == cfg.data.dataset]
    for r in sorted(runs, key=lambda r: r.ended_at or 0.0, reverse=True):
        evs, _ = read_evaluations(r.run_id, workspace)
        if not evs or evs[-1].seconds <= 0:
            continue
        ev, b = evs[-1], evs[-1].budget or {}
        tune = sum(float(f.get("finetune_seconds", 0.0)) for f in ev.downstream.values())
        cost = EvalCost(max(0.0, ev.seconds - tune), r.run_id)
        done, steps, step_s = int(b.get("finetune_steps") or 0), int(b.get("recipe_steps") or 0), float(b.get("step_s") or 0)
        same = (r.config.get("model") == d["model"]
                and {k: r.config.get("evaluation", {}).get(k) for k in recipe} == recipe)
        if same and len(ev.downstream) == 2 and 0 < done <= steps and (done == steps or step_s > 0):
            cost = EvalCost(cost.cheap_s, r.run_id, tune + 2 * (steps - done) * step_s)
        return cost
    return None


def time_steps(cfg: RunConfig, workspace=None, steps: int = TIMED_STEPS) -> Timing:
    """Time ``steps`` real training steps of resolved ``cfg`` after one warm-up step, in a child
    process (:func:`_time_here`), on the threads and device a run of it would get.

    Raises:
        EstimateError: the child failed (its last error line) or took more than :data:`TIMING_TIMEOUT_S`.
    """
    ws = str(workspace_root(workspace))
    cmd = [sys.executable, "-m", "engine.runner.estimate", ws, str(int(steps))]
    try:
        done = subprocess.run(cmd, input=json.dumps(cfg.to_dict()), capture_output=True, text=True,
                              timeout=TIMING_TIMEOUT_S, cwd=Path(__file__).resolve().parents[2])
    except subprocess.TimeoutExpired:
        raise EstimateError(f"the short timing of {cfg.task} took more than {TIMING_TIMEOUT_S:.0f} s; "
                            f"launch the run and read its step_time instead") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise EstimateError(f"the short timing of {cfg.task} failed: {why}")
    out = json.loads(lines[-1])
    return Timing(out["step_s"], out["startup_s"], out["val_s"], source="", steps=out["steps"])


def _time_here(cfg: RunConfig, workspace: str, steps: int) -> dict[str, float]:
    """The child of :func:`time_steps`: set up the run as the worker would (threads, device) with
    in-memory writers, let :func:`engine.training.loop.fit` train ``1 + steps`` steps (validation and
    checkpoints only at the end, after the timing) and time them from its ``should_stop`` polls (one
    at the start of each step)."""
    d = cfg.to_dict()
    configure_torch(resolve_threads(d["train"], d.get("launch")), cfg.train.deterministic)
    short = cfg.model_copy(deep=True)
    short.train.steps = max(short.train.steps, 2 + steps)  # a shorter run is timed on as many steps (+1: a last poll)
    short.train.eval_interval = short.train.checkpoint_interval = short.train.steps  # nothing inside the timing
    short.train.num_threads = 0  # set above, as the worker does
    polls: list[float] = []

    def should_stop() -> bool:
        polls.append(time.perf_counter())
        return len(polls) > 1 + steps

    t0 = time.perf_counter()
    state = setup(short, memory_writers(), workspace=workspace)
    fit(state, memory_writers(), should_stop=should_stop)
    gaps = [b - a for a, b in zip(polls, polls[1:])]  # gaps[0]: the warm-up step
    if not gaps:
        raise EstimateError("the short timing trained no step")
    step_s = sum(gaps[1:]) / len(gaps[1:]) if len(gaps) > 1 else gaps[0]
    # Before the first step: setup, baselines and step 0's validation; plus the warm-up step's extra.
    startup = polls[0] - t0 + gaps[0] - step_s
    return {"step_s": step_s, "startup_s": startup, "val_s": _val_s(state), "steps": len(gaps)}


def _val_s(state) -> float:
    """Seconds of one :func:`engine.training.loop.validate` of ``state`` (with in-memory writers)."""
    t0 = time.perf_counter()
    validate(state, memory_writers())
    return time.perf_counter() - t0


def estimate_run(config: dict[str, Any] | RunConfig, workspace=None, *,
                 allow_timing: bool = True) -> RunEstimate | None:
    """How long ``config`` (a partial run config dict, or a RunConfig) should train and evaluate here
    (module docstring). With no completed run of its shape: a short timing (a few seconds, in a child
    process) when ``allow_timing``, else None.

    Raises:
        ConfigError: the config is invalid (e.g. ``task: unknown task 'x'; known tasks: ...``).
        EstimateError: the short timing failed or took too long.
    """
    cfg = resolve(config if isinstance(config, RunConfig) else RunConfig.from_dict(dict(config)))
    # evaluation.budget: the share of the training's time the automatic evaluation may use (None: no limit)
    budget = cfg.evaluation.budget
    t = cfg.train
    timing = same_shape_timing(cfg, workspace)
    if timing is not None:
        basis = f"from run {timing.source}: {timing.steps:,} steps at {timing.step_s:.3g} s/step"
    elif not allow_timing:
        return None
    else:
        timing = time_steps(cfg, workspace)
        basis = f"from a {timing.steps - 1}-step timing just now: {timing.step_s:.3g} s/step"
    train_s = timing.train_s(t.steps, t.eval_interval)
    if not cfg.evaluation.auto or budget is None:  # no evaluation, or no limit: its full recipe, not estimated
        return RunEstimate(train_s, None, basis, timing=timing)
    share = budget * train_s
    cost = eval_cost(cfg, workspace)
    if cost is None:
        return RunEstimate(train_s, share, basis, f"its budget, {budget:g} x training", True, timing)
    if cost.finetune_s is not None and cost.cheap_s + cost.finetune_s <= share:  # the whole recipe fits its budget
        return RunEstimate(train_s, cost.cheap_s + cost.finetune_s, basis, f"its probes, maps and the fine-tune's "
                           f"full recipe as in run {cost.source}", False, timing)
    if cost.cheap_s >= share:
        return RunEstimate(train_s, cost.cheap_s, basis, f"its probes and maps as in run {cost.source}", False, timing)
    return RunEstimate(train_s, share, basis, f"its budget, {budget:g} x training (probes and maps "
                       f"{human_s(cost.cheap_s)} as in run {cost.source}, fine-tuning the rest)", True, timing)


def _main(argv: list[str]) -> int:
    """``python -m engine.runner.estimate WORKSPACE STEPS`` with a resolved config (JSON) on stdin:
    one JSON line ``{"step_s", "startup_s", "val_s", "steps"}`` on stdout (:func:`time_steps`' child)."""
    workspace, steps = argv[0], int(argv[1])
    cfg = RunConfig.from_dict(json.loads(sys.stdin.read()))
    try:
        out = _time_here(cfg, workspace, steps)
    except MasklabError as e:
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if not all(math.isfinite(v) for v in out.values()):
        print(f"non-finite timing {out}", file=sys.stderr)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(_main(sys.argv[1:]))
