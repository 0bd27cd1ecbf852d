"""TrainState (engine/training/state.py) and the injected writers (engine/training/writers.py): a
state's ``state_dict`` round-trips in memory and through checkpoint files, and ``fit`` writes only
through the writers it is given. On the toy task of tests/plugins (an MLP on 8x8 digits)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import tests.plugins.toy_task  # noqa: F401 (registers toy_pixels)
from engine.config import RunConfig
from engine.errors import DamagedFileError
from engine.store import create_run
from engine.store.checkpoints import (
    STATE,
    list_checkpoints,
    load_checkpoint_state,
    load_weights,
)
from engine.tasks import resolve
from engine.training.loop import fit, load_checkpoint, setup
from engine.training.writers import CheckpointFiles, memory_writers

TOY = {"task": "toy_pixels", "masking": {"strategy": "random", "ratio": 0.5},
       "train": {"steps": 8, "batch_size": 64, "eval_interval": 4, "checkpoint_interval": 4, "lr": 3e-3,
                 "warmup_steps": 2, "seed": 7, "device": "cpu", "num_threads": 1, "keep_checkpoints": 2}}


def _cfg(**train) -> RunConfig:
    return resolve(RunConfig.from_dict({**TOY, "train": {**TOY["train"], **train}}))


def _files(root):
    return sorted((p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in root.rglob("*") if p.is_file())


def _assert_same(a, b, where="state"):
    """Equal nested state: tensors elementwise (and dtype), everything else by ==, NaN equal to NaN."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (where, set(a) ^ set(b))
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b, (where, a, b)


def _steps(writers, key="loss"):
    return [(s, m[key]) for s, m in writers.metrics.rows if key in m]


def test_fit_writes_only_through_its_writers(workspace, one_thread):
    """setup + fit with in-memory writers: the run folder receives no file, and the writers get
    the run info, the baselines and step 0's eval, every step's figures, the evals, the samples and
    the checkpoints (the newest two kept)."""
    cfg = _cfg()
    _, d = create_run(cfg.to_dict())
    before = _files(d.parent)
    w = memory_writers(keep_checkpoints=2)
    state = setup(cfg, w, workspace=workspace)
    result = fit(state, w)
    assert _files(d.parent) == before  # no file in the run folder (nor any other under runs/) changed
    assert result.steps_done == 8 and not result.stopped and result.device == "cpu"
    assert w.info.info["task"] == "toy_pixels" and w.info.info["device"] == "cpu"
    assert [s for s, _ in _steps(w)] == list(range(1, 9))
    assert [s for s, _ in _steps(w, "val_loss")] == [0, 4, 8]
    assert {"loss", "lr", "mask_ratio", "throughput", "step_time"} <= set(w.metrics.rows[-2][1])
    assert result.val_loss_first == _steps(w, "val_loss")[0][1] and result.val_loss_last == _steps(w, "val_loss")[-1][1]
    assert [s.step for s in w.samples.samples] == [0, 4, 8]
    assert sorted(w.checkpoints.states) == [4, 8]  # step 4 and 8 (keep 2)
    last = w.checkpoints.states[8]
    assert last["step"] == 8 and last["loop"]["pos"] == state.pos and last["config"] == cfg.to_dict()
    _assert_same(last["model"], state.model.state_dict(), "model")
    assert w.metrics.flushes >= 4  # before each checkpoint, after each eval, at the end


def test_state_dict_round_trip_continues_the_run_bit_identically(workspace, one_thread):
    """A run stopped after step 3 keeps a checkpoint of step 3 in memory; a fresh state loaded from
    it has the same state_dict and trains steps 4..8 exactly as the run that never stopped."""
    cfg = _cfg()
    ref = memory_writers()
    fit(setup(cfg, ref, workspace=workspace), ref)

    w = memory_writers()
    state = setup(cfg, w, workspace=workspace)
    result = fit(state, w, should_stop=lambda: state.step >= 3)
    assert result.stopped and result.steps_done == 3 and sorted(w.checkpoints.states) == [3]
    saved = w.checkpoints.states[3]
    assert saved["step"] == 3 and saved["loop"]["pos"] == state.pos > 0

    again = memory_writers()
    resumed = setup(cfg, again, workspace=workspace)
    resumed.load_state_dict(copy.deepcopy(saved))
    _assert_same(resumed.state_dict(), saved)
    fit(resumed, again)
    assert not any(s == 0 for s, _ in again.metrics.rows)  # step 0's baselines and eval are not repeated
    assert _steps(again) == _steps(ref)[3:]
    assert _steps(again, "val_loss") == _steps(ref, "val_loss")[1:]
    _assert_same(again.checkpoints.states[8], ref.checkpoints.states[8])


def test_checkpoint_files_keep_the_state_dict_and_load_it_back(workspace, one_thread, tmp_path):
    """What CheckpointFiles writes is the state.pt / model.safetensors layout of engine.store.checkpoints
    (same keys as before TrainState), and load_checkpoint restores an equal state from it."""
    cfg = _cfg(steps=3)
    w = memory_writers()
    state = setup(cfg, w, workspace=workspace)
    fit(state, w)
    saved = state.state_dict()
    CheckpointFiles(tmp_path, keep=2).save(3, saved)
    (ckpt,) = list_checkpoints(tmp_path)
    on_disk = load_checkpoint_state(ckpt)
    assert set(on_disk) == {"format", "step", "optimizer", "config", "rng", "torch_rng", "loop", "task"}
    _assert_same({k: v for k, v in on_disk.items() if k != "format"}, {k: v for k, v in saved.items() if k != "model"})
    _assert_same(load_weights(ckpt), saved["model"], "model")
    assert (ckpt / STATE).is_file()

    fresh = setup(cfg, memory_writers(), workspace=workspace)
    load_checkpoint(fresh, ckpt)
    _assert_same(fresh.state_dict(), saved)


def test_a_checkpoint_without_loop_and_task_state_still_resumes(workspace, one_thread, capsys):
    """Checkpoints of older masklab have no ``loop`` / ``task``: the step, weights, optimiser and
    generators load, and a new epoch order is drawn from the restored g_data (the log says so)."""
    cfg = _cfg()
    w = memory_writers()
    state = setup(cfg, w, workspace=workspace)
    fit(state, w, should_stop=lambda: state.step >= 4)
    old = {k: v for k, v in copy.deepcopy(w.checkpoints.states[4]).items() if k not in ("loop", "task")}
    resumed = setup(cfg, memory_writers(), workspace=workspace)
    resumed.load_state_dict(old)
    assert resumed.step == 4 and len(resumed.perm) == 0 and math.isnan(resumed.val_first)
    assert "has no data order" in capsys.readouterr().err
    assert torch.equal(resumed.g_data.get_state(), old["rng"]["g_data"])
    assert fit(resumed, memory_writers()).steps_done == 8


def test_weights_that_do_not_fit_are_a_damaged_checkpoint(workspace, one_thread, tmp_path):
    cfg = _cfg(steps=1)
    state = setup(cfg, memory_writers(), workspace=workspace)
    saved = state.state_dict()
    saved["model"] = {k: v[..., :1].clone() for k, v in saved["model"].items()}
    with pytest.raises(ValueError, match="does not fit this run's model"):
        state.load_state_dict(saved)
    CheckpointFiles(tmp_path).save(1, saved)
    with pytest.raises(DamagedFileError, match=r"step-0000001: does not fit this run's model"):
        load_checkpoint(state, list_checkpoints(tmp_path)[0])
