"""Cost of metrics logging relative to the training step, measured inside one real training run.

The run uses the real training loop and the real MetricsWriter (Parquet segments, 0.5 s flush
interval). A thin proxy times every ``log`` and ``flush`` call; the report compares that time to
the summed step time of the same run.

    python bench/logging_overhead.py [--preset tiny] [--steps 300] [--dataset digits]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config import RunConfig  # noqa: E402
from engine.store import MetricsWriter, create_run, read_metrics  # noqa: E402
from engine.tasks import resolve  # noqa: E402
from engine.training.loop import train  # noqa: E402
from engine.training.writers import run_writers  # noqa: E402


class TimedSink:
    """Forwards to a real MetricsWriter and accumulates the seconds spent in it."""

    def __init__(self, inner: MetricsWriter):
        self.inner, self.seconds, self.calls = inner, 0.0, 0

    def log(self, step, metrics):
        t0 = time.perf_counter()
        self.inner.log(step, metrics)
        self.seconds += time.perf_counter() - t0
        self.calls += 1

    def flush(self):
        t0 = time.perf_counter()
        self.inner.flush()
        self.seconds += time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--dataset", default="digits")
    ap.add_argument("--patch-size", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as ws:
        cfg = resolve(RunConfig.from_dict({
            "data": {"dataset": args.dataset}, "model": {"preset": args.preset, "patch_size": args.patch_size},
            "train": {"steps": args.steps, "batch_size": 128, "eval_interval": 10**9, "checkpoint_interval": 10**9,
                      "device": "cpu"}}))
        run_id, d = create_run(cfg.to_dict(), ws)
        sink = TimedSink(MetricsWriter(d, run_id))
        train(cfg, run_writers(d, sink), workspace=ws)
        sink.inner.close(compact=False)
        df = read_metrics([run_id], ["step_time"], max_points=None, workspace=ws)
        step_s = float(df.value.sum())
        segs = len(list((d / "metrics").glob("seg-*.parquet")))
    # fit logs val_loss at the end too; count only per-step logging against step time
    print(f"preset {args.preset}, {args.dataset}, batch 128, {args.steps} steps, {segs} segments written")
    print(f"mean step time          {1000 * step_s / args.steps:9.2f} ms")
    print(f"logging (log + flush)   {1000 * sink.seconds / args.steps:9.3f} ms per step, {sink.calls} log calls")
    print(f"logging / step time     {100 * sink.seconds / step_s:9.3f} %")


if __name__ == "__main__":
    main()
