"""A run whose training is done while its worker evaluates the final checkpoint (status ``phase``
evaluating) says so on Runs and Run detail, instead of sitting at "running · 100%"."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from streamlit.testing.v1 import AppTest

from app.components.runs import activity
from engine.config import RunConfig
from engine.store import create_run, write_status
from engine.tasks import resolve
from tests.app.pages import lock_holder

REPO = Path(__file__).resolve().parents[2]
ENTRY = REPO / "app" / "streamlit_app.py"


def test_a_run_evaluating_its_final_checkpoint_says_so(workspace):
    run_id, d = create_run(resolve(RunConfig.from_dict({"name": "ev", "train": {"steps": 50}})).to_dict())
    with lock_holder(d) as holder:  # a live worker: it holds the run's lock
        line = f"**ev · {run_id}** · training done at step 50 / 50 · evaluating the final checkpoint (linear probe, kNN, k-means, fine-tune)"
        for phase, shown in ((None, False), ("evaluating", True)):
            write_status(d, {"status": "running", "step": 50, "total_steps": 50, "pid": holder.pid,
                             **({"phase": phase} if phase else {})})
            at = AppTest.from_file(str(ENTRY), default_timeout=60).run()  # Runs, the default page
            assert not at.exception, [e.value for e in at.exception]
            texts = [el.proto.text for el in at.get("progress")]
            assert (line in texts) == shown, texts
            next(b for b in at.button if b.label == "Cancel").click().run()  # asks first, in the phase's words
            asked = [m.value for m in at.markdown if m.value.startswith(f"Cancel **ev · {run_id}**?")]
            assert asked == [f"Cancel **ev · {run_id}**? " + (
                "Its training is done; the evaluation of its final checkpoint stops, and the run stays completed "
                "(it can be evaluated again from Compare)." if shown else "It stops after its current step (now 50 "
                "of 50); a cancelled run keeps its checkpoints and can be resumed.")], asked
            next(b for b in at.button if b.label == "Keep running").click().run()
            at.switch_page("../pages/run_detail.py")
            at.query_params["run"] = run_id
            at.run()
            infos = [i.value for i in at.info]
            assert any(i.startswith("Training is done; the worker is evaluating the final checkpoint") for i in infos) == shown


def test_a_training_run_says_how_long_it_has_left_at_its_pace():
    """``activity``: the steps left at the run's pace so far (its duration over its steps)."""
    rec = SimpleNamespace(status="running", step=10, total_steps=50, duration_s=30.0, extra={})
    assert activity(rec) == "running · step 10 / 50 · about 2 min 0 s left in training"
    assert activity(SimpleNamespace(**{**vars(rec), "step": 0})) == "running · step 0 / 50"  # no pace yet
    assert activity(SimpleNamespace(**{**vars(rec), "status": "queued"})) == "queued · step 10 / 50"
