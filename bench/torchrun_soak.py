"""Clean exits of two-process runs, soaked: N consecutive ``torchrun --nproc_per_node 2`` runs (gloo on
CPU) of a tiny digits MAE, each through the worker's code path (:func:`engine.runner.worker.execute_run`).

    python bench/torchrun_soak.py              # 40 runs (the acceptance of issue 14)
    python bench/torchrun_soak.py --runs 5     # a shorter soak

After ``destroy_process_group()`` a rank sometimes aborted at interpreter exit (SIGABRT) and torchrun
reported a failure: 6 of 40 runs on torch 2.11.0, 11 of 40 on 2.14.1 (../shared/docs/env-recipe.md);
the ranks now flush and ``os._exit(0)``. Prints each run's torchrun exit code and the count of unclean
exits next to that reference. Exit code 0 when every run completed with torchrun exit code 0.
The slow test tests/engine/test_distributed.py runs a scaled-down soak of this script.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from engine.config import RunConfig
from engine.data import load_dataset
from engine.runner.worker import execute_run
from engine.store import create_run, get_run
from engine.tasks import resolve

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: The reference: unclean exits in 40 runs before the ranks called ``os._exit(0)`` (env-recipe.md).
REFERENCE = {"torch 2.11.0": (6, 40), "torch 2.14.1": (11, 40)}

CONFIG = {"name": "soak", "data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
          "train": {"steps": 2, "batch_size": 32, "eval_interval": 2, "checkpoint_interval": 2, "warmup_steps": 1,
                    "seed": 1, "device": "cpu", "num_threads": 2},
          "launch": {"nproc_per_node": 2}}


def soak(workspace: Path, runs: int) -> list[dict]:
    """Train ``runs`` consecutive two-process runs of :data:`CONFIG` in ``workspace`` (made the
    process's ``$MASKLAB_WORKSPACE``). Returns one dict per run: ``run_id``, ``status`` (the worker's
    final status), ``torchrun_exit`` (torchrun's exit code, None when it never ran) and ``seconds``."""
    os.environ["MASKLAB_WORKSPACE"] = str(workspace)

    load_dataset("digits")
    out = []
    for _ in range(runs):
        t0 = time.time()
        run_id, d = create_run(resolve(RunConfig.from_dict(CONFIG)).to_dict())
        status = execute_run(d)
        out.append({"run_id": run_id, "status": status, "torchrun_exit": get_run(run_id).extra.get("torchrun_exit"),
                    "seconds": time.time() - t0})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=40, help="consecutive two-process runs (default 40)")
    ap.add_argument("--workspace", type=Path, default=None, help="kept workspace (default: a temporary one)")
    args = ap.parse_args(argv)
    ws = args.workspace or Path(tempfile.mkdtemp(prefix="masklab-soak-"))
    ws.mkdir(parents=True, exist_ok=True)

    rows = soak(ws, args.runs)
    for i, r in enumerate(rows, 1):
        print(f"run {i:3d} {r['run_id']}: {r['status']}, torchrun exit {r['torchrun_exit']}, {r['seconds']:.1f} s")
    bad = sum(r["status"] != "completed" or r["torchrun_exit"] != 0 for r in rows)
    ref = ", ".join(f"{k}: {a} of {n}" for k, (a, n) in REFERENCE.items())
    print(f"\ntorch {torch.__version__}: {bad} of {len(rows)} runs exited uncleanly "
          f"(reference before the os._exit fix, {ref}); workspace {ws}")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
