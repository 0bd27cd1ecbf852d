"""A GPU set per run (engine.runner.devices): which GPUs each launcher slot hands out, and the worker
setting CUDA_VISIBLE_DEVICES from its slot before torch starts. This machine has no GPU: the
worker case gives the run a made-up pool (``MASKLAB_GPUS``) and checks what it recorded; the run
itself trains on the CPU (CUDA is not available), as a GPU run would on its devices."""

from __future__ import annotations

import fcntl
import os

import pytest
import torch

from engine.config import RunConfig
from engine.data import load_dataset
from engine.errors import ConfigError
from engine.eval.job import job_device
from engine.runner.devices import gpu_pool, run_gpus, slot_devices
from engine.runner.worker import execute_run
from engine.store import create_run, get_run
from engine.tasks import resolve


def test_the_pool_comes_from_masklab_gpus_then_cuda_visible_devices_then_the_driver(tmp_path):
    nvidia = tmp_path / "gpus"
    nvidia.mkdir()
    for bus in ("0000:17:00.0", "0000:65:00.0", "0000:b3:00.0"):
        (nvidia / bus).mkdir()
    assert gpu_pool({}, nvidia) == ["0", "1", "2"]
    assert gpu_pool({"CUDA_VISIBLE_DEVICES": "2, 0"}, nvidia) == ["2", "0"]
    assert gpu_pool({"MASKLAB_GPUS": "1,2", "CUDA_VISIBLE_DEVICES": "0"}, nvidia) == ["1", "2"]
    assert gpu_pool({"CUDA_VISIBLE_DEVICES": " "}, tmp_path / "none") == []


@pytest.mark.parametrize("slots, wanted, pool, want", [
    (2, 1, ["0", "1", "2", "3"], [["0"], ["2"]]),           # groups of 2; a 1-GPU run takes the first
    (2, 2, ["0", "1", "2", "3"], [["0", "1"], ["2", "3"]]),
    (4, 1, ["0", "1", "2", "3"], [["0"], ["1"], ["2"], ["3"]]),
    (3, 1, ["0", "1", "2", "3"], [["0"], ["1"], ["2"]]),    # the 4th GPU is left over
    (2, 1, ["7"], [["7"], ["7"]]),                         # fewer GPUs than slots: shared
    (3, 1, ["a", "b"], [["a"], ["b"], ["a"]]),
    (2, 1, [], [[], []]),                                  # no GPU: nothing set
])
def test_each_slot_gets_its_own_gpus(slots, wanted, pool, want):
    assert [slot_devices(k, slots, wanted, pool) for k in range(slots)] == want


def test_a_run_wanting_more_gpus_than_its_slot_owns_is_refused_in_words():
    with pytest.raises(ConfigError, match=r"launch.nproc_per_node: 3 processes need 3 GPUs, but each of the 2 run "
                                          r"slots \(MASKLAB_MAX_RUNS\) has 2 of the 4 GPUs"):
        slot_devices(1, 2, 3, ["0", "1", "2", "3"])


def test_a_cpu_run_gets_no_gpus():
    env = {"MASKLAB_GPUS": "0,1"}
    assert run_gpus(0, 2, {"device": "cpu"}, {}, env) == []
    assert run_gpus(1, 2, {"device": "auto"}, {}, env) == ["1"]
    assert run_gpus(0, 1, {"device": "cuda"}, {"nproc_per_node": 2}, env) == ["0", "1"]


def test_the_worker_sets_its_slots_gpus_and_records_them(workspace, monkeypatch, one_thread):
    monkeypatch.setenv("MASKLAB_GPUS", "3,5")
    monkeypatch.setenv("MASKLAB_MAX_RUNS", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # restored after the test: the worker sets it
    load_dataset("digits")
    cfg = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
           "train": {"steps": 2, "batch_size": 16, "eval_interval": 2, "num_threads": 1}}
    slots = workspace / "slots"
    slots.mkdir()
    with open(slots / "slot-0.lock", "a+") as taken:  # another run holds slot 0
        fcntl.flock(taken, fcntl.LOCK_EX)
        run_id, d = create_run(resolve(RunConfig.from_dict(cfg)).to_dict())
        assert execute_run(d) == "completed"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    rec = get_run(run_id)
    assert rec.extra["placement"] == {"backend": "local", "hosts": [os.uname().nodename],
                                      "processes": 1, "devices": ["5"]}
    assert (rec.extra["slot"], rec.extra["gpus"]) == (1, ["5"])  # New run's GPU panel reads them


def test_a_cpu_run_records_its_slot_and_no_gpu(workspace, monkeypatch, one_thread):
    monkeypatch.setenv("MASKLAB_GPUS", "3,5")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    load_dataset("digits")
    cfg = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
           "train": {"steps": 1, "batch_size": 16, "eval_interval": 1, "num_threads": 1, "device": "cpu"}}
    run_id, d = create_run(resolve(RunConfig.from_dict(cfg)).to_dict())
    assert execute_run(d) == "completed"
    assert (get_run(run_id).extra["slot"], get_run(run_id).extra["gpus"]) == (0, [])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize("cuda", [False, True])
def test_an_evaluation_job_runs_on_its_slots_gpu_when_the_run_allows_cuda(monkeypatch, cuda):
    monkeypatch.setenv("MASKLAB_GPUS", "4,5")
    monkeypatch.setenv("MASKLAB_MAX_RUNS", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)  # this machine has none: both answers tried
    assert job_device(1, {"device": "auto"}) == ("cuda" if cuda else "cpu")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"  # slot 1's GPU, as a training run of that slot gets
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert job_device(0, {"device": "cpu"}) == "cpu" and "CUDA_VISIBLE_DEVICES" not in os.environ
