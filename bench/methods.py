"""The methods side by side: one table of linear-probe and kNN accuracy per method, next to each
method's random-init encoder and the raw input, from real masklab runs.

    python bench/methods.py                       # Fashion-MNIST, every image method, seeds 0 1, the recipe's 2,000 steps
    python bench/methods.py text                  # TREC (../shared/data/trec): mlm, data2vec-text, mlm-contrastive
    python bench/methods.py --steps 300 --seeds 0 --workspace /tmp/m   # shorter, kept workspace
    python bench/methods.py --methods mae data2vec --jobs 1

Every run is a sweep of the field ``method`` (:func:`engine.runner.sweep.sweep_configs`, the same
configs New run's sweep queues; ``engine/tasks/methods.json`` says what each method sets) over the
recipe New run proposes (image: ``configs/mae-fashion-mnist.yaml``'s; text: ``bench/text_quality.py``'s
TREC recipe), trained through the worker's own code path (``execute_run``) on one torch thread each,
``--jobs`` at a time, and evaluated by the evaluation job at its end: linear probe and kNN (k=20,
cosine) on frozen features of at most ``--rows`` rows per split, for the trained encoder, the same
architecture at its initial weights (random init: the floor a method must clear) and the raw input
(pixels; TF-IDF for text). No fine-tune (``evaluation.budget: 0``): the probes are the comparison.

Prints one line per run, then per method the mean over seeds (min..max), the gain over random init,
whether it beats the raw input, and for latent targets the target spread (``target_std``) at the first
and last step (collapse shows as a fall toward 0). Writes ``methods.csv`` into the workspace. Issue
36's acceptance: pixel MAE, HOG and the latent target beat their random-init encoder's probe by at
least 5 points; exit 0 when they do (image), else 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.methods.catalog import METHOD_FIELD, methods_for  # noqa: E402  (after the path)

SHARED = Path(os.environ.get("MASKLAB_SHARED", REPO.parent / "shared")) / "data"
SEEDS = (0, 1)
ROWS = 2000
#: Methods whose probe must clear their random-init encoder's by this much (fraction).
MUST_CLEAR = {"mae": 0.05, "maskfeat": 0.05, "data2vec": 0.05}
SWEEP = "00face"


def image_base(steps: int | None, rows: int, dataset: str = "fashion-mnist") -> dict:
    """The dataset's recipe (configs/mae-<dataset>.yaml: fashion-mnist, or digits for the scaled-down
    test) with the bench's evaluation."""
    cfg = yaml.safe_load((REPO / "configs" / f"mae-{dataset}.yaml").read_text(encoding="utf-8"))
    cfg.update(name="methods", task="image_mim")
    return _scaled(cfg, steps, rows)


def text_base(steps: int | None, rows: int) -> dict:
    """bench/text_quality.py's TREC recipe (characters, BERT tiny) with the bench's evaluation."""
    from bench.text_quality import RECIPES  # noqa: PLC0415 (text only)

    cfg = {**RECIPES["mlm"]["config"], "name": "methods-text"}
    cfg["data"] = {**cfg["data"], "dataset": "trec"}
    return _scaled(cfg, steps, rows)


def _scaled(cfg: dict, steps: int | None, rows: int) -> dict:
    t = cfg.setdefault("train", {})
    t["num_threads"] = 1
    if steps is not None:
        t.update(steps=steps, warmup_steps=min(t.get("warmup_steps", 50), steps // 10),
                 eval_interval=min(t.get("eval_interval", 100), steps), checkpoint_interval=steps)
    cfg["evaluation"] = {"auto": True, "budget": 0, "max_rows": rows, "tsne_max_rows": 0}
    return cfg


def _execute(args: tuple[str, str]) -> tuple[str, str, float, float]:
    """Train and evaluate one created run in this (pool) process: ``(run_id, outcome, wall s, CPU s)``."""
    run_id, workspace = args
    os.environ["MASKLAB_WORKSPACE"] = workspace
    os.environ["MASKLAB_AUTO_EVAL"] = "1"
    from engine.runner.worker import execute_run  # noqa: PLC0415 (in the pool process)
    from engine.store import run_dir  # noqa: PLC0415 (in the pool process)

    t0, c0 = time.time(), time.process_time()
    final = execute_run(run_dir(run_id, workspace))
    return run_id, str(final), time.time() - t0, time.process_time() - c0


def run_methods(workspace: Path, kind: str, methods, seeds, steps: int | None, rows: int, jobs: int = 2,
                quiet: bool = False, dataset: str = "fashion-mnist") -> pd.DataFrame:
    """Import the data, create one run per method and seed, train and evaluate them ``jobs`` at a time.

    Returns one row per run: ``method, seed, status, probe_acc, knn_acc`` and their ``/random_init``
    and ``/raw_input`` figures, ``target_std_first``, ``target_std_last``, ``seconds``, ``cpu_seconds``.
    """
    os.environ["MASKLAB_WORKSPACE"] = str(workspace)
    from engine.data import ImportOptions, import_source  # noqa: PLC0415 (after MASKLAB_WORKSPACE is set)
    from engine.runner.sweep import sweep_configs, sweep_table  # noqa: PLC0415 (after MASKLAB_WORKSPACE is set)
    from engine.store import create_run, read_metrics  # noqa: PLC0415 (after MASKLAB_WORKSPACE is set)

    if kind == "text":
        import_source(SHARED / "trec" / "train.tsv", "trec", ImportOptions(label_column="label"), workspace=workspace)
        base = text_base(steps, rows)
    else:
        base = image_base(steps, rows, dataset)
    cfgs = sweep_configs(base, METHOD_FIELD, list(methods), list(seeds), sweep_id=SWEEP)
    ids = [create_run(c.to_dict(), workspace)[0] for c in cfgs]
    timing = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for run_id, final, wall, cpu in pool.map(_execute, [(r, str(workspace)) for r in ids]):
            timing[run_id] = (wall, cpu)
            if not quiet:
                print(f"{run_id}: {final} in {wall:.0f} s ({cpu:.0f} s CPU)", flush=True)
    df = sweep_table(SWEEP, workspace).rename(columns={"value": "method"})
    df["seconds"] = df["run_id"].map(lambda r: timing[r][0])
    df["cpu_seconds"] = df["run_id"].map(lambda r: timing[r][1])
    first, last = [], []
    for r in df["run_id"]:
        m = read_metrics([r], workspace=workspace)
        s = m[m["key"] == "target_std"].sort_values("step")["value"]
        first.append(s.iloc[0] if len(s) else float("nan"))
        last.append(s.iloc[-1] if len(s) else float("nan"))
    df["target_std_first"], df["target_std_last"] = first, last
    order = {m: i for i, m in enumerate(methods)}
    return df.sort_values(["method", "seed"], key=lambda c: c.map(order) if c.name == "method" else c).reset_index(drop=True)


def summarise(df: pd.DataFrame, kind: str) -> tuple[list[str], bool]:
    """The per-method table (mean over seeds, min..max) and whether issue 36's targets hold."""
    def cell(g, c):
        return f"{100 * g[c].mean():5.1f} ({100 * g[c].min():4.1f}..{100 * g[c].max():4.1f})"

    head = (f"{'method':<16} {'probe':>17} {'probe rand-init':>17} {'probe raw':>17} {'kNN':>17} {'kNN rand-init':>17} "
            f"{'kNN raw':>17} {'gain':>6} {'> raw':>6} {'target_std':>15}")
    lines, ok = [head], True
    for method, g in df.groupby("method", sort=False):
        gain = g["probe_acc"].mean() - g["probe_acc/random_init"].mean()
        beats_raw = g["probe_acc"].mean() > g["probe_acc/raw_input"].mean()
        std = (f"{g['target_std_first'].mean():.3f}->{g['target_std_last'].mean():.3f}"
               if g["target_std_first"].notna().any() else "-")
        lines.append(f"{method:<16} {cell(g, 'probe_acc'):>17} {cell(g, 'probe_acc/random_init'):>17} "
                     f"{cell(g, 'probe_acc/raw_input'):>17} {cell(g, 'knn_acc'):>17} {cell(g, 'knn_acc/random_init'):>17} "
                     f"{cell(g, 'knn_acc/raw_input'):>17} {100 * gain:+6.1f} {'yes' if beats_raw else 'no':>6} {std:>15}")
        if kind == "image" and method in MUST_CLEAR:
            ok &= gain >= MUST_CLEAR[method]
    if kind == "image":
        lines.append("pixel MAE, HOG and latent beat their random-init probe by >= 5 points: " + ("yes" if ok else "NO"))
    return lines, ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", nargs="?", default="image", choices=("image", "text"))
    ap.add_argument("--methods", nargs="+", default=None, help="default: every method of the task")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default: the recipe's)")
    ap.add_argument("--rows", type=int, default=ROWS, help="rows per split the probes read (default 2,000)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time, one torch thread each")
    ap.add_argument("--workspace", type=Path, default=None, help="kept workspace (default: a temporary one)")
    args = ap.parse_args(argv)
    methods = args.methods or list(methods_for("text_mlm" if args.kind == "text" else "image_mim"))
    ws = args.workspace or Path(tempfile.mkdtemp(prefix="masklab-methods-"))
    ws.mkdir(parents=True, exist_ok=True)
    t0, load0 = time.time(), os.getloadavg()[0]
    df = run_methods(ws, args.kind, methods, args.seeds, args.steps, args.rows, args.jobs)
    base = text_base(args.steps, args.rows) if args.kind == "text" else image_base(args.steps, args.rows)
    data = "TREC (characters, BERT tiny)" if args.kind == "text" else "Fashion-MNIST (tiny MAE, 7x7 patches)"
    print(f"\n{data}, {base['train']['steps']} steps per run, seeds {' '.join(map(str, args.seeds))}, probes on at most "
          f"{args.rows} rows per split; {len(df)} runs in {time.time() - t0:.0f} s wall, {args.jobs} at a time; load "
          f"average {load0:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(df[["method", "seed", "status", "probe_acc", "probe_acc/random_init", "probe_acc/raw_input", "knn_acc",
              "knn_acc/random_init", "knn_acc/raw_input", "target_std_first", "target_std_last", "cpu_seconds"]]
          .to_string(index=False, float_format="%.4f"))
    lines, ok = summarise(df, args.kind)
    print("\n" + "\n".join(lines))
    df.to_csv(ws / "methods.csv", index=False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
