"""Issue 40's figure: a run's automatic evaluation against its training time, on this machine.

Trains ``--runs`` short MLM runs on the bundled fortunes (default: 300 steps of 32 rows, one
thread, seeds 0, 1, ...) in one fresh workspace, each evaluated at its end with the default
``evaluation.budget`` (0.5), and prints for each: the training wall time, its optimiser-step time
(what the budget is a share of), the evaluation's time and its phases, the fine-tune steps the
budget left, and the ratio evaluation / training next to the 0.5 target. The first run pays for the
raw-input (TF-IDF) figures, which later runs on the same dataset read from the workspace's cache;
each run's worker computes them (and its random init's) while it trains, in a prefetch process
(engine.eval.prefetch) at a lower priority, unless ``--no-prefetch``.

    python bench/eval_budget.py [--steps 300] [--runs 2] [--workspace DIR] [--config configs/mlm-fortunes.yaml]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config import load_config  # noqa: E402
from engine.eval.budget import step_seconds  # noqa: E402
from engine.runner.worker import execute_run  # noqa: E402
from engine.store import create_run, get_run  # noqa: E402
from engine.store.evaluations import read_evaluations  # noqa: E402
from engine.tasks import resolve  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "mlm-fortunes.yaml"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--workspace", default=None, help="default: a fresh temporary folder (a cold figure cache)")
    ap.add_argument("--no-prefetch", action="store_true", help="compute the baselines in the evaluation, not while "
                    "training (MASKLAB_EVAL_PREFETCH=0): the training time without the prefetch beside it")
    args = ap.parse_args()
    if args.no_prefetch:
        os.environ["MASKLAB_EVAL_PREFETCH"] = "0"
    ws = Path(args.workspace or tempfile.mkdtemp(prefix="eval-budget-"))
    os.environ["MASKLAB_WORKSPACE"], os.environ["MASKLAB_AUTO_EVAL"] = str(ws), "1"
    print(f"workspace {ws}; {args.steps} steps x {args.batch_size} rows, one thread; baselines "
          f"{'in the evaluation' if args.no_prefetch else 'prefetched while training'}; target: evaluation <= "
          f"0.5 x training; load average {os.getloadavg()[0]:.2f}")
    for seed in range(args.runs):
        cfg = load_config(args.config, [
            f"train.steps={args.steps}", f"train.batch_size={args.batch_size}", "train.num_threads=1",
            f"train.checkpoint_interval={args.steps}", f"train.seed={seed}", f"name=budget-s{seed}"])
        run_id, d = create_run(resolve(cfg).to_dict())
        t0 = time.time()
        outcome = execute_run(d)
        total = time.time() - t0
        rec = get_run(run_id)
        ev = read_evaluations(run_id)[0][-1]
        b = ev.budget
        train = rec.duration_s or float("nan")
        steps_s = step_seconds(d, rec.step) or float("nan")
        print(f"run {seed} ({outcome}): training {train:.1f} s wall ({steps_s:.1f} s of optimiser steps), evaluation {ev.seconds:.1f} s = {ev.seconds / train:.2f} x training "
              f"(target <= 0.50; budget {b.get('budget_s') or float('nan'):.1f} s); fine-tune "
              f"{b.get('finetune_steps')} of {b.get('recipe_steps')} steps; worker total {total:.1f} s")
        print("   phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in ev.phases.items()))
        rep = ev.representation
        print("   probe / kNN: " + "  ".join(f"{enc} {rep[enc].get('probe_acc', float('nan')):.3f} / "
                                            f"{rep[enc].get('knn_acc', float('nan')):.3f}"
                                            for enc in ("trained", "random_init", "raw_input", "chance")))
        if ev.downstream:
            print("   fine-tune: " + "  ".join(f"{enc} {f['finetune_acc']:.3f}" for enc, f in ev.downstream.items()))
        for note in ev.notes:
            print(f"   note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
