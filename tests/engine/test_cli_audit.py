"""The command line's foreground commands go through the same role check and audit as the
background ones: a foreground run is an audited launch with the status it ended in; a foreground
evaluation is refused in demo mode before it writes anything but its audit line."""

from __future__ import annotations

import json

from engine.config import RunConfig
from engine.store import create_run, list_runs
from engine.tasks import resolve
from tests.cli import engine_main

TINY = ["--set", "model.preset=tiny", "--set", "model.patch_size=2", "--set", "train.steps=2",
        "--set", "train.batch_size=8", "--set", "train.eval_interval=2", "--set", "train.device=cpu",
        "--set", "evaluation.auto=false", "--set", "name=fg"]


def _audit(ws) -> list[dict]:
    p = ws / "audit" / "audit.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def test_a_foreground_run_is_an_audited_launch_with_how_it_ended(workspace):
    out = engine_main("run", *TINY)
    assert out.returncode == 0, out.stderr
    (rec,) = list_runs(workspace)
    (line,) = [e for e in _audit(workspace) if e["action"] == "run.submit"]
    assert (line["target"], line["outcome"], line["status"], line["foreground"]) == (rec.run_id, "ok", "completed", True)


def test_a_foreground_evaluation_is_refused_in_demo_mode_and_writes_nothing(workspace):
    run_id, d = create_run(resolve(RunConfig.from_dict({"name": "x", "train": {"steps": 2}})).to_dict())
    before = sorted(p.relative_to(d) for p in d.rglob("*"))
    out = engine_main("evaluate", run_id, "--foreground", env={"MASKLAB_MODE": "demo"})
    assert out.returncode == 2 and "demo mode (MASKLAB_MODE=demo): it cannot evaluate runs" in out.stderr
    assert sorted(p.relative_to(d) for p in d.rglob("*")) == before  # demo writes nothing but the refusal
    assert [(e["action"], e["target"], e["outcome"]) for e in _audit(workspace)] == [("run.evaluate", run_id, "refused")]
