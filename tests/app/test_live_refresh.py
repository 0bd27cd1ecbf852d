"""Run detail's live panels refresh only while something they show can change (issue 41, point 1),
and its interactive box keeps its inputs in the URL (point 5).

A fragment's refresh is what Streamlit sends the browser: an ``auto_rerun`` message (interval,
fragment id) per scheduled fragment. AppTest keeps the messages of a run only to build its element
tree, so :func:`refreshes` records them from its script runner: the real page, the real messages.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest, app_test, local_script_runner

from app.components.runs import REFRESH, is_live
from engine.config import RunConfig
from engine.store import create_run, get_run, load_samples, run_dir, write_status
from engine.store.evaluations import _eval_dir, write_job
from engine.tasks import resolve
from tests.app.pages import lock_holder, open_with
from tests.app.test_url_state import _finished, url

REPO = Path(__file__).resolve().parents[2]
ENTRY = REPO / "app" / "streamlit_app.py"


class _Recording(local_script_runner.LocalScriptRunner):
    """The test's script runner, which also keeps the ``auto_rerun`` messages of its run."""

    seen: list = []

    def run(self, *args, **kwargs):
        try:
            return super().run(*args, **kwargs)
        finally:
            _Recording.seen = [(m.auto_rerun.interval, m.auto_rerun.fragment_id) for m in self.forward_msgs()
                               if m.WhichOneof("type") == "auto_rerun"]


@pytest.fixture
def refreshes(monkeypatch):
    """``refreshes()``: the ``(interval s, fragment id)`` of every fragment the last AppTest run scheduled."""
    monkeypatch.setattr(app_test, "LocalScriptRunner", _Recording)
    _Recording.seen = []
    return lambda: list(_Recording.seen)


def run_detail(params: dict[str, str]) -> AppTest:
    return open_with("../pages/run_detail.py", params)


@pytest.fixture(scope="module")
def image_run(shared_runs):
    """The session's completed, evaluated 20-step digits MAE run (read only), its workspace set."""
    run = shared_runs.get("image_mae")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(run.workspace))
        yield run.run_id


def test_a_completed_run_schedules_no_refresh(image_run, refreshes):
    at = run_detail({"run": image_run})
    assert not is_live(get_run(image_run))
    assert refreshes() == []
    assert any(h.value == "Mask it yourself" for h in at.subheader)  # the box is there, and answers
    at.button(key=f"mim_{image_run}_0_none").click().run()
    assert any("0 of 16 patches hidden" in c.value for c in at.caption)
    assert refreshes() == []


def test_a_running_run_and_a_run_being_evaluated_refresh_their_live_panels(workspace, refreshes):
    run_id, d = create_run(resolve(RunConfig.from_dict({"name": "live", "train": {"steps": 50}})).to_dict())
    with lock_holder(d) as holder:  # a live worker: it holds the run's lock
        write_status(d, {"status": "running", "step": 10, "total_steps": 50, "pid": holder.pid})
        run_detail({"run": run_id})
        every = float(REFRESH.rstrip("s"))
        assert [i for i, _ in refreshes()] == [every] * 3  # the summary, the samples and the evaluation
        assert len({f for _, f in refreshes()}) == 3
    # its worker gone, the run reads interrupted: nothing changes any more
    assert get_run(run_id).status == "interrupted"
    run_detail({"run": run_id})
    assert refreshes() == []
    # a completed run whose evaluation was just queued (by Compare) refreshes until the job ends
    write_status(d, {"status": "completed", "step": 50, "total_steps": 50})
    _eval_dir(run_dir(run_id)).mkdir(parents=True, exist_ok=True)
    write_job(run_dir(run_id), status="queued", step=50)
    assert is_live(get_run(run_id))
    run_detail({"run": run_id})
    assert [i for i, _ in refreshes()] == [every] * 3
    write_job(run_dir(run_id), status="completed", step=50)
    run_detail({"run": run_id})
    assert refreshes() == []


def test_the_masking_box_inputs_come_from_and_go_to_the_url(image_run):
    s = load_samples(image_run)
    at = run_detail({"run": image_run, "box_image": "2", "box_hidden": "[0,5,15]", "box_ckpt": "20"})
    assert at.selectbox(key=f"mim_img_{image_run}").value == 2
    rows = [g for g in at.get("button_group") if g.key and g.key.startswith(f"mim_{image_run}_2_row")]
    assert [sorted(r.value) for r in rows] == [[0], [1], [], [3]]  # patches 0, 5 and 15 of the 4x4 grid
    assert any(c.value.startswith("3 of 16 patches hidden · checkpoint of step 20") for c in at.caption)
    rows[2].set_value([0, 1]).run()  # hide patches 8 and 9 as well
    assert url(at)["box_hidden"] == "[0,5,8,9,15]" and url(at)["box_image"] == "2"
    at.selectbox(key=f"mim_img_{image_run}").set_value(3).run()  # another image starts from the run's mask
    assert url(at)["box_image"] == "3"
    assert url(at)["box_hidden"] == str(np.flatnonzero(s["mask"][3]).tolist()).replace(" ", "")
    # a hand-edited link: an image that does not exist falls back to the first, patches outside the grid are dropped
    at = run_detail({"run": image_run, "box_image": "99", "box_hidden": "[-1,16,\"x\"]"})
    assert at.selectbox(key=f"mim_img_{image_run}").value == 0
    assert any(c.value.startswith("0 of 16 patches hidden") for c in at.caption)


@pytest.mark.parametrize("kind", ["text_mlm", "text_span"])
def test_the_text_boxes_inputs_come_from_and_go_to_the_url(shared_runs, kind, monkeypatch):
    run = shared_runs.get(kind)
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(run.workspace))
    if kind == "text_mlm":  # the fill-in box: the sentence and the words hidden
        at = run_detail({"run": run.run_id, "box_sentence": "what is the capital of france ?", "box_hide": "[4]"})
        assert at.text_input(key=f"fill_text_{run.run_id}").value == "what is the capital of france ?"
        hide = at.button_group(key=f"fill_hide_{run.run_id}")
        assert hide.value == [4]
        assert "Model input: what is the capital [MASK] france ?" in "".join(el.proto.body for el in at.get("html"))
        hide.set_value([1, 4]).run()
        assert url(at)["box_hide"] == "[1,4]" and url(at)["box_sentence"] == "what is the capital of france ?"
        at.text_input(key=f"fill_text_{run.run_id}").set_value("who wrote hamlet ?").run()
        assert url(at)["box_sentence"] == "who wrote hamlet ?"
        at = run_detail({"run": run.run_id, "box_sentence": "1e3"})  # text that reads as JSON stays the text typed
        assert at.text_input(key=f"fill_text_{run.run_id}").value == "1e3" and url(at)["box_sentence"] == "1e3"
    else:  # the completion box: the text
        at = run_detail({"run": run.run_id, "box_text": "how far is [MASK] from the sun ?"})
        assert at.text_input(key=f"span_text_{run.run_id}").value == "how far is [MASK] from the sun ?"
        at.text_input(key=f"span_text_{run.run_id}").set_value("who [MASK] hamlet ?").run()
        assert url(at)["box_text"] == "who [MASK] hamlet ?"
    assert url(at)["box_ckpt"] == "6"  # the run's one checkpoint


def test_another_run_drops_the_box_settings_of_the_last(workspace):
    a, b = _finished("a"), _finished("b")
    at = run_detail({"run": b, "box_image": "3", "box_hidden": "[1]"})
    assert url(at)["box_image"] == "3"  # kept while the run is the link's (its box has no images to pick from)
    at.selectbox(key="rd_run").set_value(a).run()
    assert url(at)["run"] == a and not {k for k in url(at) if k.startswith("box_")}, url(at)
