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

Targets (issue 7): MLM val top-1 >= best baseline + 5 points, in at most 10 minutes on this 2-core CPU;
span completion: infilled-span token accuracy above every baseline. The span figure is
``val_span_acc_pos``: the model is told each span's length, as the baselines are (they emit one token
per hidden position), and writes each position's most probable token from the text and the position
(``SpanInfiller.per_position``, the decision that maximises expected token accuracy); the greedy
figures (``val_span_acc``, ``val_span_acc_len``) are printed with the other validation figures. The wall time, the process's CPU
time and the load average before and after are printed: the development machine is shared, so the
wall time says little; the run trains on one torch thread (the worker's ``cpu_count //
MASKLAB_MAX_RUNS``), and its CPU time is the 10-minute budget (it too grows under heavy load, by up
to about 1.5x, as the processes share caches and memory bandwidth).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from engine.config import RunConfig, apply_overrides
from engine.data import ImportOptions, import_source
from engine.store import run_dir

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.timed_run import timed_run  # noqa: E402  (after the path)

SHARED = Path(os.environ.get("MASKLAB_SHARED", REPO.parent / "shared")) / "data"

#: The recipes measured for issue 7 (see bench/README.md for the figures).
RECIPES = {
    "mlm": {
        "source": ("trec/train.tsv", {"label_column": "label"}),
        "config": {
            "name": "bench-mlm-trec", "task": "text_mlm",
            # Characters: TREC's 4,842 training questions are ~74k WordPiece tokens, too few for a
            # word-level model to beat the count baselines in minutes (bench/README.md, "Text quality").
            "data": {"tokenizer": {"kind": "char", "max_len": 128}},
            # Validation masks at BERT's 15%; training ramps to 40% (more predicted tokens per step).
            "masking": {"strategy": "random", "ratio": 0.15, "schedule": "linear", "final_ratio": 0.4},
            "model": {"arch": "bert", "preset": "tiny"},
            "train": {"steps": 3000, "batch_size": 32, "lr": 1e-3, "warmup_steps": 200, "eval_interval": 500,
                      "checkpoint_interval": 3000, "weight_decay": 0.01, "seed": 0},
        },
        "metric": "val_top1", "baselines": ("unigram_top1", "position_top1", "bigram_top1"), "margin": 0.05,
        "cpu_budget_s": 600,
    },
    "span": {
        "source": ("ag-news/test_part_a.csv", {"text_column": "description", "label_column": "label"}),
        "config": {
            "name": "bench-span-agnews", "task": "text_span",
            "data": {"tokenizer": {"kind": "wordpiece", "vocab_size": 8000, "max_len": 96}},
            "masking": {"strategy": "sentence_span"},
            "model": {"arch": "t5_span", "preset": "tiny"},
            # Each text hides up to all of its decoder input in training, so that the model also learns
            # each span position from the text alone: the per-position decoding the metric reads.
            "task_params": {"decoder_input_mask": 1.0},
            "train": {"steps": 3000, "batch_size": 64, "lr": 1e-3, "warmup_steps": 200, "eval_interval": 500,
                      "checkpoint_interval": 3000, "weight_decay": 0.01, "seed": 0},
        },
        "metric": "val_span_acc_pos", "baselines": ("unigram_acc", "position_acc", "bigram_acc"), "margin": 0.0,
        "cpu_budget_s": None,
    },
}


def _merge(into: dict, over: dict) -> dict:
    """Merge the nested dict ``over`` into ``into`` (in place, at every depth); returns ``into``."""
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v
    return into


def run(kind: str, workspace: Path, steps: int | None = None, overrides: dict | None = None,
        max_rows: int | None = None) -> dict:
    """Import the recipe's dataset into ``workspace``, train it, return the figures.

    Args:
        kind: ``"mlm"`` or ``"span"``.
        steps: override ``train.steps`` (the slow test's scaled-down version).
        overrides: nested dict merged over the recipe's config (at every depth).
        max_rows: import only the first rows of the source table (scaled-down version).

    Returns:
        ``{"metric", "value", "baselines": {name: value}, "best_baseline", "margin", "seconds" (wall),
        "cpu_seconds" (this process), "load_before", "load_after", "steps", "config", "dataset", "latest",
        "info" (task.json), "run_id", "cpu_budget_s"}``.

    Raises:
        RuntimeError: the run did not complete (its error).
    """
    os.environ["MASKLAB_WORKSPACE"] = str(workspace)

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
    _merge(cfg, overrides or {})
    if steps is not None:
        t = cfg["train"]
        t.update(steps=steps, warmup_steps=min(t["warmup_steps"], steps // 10), checkpoint_interval=steps,
                 eval_interval=max(1, min(t["eval_interval"], steps)))
    config = RunConfig.from_dict(cfg)
    rec, timing = timed_run(config, workspace)
    base = {b: rec.latest[f"baseline/{b}"] for b in r["baselines"]}
    return {"metric": r["metric"], "value": rec.latest[r["metric"]], "baselines": base,
            "best_baseline": max(base.values()), "margin": r["margin"], **timing,
            "cpu_budget_s": r["cpu_budget_s"],
            "config": rec.config, "dataset": {"name": name, "accepted": report.accepted},
            "latest": rec.latest, "info": json.loads((run_dir(rec.run_id, workspace) / "task.json").read_text())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=sorted(RECIPES))
    p.add_argument("--steps", type=int, default=None, help="override train.steps")
    p.add_argument("--workspace", type=Path, default=None, help="keep the run here (default: a temporary folder)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set train.lr=2e-3")
    args = p.parse_args(argv)

    overrides = apply_overrides({}, args.sets)
    ws = args.workspace or Path(tempfile.mkdtemp(prefix="masklab-bench-")) / "workspace"
    ws.mkdir(parents=True, exist_ok=True)
    out = run(args.kind, ws, args.steps, overrides)
    tok = out["config"]["data"]["tokenizer"]
    t = out["config"]["train"]
    print(f"{args.kind}: {out['dataset']['name']} ({out['dataset']['accepted']} texts), task {out['config']['task']}, "
          f"model {out['config']['model']['arch']}/{out['config']['model']['preset']}, {out['steps']} steps x batch "
          f"{t['batch_size']}, lr {t['lr']:g}, warmup {t['warmup_steps']}, weight decay {t['weight_decay']:g}, "
          f"length-grouped batches {t['group_by_length']}")
    print(f"time: {out['seconds']:.0f} s wall, {out['cpu_seconds']:.0f} s CPU, torch threads {t['num_threads']} of "
          f"{os.cpu_count()} CPUs; load average before {out['load_before'][0]:.2f}, after {out['load_after'][0]:.2f} "
          f"(run {out['run_id']} in {ws})")
    print(f"tokenizer: {tok['kind']}, vocab target {tok['vocab_size']} (reached {out['info']['vocab_size']}), "
          f"lowercase {tok['lowercase']}, min frequency {tok['min_frequency']}, max {tok['max_len']} tokens; "
          f"masking {json.dumps(out['config']['masking'])}, task params {json.dumps(out['config']['task_params'])}")
    width = max(len(b) for b in out["baselines"]) + 10
    print(f"  {'this run: ' + out['metric']:{width}} {out['value']:.4f}")
    for b, v in out["baselines"].items():
        print(f"  {'baseline: ' + b:{width}} {v:.4f}")
    gap = out["value"] - out["best_baseline"]
    ok = gap >= out["margin"] if out["margin"] else gap > 0
    print(f"  margin over the best baseline: {gap * 100:+.2f} points (target {'>=' if out['margin'] else '>'} "
          f"{out['margin'] * 100:.0f}): {'met' if ok else 'NOT met'}")
    if out["cpu_budget_s"]:
        ok = out["cpu_seconds"] <= out["cpu_budget_s"]
        print(f"  CPU time {out['cpu_seconds']:.0f} s, one torch thread (target <= {out['cpu_budget_s']} s): "
              f"{'met' if ok else 'NOT met'}")
    extra = {k: round(v, 4) for k, v in out["latest"].items() if k.startswith("val_")}
    print(f"  all validation figures: {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
