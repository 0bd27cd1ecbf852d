"""Pages at scale (issue 35): the Runs page and Compare with 2,000 runs in the workspace.

    python bench/ui_scale.py                               # 2,000 runs, 200 of them x 10,000 steps
    python bench/ui_scale.py --runs 300 --long 50 --steps 2000 --repeats 5   # smoke

**The workspace** is built as ``bench/store_scale.py`` builds it (the store's own writers: ``create_run``,
``write_status``, the metrics files a finished ``MetricsWriter`` leaves): 200 runs of 10,000 steps
(every step ``loss``, ``lr``, ``mask_ratio``, ``throughput``; ``val_loss`` every 100), then 1,800 of
200 steps (completed, failed, cancelled, interrupted). The 50 runs Compare picks are long ones; each
gets a copy of the reconstruction samples (4 evaluation steps) and the evaluation of one real tiny-MAE
digits run trained here first (``--sample-run RUN_DIR`` reuses one), so that every section of Compare
has something to draw: curves, configs and results, the matrix, downstream tables and bars, cost.

**What is timed**, with Streamlit's AppTest (the server-side script run a browser's request triggers):

* runs cold: the Runs page's first render in a fresh Python process (``AppTest.from_file(...).run()``,
  the process's imports done before the clock starts), the median of ``--repeats`` processes;
* runs warm: the median of ``--repeats`` more renders in one process after the first;
* runs filter: the median of ``--repeats`` filter changes (a search text typed in the run table's box);
* compare50: Compare with 50 runs picked (through its URL), the median of ``--repeats`` renders after
  the first.

The last line: ``runs_cold_s=A runs_warm_s=B runs_filter_s=C compare50_s=D``. Targets: 3 s, 1 s,
1 s, 3 s. The load average is printed beside them (a busy machine is slower; say so with the figures).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.store_scale import build  # noqa: E402
from engine.store.paths import run_dir  # noqa: E402

ENTRY = REPO / "app" / "streamlit_app.py"
TARGETS = {"runs_cold_s": 3.0, "runs_warm_s": 1.0, "runs_filter_s": 1.0, "compare50_s": 3.0}

_COLD = """
import os, sys, time
sys.path.insert(0, {repo!r})
from streamlit.testing.v1 import AppTest
os.environ["MASKLAB_WORKSPACE"] = {ws!r}
t = time.perf_counter()
at = AppTest.from_file({entry!r}, default_timeout=600).run()
dt = time.perf_counter() - t
assert not at.exception, [e.value for e in at.exception]
print(dt)
"""


def sample_run(ws: Path) -> Path:
    """Train one tiny MAE on digits (40 steps, evaluated every 10, evaluated at its end) in a scratch
    workspace beside ``ws``; return its run folder (the source of the copied samples and evaluation)."""
    from tests.stamps import completed_run  # noqa: PLC0415 (the test helper trains through the real worker)

    scratch = ws.parent / "sample-ws"
    cfg = {"name": "sample", "model": {"preset": "tiny", "patch_size": 2},
           "evaluation": {"max_rows": 300, "tsne_max_rows": 0, "finetune_epochs": 1, "budget": None},
           "train": {"steps": 40, "eval_interval": 10, "checkpoint_interval": 40, "batch_size": 32,
                     "num_threads": 1, "device": "cpu", "warmup_steps": 2}}
    return run_dir(completed_run(cfg, scratch, evaluate=True), scratch)


def give_media(ws: Path, ids: list[str], source: Path) -> None:
    """Copy ``source``'s samples and evaluation files into each run of ``ids`` (their step numbers kept)."""
    for run_id in ids:
        d = run_dir(run_id, ws)
        for sub in ("samples", "evaluation"):
            (d / sub).mkdir(exist_ok=True)
            for p in (source / sub).glob("*"):
                if p.name != "job.json":
                    shutil.copy2(p, d / sub / p.name)


def runs_figures(ws: Path, repeats: int) -> dict:
    from streamlit.testing.v1 import AppTest  # noqa: PLC0415 (after the workspace is built)

    env = {**os.environ, "MASKLAB_WORKSPACE": str(ws)}
    cold = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", _COLD.format(repo=str(REPO), ws=str(ws), entry=str(ENTRY))],
                             capture_output=True, text=True, env=env, cwd=REPO)
        if out.returncode:
            raise RuntimeError(out.stderr[-2000:])
        cold.append(float(out.stdout.strip().splitlines()[-1]))
    os.environ["MASKLAB_WORKSPACE"] = str(ws)
    at = AppTest.from_file(str(ENTRY), default_timeout=600).run()
    warm = []
    for _ in range(repeats):
        t = time.perf_counter()
        at.run()
        warm.append(time.perf_counter() - t)
    assert not at.exception, [e.value for e in at.exception]
    rows = len(at.dataframe[0].value)
    filt = []
    for q in ["bench-00", "bench-01", "bench-1", "bench-0042", "live", "bench-19", "bench-05"][:max(repeats, 1)]:
        at.text_input(key="runs_q").set_value(q)
        t = time.perf_counter()
        at.run()
        filt.append(time.perf_counter() - t)
    assert not at.exception, [e.value for e in at.exception]
    return {"cold": cold, "warm": warm, "filter": filt, "rows_first_page": rows}


def compare_figures(ws: Path, ids: list[str], repeats: int) -> dict:
    from streamlit.testing.v1 import AppTest  # noqa: PLC0415 (after the workspace is built)

    os.environ["MASKLAB_WORKSPACE"] = str(ws)
    at = AppTest.from_file(str(ENTRY), default_timeout=600).run()
    at.switch_page("../pages/compare.py")
    at.query_params["runs"] = ",".join(ids)
    t = time.perf_counter()
    at.run()
    first = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - t)
    assert not at.exception, [e.value for e in at.exception]
    headers = [h.value for h in at.header]
    return {"first": first, "times": times, "headers": headers}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--long", type=int, default=200)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--short-steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compare", type=int, default=50)
    ap.add_argument("--workspace", type=Path, default=None, help="build here (default: a temporary folder)")
    ap.add_argument("--sample-run", type=Path, default=None, help="a run folder to copy samples and evaluation from")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="masklab-ui-scale-"))
    ws = args.workspace or root / "workspace"
    ws.mkdir(parents=True, exist_ok=True)
    try:
        t = time.time()
        source = args.sample_run or sample_run(ws)
        rng = np.random.default_rng(0)
        long_ids = build(ws, args.long, 0, args.steps, rng, ["completed"] * 19 + ["cancelled"])
        build(ws, args.runs - args.long, args.long, args.short_steps, rng,
              ["completed"] * 8 + ["failed", "cancelled", "running"])  # "running" without a lock: interrupted
        picked = long_ids[: args.compare]
        give_media(ws, picked, source)
        print(f"built {args.runs:,} runs ({args.long} x {args.steps:,} steps) in {time.time() - t:.0f} s: {ws}", flush=True)
        load0 = os.getloadavg()
        runs = runs_figures(ws, args.repeats)
        cmp = compare_figures(ws, picked, args.repeats)
        load1 = os.getloadavg()
    finally:
        if args.workspace is None:
            shutil.rmtree(root, ignore_errors=True)
    fig = {"runs_cold_s": statistics.median(runs["cold"]), "runs_warm_s": statistics.median(runs["warm"]),
           "runs_filter_s": statistics.median(runs["filter"]), "compare50_s": statistics.median(cmp["times"])}
    print(f"\nPages at scale: {args.runs:,} runs ({args.long} x {args.steps:,} steps), AppTest, medians of {args.repeats}; "
          f"load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end ({os.cpu_count()} cores)")
    print(f"  Runs page, cold (fresh process): {', '.join(f'{x:.2f}' for x in runs['cold'])} s")
    print(f"  Runs page, warm re-render:       {', '.join(f'{x:.2f}' for x in runs['warm'])} s "
          f"(table: {runs['rows_first_page']} rows on its first page)")
    print(f"  Runs page, filter change:        {', '.join(f'{x:.2f}' for x in runs['filter'])} s")
    print(f"  Compare, {len(picked)} runs: first {cmp['first']:.2f} s, then {', '.join(f'{x:.2f}' for x in cmp['times'])} s "
          f"({' / '.join(cmp['headers'])})")
    for k, target in TARGETS.items():
        print(f"  {k}: {fig[k]:.2f} s (target <= {target:g} s: {'met' if fig[k] <= target else 'NOT met'})")
    print(" ".join(f"{k}={v:.2f}" for k, v in fig.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
