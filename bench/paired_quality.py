"""Paired (image + caption) quality figures next to their baselines, from real masklab runs (issue 11).

    python bench/paired_quality.py                       # configs/paired-tuxpaint.yaml, seeds 0, 1, 2
    python bench/paired_quality.py --steps 600 --seeds 0 # shorter, one seed
    python bench/paired_quality.py --parallel            # the seeds as parallel processes (one thread each)

Imports ../shared/data/tuxpaint-stamps (623 real Tux Paint stamps with their English captions; read
in place) into a fresh workspace as a paired dataset: 32x32 RGB, padded on white, the seeded split
with 20% of the pairs in val (125 pairs, the set the issue's CCA figures were measured on). Then
trains configs/paired-tuxpaint.yaml once per seed through the real engine (``execute_run``: the
worker's code path, tokenizer, masks, validation) on one torch thread, and prints, averaged over the
seeds and per seed, the figures each run logged on the val pairs (``engine.tasks.paired``):

- retrieval: text-to-image and image-to-text Recall@1/5/10 with the contrastive embeddings, next to
  chance (exact) and the CCA baseline (PCA-reduced pixels vs TF-IDF captions, scikit-learn); a
  retrieved item whose caption equals the query's counts as a hit;
- caption-token accuracy with the whole caption hidden, predicted from the image, next to the same
  model with the image hidden too and the most frequent training token at each position;
- image reconstruction error (pixel MSE of the hidden patches, 75% random masks) with the caption
  visible and with it hidden.

Acceptance (issue 11), on the seed average: t2i R@5 above CCA; caption accuracy above both baselines;
the reconstruction error with the caption below the one without it, or an honest note. The budget
is 15 minutes of CPU per run: the process's CPU time is printed (the development machine is shared,
so the wall time says little).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.timed_run import timed_run  # noqa: E402  (after the path)
SHARED = Path(os.environ.get("MASKLAB_SHARED", REPO.parent / "shared")) / "data"
CONFIG = REPO / "configs" / "paired-tuxpaint.yaml"
DATASET, VAL_FRACTION, IMAGE_SIZE = "tuxpaint-bench", 0.2, 32
CPU_BUDGET_S = 900
KS = (1, 5, 10)
#: The figures reported, by group: (label, metric key).
FIGURES = {
    "retrieval": [(f"{d} R@{k} {who}", key) for d in ("t2i", "i2t") for k in KS
                  for who, key in (("model", f"val_{d}_r{k}"), ("CCA", f"baseline/cca/{d}_r{k}"),
                                   ("chance", f"baseline/chance/{d}_r{k}"))],
    "caption": [("caption acc, from the image", "val_caption_acc"),
                ("caption acc, image hidden too", "val_caption_blank_acc"),
                ("caption acc, most frequent token per position", "baseline/position"),
                ("caption acc, most frequent token", "baseline/unigram"),
                ("token acc, joint masks (75% patches, 15% tokens)", "val_token_acc")],
    "reconstruction": [("pixel MSE of hidden patches, caption visible", "val_mse"),
                       ("pixel MSE of hidden patches, caption hidden", "val_mse_no_caption"),
                       ("pixel MSE, training mean image", "baseline/mean_image/mse"),
                       ("pixel MSE, each image's mean visible pixel", "baseline/visible_mean/mse")],
}


def import_data(workspace: Path, max_rows: int | None = None) -> int:
    """Import the stamps (the first ``max_rows`` only, for the scaled-down test) as :data:`DATASET`;
    returns the pairs accepted."""
    from engine.data import ImportOptions, import_source

    src = SHARED / "tuxpaint-stamps"
    if max_rows is not None:  # a folder of links: the first rows of the table and their images
        import csv

        sub = workspace.parent / f"tuxpaint-head-{max_rows}"
        (sub / "images").mkdir(parents=True, exist_ok=True)
        with open(src / "captions.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))[: max_rows + 1]
        with open(sub / "captions.csv", "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(rows)
        col = rows[0].index("image")
        for r in rows[1:]:
            if not (sub / r[col]).exists():
                (sub / r[col]).symlink_to(src / r[col])
        src = sub
    rep = import_source(src, DATASET, ImportOptions(val_fraction=VAL_FRACTION, text_column="caption_en",
                                                    label_column="category"),
                        workspace=workspace, overwrite=True, image_size=IMAGE_SIZE, geometry="pad", pad_fill="white")
    return rep.accepted


def run_seed(workspace: Path, seed: int, steps: int | None = None, overrides: list[str] | None = None) -> dict:
    """Train the example config with ``train.seed = seed`` on :data:`DATASET` (imported already);
    returns ``{"seed", "latest" (every logged figure), "seconds", "cpu_seconds", "steps", "config",
    "load_before", "load_after", "run_id"}``.

    Raises:
        RuntimeError: the run did not complete (its error).
    """
    os.environ["MASKLAB_WORKSPACE"] = str(workspace)
    from engine.config import load_config

    sets = [f"data.dataset={DATASET}", f"train.seed={seed}", "evaluation.auto=false"]
    if steps is not None:
        sets += [f"train.steps={steps}", f"train.checkpoint_interval={steps}",
                 f"train.eval_interval={steps}", f"train.warmup_steps={max(1, min(100, steps // 10))}"]
    sets += overrides or []  # the caller's last
    cfg = load_config(CONFIG, sets)
    rec, timing = timed_run(cfg, workspace)
    return {"seed": seed, "latest": rec.latest, "config": rec.config, **timing}


def _seed_job(args: tuple) -> dict:
    return run_seed(*args)


def run(workspace: Path, seeds: list[int], steps: int | None = None, overrides: list[str] | None = None,
        parallel: bool = False, max_rows: int | None = None) -> dict:
    """Import the data, train one run per seed, average the figures.

    Returns:
        ``{"pairs", "runs": [run_seed(...)], "mean": {key: mean over seeds}, "checks": {name: bool}}``.
    """
    os.environ["MASKLAB_WORKSPACE"] = str(workspace)
    pairs = import_data(workspace, max_rows)
    if parallel and len(seeds) > 1:
        import multiprocessing as mp

        # every seed at once: the workspace's run slots (MASKLAB_MAX_RUNS, default 2) would queue the rest
        os.environ["MASKLAB_MAX_RUNS"] = str(max(len(seeds), int(os.environ.get("MASKLAB_MAX_RUNS", "2"))))
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(len(seeds), mp_context=mp.get_context("spawn")) as ex:
            runs = list(ex.map(_seed_job, [(workspace, s, steps, overrides) for s in seeds]))
    else:
        runs = [run_seed(workspace, s, steps, overrides) for s in seeds]
    return {"pairs": pairs, "runs": runs, **summarise(runs)}


def summarise(runs: list[dict]) -> dict:
    """``{"mean": {key: mean over the runs' latest figures}, "checks": {name: bool}}`` (acceptance)."""
    keys = [k for group in FIGURES.values() for _, k in group]
    mean = {k: sum(r["latest"][k] for r in runs) / len(runs) for k in keys}
    checks = {"t2i R@5 above CCA": mean["val_t2i_r5"] > mean["baseline/cca/t2i_r5"],
              "caption acc above the image-hidden model": mean["val_caption_acc"] > mean["val_caption_blank_acc"],
              "caption acc above the per-position baseline": mean["val_caption_acc"] > mean["baseline/position"],
              "recon error lower with the caption": mean["val_mse"] < mean["val_mse_no_caption"]}
    return {"mean": mean, "checks": checks}


def collect(workspaces: list[Path], step: int | None = None) -> list[dict]:
    """The bench runs already in ``workspaces`` (e.g. seeds trained by separate invocations), in the
    form of :func:`run_seed` (``seconds`` / ``cpu_seconds`` None: not measured here), with the figures
    they logged at ``step`` (default: their latest). A run that has not reached ``step`` is left out."""
    from engine.store import list_runs, read_metrics

    out = []
    for ws in workspaces:
        for rec in list_runs(workspace=ws):
            latest = dict(rec.latest)
            if step is not None:
                df = read_metrics([rec.run_id], workspace=ws, max_points=None)
                at = df[(df.step == step) | df.key.str.startswith("baseline/")]
                if not (at.key == "val_loss").any():
                    continue
                latest = dict(zip(at.key, at.value))
            out.append({"seed": rec.config["train"]["seed"], "latest": latest, "steps": step or rec.step,
                        "run_id": rec.run_id, "config": rec.config, "seconds": None, "cpu_seconds": None,
                        "load_before": (float("nan"),), "load_after": (float("nan"),)})
    return sorted(out, key=lambda r: r["seed"])


def print_report(out: dict, where: str) -> None:
    """The figures of :func:`run` (or :func:`summarise` over :func:`collect`), mean and per seed."""
    r0 = out["runs"][0]
    t = r0["config"]["train"]
    print(f"paired: {out.get('pairs', '?')} Tux Paint pairs ({DATASET}, {VAL_FRACTION:.0%} val, {IMAGE_SIZE}x{IMAGE_SIZE}), "
          f"config {CONFIG.name}, {r0['steps']} steps x batch {t['batch_size']}, lr {t['lr']:g}, "
          f"seeds {[r['seed'] for r in out['runs']]}")
    print(f"objective {json.dumps(r0['config']['objective']['terms'])}; masking {json.dumps(r0['config']['masking'])}; "
          f"task params {json.dumps(r0['config']['task_params'])}")
    for r in out["runs"]:
        if r["cpu_seconds"] is not None:
            print(f"  seed {r['seed']}: {r['seconds']:.0f} s wall, {r['cpu_seconds']:.0f} s CPU (budget {CPU_BUDGET_S} s), "
                  f"load average {r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f} (run {r['run_id']} in {where})")
    for group, rows in FIGURES.items():
        print(f"{group}:  mean  (per seed)")
        for label, key in rows:
            per = ", ".join(f"{r['latest'][key]:.4f}" for r in out["runs"])
            print(f"  {label:50s} {out['mean'][key]:.4f}  ({per})")
    for name, ok in out["checks"].items():
        print(f"  {name}: {'met' if ok else 'NOT met'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2", help="comma-separated train seeds (default 0,1,2)")
    p.add_argument("--steps", type=int, default=None, help="override train.steps")
    p.add_argument("--parallel", action="store_true", help="one process per seed")
    p.add_argument("--workspace", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set train.lr=2e-3")
    p.add_argument("--json", type=Path, default=None, help="also write every figure here")
    p.add_argument("--collect", type=Path, nargs="+", default=None, metavar="WORKSPACE",
                   help="train nothing: report the runs already in these workspaces (--at-step: their figures then)")
    p.add_argument("--at-step", type=int, default=None, help="with --collect: the evaluation at this step")
    args = p.parse_args(argv)
    if args.collect:
        runs = collect(args.collect, args.at_step)
        out = {"runs": runs, **summarise(runs)}
        print_report(out, ", ".join(map(str, args.collect)))
    else:
        ws = args.workspace or Path(tempfile.mkdtemp(prefix="masklab-bench-")) / "workspace"
        ws.mkdir(parents=True, exist_ok=True)
        out = run(ws, [int(s) for s in args.seeds.split(",")], args.steps, args.sets, args.parallel)
        print_report(out, str(ws))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
