"""Image reconstruction quality of the default recipe, next to the four trivial baselines.

    python bench/image_quality.py digits            # scikit-learn's 8x8 digits (bundled)
    python bench/image_quality.py fashion-mnist     # Fashion-MNIST 28x28 (Debian's dataset-fashion-mnist)
    python bench/image_quality.py digits --steps 300 --workspace /tmp/ws   # shorter, kept workspace
    python bench/image_quality.py digits --set train.lr=3e-3                # try a change

The config is exactly what New run proposes for the dataset (``engine.tasks.image.recipe_for``:
patch size, model, objective, steps, batch, learning rate, warmup) with random masking at ratio
0.75. It trains through the real engine in a fresh workspace (``execute_run``: the worker's own code
path, with the worker's thread count, ``cpu_count // MASKLAB_MAX_RUNS``), and prints the run's
masked-patch pixel MSE and PSNR next to the baselines it logged at step 0 on the same fixed
validation masks (``engine.eval.image_baselines``): the training mean image, each image's mean
visible pixel, biharmonic inpainting (on the first 512 validation images) and the mean of the 10
training images nearest on the visible pixels.

Targets (issue 8): masked-patch val MSE at most 50% of the mean image's and at most 80% of the best
baseline's, in a run of at most 5 minutes. The wall time, the process's CPU time and the load
average before and after are printed: on a shared machine the wall time says little, the CPU time
(one thread) is close to the wall time of a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from engine.config import RunConfig, apply_overrides
from engine.data import load_dataset
from engine.eval.image_baselines import BASELINES
from engine.tasks.image.recipe import recipe_for

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.timed_run import timed_run  # noqa: E402  (after the path)

DATASETS = ("digits", "fashion-mnist")
#: Issue 8's acceptance: run / mean image <= 0.5 and run / best baseline <= 0.8.
TARGET_VS_MEAN_IMAGE = 0.5
TARGET_VS_BEST = 0.8


def config_for(dataset: str, workspace: Path, steps: int | None = None, overrides: dict | None = None) -> dict:
    """The run config New run proposes for ``dataset`` (random masking at 0.75), as a nested dict,
    with ``overrides`` merged one level deep per section and ``steps`` scaled down if given."""
    info = load_dataset(dataset, workspace).info
    r = recipe_for(info.image_shape)
    cfg = {"name": f"bench-{dataset}", "task": "image_mim", "data": {"dataset": dataset},
           "masking": {"strategy": "random", "ratio": 0.75}, **json.loads(json.dumps(r))}
    for section, values in (overrides or {}).items():
        cfg.setdefault(section, {}).update(values) if isinstance(values, dict) else cfg.__setitem__(section, values)
    if steps is not None:
        t = cfg["train"]
        t.update(steps=steps, warmup_steps=min(t.get("warmup_steps", 0), steps // 10),
                 eval_interval=min(t.get("eval_interval", steps), steps), checkpoint_interval=steps)
    return cfg


def run(dataset: str, workspace: Path, steps: int | None = None, overrides: dict | None = None) -> dict:
    """Train the default recipe of ``dataset`` in ``workspace`` and return its figures.

    Returns:
        ``{"mse", "psnr", "baselines": {name: {"mse", "psnr"}}, "vs_mean_image", "vs_best", "best",
        "seconds", "cpu_seconds", "steps", "config", "load_before", "load_after"}``.

    Raises:
        RuntimeError: the run did not complete (its error).
    """
    os.environ["MASKLAB_WORKSPACE"] = str(workspace)

    config = RunConfig.from_dict(config_for(dataset, workspace, steps, overrides))
    rec, timing = timed_run(config, workspace)
    latest = rec.latest
    base = {b: {"mse": latest[f"baseline/{b}/mse"], "psnr": latest[f"baseline/{b}/psnr"]} for b in BASELINES}
    best = min(base, key=lambda b: base[b]["mse"])
    return {"mse": latest["val_mse"], "psnr": latest["val_psnr"], "baselines": base, "best": best,
            "vs_mean_image": latest["val_mse"] / base["mean_image"]["mse"], "vs_best": latest["val_mse"] / base[best]["mse"],
            "config": rec.config, **timing}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", choices=DATASETS)
    p.add_argument("--steps", type=int, default=None, help="override train.steps (a shorter run)")
    p.add_argument("--workspace", type=Path, default=None, help="keep the run here (default: a temporary folder)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set train.lr=3e-3")
    args = p.parse_args(argv)

    ws = args.workspace or Path(tempfile.mkdtemp(prefix="masklab-bench-")) / "workspace"
    ws.mkdir(parents=True, exist_ok=True)
    out = run(args.dataset, ws, args.steps, apply_overrides({}, args.sets))
    c, t = out["config"], out["config"]["train"]
    print(f"{args.dataset}: {c['model']['arch']}/{c['model']['preset']}, patch {c['model']['patch_size']}, "
          f"loss {c['objective']['loss']}{' (norm pix)' if c['objective']['norm_pix_loss'] else ''}, "
          f"{out['steps']} steps x batch {t['batch_size']}, lr {t['lr']:g}, warmup {t['warmup_steps']}; "
          f"random masking at {c['masking']['ratio']}")
    print(f"time: {out['seconds']:.0f} s wall, {out['cpu_seconds']:.0f} s CPU, torch threads {t['num_threads']} "
          f"of {os.cpu_count()} CPUs; load average before {out['load_before'][0]:.2f}, after "
          f"{out['load_after'][0]:.2f} (run {out['run_id']} in {ws})")
    print(f"  {'masked-patch pixel figures':32} {'MSE':>8} {'PSNR dB':>8}")
    print(f"  {'this run':32} {out['mse']:8.4f} {out['psnr']:8.2f}")
    for b, v in out["baselines"].items():
        note = " (first 512 val images)" if b == "biharmonic" else ""
        print(f"  {'baseline: ' + b.replace('_', ' ') + note:32} {v['mse']:8.4f} {v['psnr']:8.2f}")
    ok1, ok2 = out["vs_mean_image"] <= TARGET_VS_MEAN_IMAGE, out["vs_best"] <= TARGET_VS_BEST
    print(f"  run / mean image: {out['vs_mean_image']:.0%} (target <= {TARGET_VS_MEAN_IMAGE:.0%}): "
          f"{'met' if ok1 else 'NOT met'}")
    print(f"  run / best baseline ({out['best']}): {out['vs_best']:.0%} (target <= {TARGET_VS_BEST:.0%}): "
          f"{'met' if ok2 else 'NOT met'}")
    print(f"  wall time {out['seconds']:.0f} s (target <= 300 s): {'met' if out['seconds'] <= 300 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
