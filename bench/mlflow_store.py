"""MLflow's side of ``bench/store_scale.py``: the same reads against MLflow's tracking store.

Runs in an interpreter that has MLflow (not a masklab dependency; a throwaway venv, e.g.
``python3 -m venv /tmp/mlflow-venv && /tmp/mlflow-venv/bin/pip install mlflow-skinny sqlalchemy alembic``):

    /tmp/mlflow-venv/bin/python bench/mlflow_store.py --runs 200 --steps 10000

Builds a SQLite-backed tracking store (MLflow's default backend since the file store was
deprecated) in a temporary folder: ``--runs`` runs, each logging ``loss``, ``lr``, ``mask_ratio``
and ``throughput`` every step and ``val_loss`` every 100th. The first and the last step go through
``log_batch``; the steps between are inserted into MLflow's ``metrics`` table in one transaction per
run with exactly the rows ``log_batch`` writes (``--no-bulk``: all through ``log_batch``, 1,000
values a call, about 1,000 values/s here, i.e. hours for this size). Then, in this one warm process, the median of
``--repeats``: the run list with each run's latest metrics (``search_runs``), one run's full
``loss`` history (``get_metric_history``, 10,000 points) and the comparison of 100 runs
(``get_metric_history`` of ``loss``, ``val_loss``, ``throughput`` per run, downsampled to 1,000
points per series in Python: MLflow's client has no server-side downsampling); then ``--short-runs``
runs of ``--short-steps`` steps are added and the list is timed again. Prints one JSON line last:
``{"list200": ms, "history": ms, "compare": ms, "list2000": ms, ...}``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time


def timed(fn, repeats: int) -> float:
    fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--compare", type=int, default=100)
    ap.add_argument("--short-runs", type=int, default=1800, help="runs added afterwards for the 2,000-run list")
    ap.add_argument("--short-steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--bulk", action=argparse.BooleanOptionalAction, default=True,
                    help="write steps 1..N-1 straight into MLflow's metrics table (log_batch ran at about "
                         "1,000 values/s here: 8 million would take over 2 hours); the first and last "
                         "steps go through log_batch, so latest_metrics is what log_batch leaves")
    args = ap.parse_args(argv)

    from mlflow.entities import Metric  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)
    from mlflow.tracking import MlflowClient  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)

    root = args.dir or tempfile.mkdtemp(prefix="mlflow-store-scale-")
    client = MlflowClient(tracking_uri=f"sqlite:///{os.path.join(root, 'mlflow.db')}")
    eid = client.create_experiment("bench", artifact_location=os.path.join(root, "artifacts"))
    rng = random.Random(0)
    t0 = time.time()
    db = sqlite3.connect(os.path.join(root, "mlflow.db"))

    def add_runs(n: int, steps: int, first: int) -> list[str]:
        added = []
        for i in range(first, first + n):
            run = client.create_run(eid, run_name=f"bench-{i:04d}", tags={"task": "image_mim"})
            rid = run.info.run_id

            def metrics(st: int) -> list:
                loss = 0.1 + 0.5 * math.exp(-st / max(1, steps / 5)) + rng.gauss(0, 0.005)
                ts = int(t0 * 1000 + 50 * st)
                out = [Metric("loss", loss, ts, st), Metric("lr", 1e-3, ts, st), Metric("mask_ratio", 0.75, ts, st),
                       Metric("throughput", 2500.0 + rng.gauss(0, 50), ts, st)]
                return out + ([Metric("val_loss", loss + 0.01, ts, st)] if st % 100 == 0 else [])

            client.log_batch(rid, metrics=metrics(0))
            if args.bulk:  # the rows log_batch would add, in MLflow's own table, in one transaction
                rows = [(m.key, m.value, m.timestamp, rid, m.step, 0) for st in range(1, steps) for m in metrics(st)]
                with db:
                    db.executemany("INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
                                   "VALUES (?, ?, ?, ?, ?, ?)", rows)
            else:
                batch = []
                for st in range(1, steps):
                    batch += metrics(st)
                    if len(batch) >= 996:
                        client.log_batch(rid, metrics=batch)
                        batch = []
                if batch:
                    client.log_batch(rid, metrics=batch)
            client.log_batch(rid, metrics=metrics(steps))  # the last step: latest_metrics as log_batch leaves it
            client.set_terminated(rid)
            added.append(rid)
            if (i + 1) % 100 == 0:
                print(f"  {i + 1} runs logged ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
        return added

    ids = add_runs(args.runs, args.steps, 0)
    build_s = time.time() - t0

    n_runs = {"n": args.runs}

    def listing():
        runs = client.search_runs([eid], max_results=max(1000, n_runs["n"]))
        assert len(runs) == n_runs["n"] and all("loss" in r.data.metrics for r in runs)

    def history():
        h = client.get_metric_history(ids[len(ids) // 2], "loss")
        assert len(h) == args.steps + 1

    def compare():
        for rid in ids[: args.compare]:
            for key in ("loss", "val_loss", "throughput"):
                h = sorted(client.get_metric_history(rid, key), key=lambda m: m.step)
                stride = max(1, -(-len(h) // 1000))
                _ = [(m.step, m.value) for m in h[::stride]] + [(h[-1].step, h[-1].value)]

    check = client.get_metric_history(ids[0], "loss")
    assert [m.step for m in sorted(check, key=lambda m: m.step)] == list(range(args.steps + 1))
    out = {"runs": args.runs, "steps": args.steps, "build_s": build_s, "bulk": args.bulk,
           "list200": timed(listing, args.repeats), "history": timed(history, args.repeats),
           "compare": timed(compare, max(1, args.repeats // 5)), "mlflow_backend": "sqlite",
           "load": os.getloadavg()[0]}
    print("measured at", args.runs, "runs:", json.dumps(out), file=sys.stderr, flush=True)  # if cut short later
    if args.short_runs:
        add_runs(args.short_runs, args.short_steps, args.runs)
        n_runs["n"] += args.short_runs
        out[f"list{n_runs['n']}"] = timed(listing, args.repeats)
    import mlflow  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)

    out["mlflow_version"] = mlflow.__version__
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
