"""Mask ratio vs representation quality (MAE's figure 5, He et al. 2022) on real MNIST, with baselines.

    python bench/sweep_mask_ratio.py                         # ../shared/data/mnist-t10k, ratios 0.25 0.5 0.75 0.9, seeds 0 1
    python bench/sweep_mask_ratio.py --steps 500 --workspace /tmp/sw   # a stated, smaller step budget
    python bench/sweep_mask_ratio.py --ratios 0.5 0.9 --seeds 0 --steps 40 --rows 300   # a smoke run

Imports the IDX files of ../shared/data/mnist-t10k (8,000 test digits; the import's seeded 90/10
split) into a fresh workspace, then trains a sweep (:func:`engine.runner.sweep.sweep_configs`) of
``masking.ratio`` with every seed: the 28x28 recipe New run proposes (``recipe_for``: the smallest
image preset ``tiny``, 7x7 px patches, batch 128, lr 2e-3, random masking) with the same step
budget for every run (``--steps``, default the recipe's 2000). Each run goes through the worker's
code path (``execute_run``), one at a time, and is evaluated at its end by the evaluation job
(:mod:`engine.eval.job`): linear probe and kNN (k=20, cosine) on the frozen features of the first
``--rows`` train rows (default :data:`ROWS`: every one of the 7,200), scored on the val rows, for
the trained encoder, the same model at its initial weights (random init) and the raw pixels.

Prints one line per run, then per ratio the mean and spread (min..max) over seeds, and checks issue
9's acceptance: the trained encoder beats the random-init encoder at every ratio (probe, mean over
seeds), and the best ratio's probe accuracy comes within 2 points of raw pixels or beats them.
Writes ``sweep.csv`` into the workspace. Exit code 0 when both hold, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from engine.data import import_source
from engine.runner.sweep import sweep_configs, sweep_table
from engine.runner.worker import execute_run
from engine.store import create_run
from engine.tasks.image.recipe import recipe_for

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED = Path(os.environ.get("MASKLAB_SHARED", REPO.parent / "shared"))

RATIOS = (0.25, 0.5, 0.75, 0.9)
SEEDS = (0, 1)
#: Rows of each split the probes read by default: more than the import's 7,200 train rows, so all of
#: them (and the 800 val rows). The product's default (evaluation.max_rows) is 2,000.
ROWS = 8000
#: Acceptance: the best ratio's probe accuracy at most this far below raw pixels (fraction).
WITHIN_RAW = 0.02


def base_config(steps: int | None, rows: int) -> dict:
    """The 28x28 recipe (``recipe_for``) with random masking, ``steps`` (scaled warmup/eval/checkpoint
    intervals) and the evaluation on ``rows`` rows per split (no t-SNE: not needed here)."""
    r = recipe_for((1, 28, 28))
    cfg = {"name": "mnist", "task": "image_mim", "data": {"dataset": "mnist"},
           "masking": {"strategy": "random", "ratio": 0.75}, **r,
           "evaluation": {"auto": True, "max_rows": rows, "tsne_max_rows": 0}}
    if steps is not None:
        t = cfg["train"]
        t.update(steps=steps, warmup_steps=min(t["warmup_steps"], steps // 10), eval_interval=min(t["eval_interval"], steps),
                 checkpoint_interval=steps)
    return cfg


def run_sweep(workspace: Path, ratios, seeds, steps: int | None, rows: int, quiet: bool = False):
    """Import MNIST, train and evaluate every run; returns the :func:`engine.runner.sweep.sweep_table` frame
    with ``seconds`` (train + evaluation wall time) per run."""
    os.environ["MASKLAB_WORKSPACE"] = str(workspace)
    os.environ["MASKLAB_AUTO_EVAL"] = "1"

    import_source(SHARED / "data" / "mnist-t10k", "mnist", workspace=workspace)
    seconds = {}
    cfgs = sweep_configs(base_config(steps, rows), "masking.ratio", list(ratios), list(seeds), sweep_id="000001")
    for cfg in cfgs:
        t0 = time.time()
        run_id, d = create_run(cfg.to_dict(), workspace)
        final = execute_run(d)
        seconds[run_id] = time.time() - t0
        if not quiet:
            print(f"{cfg.name}: {final} in {seconds[run_id]:.0f} s", flush=True)
    df = sweep_table("000001", workspace)
    df["seconds"] = df["run_id"].map(seconds)
    return df


def summarise(df) -> tuple[list[str], bool]:
    """Lines per ratio (mean and min..max over seeds of each figure) and whether the acceptance holds."""
    cols = ["probe_acc", "probe_acc/random_init", "probe_acc/raw_input", "knn_acc", "knn_acc/random_init", "knn_acc/raw_input"]
    lines = [f"{'ratio':>5}  " + "  ".join(f"{c:>24}" for c in cols)]
    means = df.groupby("value")[cols].mean()
    for v, g in df.groupby("value"):
        cells = [f"{100 * g[c].mean():5.1f} ({100 * g[c].min():4.1f}..{100 * g[c].max():4.1f})" for c in cols]
        lines.append(f"{v:>5}  " + "  ".join(f"{c:>24}" for c in cells))
    beats_random = bool((means["probe_acc"] > means["probe_acc/random_init"]).all())
    best = means["probe_acc"].idxmax()
    gap = means.loc[best, "probe_acc/raw_input"] - means.loc[best, "probe_acc"]
    ok = beats_random and gap <= WITHIN_RAW
    lines.append(f"trained > random init (probe, mean over seeds) at every ratio: {'yes' if beats_random else 'NO'}")
    lines.append(f"best ratio {best}: probe {100 * means.loc[best, 'probe_acc']:.1f}% vs raw pixels "
                 f"{100 * means.loc[best, 'probe_acc/raw_input']:.1f}% (gap {100 * gap:+.1f} points; target <= "
                 f"{100 * WITHIN_RAW:.0f}): {'yes' if gap <= WITHIN_RAW else 'NO'}")
    return lines, ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ratios", type=float, nargs="+", default=list(RATIOS))
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default: the 28x28 recipe's 2000)")
    ap.add_argument("--rows", type=int, default=ROWS, help="train rows the probes fit on (val: all, up to this; "
                    "default: every row)")
    ap.add_argument("--workspace", type=Path, default=None, help="kept workspace (default: a temporary one)")
    args = ap.parse_args(argv)
    ws = args.workspace or Path(tempfile.mkdtemp(prefix="masklab-sweep-"))
    ws.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    cpu0 = time.process_time()
    df = run_sweep(ws, args.ratios, args.seeds, args.steps, args.rows)
    steps = base_config(args.steps, args.rows)["train"]["steps"]
    print(f"\nMNIST t10k (8,000 digits, 90/10 split), tiny MAE, 7x7 patches, {steps} steps per run, batch 128, probes on "
          f"at most {args.rows} train rows; {len(df)} runs in {time.time() - t0:.0f} s wall, {time.process_time() - cpu0:.0f} s CPU, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(df[["value", "seed", "probe_acc", "probe_acc/random_init", "probe_acc/raw_input", "knn_acc",
              "knn_acc/random_init", "knn_acc/raw_input", "seconds"]].to_string(index=False, float_format="%.4f"))
    lines, ok = summarise(df)
    print("\n" + "\n".join(lines))
    df.to_csv(ws / "sweep.csv", index=False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
