"""Server render time of the Compare page for 20 saved runs of 10,000 steps, every panel shown.

    python bench/compare_render.py                      # 20 runs x 10,000 steps, 5 renders
    python bench/compare_render.py --runs 4 --steps 500 --renders 2   # a smoke run

Builds a workspace through the store's own write path: each run is created with ``create_run``, its
metrics (``loss``, ``lr``, ``mask_ratio``, ``throughput`` every step, ``val_loss`` every 100 steps,
with step-by-step wall times) go through ``MetricsWriter`` (segments, compaction, the final
merge), its final status carries the figures a worker records (device, parameters, peak memory),
its samples are 8 real digits with a mask and a reconstruction (``save_samples``), its evaluation a
stored :class:`~engine.store.evaluations.Evaluation`. The numbers are made up (no training: 20 x
10,000 steps would take hours here); what is read and drawn is exactly what real runs give.

Then renders ``pages/compare.py`` with all runs selected (curves, config diff, reconstruction grid,
downstream table and bars, training cost, both exports) in Streamlit's AppTest: the server-side
script run a browser's request triggers. Prints the first run (cold: it also starts AppTest's
runtime, about 1.7 s of scanning installed packages for components that a server does once at
launch, and imports torch) and the median of the following runs of the same page, what a reload or
a widget change costs. Target (issue 9): at most 2 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from engine.config import RunConfig
from engine.data import load_dataset
from engine.store import MetricsWriter, Sample, create_run, save_samples, write_status
from engine.store.evaluations import Evaluation, save_evaluation
from engine.tasks import resolve

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TARGET_S = 2.0


def build(ws: Path, n_runs: int, steps: int) -> list[str]:
    """``n_runs`` completed runs of ``steps`` steps in workspace ``ws`` (see the module docstring)."""
    rng = np.random.default_rng(0)
    ds = load_dataset("digits", ws)
    val = ds.indices("val")[:8]
    images = ds.images[val].transpose(0, 3, 1, 2).astype(np.float32) / 255
    ids = []
    for i in range(n_runs):
        ratio = round(0.25 + 0.65 * i / max(1, n_runs - 1), 3)
        cfg = resolve(RunConfig.from_dict({"name": f"bench-{i:02d}", "masking": {"ratio": ratio},
                                           "model": {"patch_size": 2}, "train": {"steps": steps, "seed": i % 2}}))
        run_id, d = create_run(cfg.to_dict(), ws)
        t0 = time.time() - steps * 0.05
        clock = {"t": t0}
        w = MetricsWriter(d, run_id, flush_interval=1e9, clock=lambda: clock["t"])
        loss = 0.1 + 0.5 * np.exp(-np.arange(steps + 1) / (steps / 5)) + rng.normal(0, 0.005, steps + 1)
        for s in range(steps + 1):
            clock["t"] = t0 + 0.05 * s
            m = {"loss": float(loss[s]), "lr": 1e-3, "mask_ratio": ratio, "throughput": 2500.0 + rng.normal(0, 50)}
            if s % 100 == 0:
                m["val_loss"] = float(loss[s] + 0.01)
            w.log(s, m)
            if s % 200 == 0:
                w.flush()
        w.close()
        write_status(d, {"status": "completed", "created_at": t0, "started_at": t0, "ended_at": clock["t"],
                         "step": steps, "total_steps": steps, "latest": w.latest, "device": "cpu",
                         "n_params": 550_000, "peak_mem_bytes": int(480 * 2**20 + i * 2**20)})
        mask = rng.random((8, 4, 4)) < ratio
        pred = np.clip(images + rng.normal(0, 0.1, images.shape).astype(np.float32), 0, 1)
        pasted = np.where(np.kron(mask, np.ones((2, 2)))[:, None].astype(bool), pred, images).astype(np.float32)
        save_samples(d, Sample(steps, "image", {"images": images, "mask": mask, "pred_img": pred, "pasted": pasted,
                                                "labels": ds.labels[val].astype(np.int64)},
                               {"class_names": list(ds.info.class_names), "patch_size": 2}))
        rep = {e: {"probe_acc": float(rng.uniform(0.8, 0.95)), "knn_acc": float(rng.uniform(0.5, 0.95)),
                   "kmeans_nmi": float(rng.uniform(0.2, 0.7)), "kmeans_ari": float(rng.uniform(0, 0.5))}
               for e in ("trained", "random_init", "raw_input")}
        rep["chance"] = {"probe_acc": 0.1, "knn_acc": 0.1}
        save_evaluation(d, Evaluation(steps, rep, {"val_loss": float(loss[-1])}, {"train": 1618, "val": 179, "dim": 96},
                                      12.0, time.time()))
        ids.append(run_id)
    return ids


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--renders", type=int, default=5)
    ap.add_argument("--workspace", type=Path, default=None)
    args = ap.parse_args(argv)
    ws = args.workspace or Path(tempfile.mkdtemp(prefix="masklab-compare-"))
    os.environ["MASKLAB_WORKSPACE"] = str(ws)
    t0 = time.time()
    ids = build(ws, args.runs, args.steps)
    print(f"built {args.runs} runs x {args.steps} steps in {time.time() - t0:.0f} s ({ws})")

    times = []
    at = AppTest.from_file(str(REPO / "app" / "streamlit_app.py"), default_timeout=300)
    at.switch_page("../pages/compare.py")
    at.query_params["runs"] = ",".join(ids)
    for k in range(args.renders):
        t = time.perf_counter()
        at.run()  # the first run also starts AppTest's runtime (a server does that once, at launch)
        times.append(time.perf_counter() - t)
        if at.exception or at.error:
            print("page failed:", [e.value for e in at.exception] + [e.value for e in at.error])
            return 1
        shown = [h.value for h in at.header]
        if k == 0:
            print(f"panels: {', '.join(shown)}; {len(at.table)} tables, "
                  f"{sum(len(el.proto.imgs) for el in at.get('image'))} images")
    warm = statistics.median(times[1:]) if len(times) > 1 else times[0]
    print(f"Compare page, {args.runs} runs x {args.steps} steps: first render {times[0]:.2f} s, "
          f"then median {warm:.2f} s over {len(times) - 1} renders (target <= {TARGET_S:.0f} s); "
          f"load average {os.getloadavg()[0]:.1f}")
    return 0 if warm <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
