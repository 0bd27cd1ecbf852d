"""Store at scale (issue 15, point 4): the run list with each run's latest metrics, one run's full
history, a 100-run comparison and the Runs page's server render, in a warm, long-lived reader.

    python bench/store_scale.py                       # 2,000 runs, 200 of them x 10,000 steps
    python bench/store_scale.py --runs 100 --long 20 --steps 1000 --repeats 20 --renders 2   # smoke

**The workspace** (a temporary folder) is built through the store's own write path: every run is
made by ``create_run`` (its resolved config), its statuses by ``write_status``, a few tags by
``set_tags``. A finished run's metrics are the file ``MetricsWriter.close()`` leaves: one
``part-000000-NNNNNN.parquet`` (zstd, rows sorted by key and step, 50 flushes of 200 steps), written
here directly with the store's own encoder and atomic write because 200 x 50 real flushes with
their fsyncs would take minutes on this machine; the runs this process keeps "running" (it holds
their locks) write theirs through a real ``MetricsWriter`` (segments and merges). Every step logs
``loss``, ``lr``, ``mask_ratio`` and ``throughput``, every 100th step ``val_loss`` (as a worker does).
First the 200 long runs alone are measured, then 1,800 short ones (200 steps; completed, failed,
cancelled, interrupted) are added and everything is measured again.

**What is timed**, each the median of ``--repeats`` calls in this one process after a first call
(the dashboard is a long-lived process: warm):

* list: ``list_runs(max_age_s=1.0)`` then ``latest_points(ids, max_age_s=1.0)`` for every run,
  what the Runs page shows (statuses at most 1 s old: the run index validates in the background).
  Also the exact ``list_runs()`` (checked on each call) and the cold first call. Staleness is
  measured too: another process rewrites a status while this one polls the list every 2 ms.
* history: ``read_metrics([run], ["loss"], max_points=None)``, 10,000 points; cold (no cache),
  warm, and right after its live run flushed a new segment.
* comparison: ``read_metrics(100 runs, ["loss", "val_loss", "throughput"], max_points=1000)``, what
  the Compare page reads (1,000 points per run and key); cold and warm.
* the Runs page: ``app/streamlit_app.py`` (Runs is the default page) rendered in Streamlit's AppTest
  (the server-side script run a browser's request triggers), first render then the median of
  ``--renders`` more; and its data function (``list_runs`` + ``latest_points`` + ``runs_frame``).

Targets (issue 15): list <= 1.1 ms for 200 runs and <= 2 ms for 2,000; history <= 3.7 ms; 100-run
comparison <= 300 ms. MLflow on the issue's machine: 10.9 ms, 364 ms and 30.4 s (the issue's
figures; ``--mlflow PYTHON`` measures them here instead with that interpreter, see
``bench/mlflow_store.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from streamlit.testing.v1 import AppTest

from app.components.runs import latest_points as page_points
from app.components.runs import runs_frame
from engine.config import RunConfig
from engine.store import MetricsWriter, RunLock, create_run, latest_points, list_runs, read_metrics, set_tags, write_status
from engine.store.index import RACY_S, _indexes
from engine.store.metrics import SCHEMA, SEGMENT_DIR, _table_bytes
from engine.store.metrics_cache import clear_caches
from engine.tasks import resolve
from engine.workspace import atomic_write_bytes

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TARGETS_MS = {"list200": 1.1, "list2000": 2.0, "history": 3.7, "compare": 300.0}
MLFLOW_ISSUE_MS = {"list200": 10.9, "history": 364.0, "compare": 30_400.0}
KEYS_EVERY_STEP = ("loss", "lr", "mask_ratio", "throughput")
FLUSH_STEPS = 200  # a worker flushes every 0.5 s; at 0.05 s a step about every 10 steps, here fewer, larger ones


def metrics_table(run_id: str, steps: int, t0: float, rng, ratio: float):
    """The rows a worker logs over steps 0..``steps`` (every key every step, ``val_loss`` every 100),
    sorted by key then step as ``MetricsWriter``'s final merge leaves them, and the last value of
    each key (the status file's ``latest``)."""
    s = np.arange(steps + 1, dtype=np.int64)
    loss = 0.1 + 0.5 * np.exp(-s / max(1, steps / 5)) + rng.normal(0, 0.005, s.size)
    vs = s[s % 100 == 0]
    series = {"loss": (s, loss), "lr": (s, np.full(s.size, 1e-3)), "mask_ratio": (s, np.full(s.size, ratio)),
              "throughput": (s, 2500.0 + rng.normal(0, 50, s.size)), "val_loss": (vs, loss[vs] + 0.01)}
    parts = [(np.full(st.size, key, dtype=object), st, v) for key, (st, v) in sorted(series.items())]
    keys, st, v = (np.concatenate(c) for c in zip(*parts))
    table = pa.table({"run_id": pa.array([run_id] * len(st), pa.string()), "key": pa.array(keys, pa.string()),
                      "step": pa.array(st), "value": pa.array(v), "wall_time": pa.array(t0 + 0.05 * st)}, schema=SCHEMA)
    return table, {key: float(v[-1]) for key, (_, v) in series.items()}


def add_run(ws: Path, base: dict, i: int, steps: int, status: str, rng, *, t_end: float) -> str:
    """One run folder as a worker leaves it (see the module docstring); returns its id."""
    ratio = round(0.25 + 0.65 * (i % 14) / 13, 3)
    cfg = {**base, "name": f"bench-{i:04d}", "masking": {**base["masking"], "ratio": ratio},
           "train": {**base["train"], "steps": steps, "seed": i % 3}}
    run_id, d = create_run(cfg, ws)
    t0 = t_end - 0.05 * steps
    done = steps if status == "completed" else int(steps * rng.uniform(0.2, 0.9))
    table, latest = metrics_table(run_id, done, t0, rng, ratio)
    last_seg = max(0, -(-done // FLUSH_STEPS) - 1)
    atomic_write_bytes(d / SEGMENT_DIR / f"part-000000-{last_seg:06d}.parquet", _table_bytes(table))
    st = {"status": status, "created_at": t0 - 1, "queued_at": t0 - 1, "started_at": t0, "step": done,
          "total_steps": steps, "latest": latest, "device": "cpu", "n_params": 550_000, "pid": 10_000 + i,
          "peak_mem_bytes": 480 * 2**20}
    if status != "running":
        st["ended_at"] = t0 + 0.05 * done
    if status == "failed":
        st["error"] = "a bench failure"
    write_status(d, st)
    return run_id


def build(ws: Path, n: int, first: int, steps: int, rng, statuses: list[str]) -> list[str]:
    """Add ``n`` runs of ``steps`` steps numbered from ``first``; statuses cycle through ``statuses``."""
    base = resolve(RunConfig.from_dict({"model": {"patch_size": 2}})).to_dict()
    now = time.time()
    return [add_run(ws, base, first + k, steps, statuses[k % len(statuses)], rng,
                    t_end=now - 3600 * (n - k) / n - 60) for k in range(n)]


def timed(fn, repeats: int, pause_s: float = 0.0) -> tuple[float, list[float]]:
    """Median milliseconds of ``repeats`` calls of ``fn`` (after one untimed call), and all of them."""
    fn()
    out = []
    for _ in range(repeats):
        if pause_s:
            time.sleep(pause_s)
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out), out


def once_ms(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def settle() -> None:
    """Wait until the folders just written are older than the index's racy window: a folder changed
    less than ``RACY_S`` ago is read again at every validation (a dashboard's runs are mostly older)."""
    time.sleep(RACY_S + 0.5)


def list_figures(ws: Path, repeats: int) -> dict:
    """Cold, exact and max-age list timings (with each run's latest points) in this process."""
    _indexes.clear()

    def listing(max_age_s: float):
        recs = list_runs(ws, max_age_s=max_age_s)
        pts = latest_points([r.run_id for r in recs], max_age_s=max_age_s, workspace=ws)
        return recs, pts

    cold = once_ms(lambda: listing(0.0))
    exact, _ = timed(lambda: listing(0.0), max(5, repeats // 10))
    fresh, all_ms = timed(lambda: listing(1.0), repeats, pause_s=0.01)
    recs, pts = listing(1.0)
    return {"runs": len(recs), "points": len(pts), "cold_ms": cold, "exact_ms": exact, "list_ms": fresh,
            "p95_ms": sorted(all_ms)[int(0.95 * (len(all_ms) - 1))]}


STALE_CHILD = """
import sys, time
from engine.store import run_dir, write_status
from engine.store.runs import read_status
ws, run_id, n, base = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
d = run_dir(run_id, ws)
st = read_status(d)
for k in range(n):
    time.sleep(0.37)
    write_status(d, {**st, "step": base + k})
    print(time.time(), flush=True)
"""


def staleness(ws: Path, run_id: str, base: int, n: int = 6) -> list[float]:
    """Seconds from another process's status write (steps ``base``, ``base + 1``...) to this
    process's ``list_runs(max_age_s=1)`` showing it (polled every 2 ms), for ``n`` writes."""
    child = subprocess.Popen([sys.executable, "-c", STALE_CHILD, str(ws), run_id, str(n), str(base)], cwd=REPO,
                             stdout=subprocess.PIPE, text=True)
    seen: dict[int, float] = {}
    deadline = time.time() + 120
    while len(seen) < n and time.time() < deadline:
        rec = next(r for r in list_runs(ws, max_age_s=1.0) if r.run_id == run_id)
        if base <= rec.step < base + n and rec.step - base not in seen:
            seen[rec.step - base] = time.time()
        time.sleep(0.002)
    written = [float(x) for x in child.stdout.read().split()]
    child.wait()
    return [seen[k] - written[k] for k in sorted(seen) if k < len(written)]


def metrics_figures(ws: Path, long_ids: list[str], live: list, repeats: int) -> dict:
    """History and comparison timings, cold (no cache) and warm, plus a live run's history after a flush."""
    hist_id = long_ids[len(long_ids) // 2]
    cmp_ids = long_ids[:100]
    cmp_keys = ["loss", "val_loss", "throughput"]
    out = {}
    # the uncached path first (its first call, untimed, also brings the files into the OS page cache)
    out["history_uncached_ms"], _ = timed(
        lambda: read_metrics([hist_id], ["loss"], max_points=None, workspace=ws, cache=False), max(3, repeats // 20))
    clear_caches()
    out["history_cold_ms"] = once_ms(lambda: read_metrics([hist_id], ["loss"], max_points=None, workspace=ws))
    out["history_ms"], _ = timed(lambda: read_metrics([hist_id], ["loss"], max_points=None, workspace=ws), repeats)
    out["history_points"] = len(read_metrics([hist_id], ["loss"], max_points=None, workspace=ws))
    run_id, writer, step = live  # [run id, its MetricsWriter, its last step]
    live_ms = []
    read_metrics([run_id], ["loss"], max_points=None, workspace=ws)
    for _ in range(max(5, repeats // 20)):
        for _ in range(10):
            step += 1
            writer.log(step, {"loss": 0.2, "lr": 1e-3, "mask_ratio": 0.75, "throughput": 2500.0})
        writer.flush()  # a new segment (every 16th also merges a level)
        live_ms.append(once_ms(lambda: read_metrics([run_id], ["loss"], max_points=None, workspace=ws)))
    live[2] = step
    out["history_live_ms"] = statistics.median(live_ms)
    out["history_live_points"] = len(read_metrics([run_id], ["loss"], max_points=None, workspace=ws))
    read_metrics(cmp_ids, cmp_keys, max_points=1000, workspace=ws, cache=False)  # OS page cache
    out["compare_uncached_ms"] = once_ms(
        lambda: read_metrics(cmp_ids, cmp_keys, max_points=1000, workspace=ws, cache=False))
    clear_caches()
    out["compare_cold_ms"] = once_ms(lambda: read_metrics(cmp_ids, cmp_keys, max_points=1000, workspace=ws))
    out["compare_ms"], _ = timed(lambda: read_metrics(cmp_ids, cmp_keys, max_points=1000, workspace=ws),
                                 max(5, repeats // 10))
    df = read_metrics(cmp_ids, cmp_keys, max_points=1000, workspace=ws)
    out["compare_rows"] = len(df)
    out["compare_runs"] = df["run_id"].nunique()
    return out


def page_figures(ws: Path, renders: int, repeats: int) -> dict:
    """The Runs page: its data function, then full server renders in AppTest."""
    def data():
        recs = [r for r in list_runs(ws, max_age_s=1.0) if not r.archived]
        return runs_frame(recs, page_points(recs))

    os.environ["MASKLAB_WORKSPACE"] = str(ws)
    out = {"data_ms": timed(data, max(5, repeats // 10))[0], "table_rows": len(data())}

    at = AppTest.from_file(str(REPO / "app" / "streamlit_app.py"), default_timeout=600)
    times = []
    for _ in range(renders + 1):
        t = time.perf_counter()
        at.run()
        times.append((time.perf_counter() - t) * 1000)
        if at.exception:
            raise RuntimeError(f"the Runs page failed: {[e.value for e in at.exception]}")
    out["render_first_ms"] = times[0]
    out["render_ms"] = statistics.median(times[1:]) if renders else times[0]
    out["render_tables"] = len(at.dataframe)
    return out


def row(what: str, ms: float, target: float | None, mlflow: float | None, mlflow_src: str) -> str:
    t = f"<= {target:g} ms {'met' if ms <= target else 'NOT met'}" if target else ""
    m = f"{mlflow:,.1f} ms ({mlflow_src}; {mlflow / ms:,.0f}x)" if mlflow else ""
    return f"| {what} | {ms:,.3f} ms | {t} | {m} |"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2000, help="runs in the workspace at the end")
    ap.add_argument("--long", type=int, default=200, help="runs with --steps steps (measured alone first)")
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--short-steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--renders", type=int, default=5)
    ap.add_argument("--workspace", type=Path, default=None)
    ap.add_argument("--mlflow", type=Path, default=None, help="a Python with mlflow: run bench/mlflow_store.py with it")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)

    ws = args.workspace or Path(tempfile.mkdtemp(prefix="masklab-store-scale-"))
    rng = np.random.default_rng(0)
    t = time.time()
    long_ids = build(ws, args.long, 0, args.steps, rng, ["completed"] * 19 + ["cancelled"])
    # three live runs: this process holds their locks and logs through a real MetricsWriter
    locks, live = [], None
    for k in range(3):
        run_id, d = create_run({"name": f"live-{k}", "train": {"steps": args.steps}}, ws)
        locks.append(RunLock(d).acquire())
        w = MetricsWriter(d, run_id, flush_interval=1e9)
        for s in range(args.steps // 2):
            w.log(s, {"loss": 0.3, "lr": 1e-3, "mask_ratio": 0.75, "throughput": 2500.0,
                      **({"val_loss": 0.31} if s % 100 == 0 else {})})
            if s % FLUSH_STEPS == FLUSH_STEPS - 1:
                w.flush()
        w.flush()
        write_status(d, {"status": "running", "step": args.steps // 2 - 1, "total_steps": args.steps,
                         "pid": os.getpid(), "started_at": time.time() - 60, "latest": dict(w.latest)})
        live = live or [run_id, w, args.steps // 2 - 1]
    for run_id in long_ids[::20]:
        set_tags(run_id, ["long", "bench"], workspace=ws)
    print(f"built {args.long} runs x {args.steps:,} steps + 3 live in {time.time() - t:.0f} s ({ws})", flush=True)

    settle()
    fig = {"load_start": os.getloadavg()}
    fig["list200"] = list_figures(ws, args.repeats)
    fig["stale200"] = staleness(ws, long_ids[1], 1_000_000)
    print(f"list and staleness at {fig['list200']['runs']} runs measured", flush=True)
    fig.update(metrics_figures(ws, long_ids, live, args.repeats))
    print("history and comparison measured", flush=True)
    t = time.time()
    build(ws, args.runs - args.long - 3, args.long, args.short_steps, rng,
          ["completed"] * 8 + ["failed", "cancelled", "running"])  # "running" without a lock: interrupted
    print(f"added {args.runs - args.long - 3} runs x {args.short_steps} steps in {time.time() - t:.0f} s", flush=True)
    settle()
    fig["list2000"] = list_figures(ws, args.repeats)
    fig["stale2000"] = staleness(ws, long_ids[1], 2_000_000)
    print(f"list and staleness at {fig['list2000']['runs']} runs measured", flush=True)
    fig["page"] = page_figures(ws, args.renders, args.repeats)
    fig["load_end"] = os.getloadavg()
    for lock in locks:
        lock.release()

    mlflow, src = dict(MLFLOW_ISSUE_MS), "MLflow, issue 15's figure"
    if args.mlflow:
        print("MLflow: building its store and measuring (bench/mlflow_store.py)...", flush=True)
        out = subprocess.run([str(args.mlflow), str(REPO / "bench" / "mlflow_store.py"), "--runs", str(args.long),
                              "--steps", str(args.steps), "--short-runs", str(args.runs - args.long),
                              "--short-steps", str(args.short_steps), "--repeats", "5"], capture_output=True, text=True)
        if out.returncode == 0:
            mlflow, src = json.loads(out.stdout.strip().splitlines()[-1]), "MLflow measured here"
            fig["mlflow"] = mlflow
        else:
            print("MLflow bench failed; using the issue's figures:", out.stderr[-500:])
    l2, l20 = fig["list200"], fig["list2000"]
    load = f"load average {fig['load_start'][0]:.1f} at the start, {fig['load_end'][0]:.1f} at the end (2 cores, shared)"
    print(f"\nStore at scale: {l20['runs']:,} runs ({args.long} x {args.steps:,} steps), median of repeats in one warm process; {load}")
    print("| what | masklab | target | MLflow |\n| --- | --- | --- | --- |")
    print(row(f"run list + latest metrics, {l2['runs']} runs (max_age 1 s)", l2["list_ms"], TARGETS_MS["list200"],
              mlflow.get("list200"), src))
    print(row(f"run list + latest metrics, {l20['runs']:,} runs (max_age 1 s)", l20["list_ms"], TARGETS_MS["list2000"],
              mlflow.get("list2000"), src))
    print(row(f"one history, {fig['history_points']:,} points", fig["history_ms"], TARGETS_MS["history"],
              mlflow.get("history"), src))
    print(row(f"comparison, {fig['compare_runs']} runs x 1,000 points x 3 keys ({fig['compare_rows']:,} rows)",
              fig["compare_ms"], TARGETS_MS["compare"], mlflow.get("compare"), src))
    print(row(f"Runs page server render (AppTest), {fig['page']['table_rows']:,} rows", fig["page"]["render_ms"], None, None, src))
    print("\nOther figures (ms):")
    for n, l in ((l2["runs"], l2), (l20["runs"], l20)):
        print(f"  list {n:,} runs: cold first call {l['cold_ms']:.1f}, exact list_runs() (checked on each call) "
              f"{l['exact_ms']:.2f}, max-age p95 {l['p95_ms']:.3f}; {l['points']:,} latest points")
    for n, s in ((l2["runs"], fig["stale200"]), (l20["runs"], fig["stale2000"])):
        print(f"  staleness at {n:,} runs, another process's status write -> seen by this one: "
              + ", ".join(f"{x * 1000:.0f}" for x in s) + f" ms (max {max(s) * 1000:.0f}; bound 1,000; a write "
              "superseded by the next one before a validation is not seen at all)")
    print(f"  history: cold {fig['history_cold_ms']:.1f}, uncached path {fig['history_uncached_ms']:.1f}, "
          f"live run right after a flush {fig['history_live_ms']:.1f} ({fig['history_live_points']:,} points)")
    print(f"  comparison: cold {fig['compare_cold_ms']:.0f}, uncached path {fig['compare_uncached_ms']:.0f}")
    print(f"  Runs page: data function (list + latest + runs_frame) {fig['page']['data_ms']:.1f}, "
          f"first render {fig['page']['render_first_ms']:.0f}")
    if args.json:
        args.json.write_text(json.dumps(fig, indent=2))
    ok = (l2["list_ms"] <= TARGETS_MS["list200"] and l20["list_ms"] <= TARGETS_MS["list2000"]
          and fig["history_ms"] <= TARGETS_MS["history"] and fig["compare_ms"] <= TARGETS_MS["compare"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
