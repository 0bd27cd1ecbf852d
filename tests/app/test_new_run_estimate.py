"""New run's estimate under Launch (how long training and evaluation should take here), in AppTest
against the real engine: from a completed run of the same shape, or behind "Estimate time" (a real
short timing) when there is none."""

from __future__ import annotations

from app.components.urlstate import flatten
from engine.runner.estimate import estimate_run
from engine.store import get_run
from tests.app.pages import open_with

#: New run's form for a tiny digits MAE run (one parameter per dotted field, as its URL keeps them).
TINY = {"dataset": "digits", "task": "image_mim", "model.preset": "tiny", "model.patch_size": "2", "train.steps": "50",
        "train.batch_size": "16", "train.eval_interval": "20", "train.device": "cpu", "train.num_threads": "1",
        "evaluation.auto": "false"}


def _estimates(at) -> list[str]:
    return [c.value for c in at.caption if c.value.startswith("Training ≈")]


def test_new_run_shows_the_estimate_from_a_run_of_the_same_shape(shared_runs, tmp_path, monkeypatch):
    ws, ids = shared_runs.copy("image_mae", dest=tmp_path / "ws")
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    cfg = get_run(ids["image_mae"], workspace=ws).config
    cfg = {**cfg, "evaluation": {**cfg["evaluation"], "budget": 0.5}}  # the shared runs' None (no limit) is not estimated
    params = {k: str(v).lower() if isinstance(v, bool) else str(v)
              for k, v in flatten(cfg).items() if k != "name" and not isinstance(v, (list, dict))}
    at = open_with("../pages/new_run.py", params)
    assert _estimates(at) == [estimate_run(cfg, ws, allow_timing=False).text()]
    assert f"from run {ids['image_mae']}: 20 steps at" in _estimates(at)[0]
    assert "Estimate time" not in [b.label for b in at.button]


def test_estimate_time_runs_a_short_timing_when_no_run_exists(workspace):
    at = open_with("../pages/new_run.py", TINY)
    assert not _estimates(at)
    next(b for b in at.button if b.label == "Estimate time").click().run()
    assert not at.exception and not at.error
    (text,) = _estimates(at)
    assert "from a 5-step timing just now" in text and "evaluation" not in text  # evaluation.auto is off
    assert "Estimate time" not in [b.label for b in at.button]  # the click's rerun shows the timing instead
    at.run()  # kept for this config: no second timing, no button
    assert _estimates(at) == [text] and "Estimate time" not in [b.label for b in at.button]
