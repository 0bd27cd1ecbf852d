"""The baselines' representation figures, computed while the run trains.

The raw input's figures (probe, kNN, clustering on :meth:`Task.raw_features`) are a property of the
dataset, and the random init's are fixed by the architecture and ``train.seed`` before the first step:
neither needs the trained checkpoint. The worker of a run that will be evaluated at its end starts
``python -m engine.eval.prefetch RUN_DIR`` beside its training (:mod:`engine.runner.prefetch`), at a
lower CPU priority (``nice`` +:data:`NICE`); it computes them into the workspace's figure cache
(:func:`engine.store.evaluations.cached_figures`, keyed by the features' content) and a file stamped
with what they were computed from. The final evaluation waits for it in its setup phase, then reads
that file (:func:`read_baselines`) instead of computing those features again
(``$MASKLAB_EVAL_PREFETCH=0``: no prefetch). Had it failed, or its features differ (another device),
the evaluation computes them itself: the figures are the same either way.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import torch

from engine.config import RunConfig
from engine.eval.figures import FIGURE_PHASES, RAW_INPUT_SEED, encoder_figures
from engine.eval.representation import labels_problem, prepare
from engine.pretrained.runs import random_init_, recorded_init
from engine.runner.resources import resolve_threads
from engine.store.evaluations import FIGURE_RECIPE
from engine.tasks import build_task
from engine.training.loop import resolve_device
from engine.workspace import atomic_write_json, read_json, workspace_root

#: The workspace's folder of the prefetched baselines' figures, one ``<run id>.json`` per run.
BASELINES_DIR = "cache/eval-baselines"
#: How much lower the prefetch's CPU priority is than its worker's (``os.nice``).
NICE = 10


def prefetch_baselines(run_dir: Path, workspace=None) -> list[str]:
    """Compute the run's raw-input figures, and its random init's when it trains on the CPU, into the
    workspace's figure cache, exactly as :func:`engine.eval.job.evaluate_checkpoint` will ask for them.

    Returns:
        The encoders whose figures are now cached (``raw_input``, ``random_init``); none when the rows
        have nothing to score them on (:func:`engine.eval.representation.labels_problem`: the
        evaluation skips these figures and says why).

    Raises:
        EvaluationError: the raw-input features cannot be computed on this data (the evaluation
            leaves that encoder out).
    """

    run_dir = Path(run_dir)
    raw = read_json(run_dir / "config.json")
    cfg = RunConfig.from_dict(raw)
    torch.set_num_threads(resolve_threads(raw.get("train", {}), raw.get("launch") or {}))  # the worker's count: the same sums
    n, seed = cfg.evaluation.max_rows, cfg.train.seed
    torch.manual_seed(seed)  # the run's initial weights, drawn as the run and its evaluation draw them
    with recorded_init(run_dir):  # once the run recorded its start (task.json), its source is not needed
        task = build_task(cfg, torch.device("cpu"), workspace)
    fresh = random_init_(task, cfg.train.seed) or not cfg.model.init_from or _recorded(run_dir)
    task.model.eval()
    feats = {}
    with torch.no_grad():
        # elsewhere the evaluation's features differ in their last bits; and a fork whose start is not
        # recorded yet was built with its parent's weights, not a random init: the evaluation draws it
        if resolve_device(cfg.train.device).type == "cpu" and fresh:
            random_init = (task.features("train", n), task.features("val", n))
            if labels_problem(random_init[0][1], random_init[1][1], getattr(task, "class_names", ())):
                return []  # nothing to score: the evaluation skips these figures and says why
            feats["random_init"] = (prepare(*random_init), seed)
        raw = task.raw_features(n)
        if labels_problem(raw[0][1], raw[1][1], getattr(task, "class_names", ())):
            return []
        feats["raw_input"] = (prepare(*raw), RAW_INPUT_SEED)
    cache_at = workspace if workspace is not None else run_dir.parent.parent
    figures: dict[str, dict[str, float]] = {enc: {} for enc in feats}
    for phase in FIGURE_PHASES:
        for enc, (X, s) in feats.items():
            figures[enc].update(encoder_figures(phase, X, s, cache_at))
    stamp = _stamp(run_dir, task.run_info().get("dataset_hash") or "", n)
    atomic_write_json(baselines_path(run_dir, cache_at), {**stamp, "figures": figures}, what="the baselines' figures")
    return list(feats)


def _recorded(run_dir: Path) -> bool:
    """Whether the run's task.json records its start (``init``): then :func:`recorded_init` built a fresh model."""
    try:
        return bool(read_json(run_dir / "task.json").get("init"))
    except (OSError, ValueError, AttributeError):
        return False


def baselines_path(run_dir: Path, workspace=None) -> Path:
    """Where the prefetch leaves the run's baselines' figures: the workspace's cache, by run id."""

    run_dir = Path(run_dir)
    return workspace_root(workspace if workspace is not None else run_dir.parent.parent) / BASELINES_DIR / f"{run_dir.name}.json"


def _stamp(run_dir: Path, dataset_hash: str, max_rows: int) -> dict:
    """What the baselines' figures were computed from: the figures' recipe, the run's config file
    (its bytes' SHA-256), the dataset's content and the rows read."""

    config_sha = hashlib.sha256((Path(run_dir) / "config.json").read_bytes()).hexdigest()
    return {"recipe": FIGURE_RECIPE, "config_sha": config_sha, "dataset_hash": dataset_hash, "max_rows": max_rows}


def read_baselines(run_dir: Path, dataset_hash: str, max_rows: int, workspace=None) -> dict[str, dict[str, float]]:
    """The baselines' figures the run's prefetch computed (encoder -> figure -> value), when they
    were computed from this config, dataset and row count with this recipe; else ``{}`` (the
    evaluation then computes them itself). Never raises."""

    try:
        found = read_json(baselines_path(run_dir, workspace))
        if {k: found.get(k) for k in ("recipe", "config_sha", "dataset_hash", "max_rows")} != _stamp(
                run_dir, dataset_hash, max_rows):
            return {}
        return {enc: {k: float(v) for k, v in figs.items()} for enc, figs in found["figures"].items()}
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return {}


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.eval.prefetch RUN_DIR``: 0 done, 1 failed (the reason on stderr), 2 usage."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m engine.eval.prefetch RUN_DIR", file=sys.stderr)
        return 2
    try:
        os.nice(NICE)
    except OSError:
        pass
    try:
        run_dir = Path(args[0]).resolve()
        prefetch_baselines(run_dir, run_dir.parent.parent)
    except Exception as e:  # noqa: BLE001 - the evaluation computes what is missing itself
        print(f"masklab: the baselines' prefetch of {Path(args[0]).name} failed ({type(e).__name__}: {e}); "
              f"the evaluation computes them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
