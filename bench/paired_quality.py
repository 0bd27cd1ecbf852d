"""Paired (image + caption, or audio + text) quality figures next to their baselines, from real masklab runs (issue 11).

    python bench/paired_quality.py                       # configs/paired-tuxpaint.yaml, seeds 0, 1, 2
    python bench/paired_quality.py --steps 600 --seeds 0 # shorter, one seed
    python bench/paired_quality.py --parallel            # the seeds as parallel processes (one thread each)
    python bench/paired_quality.py --audio               # audio-text: configs/paired-audio-fsdd.yaml on FSDD

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

``--audio`` (:data:`AUDIO`): ../shared/data/fsdd (2,000 real spoken digits, 4 speakers) imported
through the real importer as an audio dataset, split by speaker (``--group-column speaker``, a
quarter of the speakers in val: one speaker never heard in training), 8 kHz; then
configs/paired-audio-fsdd.yaml (each clip's log-mel spectrogram with the digit's English word,
``task_params.text_source: digit_word``). The same figures with the clip in place of the image:
audio->text (``i2t``) and text->audio (``t2i``) Recall@K next to chance and CCA (PCA of the
normalised log-mel vs TF-IDF), word accuracy from the audio next to the audio-hidden model and the
per-position baseline, spectrogram MSE of the hidden patches (normalised log-mel, clip frames only)
with and without the text next to the training mean spectrogram.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.fsdd import subset_zip
from engine.config import load_config
from engine.data import ImportOptions, import_source, load_dataset
from engine.store import list_runs, read_metrics

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


@dataclass(frozen=True)
class Recipe:
    """One bench recipe: ``kind`` (``image`` or ``audio``), the example config, the dataset name it
    is imported as, the figures reported (group -> ``[(label, metric key)]``), the acceptance checks
    (name -> ``(metric that must be smaller, metric that must be larger)``, on the seed average) and
    the data in words."""

    kind: str
    config: Path
    dataset: str
    figures: dict
    checks: dict
    what: str


IMAGE = Recipe("image", CONFIG, DATASET, FIGURES,
               {"t2i R@5 above CCA": ("baseline/cca/t2i_r5", "val_t2i_r5"),
                "caption acc above the image-hidden model": ("val_caption_blank_acc", "val_caption_acc"),
                "caption acc above the per-position baseline": ("baseline/position", "val_caption_acc"),
                "recon error lower with the caption": ("val_mse", "val_mse_no_caption")},
               f"Tux Paint pairs ({DATASET}, {VAL_FRACTION:.0%} val, {IMAGE_SIZE}x{IMAGE_SIZE})")
AUDIO_DATASET, AUDIO_VAL_FRACTION = "fsdd-paired-bench", 0.25
#: FSDD's speakers are its groups: a quarter of them (one of four) only in val.
AUDIO = Recipe("audio", REPO / "configs" / "paired-audio-fsdd.yaml", AUDIO_DATASET, {
    "retrieval": [(f"{name} R@{k} {who}", key) for d, name in (("i2t", "audio->text"), ("t2i", "text->audio"))
                  for k in KS for who, key in (("model", f"val_{d}_r{k}"), ("CCA", f"baseline/cca/{d}_r{k}"),
                                               ("chance", f"baseline/chance/{d}_r{k}"))],
    "caption": [("word acc, from the audio", "val_caption_acc"),
                ("word acc, audio hidden too", "val_caption_blank_acc"),
                ("word acc, most frequent token per position", "baseline/position"),
                ("token acc, joint masks (75% patches, 15% tokens)", "val_token_acc")],
    "reconstruction": [("spectrogram MSE of hidden patches, text visible", "val_mse"),
                       ("spectrogram MSE of hidden patches, text hidden", "val_mse_no_caption"),
                       ("spectrogram MSE, training mean spectrogram", "baseline/mean_spec/mse"),
                       ("spectrogram MSE, interpolated in time", "baseline/interp_spec/mse")],
}, {"text->audio R@5 above CCA": ("baseline/cca/t2i_r5", "val_t2i_r5"),
    "audio->text R@5 above chance": ("baseline/chance/i2t_r5", "val_i2t_r5"),
    "word acc above the audio-hidden model": ("val_caption_blank_acc", "val_caption_acc"),
    "word acc above the per-position baseline": ("baseline/position", "val_caption_acc"),
    "spectrogram error lower with the text": ("val_mse", "val_mse_no_caption")},
   f"FSDD clips ({AUDIO_DATASET}, speaker held out: {AUDIO_VAL_FRACTION:.0%} of the speakers in val, 8 kHz)")
RECIPES = {"image": IMAGE, "audio": AUDIO}



def import_data(workspace: Path, max_rows: int | None = None, recipe: Recipe = IMAGE) -> int:
    """Import the recipe's data (the first ``max_rows`` only, for the scaled-down test) as its
    dataset: the stamps as :data:`DATASET`, or FSDD as :data:`AUDIO_DATASET` (:func:`import_fsdd`);
    returns the pairs (clips) accepted."""
    if recipe.kind == "audio":
        return import_fsdd(workspace, max_rows)

    src = SHARED / "tuxpaint-stamps"
    if max_rows is not None:  # a folder of links: the first rows of the table and their images

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


def import_fsdd(workspace: Path, takes: int | None = None) -> int:
    """Import ../shared/data/fsdd as :data:`AUDIO_DATASET`: every clip (or, with ``takes``, the
    takes ``0 .. takes - 1`` of each digit and speaker, as a zip of them with their manifest rows:
    :func:`bench.fsdd.subset_zip`), the speaker as group (one of the four speakers only in val),
    resampled to 8 kHz. Returns the clips accepted.

    Raises:
        RuntimeError: a clip was rejected, or the val split is not exactly one speaker.
    """
    src = SHARED / "fsdd"
    if takes is not None:
        src = subset_zip(SHARED, workspace.parent / f"fsdd-takes-{takes}.zip", "0123456789", None, takes)
    rep = import_source(src, AUDIO_DATASET, ImportOptions(group_column="speaker", label_column="label", sample_rate=8000,
                                                          val_fraction=AUDIO_VAL_FRACTION),
                        workspace=workspace, overwrite=True)  # fmt: skip
    if rep.rejected:
        raise RuntimeError(f"fsdd: rejected {rep.rejected[:3]}")
    ds = load_dataset(AUDIO_DATASET, workspace)
    val = {ds.info.group_names[g] for g in ds.groups[ds.split == 1]}
    train = {ds.info.group_names[g] for g in ds.groups[ds.split == 0]}
    if len(val) != 1 or val & train:
        raise RuntimeError(f"fsdd: val speakers {sorted(val)}, train speakers {sorted(train)}: not one held-out speaker")
    return rep.accepted



def run_seed(workspace: Path, seed: int, steps: int | None = None, overrides: list[str] | None = None,
             recipe: Recipe = IMAGE) -> dict:
    """Train the recipe's example config with ``train.seed = seed`` on its dataset (imported already);
    returns ``{"seed", "latest" (every logged figure), "seconds", "cpu_seconds", "steps", "config",
    "load_before", "load_after", "run_id"}``.

    Raises:
        RuntimeError: the run did not complete (its error).
    """
    os.environ["MASKLAB_WORKSPACE"] = str(workspace)

    sets = [f"data.dataset={recipe.dataset}", f"train.seed={seed}", "evaluation.auto=false"]
    if steps is not None:
        sets += [f"train.steps={steps}", f"train.checkpoint_interval={steps}",
                 f"train.eval_interval={steps}", f"train.warmup_steps={max(1, min(100, steps // 10))}"]
    sets += overrides or []  # the caller's last
    cfg = load_config(recipe.config, sets)
    rec, timing = timed_run(cfg, workspace)
    return {"seed": seed, "latest": rec.latest, "config": rec.config, **timing}


def _seed_job(args: tuple) -> dict:
    return run_seed(*args)


def run(workspace: Path, seeds: list[int], steps: int | None = None, overrides: list[str] | None = None,
        parallel: bool = False, max_rows: int | None = None, recipe: Recipe = IMAGE) -> dict:
    """Import the recipe's data, train one run per seed, average the figures. ``max_rows``: the
    first stamps, or for FSDD the first takes of each digit and speaker.

    Returns:
        ``{"kind", "pairs", "runs": [run_seed(...)], "mean": {key: mean over seeds}, "checks": {name: bool}}``.
    """
    os.environ["MASKLAB_WORKSPACE"] = str(workspace)
    pairs = import_data(workspace, max_rows, recipe)
    if parallel and len(seeds) > 1:
        # every seed at once: the workspace's run slots (MASKLAB_MAX_RUNS, default 2) would queue the rest
        os.environ["MASKLAB_MAX_RUNS"] = str(max(len(seeds), int(os.environ.get("MASKLAB_MAX_RUNS", "2"))))

        with ProcessPoolExecutor(len(seeds), mp_context=mp.get_context("spawn")) as ex:
            runs = list(ex.map(_seed_job, [(workspace, s, steps, overrides, recipe) for s in seeds]))
    else:
        runs = [run_seed(workspace, s, steps, overrides, recipe) for s in seeds]
    return {"kind": recipe.kind, "pairs": pairs, "runs": runs, **summarise(runs, recipe)}


def summarise(runs: list[dict], recipe: Recipe = IMAGE) -> dict:
    """``{"mean": {key: mean over the runs' latest figures}, "checks": {name: bool}}`` (the
    recipe's acceptance checks)."""
    keys = [k for group in recipe.figures.values() for _, k in group]
    mean = {k: sum(r["latest"][k] for r in runs) / len(runs) for k in keys}
    checks = {name: mean[lo] < mean[hi] for name, (lo, hi) in recipe.checks.items()}
    return {"mean": mean, "checks": checks}


def collect(workspaces: list[Path], step: int | None = None) -> list[dict]:
    """The bench runs already in ``workspaces`` (e.g. seeds trained by separate invocations), in the
    form of :func:`run_seed` (``seconds`` / ``cpu_seconds`` None: not measured here), with the figures
    they logged at ``step`` (default: their latest). A run that has not reached ``step`` is left out."""
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


def print_report(out: dict, where: str, recipe: Recipe = IMAGE) -> None:
    """The figures of :func:`run` (or :func:`summarise` over :func:`collect`), mean and per seed."""
    r0 = out["runs"][0]
    t = r0["config"]["train"]
    print(f"paired: {out.get('pairs', '?')} {recipe.what}, "
          f"config {recipe.config.name}, {r0['steps']} steps x batch {t['batch_size']}, lr {t['lr']:g}, "
          f"seeds {[r['seed'] for r in out['runs']]}")
    print(f"objective {json.dumps(r0['config']['objective']['terms'])}; masking {json.dumps(r0['config']['masking'])}; "
          f"task params {json.dumps(r0['config']['task_params'])}")
    for r in out["runs"]:
        if r["cpu_seconds"] is not None:
            print(f"  seed {r['seed']}: {r['seconds']:.0f} s wall, {r['cpu_seconds']:.0f} s CPU (budget {CPU_BUDGET_S} s), "
                  f"load average {r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f} (run {r['run_id']} in {where})")
    for group, rows in recipe.figures.items():
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
    p.add_argument("--audio", action="store_true",
                   help="audio-text pairs: configs/paired-audio-fsdd.yaml on ../shared/data/fsdd, a speaker held out")
    p.add_argument("--takes", type=int, default=None,
                   help="with --audio: only the first TAKES recordings of each digit and speaker (a shorter import)")
    args = p.parse_args(argv)
    recipe = AUDIO if args.audio else IMAGE
    if args.collect:
        runs = collect(args.collect, args.at_step)
        out = {"kind": recipe.kind, "runs": runs, **summarise(runs, recipe)}
        print_report(out, ", ".join(map(str, args.collect)), recipe)
    else:
        ws = args.workspace or Path(tempfile.mkdtemp(prefix="masklab-bench-")) / "workspace"
        ws.mkdir(parents=True, exist_ok=True)
        out = run(ws, [int(s) for s in args.seeds.split(",")], args.steps, args.sets, args.parallel,
                  args.takes if args.audio else None, recipe)
        print_report(out, str(ws), recipe)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
