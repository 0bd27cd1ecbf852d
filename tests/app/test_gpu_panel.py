"""New run's GPU panel (app/components/gpus.py) in AppTest: with a fake ``nvidia-smi`` first on
PATH (a shell script printing two GPUs) and ``MASKLAB_GPUS=0,1`` it lists both with their memory
and names the running run that holds GPU 0 beside it; without ``nvidia-smi`` nor a GPU pool it is
one line saying runs train on the CPU. The dashboard never starts CUDA (this machine has none)."""

from __future__ import annotations

import os
from types import SimpleNamespace

from app.components.gpus import gpu_line
from engine.config import RunConfig
from engine.runner import devices
from engine.runner.gpus import GpuInfo, GpuRow
from engine.store import create_run, write_status
from engine.tasks import resolve
from tests.app.pages import lock_holder, open_with
from tests.app.test_new_run_estimate import TINY

#: What the fake nvidia-smi prints (index, name, memory total and used in MiB).
TWO_GPUS = "0, NVIDIA H100 80GB HBM3, 81559, 30720\n1, NVIDIA H100 80GB HBM3, 81559, 512\n"


def _gpu_lines(at) -> list[str]:
    return [m.value for m in at.markdown if m.value.startswith("**GPU ")]


def test_new_run_lists_the_gpus_their_memory_and_the_run_holding_each(workspace, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat <<'EOF'\n{TWO_GPUS}EOF\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")  # first on PATH
    monkeypatch.setenv("MASKLAB_GPUS", "0,1")
    monkeypatch.setenv("MASKLAB_MAX_RUNS", "2")
    run_id, d = create_run(resolve(RunConfig.from_dict({"name": "on-gpu0", "train": {"steps": 50}})).to_dict())
    with lock_holder(d) as holder:  # a live worker holding slot 0 and its GPU
        write_status(d, {"status": "running", "step": 5, "total_steps": 50, "pid": holder.pid, "slot": 0, "gpus": ["0"]})
        at = open_with("../pages/new_run.py", TINY)
    assert [line.split("  \n") for line in _gpu_lines(at)] == [
        ["**GPU 0** · NVIDIA H100 80GB HBM3", "30.0 of 79.6 GiB used · 49.6 GiB free",
         f"slot 0 · held by **on-gpu0 · {run_id[-6:]}**"],
        ["**GPU 1** · NVIDIA H100 80GB HBM3", "0.5 of 79.6 GiB used · 79.1 GiB free", "slot 1 · free"]]
    assert "**GPUs here**: 2 for 2 slots (MASKLAB_MAX_RUNS)" in [m.value for m in at.markdown]
    assert not [c.value for c in at.caption if "nvidia-smi" in c.value or c.value.startswith("No GPU")]


def test_without_a_gpu_new_run_says_runs_train_on_the_cpu(workspace, tmp_path, monkeypatch):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no nvidia-smi
    for name in ("MASKLAB_GPUS", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(devices, "NVIDIA_GPUS", tmp_path / "no-driver")  # the same on a machine with GPUs
    monkeypatch.setenv("MASKLAB_MAX_RUNS", "3")
    at = open_with("../pages/new_run.py", TINY)
    assert not _gpu_lines(at)
    assert [c.value for c in at.caption if c.value.startswith("No GPU")] == [
        "No GPU: runs train on the CPU (3 slots at once, MASKLAB_MAX_RUNS)."]


def test_a_gpu_shared_by_slots_names_each_holder_s_slot():
    a = SimpleNamespace(run_id="r-aaaaaa", name="a", extra={"slot": 0, "gpus": ["0"]})
    b = SimpleNamespace(run_id="r-bbbbbb", name="b", extra={"slot": 2, "gpus": ["0"]})
    row = GpuRow("0", GpuInfo("0", "NVIDIA H200", 143771, None), (0, 2), (a, b))
    assert gpu_line(row).split("  \n") == ["**GPU 0** · NVIDIA H200", "? of 140.4 GiB used · ? GiB free",
                                           "slots 0, 2 share it · held by **a · aaaaaa** (slot 0), **b · bbbbbb** (slot 2)"]
    assert gpu_line(GpuRow("7", None, (), ())) == "**GPU 7** · not in nvidia-smi's list  \nno slot hands it out · free"
