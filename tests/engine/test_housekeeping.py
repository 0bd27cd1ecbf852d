"""Deleting runs (refused while active, or cancelled first) and datasets (the runs' results stay viewable)."""

from __future__ import annotations

import pytest

from engine.cli import main as cli
from engine.config import RunConfig
from engine.data import import_source, list_datasets
from engine.errors import RunActiveError, RunNotFoundError
from engine.housekeeping import delete_dataset, delete_run, runs_using
from engine.launcher import submit
from engine.store import create_run, get_run, list_runs, load_samples, read_metrics
from engine.worker import execute_run

CFG = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
       "train": {"steps": 6, "batch_size": 32, "eval_interval": 3, "checkpoint_interval": 6, "warmup_steps": 1,
                 "device": "cpu", "num_threads": 1}}


def test_a_queued_run_is_refused_then_deleted_after_cancel(workspace):
    run_id, d = create_run(RunConfig.from_dict(CFG).to_dict())  # queued, its worker not started yet
    with pytest.raises(RunActiveError, match=rf"run {run_id} is queued: cancel it first .*--cancel"):
        delete_run(run_id)
    assert d.is_dir() and get_run(run_id).status == "queued"
    assert cli(["delete", run_id]) == 2  # the CLI refuses the same way
    assert delete_run(run_id, cancel=True, timeout=5) >= 0
    assert not d.exists() and [r.run_id for r in list_runs()] == []
    with pytest.raises(RunNotFoundError):
        get_run(run_id)


@pytest.mark.slow
def test_a_training_run_is_cancelled_then_deleted(workspace):
    run_id = submit(RunConfig.from_dict({**CFG, "train": {**CFG["train"], "steps": 100_000}}))
    import time

    end = time.time() + 120
    while get_run(run_id).status != "running" and time.time() < end:
        time.sleep(0.3)
    with pytest.raises(RunActiveError, match="is running"):
        delete_run(run_id)
    assert delete_run(run_id, cancel=True, timeout=120) > 0
    assert run_id not in [r.run_id for r in list_runs()]


def test_deleting_a_dataset_keeps_the_runs_results_viewable(workspace, tmp_path, one_thread):
    src = tmp_path / "d.csv"
    src.write_text("text,label\n" + "".join(f"text number {i} about {'cats' if i % 2 else 'dogs'},"
                                           f"{'a' if i % 2 else 'b'}\n" for i in range(60)), encoding="utf-8")
    import_source(src, "mine")
    digits_run, d = create_run(RunConfig.from_dict(CFG).to_dict())
    assert execute_run(d) == "completed"
    from engine.data.storage import datasets_dir

    assert runs_using("digits") == [digits_run] and runs_using("mine") == []
    freed = delete_dataset("digits")
    assert freed > 0 and not (datasets_dir() / "digits").exists()
    assert "mine" in [i.name for i in list_datasets()]
    # the run still lists, with its metrics and samples
    assert get_run(digits_run).status == "completed"
    assert set(read_metrics([digits_run])["key"]) >= {"loss", "val_loss"}
    assert load_samples(digits_run)["images"].shape[1:] == (1, 8, 8)
    assert cli(["data", "delete", "mine"]) == 0 and cli(["data", "delete", "mine"]) == 2
