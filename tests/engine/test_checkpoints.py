"""Checkpoints: safe loading (safetensors + weights_only), completeness, full disk, rotation; config history."""

from __future__ import annotations

import errno
import os
import random

import numpy as np
import pytest
import torch

import engine.workspace as ws_mod
from engine.config import RunConfig
from engine.errors import DamagedFileError, StorageError
from engine.store import (
    append_config_history,
    checkpoint_weights,
    create_run,
    get_run,
    latest_complete_checkpoint,
    list_checkpoints,
    load_checkpoint_state,
    load_weights,
    read_config_history,
    save_checkpoint,
)
from engine.store.checkpoints import checkpoint_problem, plain_state
from engine.tasks import resolve


@pytest.fixture
def trained(workspace):
    """A run folder, a small model and an AdamW optimizer with state (one real step)."""
    _, d = create_run({"train": {"steps": 10}})
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
    model(torch.randn(3, 4)).pow(2).mean().backward()
    opt.step()
    return d, model, opt


def rng_states() -> dict:
    g = torch.Generator().manual_seed(7)
    torch.randn(5, generator=g)
    return {"g_mask": g, "g_data": g.get_state(), "python": random.Random(3).getstate(),
            "numpy": np.random.RandomState(5).get_state(), "pcg": np.random.default_rng(9).bit_generator.state,
            "epoch": np.int64(4), "cursor": 17}


def test_state_loads_with_weights_only_and_restores_every_generator(trained):
    d, model, opt = trained
    cfg = resolve(RunConfig.from_dict({"train": {"steps": 10}}))
    path = save_checkpoint(d, 5, model, opt, cfg, rng_states())
    state = load_checkpoint_state(path)  # torch.load(weights_only=True): no code runs on load
    assert state["step"] == 5 and state["format"] == 2 and state["config"] == cfg.to_dict()
    rng = state["rng"]
    g = torch.Generator()
    g.set_state(rng["g_mask"])
    assert torch.equal(torch.randn(5, generator=g), torch.randn(5, generator=torch.Generator().set_state(rng["g_data"])))
    r = random.Random()
    r.setstate(rng["python"])
    assert r.random() == random.Random(3).random()
    np_state = rng["numpy"]
    rs = np.random.RandomState()
    rs.set_state((np_state[0], np_state[1].numpy(), *np_state[2:]))
    assert rs.rand() == np.random.RandomState(5).rand()
    assert rng["pcg"]["state"]["state"] == np.random.default_rng(9).bit_generator.state["state"]["state"]
    assert rng["epoch"] == 4 and rng["cursor"] == 17
    restored = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
    restored.load_state_dict(state["optimizer"])
    assert torch.equal(restored.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    weights = load_weights(path)
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())


def test_plain_state_refuses_what_weights_only_cannot_load():
    with pytest.raises(TypeError, match=r"rng\.sampler: object"):
        plain_state({"sampler": object()})


def test_half_written_and_damaged_checkpoints_are_skipped(trained):
    d, model, opt = trained
    cfg = RunConfig()
    for step in (2, 4, 6, 8):
        save_checkpoint(d, step, model, opt, cfg, {}, keep=10)
    assert [p.name for p in list_checkpoints(d)] == ["step-0000002", "step-0000004", "step-0000006", "step-0000008"]
    assert latest_complete_checkpoint(d).name == "step-0000008"
    s8, s6, s4 = (d / "checkpoints" / f"step-000000{k}" for k in (8, 6, 4))
    (s8 / "state.pt").write_bytes((s8 / "state.pt").read_bytes()[:-100])  # truncated
    (s6 / "manifest.json").unlink()  # format-1 layout, and its weights cut short
    (s6 / "model.safetensors").write_bytes((s6 / "model.safetensors").read_bytes()[:200])
    (s4 / "model.safetensors").unlink()
    assert "state.pt: " in checkpoint_problem(s8) and "bytes, manifest says" in checkpoint_problem(s8)
    assert "truncated" in checkpoint_problem(s6) and "missing" in checkpoint_problem(s4)
    assert latest_complete_checkpoint(d).name == "step-0000002"
    with pytest.raises(DamagedFileError, match="state.pt"):
        load_checkpoint_state(s8)
    with pytest.raises(DamagedFileError, match="model.safetensors"):
        load_weights(s4)


def test_rotation_keeps_the_newest_complete_ones(trained):
    d, model, opt = trained
    for step in (1, 2, 3, 4):
        save_checkpoint(d, step, model, opt, RunConfig(), {}, keep=2)
    assert [p.name for p in list_checkpoints(d)] == ["step-0000003", "step-0000004"]
    save_checkpoint(d, 4, model, opt, RunConfig(), {}, keep=2)  # the same step again (a stop at a checkpoint)
    assert [p.name for p in list_checkpoints(d)] == ["step-0000003", "step-0000004"]
    assert sorted(p.name for p in (d / "checkpoints").iterdir()) == ["step-0000003", "step-0000004"]


@pytest.mark.parametrize("fail_at", ["model.safetensors", "state.pt", "manifest.json"])
def test_full_disk_during_a_checkpoint_leaves_no_trace_and_says_what(trained, monkeypatch, fail_at):
    d, model, opt = trained
    save_checkpoint(d, 2, model, opt, RunConfig(), {})
    real = ws_mod._write_all
    names = {}

    def full(fd, data):
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        names[name] = True
        if name == fail_at:
            real(fd, bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data)

    monkeypatch.setattr(ws_mod, "_write_all", full)
    with pytest.raises(StorageError) as info:
        save_checkpoint(d, 4, model, opt, RunConfig(), {})
    assert str(info.value).startswith("no space left on device while writing checkpoint step 4 (")
    assert str(info.value).endswith(f"checkpoints/step-0000004/{fail_at})")
    assert sorted(p.name for p in (d / "checkpoints").iterdir()) == ["step-0000002"]  # no temporary folder
    assert latest_complete_checkpoint(d).name == "step-0000002"


def test_config_history_records_what_a_resume_changed(workspace):
    cfg = resolve(RunConfig.from_dict({"train": {"steps": 100, "lr": 0.002}})).to_dict()
    run_id, d = create_run(cfg)
    assert read_config_history(d) == [{"step": 0, "config": cfg, "changed": {}}]
    new = {**cfg, "train": {**cfg["train"], "lr": 0.0005, "steps": 200}}
    entry = append_config_history(d, 60, new)
    assert entry["changed"] == {"train.lr": [0.002, 0.0005], "train.steps": [100, 200]}
    history = read_config_history(d)
    assert [h["step"] for h in history] == [0, 60] and history[0]["config"] == cfg and history[1]["config"] == new

    assert get_run(run_id).config["train"]["lr"] == 0.0005  # config.json is the config it trains with now
    (d / "config_history.json").write_text("[{\"step\": 0}")
    with pytest.raises(DamagedFileError, match="config_history.json"):
        read_config_history(d)


def test_checkpoint_weights_counts_parameters_from_the_header(trained):
    d, model, opt = trained
    assert checkpoint_weights(d.name) is None  # no checkpoint yet
    cfg = resolve(RunConfig.from_dict({"train": {"steps": 10}}))
    save_checkpoint(d, 3, model, opt, cfg, rng_states())
    path = save_checkpoint(d, 7, model, opt, cfg, rng_states())
    w = checkpoint_weights(d.name)
    assert (w.step, w.path) == (7, path / "model.safetensors")
    assert w.n_params == sum(p.numel() for p in model.parameters()) == 4 * 8 + 8 + 8 + 8 + 8 * 2 + 2
    assert w.n_bytes == w.path.stat().st_size and w.read() == w.path.read_bytes()
    (path / "manifest.json").write_text("{")  # the newest is damaged: the one before is offered
    assert checkpoint_weights(d.name).step == 3
