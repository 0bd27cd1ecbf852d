"""New run's GPU panel, engine side (engine.runner.gpus): nvidia-smi's answer read without CUDA
(good, malformed, failing, missing, hanging), the table of which slot shares which GPU and which
running run holds it; and the peak a run's MFU is measured against (engine.training.perf.mfu_basis).
The fake ``nvidia-smi`` here is a shell script: this machine has no GPU."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from engine.runner import devices
from engine.runner.gpus import QUERY, GpuInfo, GpuReading, gpu_overview, held_gpus, parse_gpus, read_gpus
from engine.training import perf
from engine.training.perf import mfu_basis

H100 = "NVIDIA H100 80GB HBM3"


def _script(folder: Path, body: str) -> str:
    """An executable ``nvidia-smi`` in ``folder`` running ``body`` (sh); its path."""
    path = folder / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_two_gpus_are_read_with_their_memory():
    reading = parse_gpus(f"0, {H100}, 81559, 1234\n1, {H100}, 81559, 0\n\n")
    assert reading == GpuReading((GpuInfo("0", H100, 81559, 1234), GpuInfo("1", H100, 81559, 0)), "")
    assert reading.gpus[0].free_mib == 80325


def test_unknown_memory_and_a_name_with_commas_are_kept():
    (gpu,) = parse_gpus("3, Tesla T4, rev B, [N/A], [N/A]").gpus
    assert gpu == GpuInfo("3", "Tesla T4, rev B", None, None) and gpu.free_mib is None


@pytest.mark.parametrize("bad", [
    "No devices were found",          # one field
    "0, NVIDIA A100, 40960",          # a field short
    "GPU-0, NVIDIA A100, 40960, 1",   # not an index
    "0, NVIDIA A100, 40 GiB, 1",      # units in the memory
    "0, NVIDIA A100, 40960, -",
])
def test_a_malformed_line_is_left_out_and_named(bad):
    reading = parse_gpus(f"{bad}\n1, {H100}, 81559, 0")
    assert reading.gpus == (GpuInfo("1", H100, 81559, 0),)
    assert reading.problem == f"nvidia-smi: 1 line not understood, e.g. {bad!r}"
    assert parse_gpus(f"{bad}\n{bad}").problem.startswith("nvidia-smi: 2 lines not understood")


def test_the_query_asks_for_index_name_and_memory_and_its_answer_is_parsed(tmp_path):
    args = tmp_path / "args"
    smi = _script(tmp_path, f'echo "$@" > {args}\necho "0, {H100}, 81559, 1024"')
    assert read_gpus(smi) == GpuReading((GpuInfo("0", H100, 81559, 1024),), "")
    assert args.read_text().split() == list(QUERY)


@pytest.mark.parametrize("body, problem", [
    ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9',
     "nvidia-smi failed (exit code 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
    ("exit 3", "nvidia-smi failed (exit code 3)"),
    ("true", "nvidia-smi lists no GPU"),
    ("exec sleep 30", "nvidia-smi did not answer within 0.3 s"),
])
def test_a_failing_or_hanging_nvidia_smi_gives_no_gpu_and_says_why(tmp_path, body, problem):
    assert read_gpus(_script(tmp_path, body), timeout_s=0.3) == GpuReading((), problem)


def test_a_missing_or_unrunnable_nvidia_smi_says_so(tmp_path):
    assert read_gpus(None) == GpuReading((), "nvidia-smi is not installed here (not on PATH)")
    assert read_gpus(str(tmp_path / "gone")).problem.startswith("nvidia-smi could not be started: ")
    smi = _script(tmp_path, "true")
    os.chmod(smi, 0o644)  # not executable
    assert read_gpus(smi).problem == "nvidia-smi could not be started: Permission denied"


def _run(run_id: str, status: str = "running", **extra):
    return SimpleNamespace(run_id=run_id, name=run_id, status=status, extra=extra)


def test_held_gpus_come_from_the_status_else_a_local_placement():
    assert held_gpus(_run("a", slot=1, gpus=["1"])) == ["1"]
    assert held_gpus(_run("cpu", slot=0, gpus=[])) == []
    assert held_gpus(_run("old", placement={"backend": "local", "devices": ["0,1"]})) == ["0", "1"]
    assert held_gpus(_run("ray", placement={"backend": "ray", "devices": ["0"]})) == []


def test_each_gpu_lists_its_slots_and_the_running_runs_holding_it():
    reading = GpuReading((GpuInfo("0", H100, 81559, 30000), GpuInfo("1", H100, 81559, 0),
                          GpuInfo("2", H100, 81559, 0)), "")
    a, b = _run("a", slot=0, gpus=["0"]), _run("b", slot=2, gpus=["0"])
    done, queued = _run("done", "completed", slot=1, gpus=["1"]), _run("queued", "queued")
    view = gpu_overview([a, b, done, queued], reading, slots=3, env={"MASKLAB_GPUS": "0,1"})
    assert [(r.gpu, r.info, r.slots, r.runs) for r in view.rows] == [
        ("0", reading.gpus[0], (0, 2), (a, b)),  # 3 slots, 2 GPUs: slots 0 and 2 share GPU 0
        ("1", reading.gpus[1], (1,), ())]        # a completed run holds nothing
    assert view.unused == (reading.gpus[2],) and view.slots == 3 and view.problem == ""
    four = gpu_overview([], GpuReading(problem="nvidia-smi lists no GPU"), slots=2, env={"MASKLAB_GPUS": "0,1,2,3"})
    assert [(r.gpu, r.info, r.slots) for r in four.rows] == [("0", None, (0,)), ("1", None, (0,)), ("2", None, (1,)),
                                                             ("3", None, (1,))]
    assert four.problem == "nvidia-smi lists no GPU"


def test_without_a_pool_every_listed_gpu_is_unused(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "NVIDIA_GPUS", tmp_path / "no-driver")
    reading = GpuReading((GpuInfo("0", H100, 81559, 0),), "")
    view = gpu_overview([_run("a", slot=0, gpus=[])], reading, slots=2, env={})
    assert view.rows == () and view.unused == reading.gpus
    assert gpu_overview([], GpuReading(), slots=2, env={}).unused == ()


def test_the_mfu_basis_names_the_gpu_and_the_peak_of_the_step_dtype(monkeypatch):
    assert mfu_basis(torch.device("cpu"), amp=True) == {}
    monkeypatch.setattr(perf.torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    cuda = torch.device("cuda", 0)
    assert mfu_basis(cuda, amp=True) == {"gpu_name": "NVIDIA H200", "mfu_dtype": "bf16", "mfu_peak_flops": 989e12}
    assert mfu_basis(cuda, amp=False) == {"gpu_name": "NVIDIA H200", "mfu_dtype": "fp32", "mfu_peak_flops": 67e12}
    monkeypatch.setattr(perf.torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    assert mfu_basis(cuda, amp=True) == {"gpu_name": "Tesla T4"}  # no peak known: no mfu logged either
