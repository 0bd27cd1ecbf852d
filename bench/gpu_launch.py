"""The GPU paths of issue 14 on a GPU machine: a GPU set per run, and NCCL data parallelism.

    python bench/gpu_launch.py [--steps 300]

In a fresh temporary workspace, with the GPUs the NVIDIA driver lists (``engine.runner.devices.gpu_pool``):

1. two runs of configs/mae-digits.yaml submitted at once with ``MASKLAB_MAX_RUNS=2``: each gets
   its slot's GPU set (``CUDA_VISIBLE_DEVICES``; with one GPU both share it), trains on CUDA;
2. with two GPUs or more, one run on ``launch.nproc_per_node=2`` (NCCL) next to a single-process
   run with the same seed and global batch: final val losses, throughput, ``torchrun_exit``.
   With one GPU this part says it was skipped (two NCCL ranks cannot share one GPU).

Prints one line per run: status, device, placement, final val loss, median throughput. Exit code 1
when a run did not complete. On a machine without a GPU it runs on the CPU and says so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from engine.config import load_config
from engine.data import load_dataset
from engine.runner.devices import gpu_pool
from engine.runner.launcher import submit
from engine.store import get_run, read_metrics

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    ws = Path(tempfile.mkdtemp(prefix="masklab-gpu-"))
    os.environ.update(MASKLAB_WORKSPACE=str(ws), MASKLAB_MAX_RUNS="2", MASKLAB_AUTO_EVAL="0")

    pool = gpu_pool()
    print(f"GPUs: {pool or 'none (CPU only)'}; workspace {ws}")
    load_dataset("digits")
    steps = [f"train.steps={args.steps}", f"train.eval_interval={args.steps // 2}", f"train.checkpoint_interval={args.steps}"]

    def launch(*overrides: str) -> str:
        return submit(load_config(REPO / "configs" / "mae-digits.yaml", [*steps, *overrides]))

    def report(run_id: str, label: str) -> bool:
        while get_run(run_id).is_active:
            time.sleep(1)
        rec = get_run(run_id)
        df = read_metrics([run_id], ["val_loss", "throughput"])
        val = df[df.key == "val_loss"].sort_values("step").value.iloc[-1] if (df.key == "val_loss").any() else float("nan")
        tp = statistics.median(df[df.key == "throughput"].value) if (df.key == "throughput").any() else float("nan")
        print(f"{label:28} {rec.status:10} device {rec.extra.get('device')}  placement {rec.extra.get('placement')}  "
              f"torchrun_exit {rec.extra.get('torchrun_exit', '-')}  val_loss {val:.5f}  throughput {tp:,.0f}/s"
              f"{'  error: ' + rec.error if rec.error else ''}")
        return rec.status == "completed"

    ok = True
    a, b = launch("name=gpu-set-a"), launch("name=gpu-set-b")
    ok &= report(a, "slot run a (1 process)")
    ok &= report(b, "slot run b (1 process)")
    if len(pool) >= 2:
        os.environ["MASKLAB_MAX_RUNS"] = "1"  # one slot owns every GPU: the 2-process run gets two
        one = launch("name=nccl-ref", "train.seed=1")
        ok &= report(one, "1 process (reference)")
        two = launch("name=nccl-2", "train.seed=1", "launch.nproc_per_node=2")
        ok &= report(two, "2 processes (NCCL)")
    else:
        print("2 processes (NCCL): skipped, this machine has fewer than 2 GPUs")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
