"""Linear probe on frozen features of a small pretrained audio model, speaker-held-out on FSDD, next
to the same probe on log-mel mean/std features (issue 10's acceptance).

    python bench/audio_probe.py                          # 4 folds, audio_frames with the mel and EMA targets
    python bench/audio_probe.py --targets mel --steps 300 --folds jackson     # one short fold
    python bench/audio_probe.py --set train.lr=3e-3      # try a change

Protocol. ``../shared/data/fsdd`` (4 speakers x 10 digits x 50 takes, 8 kHz) is imported through
the real importer once per fold, with the speaker as the group column and the split seed that puts
exactly that speaker in validation (:func:`engine.data.dataset.seeded_split` takes one whole
speaker at ``val_fraction`` 0.25), so each speaker is the validation set once and the other three
train. For each fold:

- **pretraining** on the fold's train clips only (its labels unused): the config below trains
  through the real engine (``execute_run``, the worker's code path) on one torch thread, so its CPU
  time is the budget of issue 10 (at most 10 minutes per fold);
- **features**: :meth:`engine.tasks.audio._AudioTask.features` of the trained encoder (every window
  of a clip, nothing masked, tokens and windows averaged) for every clip;
- **baseline**: :func:`engine.eval.logmel_stats` (each clip's mean and std of every log-mel bin)
  on the same clips, from the same normalised log-mel frames;
- **probe**: :func:`engine.eval.linear_probe` (standardised features, logistic regression, ``C``
  chosen by leaving one train speaker out) on the train speakers, scored on the held-out speaker.

The figure is the mean accuracy over the four folds, model against baseline (each fold printed).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch

from engine.config import RunConfig, apply_overrides
from engine.data import ImportOptions, import_source, load_dataset
from engine.data.dataset import seeded_split
from engine.eval import linear_probe, logmel_stats
from engine.eval.inference import load_model
from engine.tasks import build_task, resolve

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.timed_run import timed_run  # noqa: E402  (after the path)

FSDD = REPO.parent / "shared" / "data" / "fsdd"
SPEAKERS = ("jackson", "nicolas", "theo", "yweweler")
TARGETS = ("mel", "ema")
#: issue 10: at most 10 minutes of one CPU thread of pretraining per fold
BUDGET_CPU_S = 600

#: The pretraining config (``audio_frames``; ``task_params.target`` is set per target).
CONFIG = {
    "task": "audio_frames",
    "data": {"audio": {"n_mels": 40, "window_ms": 25.0, "hop_ms": 10.0, "clip_seconds": 1.0}},
    "masking": {"strategy": "span_starts", "params": {"p": 0.065, "length": 5, "min_spans": 1}},
    "model": {"arch": "frame_transformer", "preset": "tiny", "patch_size": 2},
    "objective": {"loss": "mse"},
    "train": {"steps": 600, "batch_size": 32, "lr": 1.5e-3, "warmup_steps": 100, "eval_interval": 500,
              "checkpoint_interval": 100_000, "num_vis": 4, "num_threads": 1, "seed": 0},
}


def fold_seed(groups: list[str], speaker: str, val_fraction: float = 0.25) -> int:
    """The smallest split seed whose validation split is exactly ``speaker``'s clips."""
    names = sorted(set(groups))
    g = np.array([names.index(s) for s in groups])
    for seed in range(1000):
        split = seeded_split(np.zeros(len(g), np.int64), val_fraction, seed, g)
        if set(g[split == 1]) == {names.index(speaker)}:
            return seed
    raise RuntimeError(f"no split seed holds out exactly {speaker!r}")


def import_fold(source: Path, speaker: str, workspace: Path) -> str:
    """Import ``source`` (a folder or zip with FSDD's ``manifest.csv``) as ``fsdd-<speaker>`` with
    ``speaker`` as the validation split; returns the dataset name."""
    groups = manifest_speakers(source)
    seed = fold_seed(groups, speaker)
    name = f"fsdd-{speaker}"
    rep = import_source(source, name, ImportOptions(group_column="speaker", sample_rate=8000, val_fraction=0.25,
                                                    seed=seed), workspace=workspace)  # fmt: skip
    if rep.rejected:
        raise RuntimeError(f"{source}: rejected {rep.rejected[:3]}")
    ds = load_dataset(name, workspace)
    val = {ds.info.group_names[g] for g in ds.groups[ds.split == 1]}
    assert val == {speaker}, val
    return name


def manifest_speakers(source: Path) -> list[str]:
    """The ``speaker`` column of the source's manifest, in its row order."""
    if source.is_dir():
        text = (source / "manifest.csv").read_text()
    else:
        with zipfile.ZipFile(source) as z:
            text = z.read(next(n for n in z.namelist() if n.endswith("manifest.csv"))).decode()
    return [r["speaker"] for r in csv.DictReader(text.splitlines())]


def config_for(dataset: str, target: str, steps: int | None = None, overrides: dict | None = None) -> dict:
    """:data:`CONFIG` for ``dataset`` with ``target``, ``overrides`` merged one level deep per section."""
    cfg = json.loads(json.dumps(CONFIG))
    cfg.update(name=f"bench-{dataset}-{target}", data={**cfg["data"], "dataset": dataset},
               task_params={"target": target})
    for section, values in (overrides or {}).items():
        cfg.setdefault(section, {}).update(values) if isinstance(values, dict) else cfg.__setitem__(section, values)
    if steps is not None:
        cfg["train"].update(steps=steps, warmup_steps=min(cfg["train"]["warmup_steps"], steps // 10),
                            eval_interval=min(cfg["train"]["eval_interval"], steps))
    return cfg


def probe_sets(task) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{"train": (x, y), "val": (x, y)}`` of the model's frozen features and of the log-mel baseline."""
    ds = task._ds
    out = {}
    for split in ("train", "val"):
        rows = ds.indices(split)
        x, y = task.features(split)
        out[split] = (x, logmel_stats(task.feats, rows), y, ds.groups[rows])
    return out


def run_fold(dataset: str, target: str, workspace: Path, steps: int | None = None, overrides: dict | None = None,
             untrained: bool = False) -> dict:
    """Pretrain on ``dataset``'s train split, probe model and baseline on its val split.

    Returns:
        ``{"model", "baseline", "untrained", "cpu_seconds", "seconds", "steps", "config", "run_id",
        "val_spec_mse", "baseline_spec_mse"}`` (accuracies in [0, 1]; ``untrained``, when asked
        for: the same probe on the encoder before pretraining, the same init; else None).

    Raises:
        RuntimeError: the run did not complete (its error).
    """
    torch.set_num_threads(1)  # features and probes on one thread too, as the run
    os.environ["MASKLAB_WORKSPACE"] = str(workspace)

    cfg = resolve(RunConfig.from_dict(config_for(dataset, target, steps, overrides)))
    torch.manual_seed(cfg.train.seed)  # the loop's init: this task's model is the run's step-0 model
    task = build_task(cfg, "cpu", workspace)
    sets = probe_sets(task)
    (xt, bt, yt, gt), (xv, bv, yv, _) = sets["train"], sets["val"]
    untrained = linear_probe(xt, yt, xv, yv, groups=gt).accuracy if untrained else None
    baseline = linear_probe(bt, yt, bv, yv, groups=gt).accuracy

    rec, timing = timed_run(cfg, workspace)
    task.model.load_state_dict(load_model(rec.run_id, workspace=workspace).model.state_dict())
    sets = probe_sets(task)
    (xt, _, yt, gt), (xv, _, yv, _) = sets["train"], sets["val"]
    model = linear_probe(xt, yt, xv, yv, groups=gt).accuracy
    latest = rec.latest
    return {"model": model, "baseline": baseline, "untrained": untrained, **timing,
            "config": rec.config, "val_spec_mse": latest.get("val_spec_mse"),
            "baseline_spec_mse": min(latest.get("baseline/mean_spec_mse", np.inf), latest.get("baseline/interp_spec_mse", np.inf))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", type=Path, default=FSDD, help="FSDD folder (or a zip) with manifest.csv")
    p.add_argument("--folds", nargs="+", default=list(SPEAKERS), help="validation speakers (default: all four)")
    p.add_argument("--targets", nargs="+", default=list(TARGETS), choices=TARGETS)
    p.add_argument("--steps", type=int, default=None, help="override train.steps")
    p.add_argument("--untrained", action="store_true",
                   help="also probe the first target's encoder before pretraining (its random init)")
    p.add_argument("--workspace", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set train.lr=3e-3")
    args = p.parse_args(argv)

    ws = args.workspace or Path(tempfile.mkdtemp(prefix="masklab-bench-")) / "workspace"
    ws.mkdir(parents=True, exist_ok=True)
    overrides = apply_overrides({}, args.sets)
    results: dict[str, dict[str, dict]] = {t: {} for t in args.targets}
    for speaker in args.folds:
        dataset = import_fold(args.source, speaker, ws)
        for target in args.targets:
            is_first = target == args.targets[0]
            out = run_fold(dataset, target, ws, args.steps, overrides, args.untrained and is_first)
            results[target][speaker] = out
            before = f" (untrained {out['untrained']:.1%})" if args.untrained and is_first else ""
            print(f"fold {speaker:9} target {target}: probe {out['model']:.1%}{before}, "
                  f"log-mel mean/std {out['baseline']:.1%} · {out['steps']} steps, {out['cpu_seconds']:.0f} s CPU "
                  f"({out['seconds']:.0f} s wall) · val spectral MSE {out['val_spec_mse']:.3f} "
                  f"(best trivial {out['baseline_spec_mse']:.3f})", flush=True)
    c = next(iter(next(iter(results.values())).values()))["config"]
    print(f"\n{c['task']} {c['model']['preset']} (width/depth of the preset), {c['masking']['strategy']} masking, "
          f"{c['train']['steps']} steps x batch {c['train']['batch_size']}, lr {c['train']['lr']:g}, "
          f"{c['train']['num_threads']} torch thread; {c['data']['audio']['n_mels']} mel bins, "
          f"{c['data']['audio']['clip_seconds']:g} s window (workspace {ws})")
    print(f"  {'validation speaker':20}" + "".join(f"{s:>10}" for s in args.folds) + f"{'mean':>10}")
    first = next(iter(results.values()))
    rows = [("log-mel mean/std", [first[s]["baseline"] for s in args.folds])]
    if args.untrained:
        rows.append(("untrained encoder", [first[s]["untrained"] for s in args.folds]))
    for t, r in results.items():
        rows.append((f"pretrained, {t} target", [r[s]["model"] for s in args.folds]))
    for name, accs in rows:
        print(f"  {name:20}" + "".join(f"{a:10.1%}" for a in accs) + f"{np.mean(accs):10.1%}")
    base = np.mean(rows[0][1])
    for t, r in results.items():
        m = np.mean([r[s]["model"] for s in args.folds])
        worst = max(r[s]["cpu_seconds"] for s in args.folds)
        print(f"  {t} target: mean {m:.1%} vs baseline {base:.1%}: {'beats it' if m > base else 'does NOT beat it'}; "
              f"longest pretraining {worst:.0f} s CPU (budget {BUDGET_CPU_S} s): {'met' if worst <= BUDGET_CPU_S else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
