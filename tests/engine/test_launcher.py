"""Launcher and worker processes: background runs, cancel, and concurrent writers + a reader."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from engine.config import RunConfig
from engine.data import load_dataset
from engine.errors import MasklabError
from engine.runner.launcher import cancel, submit
from engine.store import get_run, list_runs, lock_holder, read_metrics, run_alive
from engine.tasks import resolve

CFG = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
       "train": {"steps": 120, "batch_size": 32, "eval_interval": 40, "checkpoint_interval": 1000,
                 "warmup_steps": 5, "device": "cpu"}}

READER = textwrap.dedent("""
    import json, sys, time
    from engine.store import get_run, read_metrics
    run_ids, deadline = sys.argv[1:3], time.time() + float(sys.argv[3])
    errors, reads, rows_seen = [], 0, []
    while time.time() < deadline:
        try:
            df = read_metrics(run_ids, ["loss", "val_loss"], max_points=None)
            reads += 1
            rows_seen.append(len(df))
            if all(get_run(r).status in ("completed", "failed", "cancelled") for r in run_ids):
                break
        except Exception as e:  # a lock error or a torn file would land here
            errors.append(f"{type(e).__name__}: {e}")
        time.sleep(0.5)
    final = read_metrics(run_ids, ["loss", "val_loss"], max_points=None)
    out = {"errors": errors, "reads": reads, "rows_seen": rows_seen,
           "steps": {f"{r}/{k}": sorted(int(s) for s in final[(final.run_id == r) & (final.key == k)].step)
                     for r in run_ids for k in ("loss", "val_loss")}}
    print(json.dumps(out))
""")


def _wait(pred, timeout: float, what: str) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.mark.slow
def test_two_writers_and_a_reader_process(workspace):
    """Two training processes write while a third reads every 0.5 s: no lock error, nothing lost."""
    load_dataset("digits")  # register once, so both workers only read it
    ids = [submit(resolve(RunConfig.from_dict({**CFG, "name": f"w{i}"}))) for i in range(2)]
    reader = subprocess.run([sys.executable, "-c", READER, *ids, "300"], capture_output=True, text=True,
                            timeout=330)
    assert reader.returncode == 0, reader.stderr
    out = json.loads(reader.stdout.strip().splitlines()[-1])
    assert out["errors"] == []
    assert out["reads"] >= 5 and out["rows_seen"][-1] > out["rows_seen"][0]  # it read while they wrote
    for r in ids:
        rec = get_run(r)
        assert rec.status == "completed", rec.error
        assert out["steps"][f"{r}/loss"] == list(range(1, 121))
        assert out["steps"][f"{r}/val_loss"] == [0, 40, 80, 120]
    # both ran at the same time (two slots by default)
    starts = [get_run(r).started_at for r in ids]
    ends = [get_run(r).ended_at for r in ids]
    assert max(starts) < min(ends)


@pytest.mark.slow
def test_cancel_a_running_background_run(workspace):
    run_id = submit(resolve(RunConfig.from_dict({**CFG, "train": {**CFG["train"], "steps": 100_000}})))
    _wait(lambda: get_run(run_id).step > 0, 120, "the run to start training")
    d = get_run(run_id).path
    assert run_alive(d) and lock_holder(d) == get_run(run_id).pid
    assert cancel(run_id) is True
    _wait(lambda: get_run(run_id).status == "cancelled", 60, "status cancelled")
    _wait(lambda: not run_alive(d), 30, "the worker to exit")
    rec = get_run(run_id)
    assert 0 < rec.step < 100_000
    assert cancel(run_id) is False  # already ended
    logged = read_metrics([run_id], ["loss"], max_points=None)
    assert logged.step.max() == rec.step  # everything logged before the stop was flushed


@pytest.mark.parametrize("override, field", [
    ({"data": {"dataset": "missing-set"}}, "data.dataset"),
    ({"model": {"preset": "huge", "patch_size": 2}}, "model.preset"),
    ({"model": {"preset": "tiny", "patch_size": 3}}, "model.patch_size"),
    ({"masking": {"ratio": 0.01}}, "masking.ratio"),   # round(0.01 * 16) = 0 masked patches
    ({"masking": {"ratio": 0.99}}, "masking.ratio"),   # all 16 masked: the encoder sees nothing
    # Bernoulli 0.95 over 2x2 patches: 0.95**4 = 81% of the samples fully masked
    ({"masking": {"strategy": "bernoulli", "ratio": 0.95}, "model": {"preset": "tiny", "patch_size": 4}}, "masking.ratio"),
    ({"masking": {"strategy": "periodic", "params": {"k": 1}}}, "masking.params"),  # every patch
    ({"masking": {"strategy": "span"}}, "masking.strategy"),  # sequences only, not patch grids
])
def test_submit_refuses_a_run_that_cannot_train(workspace, override, field):
    with pytest.raises(MasklabError, match=field):
        submit(resolve(RunConfig.from_dict({**CFG, **override})))
    assert list_runs() == []  # nothing was created, no process started


@pytest.mark.slow
def test_cli_and_background_runs_train_identically(workspace, tmp_path):
    """The same config file, from the CLI (foreground) and the dashboard's path (background worker):
    both resolve the same thread count, record it in the config, and give bit-identical losses on CPU."""
    load_dataset("digits")
    cfg = resolve(RunConfig.from_dict({**CFG, "train": {**CFG["train"], "steps": 30, "eval_interval": 10}}))
    assert cfg.train.num_threads == 0  # "auto": resolved when the run starts
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    bg = submit(cfg)
    out = subprocess.run([sys.executable, "-m", "engine", "run", str(path)], cwd=Path(__file__).resolve().parents[2],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    fg = out.stdout.split()[1]
    _wait(lambda: get_run(bg).status == "completed", 300, "the background run")
    cfg_bg, cfg_fg = get_run(bg).config, get_run(fg).config
    assert cfg_bg == cfg_fg and cfg_bg["train"]["num_threads"] >= 1 and cfg_bg["train"]["deterministic"] is False
    assert get_run(bg).extra["num_threads"] == cfg_bg["train"]["num_threads"]
    a, b = (read_metrics([r], ["loss", "val_loss"], max_points=None) for r in (bg, fg))
    assert len(a) == 34 and a.step.tolist() == b.step.tolist() and a.value.tolist() == b.value.tolist()
