"""Text quality figures next to their baselines, from one real masklab run each.

    python bench/text_quality.py mlm     # TREC: BERT MLM (smallest preset) vs three count baselines
    python bench/text_quality.py span    # AG News: span completion vs the same three baselines
    python bench/text_quality.py mlm --steps 600 --workspace /tmp/ws    # shorter, kept workspace

Each command imports its dataset from ../shared/data into a fresh workspace (read in place; TREC and
AG News are for tests and benchmarks only), trains through the real engine (``execute_run``: the
worker's own code path, tokenizer, masks and validation), and prints the run's validation figure next
to the baselines it logged at step 0. The baselines are measured by the run itself, on its fixed
validation masks with its tokenizer (``engine.eval.text_baselines``):

- the most frequent training token;
- the most frequent training token at each position;
- a bidirectional bigram: the most likely token between its left and right neighbours in the input
  the model sees (training counts, with back-off).

Targets (issue 7): MLM val top-1 >= best baseline + 5 points, in at most 10 minutes on a 2-core CPU;
span completion: infilled-span token accuracy above every baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED = Path(os.environ.get("MASKLAB_SHARED", REPO.parent / "shared")) / "data"

#: The recipes measured for issue 7 (see bench/README.md for the figures).
RECIPES = {
    "mlm": {
        "source": ("trec/train.tsv", {"label_column": "label"}),
        "config": {
            "name": "bench-mlm-trec", "task": "text_mlm",
            "data": {"tokenizer": {"kind": "wordpiece", "vocab_size": 4000, "max_len": 64}},
            "masking": {"strategy": "random", "ratio": 0.15},
            "model": {"arch": "bert", "preset": "tiny"},
            "train": {"steps": 6000, "batch_size": 64, "lr": 1e-3, "warmup_steps": 200, "eval_interval": 500,
                      "checkpoint_interval": 6000, "weight_decay": 0.01, "seed": 0},
        },
        "metric": "val_top1", "baselines": ("unigram_top1", "position_top1", "bigram_top1"), "margin": 0.05,
    },
    "span": {
        "source": ("ag-news/test_part_a.csv", {"text_column": "description", "label_column": "label"}),
        "config": {
            "name": "bench-span-agnews", "task": "text_span",
            "data": {"tokenizer": {"kind": "wordpiece", "vocab_size": 8000, "max_len": 96}},
            "masking": {"strategy": "sentence_span"},
            "model": {"arch": "t5_span", "preset": "tiny"},
            "train": {"steps": 3000, "batch_size": 64, "lr": 1e-3, "warmup_steps": 200, "eval_interval": 500,
                      "checkpoint_interval": 3000, "weight_decay": 0.01, "seed": 0},
        },
        "metric": "val_span_acc", "baselines": ("unigram_acc", "position_acc", "bigram_acc"), "margin": 0.0,
    },
}


def run(kind: str, workspace: Path, steps: int | None = None, overrides: dict | None = None,
        max_rows: int | None = None) -> dict:
    """Import the recipe's dataset into ``workspace``, train it, return the figures.

    Args:
        kind: ``"mlm"`` or ``"span"``.
        steps: override ``train.steps`` (the slow test's scaled-down version).
        overrides: nested dict merged over the recipe's config (one level deep per section).
        max_rows: import only the first rows of the source table (scaled-down version).

    Returns:
        ``{"metric", "value", "baselines": {name: value}, "best_baseline", "margin", "seconds", "steps",
        "config", "dataset"}``.
    """
    os.environ["MASKLAB_WORKSPACE"] = str(workspace)
    from engine.config import RunConfig
    from engine.data import ImportOptions, import_source
    from engine.store import create_run, get_run
    from engine.worker import execute_run

    r = RECIPES[kind]
    rel, opts = r["source"]
    src = SHARED / rel
    if max_rows is not None:
        head = src.read_text(encoding="utf-8").splitlines()[: max_rows + 1]
        src = workspace.parent / f"head-{max_rows}{src.suffix}"
        src.write_text("\n".join(head) + "\n", encoding="utf-8")
    name = f"{kind}-data"
    report = import_source(src, name, ImportOptions(**opts), workspace=workspace, overwrite=True)
    cfg = json.loads(json.dumps(r["config"]))
    cfg["data"]["dataset"] = name
    for section, values in (overrides or {}).items():
        cfg.setdefault(section, {}).update(values) if isinstance(values, dict) else cfg.__setitem__(section, values)
    if steps is not None:
        cfg["train"].update(steps=steps, checkpoint_interval=steps, eval_interval=max(1, min(cfg["train"]["eval_interval"], steps)))
    config = RunConfig.from_dict(cfg)
    run_id, d = create_run(config.to_dict(), workspace)
    t0 = time.perf_counter()
    status = execute_run(d)
    seconds = time.perf_counter() - t0
    rec = get_run(run_id, workspace)
    if status != "completed":
        raise RuntimeError(f"run {run_id} ended {status}: {rec.error}")
    base = {b: rec.latest[f"baseline/{b}"] for b in r["baselines"]}
    return {"metric": r["metric"], "value": rec.latest[r["metric"]], "baselines": base,
            "best_baseline": max(base.values()), "margin": r["margin"], "seconds": seconds, "steps": rec.step,
            "config": rec.config, "dataset": {"name": name, "accepted": report.accepted},
            "latest": rec.latest, "info": json.loads((d / "task.json").read_text())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=sorted(RECIPES))
    p.add_argument("--steps", type=int, default=None, help="override train.steps")
    p.add_argument("--workspace", type=Path, default=None, help="keep the run here (default: a temporary folder)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set train.lr=2e-3")
    args = p.parse_args(argv)
    from engine.config import apply_overrides

    overrides = apply_overrides({}, args.sets)
    ws = args.workspace or Path(tempfile.mkdtemp(prefix="masklab-bench-")) / "workspace"
    ws.mkdir(parents=True, exist_ok=True)
    out = run(args.kind, ws, args.steps, overrides)
    tok = out["config"]["data"]["tokenizer"]
    print(f"{args.kind}: {out['dataset']['name']} ({out['dataset']['accepted']} texts), task {out['config']['task']}, "
          f"model {out['config']['model']['arch']}/{out['config']['model']['preset']}, {out['steps']} steps in "
          f"{out['seconds']:.0f} s ({os.cpu_count()} CPUs, torch threads {out['config']['train']['num_threads']})")
    print(f"tokenizer: {tok['kind']}, vocab target {tok['vocab_size']} (reached {out['info']['vocab_size']}), "
          f"lowercase {tok['lowercase']}, min frequency {tok['min_frequency']}, max {tok['max_len']} tokens; "
          f"masking {json.dumps(out['config']['masking'])}")
    width = max(len(b) for b in out["baselines"]) + 10
    print(f"  {'this run: ' + out['metric']:{width}} {out['value']:.4f}")
    for b, v in out["baselines"].items():
        print(f"  {'baseline: ' + b:{width}} {v:.4f}")
    gap = out["value"] - out["best_baseline"]
    ok = gap >= out["margin"] if out["margin"] else gap > 0
    print(f"  margin over the best baseline: {gap * 100:+.2f} points (target {'>=' if out['margin'] else '>'} "
          f"{out['margin'] * 100:.0f}): {'met' if ok else 'NOT met'}")
    extra = {k: round(v, 4) for k, v in out["latest"].items() if k.startswith("val_")}
    print(f"  all validation figures: {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
