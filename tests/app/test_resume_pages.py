"""Resume from the dashboard: the Resume buttons of Runs and Run detail and the config history.

AppTest on the real engine: runs are trained in-process and stopped by an exception in the
worker's step callback (ends ``failed``, checkpoint of step 4 kept); a click resumes through
``engine.runner.launcher.resume``, which starts a real background worker (those cases are slow).
"""

from __future__ import annotations

import time

import pytest

from engine.config import RunConfig
from engine.runner.worker import execute_run
from engine.store import create_run, get_run, read_config_history
from engine.tasks import resolve
from tests.app.test_reliability_pages import page  # AppTest of a page, with ?run=<id>

CFG = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
       "train": {"steps": 12, "batch_size": 32, "eval_interval": 4, "checkpoint_interval": 4, "warmup_steps": 2,
                 "device": "cpu", "num_threads": 1}}


def stopped_run(name: str, stop_after: int | None = 6) -> str:
    """A run trained in-process, ended ``failed`` after step ``stop_after`` (None: completed)."""
    run_id, d = create_run(resolve(RunConfig.from_dict({**CFG, "name": name})).to_dict())

    def crash(step: int) -> None:
        if step == stop_after:
            raise RuntimeError("simulated crash")

    execute_run(d, on_step=crash)
    return run_id


def wait_done(run_id: str, timeout: float = 180) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if not get_run(run_id).is_active:
            return
        time.sleep(0.3)
    raise AssertionError(f"{run_id} still active after {timeout}s")


def test_resume_buttons_only_for_runs_that_can_resume(workspace):
    """Runs: a Resume button for a failed run with a checkpoint; none for a completed run or for a
    failed run that ended before its first checkpoint. Run detail: the form for the first only."""
    resumable, done, early = stopped_run("crashed"), stopped_run("done", None), stopped_run("early", 2)
    at = page("runs")
    keys = {b.key for b in at.button if b.key and b.key.startswith("resume-")}
    assert keys == {f"resume-{resumable}"}
    assert any("resumable from step 4" in m.value for m in at.markdown)

    at = page("run_detail", resumable)
    assert at.number_input(key="resume_lr").value == 1.5e-3 and at.number_input(key="resume_steps").value == 12
    for other in (done, early):
        at = page("run_detail", other)
        assert not [n for n in at.number_input if n.key in ("resume_lr", "resume_steps")]
        assert not any(m.value.startswith("**Config history**") for m in at.markdown)


@pytest.mark.slow
def test_resume_from_runs_page(workspace):
    run_id = stopped_run("crashed")
    at = page("runs")
    at.button(key=f"resume-{run_id}").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    wait_done(run_id)
    rec = get_run(run_id)
    assert rec.status == "completed" and rec.step == 12 and rec.extra["resume_from"] == 4


@pytest.mark.slow
def test_resume_with_changes_from_run_detail_then_its_config_history(workspace):
    run_id = stopped_run("crashed")
    at = page("run_detail", run_id)
    at.number_input(key="resume_lr").set_value(5e-4)
    at.number_input(key="resume_steps").set_value(16)
    next(b for b in at.button if b.label == "Resume").click().run()
    # the status box above still shows the failure read before the click
    assert not at.exception and [e.value for e in at.error] == ["Run failed: RuntimeError: simulated crash"]
    assert any(s.value.startswith("Resuming from step 4 with train.lr=0.0005, train.steps=16") for s in at.success)
    wait_done(run_id)
    rec = get_run(run_id)
    assert rec.status == "completed" and rec.step == 16, rec.error
    assert read_config_history(rec.path)[-1]["changed"] == {"train.lr": [0.0015, 0.0005], "train.steps": [12, 16]}

    at = page("run_detail", run_id)
    assert any(m.value == "**Config history**" for m in at.markdown)
    table = next(d.value for d in at.dataframe if "from step" in d.value.columns)
    assert table.to_dict("records") == [{"from step": 4, "changed": "train.lr: 0.0015 → 0.0005; train.steps: 12 → 16"}]
    assert not [n for n in at.number_input if n.key == "resume_lr"]  # completed: nothing to resume
