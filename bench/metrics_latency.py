"""How long a logged metric takes to become visible through the dashboard's read path.

Submits a real background run (digits, tiny preset), polls ``engine.store.read_metrics`` every
0.1 s from this process, and for each (key, step) row records ``first seen - logged wall_time``.

    python bench/metrics_latency.py [--steps 400] [--preset tiny]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config import RunConfig  # noqa: E402
from engine.runner.launcher import submit  # noqa: E402
from engine.store import get_run, read_metrics  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--preset", default="tiny")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as ws:
        cfg = RunConfig.from_dict({"model": {"preset": args.preset}, "train": {
            "steps": args.steps, "eval_interval": 100, "checkpoint_interval": 10**6}})
        run_id = submit(cfg, ws)
        seen: dict[tuple[str, int], float] = {}
        lat: list[float] = []
        reads, read_s = 0, 0.0
        while True:
            t0 = time.time()
            df = read_metrics([run_id], ["loss", "val_loss"], max_points=None, workspace=ws)
            now = time.time()
            reads, read_s = reads + 1, read_s + (now - t0)
            for key, step, wall in zip(df.key, df.step, df.wall_time):
                if (key, step) not in seen:
                    seen[(key, step)] = now
                    lat.append(now - wall)
            if get_run(run_id, ws).status not in ("queued", "running"):
                break
            time.sleep(0.1)
        rec = get_run(run_id, ws)
    lat.sort()
    print(f"run {rec.status}: {rec.step} steps, {len(lat)} rows observed, {reads} reads "
          f"({1000 * read_s / reads:.1f} ms per read)")
    print(f"visibility latency: median {statistics.median(lat):.3f} s, p95 {lat[int(0.95 * (len(lat) - 1))]:.3f} s, "
          f"max {lat[-1]:.3f} s (target: under 2 s)")


if __name__ == "__main__":
    main()
