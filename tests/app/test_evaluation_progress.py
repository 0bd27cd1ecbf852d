"""An evaluation under way shows its phase and counts on Run detail and Runs, with the figures of the
phases it finished (the others pending), and a Stop button; one whose process is gone, or that was
cancelled, says so and keeps what it finished; a finished one says how it spent its budget and
offers a deeper one (issue 40)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.components.compare import downstream_frame
from app.components.evaluation import PENDING
from engine.errors import EvaluationCancelled
from engine.eval.job import evaluate_checkpoint
from engine.eval.progress import EvalProgress
from engine.store import get_run
from engine.store.evaluations import read_evaluations, save_evaluation
from engine.workspace import read_json
from tests.app.pages import lock_holder
from tests.app.test_housekeeping_pages import open_page


def _stopped_after_knn(d: Path):
    """A real evaluation of step 20 stopped as k-means starts: its finished phases stored as it
    stores them (a ``partial`` record), its job file as its progress left it (kNN done)."""
    def after_knn() -> bool:
        job = read_json(d / "evaluation" / "job.json")
        return job["status"] == "running" and "knn" in job["phases_done"]

    progress = EvalProgress(d, 20, should_stop=after_knn, pid=os.getpid())
    with pytest.raises(EvaluationCancelled):
        evaluate_checkpoint(d, 20, workspace=d.parent.parent, budget=None, progress=progress,
                            on_phase=lambda ev, maps: save_evaluation(d, ev))


def _table(at, title: str):
    return next(t.value for t in at.table if title in t.value.columns)


def test_an_evaluation_under_way_shows_its_phase_and_the_figures_so_far(shared_runs, tmp_path, monkeypatch):
    ws, ids = shared_runs.copy("image_mae", dest=tmp_path / "workspace")
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    run_id = ids["image_mae"]
    d = get_run(run_id, ws).path
    (d / "evaluation" / "step-0000020.json").unlink()  # the run's own evaluation: this one is its first
    _stopped_after_knn(d)
    with lock_holder(d):  # the evaluation's process: it holds the run's lock
        at = open_page("run_detail", {"run": run_id})
        bars = [el.proto.text for el in at.get("progress")]
        assert bars == ["Evaluating step 20: kNN, part 3 of 3 · done: loading the run, encoding the rows, "
                        "reconstruction figures, linear probes, kNN"], bars
        assert "Stop" in {b.label for b in at.button}
        table = _table(at, "this run")
        ev = read_evaluations(run_id, ws)[0][-1]
        assert ev.status == "partial"
        assert table.loc["linear probe", "this run"] == f"{ev.representation['trained']['probe_acc']:.1%}"
        assert table.filter(like="NMI", axis=0)["this run"].tolist() == [PENDING]  # k-means: not yet
        assert table.loc["fine-tune", "random init"] == PENDING
        at = open_page("runs", {})  # Runs shows it too, for this ended run
        assert any("· Evaluating step 20: kNN" in el.proto.text for el in at.get("progress"))
    # its process is gone: the page says so, and keeps what it finished
    at = open_page("run_detail", {"run": run_id})
    assert not at.get("progress")
    assert any("stopped before its end (its process is gone)" in w.value for w in at.warning)
    assert _table(at, "this run").loc["linear probe", "this run"] != PENDING


def test_a_finished_evaluation_says_how_it_spent_its_budget(shared_runs, monkeypatch):
    run = shared_runs.get("image_mae")  # evaluated at its end with no limit (tests/runs.py)
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(run.workspace))
    at = open_page("run_detail", {"run": run.run_id})
    ev = read_evaluations(run.run_id, run.workspace)[0][-1]
    steps = int(ev.budget["finetune_steps"])
    assert ev.budget["share"] is None and steps == ev.downstream["trained"]["finetune_steps"] > 0
    assert f"No budget limit: the fine-tune's full recipe; took {round(ev.seconds)} s; fine-tune {steps} of the recipe's " \
           f"{steps} steps per encoder." in [c.value for c in at.caption]
    assert "Evaluate again" in {b.label for b in at.button}  # a deeper one (the page is not changed: no click)


def test_a_fine_tune_cut_short_by_the_budget_is_marked_as_such(shared_runs, tmp_path, monkeypatch):
    """The row reads "fine-tune (3 of 25 steps)", the caption says it is not the recipe's result, the
    budget line says how far it got and its note is not repeated; Compare's table gives the steps beside it."""
    ws, ids = shared_runs.copy("image_mae", dest=tmp_path / "workspace")
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    run_id = ids["image_mae"]
    d = get_run(run_id, ws).path
    ev = read_evaluations(run_id, ws)[0][-1]
    recipe = int(ev.budget["recipe_steps"])
    ev.budget.update(share=0.5, train_s=10.0, budget_s=5.0, finetune_steps=3)  # as a 0.5 budget would have cut it
    note = f"fine-tune shortened by the budget: 3 of the recipe's {recipe} steps (0.5 x 10 s of training)"
    ev.notes.append(note)
    save_evaluation(d, ev)
    at = open_page("run_detail", {"run": run_id})
    table = _table(at, "this run")
    assert f"fine-tune (3 of {recipe} steps)" in table.index
    captions = [c.value for c in at.caption]
    assert any("Cut short by the evaluation budget" in c and "not the recipe's downstream result" in c for c in captions)
    assert any(f"fine-tune 3 of the recipe's {recipe} steps per encoder" in c for c in captions)
    assert note not in captions
    frame = downstream_frame({run_id: read_evaluations(run_id, ws)[0][-1]}, {run_id: "r"})  # Compare's table
    assert frame["fine-tune steps"].tolist() == [f"3 of {recipe}"]
