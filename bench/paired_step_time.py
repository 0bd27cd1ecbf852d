"""Milliseconds per training step of the paired recipe with each paired architecture (M3AE, FLAVA-style).

    python bench/paired_step_time.py                       # 60 steps per run, 3 interleaved repeats, 1 thread
    python bench/paired_step_time.py --steps 20 --repeats 1   # a smoke run

Trains ``configs/paired-tuxpaint.yaml`` (bundled Tux Paint stamps, 32x32 images in 8x8 patches,
captions of at most 48 WordPiece tokens, batch 32, 75% of the patches and 15% of the tokens hidden,
pixel MSE + token cross-entropy + InfoNCE) through the worker's own code path (``execute_run``) in a
fresh workspace, once per architecture (``model.arch`` ``m3ae`` and ``flava``) and repeat, the
architectures interleaved so that a change in the shared machine's load hits both. No evaluation
runs (``train.eval_interval`` past the end, ``evaluation.auto`` off).

A step is what the run logs as ``step_time`` (seconds): the batch's masks, forward, the weighted loss,
backward and the AdamW update, wall time measured by the training loop. Prints, per architecture, the
median over the steps after the first 10 (warm-up) of every repeat, the spread of the per-repeat
medians, the parameter count, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from engine.data import load_dataset
from engine.runner.worker import execute_run
from engine.store import create_run, get_run, read_metrics

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ARCHS = ("m3ae", "flava")
#: Logged steps left out of each run's median: the first steps build caches and warm the allocator.
WARMUP_STEPS = 10


def step_times(workspace: Path, arch: str, steps: int, threads: int) -> tuple[list[float], int]:
    """Train the Tux Paint recipe with ``model.arch = arch`` for ``steps`` steps; returns the
    logged step times after :data:`WARMUP_STEPS` (seconds) and the model's parameter count."""
    cfg = yaml.safe_load((REPO / "configs" / "paired-tuxpaint.yaml").read_text())
    cfg["name"] = f"step-time-{arch}"
    cfg["model"]["arch"] = arch
    cfg["train"].update(steps=steps, eval_interval=steps + 1, checkpoint_interval=steps, num_threads=threads,
                        warmup_steps=min(cfg["train"]["warmup_steps"], steps // 10))
    cfg["evaluation"] = {"auto": False}
    run_id, d = create_run(cfg, workspace)
    outcome = execute_run(d)
    if outcome != "completed":
        raise RuntimeError(f"run {run_id} ({arch}) ended {outcome}: {get_run(run_id, workspace).error}")
    df = read_metrics([run_id], ["step_time"], max_points=None, workspace=workspace)
    times = [float(v) for s, v in sorted(zip(df.step, df.value)) if s > WARMUP_STEPS]
    return times, int(get_run(run_id, workspace).extra.get("n_params") or 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=60, help="steps per run (the first 10 are not timed)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per architecture, interleaved")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--workspace", type=Path, default=None, help="kept workspace (default: a temporary one)")
    args = ap.parse_args(argv)
    if args.steps <= WARMUP_STEPS:
        ap.error(f"--steps must be above the {WARMUP_STEPS} warm-up steps")
    ws = args.workspace or Path(tempfile.mkdtemp(prefix="masklab-paired-step-"))
    ws.mkdir(parents=True, exist_ok=True)
    os.environ["MASKLAB_WORKSPACE"] = str(ws)
    os.environ["MASKLAB_AUTO_EVAL"] = "0"

    load_dataset("tuxpaint-stamps", ws)
    load0 = os.getloadavg()[0]
    times: dict[str, list[float]] = {a: [] for a in ARCHS}
    medians: dict[str, list[float]] = {a: [] for a in ARCHS}
    params: dict[str, int] = {}
    for _ in range(args.repeats):
        for arch in ARCHS:
            t, params[arch] = step_times(ws, arch, args.steps, args.threads)
            times[arch] += t
            medians[arch].append(statistics.median(t))
    print(f"paired-tuxpaint recipe, batch 32, {args.steps} steps x {args.repeats} repeats per architecture, "
          f"{args.threads} torch thread(s); load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after")
    for arch in ARCHS:
        print(f"  {arch:6s} {1000 * statistics.median(times[arch]):7.1f} ms/step (per-repeat medians "
              f"{', '.join(f'{1000 * m:.1f}' for m in medians[arch])}); {params[arch]:,} parameters")
    ratio = statistics.median(times["m3ae"]) / statistics.median(times["flava"])
    print(f"  m3ae / flava: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
