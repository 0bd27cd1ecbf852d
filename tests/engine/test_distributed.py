"""Data-parallel runs under torchrun (engine.runner.torchrun): the launch section, one run on two
processes (gloo on CPU) against the single process, clean exits, cancel / kill / resume through the
run lock, and two "nodes" on this machine (two torchrun launches meeting at one c10d endpoint).

Every case that starts processes is slow (each rank imports torch: about 7 s on 2 shared cores).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

import engine.runner.torchrun
from engine.config import RunConfig
from engine.data import load_dataset
from engine.errors import ConfigError, RunActiveError
from engine.runner.launcher import cancel, resume, submit
from engine.runner.resume import prepare_resume, resume_config
from engine.runner.torchrun import join, torchrun_command
from engine.runner.worker import execute_run
from engine.store import CANCEL_FILE, create_run, get_run, latest_checkpoint_step, run_alive, signal_holder, write_status
from engine.store.metrics import read_run_table
from engine.tasks import resolve
from engine.training.dist import mask_seed
from tests.bench import load_bench
from tests.engine.procs import pids_with_args
from tests.engine.procs import wait_until as _wait

REPO = Path(__file__).resolve().parents[2]
MAE_DIGITS = REPO / "configs" / "mae-digits.yaml"
TINY = {"name": "ddp", "data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
        "train": {"steps": 6, "batch_size": 32, "eval_interval": 3, "checkpoint_interval": 3, "warmup_steps": 2,
                  "seed": 1, "device": "cpu", "num_threads": 2}}


def with_launch(cfg: dict, train: dict | None = None, **launch) -> dict:
    return {**cfg, "train": {**cfg["train"], **(train or {})}, "launch": launch}


def rows(run_id: str, key: str) -> list[tuple[int, float]]:
    t = read_run_table(get_run(run_id).path, [key])[0]
    return sorted(zip(t.column("step").to_pylist(), t.column("value").to_pylist()))


def _ranks(run_dir: Path) -> list[int]:
    """PIDs of the rank processes of ``run_dir`` (``-m engine.runner.rank RUN_DIR``, not torchrun)."""
    return pids_with_args(b"engine.runner.rank", str(run_dir).encode(), without=b"torch.distributed.run")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the launch section, without processes -------------------------------------------------------------------


def test_a_default_launch_leaves_the_saved_config_as_it_was():
    d = resolve(RunConfig.from_dict(TINY)).to_dict()
    assert "launch" not in d and resolve(RunConfig.from_dict(d)).launch.world_size == 1
    two = resolve(RunConfig.from_dict(with_launch(TINY, nproc_per_node=2))).to_dict()
    assert two["launch"] == {"nproc_per_node": 2, "nnodes": 1, "node_rank": 0, "rdzv_endpoint": "", "backend": "local"}
    assert {k: v for k, v in two.items() if k != "launch"} == d


@pytest.mark.parametrize("launch, train, problem", [
    ({"nproc_per_node": 3}, {}, "train.batch_size: 32 is the global batch and must split evenly over the 3 training "
                                "processes"),
    ({"nproc_per_node": 2, "nnodes": 2, "rdzv_endpoint": "h:1"}, {"batch_size": 6}, "over the 4 training processes"),
    ({"nnodes": 2}, {}, "launch.rdzv_endpoint: '': 2 nodes need the rendezvous address as host:port"),
    ({"nnodes": 2, "rdzv_endpoint": "node0"}, {}, "launch.rdzv_endpoint: 'node0': 2 nodes need"),
    ({"nnodes": 2, "rdzv_endpoint": "node0:99999"}, {}, "launch.rdzv_endpoint: 'node0:99999'"),
    ({"node_rank": 1}, {}, "launch.node_rank: 1 must be below launch.nnodes (1)"),
    ({"backend": "mpi"}, {}, "launch.backend: 'mpi' is not available; use one of local"),
    ({"nproc_per_node": 0}, {}, "launch.nproc_per_node"),
])
def test_bad_launch_sections_are_refused_naming_the_field(launch, train, problem):
    with pytest.raises(ConfigError, match="^invalid run config: ") as e:
        resolve(RunConfig.from_dict(with_launch(TINY, train, **launch)))
    assert problem in str(e.value)


def test_torchrun_commands_for_one_node_and_for_several(tmp_path):
    one = torchrun_command({"nproc_per_node": 2, "nnodes": 1}, tmp_path / "r1")
    assert one[1:] == ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--max_restarts", "0", "--standalone",
                       "-m", "engine.runner.rank", str(tmp_path / "r1")]
    launch = {"nproc_per_node": 1, "nnodes": 2, "node_rank": 0, "rdzv_endpoint": "node0:29400"}
    two = torchrun_command(launch, tmp_path / "r2", node_rank=1, resume_from=40)
    assert two[two.index("--nnodes"):] == [
        "--nnodes", "2", "--node_rank", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", "node0:29400",
        "--rdzv_id", "r2", "-m", "engine.runner.rank", str(tmp_path / "r2"), "--resume-from", "40"]
    assert "--resume-from" not in torchrun_command(launch, tmp_path / "r2", resume_from=0)  # a restart from scratch


def test_mask_seeds_rank_0_keeps_the_run_seed_and_other_ranks_differ_reproducibly():
    assert mask_seed(7, 0) == 7 and mask_seed(0, 0) == 0
    seeds = [mask_seed(7, r) for r in range(8)] + [mask_seed(7, 1, 100), mask_seed(8, 1)]
    assert len(set(seeds)) == len(seeds) and all(0 <= s < 2**63 for s in seeds)
    assert [mask_seed(7, r) for r in range(8)] == seeds[:8]


def test_join_refuses_a_single_node_run_and_the_holders_rank(workspace):
    _, d = create_run(resolve(RunConfig.from_dict(with_launch(TINY, nproc_per_node=2))).to_dict(), workspace)
    with pytest.raises(ConfigError, match="trains on one node"):
        join(d, 1)
    _, d = create_run(resolve(RunConfig.from_dict(with_launch(TINY, nnodes=2, rdzv_endpoint="127.0.0.1:29400"))).to_dict(),
                      workspace)
    for rank in (0, 2, -1):
        with pytest.raises(ConfigError, match=f"--node-rank {rank}: run .* has nodes 0..1"):
            join(d, rank)
    write_status(d, {"status": "completed", "step": 6, "total_steps": 6})
    with pytest.raises(RunActiveError, match=f"run {d.name} is completed: there is nothing to join; resume it"):
        join(d, 1)


# --- processes -----------------------------------------------------------------------------------------------


def _foreground(cfg: dict) -> str:
    run_id, d = create_run(resolve(RunConfig.from_dict(cfg)).to_dict())
    assert execute_run(d) == "completed", get_run(run_id).error
    return run_id


@pytest.mark.slow
def test_two_processes_reach_the_single_process_val_loss(workspace):
    """Acceptance: configs/mae-digits.yaml (scaled down to 150 steps) on two gloo processes ends
    within 5% of the single process's final val loss, with the same global batch and seed. The
    two-process run logs every step once, only from its writer, with the global throughput."""
    load_dataset("digits")
    base = yaml.safe_load(MAE_DIGITS.read_text())
    base["train"].update(steps=150, eval_interval=50, checkpoint_interval=150, num_threads=1, device="cpu")
    one = _foreground(base)
    two = _foreground({**base, "launch": {"nproc_per_node": 2}})
    v1, v2 = rows(one, "val_loss")[-1], rows(two, "val_loss")[-1]
    assert v1[0] == v2[0] == 150
    assert abs(v2[1] - v1[1]) <= 0.05 * v1[1], (v1, v2)
    assert v2[1] < 0.5 * rows(two, "val_loss")[0][1]  # it learnt
    assert [s for s, _ in rows(two, "loss")] == list(range(1, 151))
    rec = get_run(two)
    assert rec.extra["torchrun_exit"] == 0 and rec.extra["placement"]["processes"] == 2
    # throughput = global batch / step time
    tp, st = dict(rows(two, "throughput")), dict(rows(two, "step_time"))
    assert all(tp[s] == pytest.approx(128 / st[s], rel=1e-6) for s in tp)
    print(f"\nfinal val loss: 1 process {v1[1]:.5f}, 2 processes {v2[1]:.5f} ({(v2[1] / v1[1] - 1) * 100:+.2f}%)")


@pytest.mark.slow
def test_consecutive_two_process_runs_exit_cleanly(workspace):
    """bench/torchrun_soak.py scaled down (its 40-run soak is issue 14's acceptance): two
    consecutive two-process runs both complete and every rank exits with code 0 (torchrun's exit
    code, recorded by the worker; no SIGABRT at interpreter exit), and the bench says so."""
    bench = load_bench("torchrun_soak")
    rows = bench.soak(workspace, 2)
    assert [(r["status"], r["torchrun_exit"]) for r in rows] == [("completed", 0)] * 2, rows
    assert len({r["run_id"] for r in rows}) == 2


@pytest.mark.slow
def test_a_two_process_run_is_cancelled_killed_and_resumed_through_its_lock(workspace):
    """A background two-process run: the lock holder is the worker, not a rank. Cancel reaches
    every rank (status cancelled, a checkpoint at the step it stopped, no rank left); resumed, it
    is then killed with SIGKILL (its ranks die with it, readers see interrupted) and resumed again to
    the end, with one row per step."""
    load_dataset("digits")
    cfg = with_launch(TINY, {"steps": 200, "eval_interval": 50, "checkpoint_interval": 20, "num_threads": 1},
                      nproc_per_node=2)
    run_id = submit(resolve(RunConfig.from_dict(cfg)))
    d = get_run(run_id).path
    _wait(lambda: get_run(run_id).step >= 5, 180, "the ranks to train")
    assert len(_ranks(d)) == 2 and signal_holder(d, 0) not in _ranks(d)  # the holder is the worker
    assert cancel(run_id) is True
    _wait(lambda: not get_run(run_id).is_active, 120, "the cancel")
    rec = get_run(run_id)
    assert rec.status == "cancelled" and latest_checkpoint_step(run_id) == rec.step < 200
    _wait(lambda: _ranks(d) == [], 30, "the ranks to exit")

    assert resume(run_id) == rec.step
    _wait(lambda: get_run(run_id).step >= rec.step + 25 and latest_checkpoint_step(run_id) > rec.step, 180,
          "the resumed run to checkpoint")
    assert signal_holder(d, signal.SIGKILL) is not None
    _wait(lambda: not run_alive(d) and _ranks(d) == [], 30, "the worker and its ranks to die")
    rec = get_run(run_id)
    assert rec.status == "interrupted" and rec.is_resumable
    killed = latest_checkpoint_step(run_id)
    assert resume(run_id) == killed
    _wait(lambda: not get_run(run_id).is_active, 300, "the run to end")
    rec = get_run(run_id)
    assert rec.status == "completed" and rec.step == 200, rec.error
    assert [s for s, _ in rows(run_id, "loss")] == list(range(1, 201))


@pytest.mark.slow
def test_two_nodes_train_one_run_and_resume_it_after_a_cancel(workspace):
    """Acceptance: two torchrun launches on this machine (node ranks 0 and 1, one c10d endpoint)
    train one run: the dashboard's submit is node 0 and holds the run, ``python -m engine join``
    is node 1. A cancel through the store stops both nodes; a resume plus a new join finishes it."""
    load_dataset("digits")
    endpoint = f"127.0.0.1:{_free_port()}"
    cfg = with_launch(TINY, {"steps": 200, "eval_interval": 50, "checkpoint_interval": 10, "num_threads": 1},
                      nnodes=2, rdzv_endpoint=endpoint)
    run_id = submit(resolve(RunConfig.from_dict(cfg)))
    d = get_run(run_id).path

    def join() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "engine", "join", run_id, "--node-rank", "1"], cwd=REPO,
                                env={**os.environ}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    node1 = join()
    _wait(lambda: get_run(run_id).step >= 15, 240, "the two nodes to train")
    rec = get_run(run_id)
    assert rec.extra["placement"]["processes"] == 2 and len(_ranks(d)) == 2
    assert cancel(run_id) is True
    _wait(lambda: not get_run(run_id).is_active, 120, "the cancel")
    node1.communicate(timeout=60)  # node 1's ranks stopped with node 0's
    rec = get_run(run_id)
    assert rec.status == "cancelled" and latest_checkpoint_step(run_id) == rec.step < 200

    assert resume(run_id) == rec.step
    node1 = join()
    _wait(lambda: not get_run(run_id).is_active, 300, "the resumed run to end")
    out, _ = node1.communicate(timeout=60)
    rec = get_run(run_id)
    assert rec.status == "completed" and rec.step == 200, rec.error
    assert rec.extra["torchrun_exit"] == 0 and node1.returncode == 0, out[-3000:]  # both nodes exited cleanly
    assert [s for s, _ in rows(run_id, "loss")] == list(range(1, 201))
    assert [s for s, _ in rows(run_id, "val_loss")] == [0, 50, 100, 150, 200]


@pytest.mark.slow
def test_a_single_process_run_resumes_on_two_processes(workspace):
    """A resume may change the number of processes: the data order is global, rank 0 keeps the
    checkpoint's mask generator and rank 1 (which the checkpoint has none for) draws a fresh one."""
    load_dataset("digits")
    cfg = {**TINY, "train": {**TINY["train"], "steps": 30, "eval_interval": 10, "checkpoint_interval": 5,
                             "num_threads": 1}}
    run_id, d = create_run(resolve(RunConfig.from_dict(cfg)).to_dict())

    def cancel_at_8(step: int) -> None:
        if step == 8:
            (d / CANCEL_FILE).touch()

    assert execute_run(d, on_step=cancel_at_8) == "cancelled" and latest_checkpoint_step(run_id) == 8
    step = prepare_resume(d, lambda old, s: resume_config(old, ["launch.nproc_per_node=2"], s).to_dict())
    assert step == 8 and execute_run(d) == "completed", get_run(run_id).error
    rec = get_run(run_id)
    assert rec.step == 30 and rec.extra["placement"]["processes"] == 2 and rec.config["launch"]["nproc_per_node"] == 2
    assert [s for s, _ in rows(run_id, "loss")] == list(range(1, 31))


@pytest.mark.slow
def test_a_cancel_while_waiting_for_a_node_that_never_comes_ends_cancelled(workspace, monkeypatch):
    """Node 1 never joins: the ranks of node 0 wait at the rendezvous and never see the cancel
    marker; the worker terminates torchrun after the grace period and records ``cancelled``."""
    monkeypatch.setattr(engine.runner.torchrun, "STOP_GRACE_S", 3.0)
    load_dataset("digits")
    cfg = with_launch(TINY, nnodes=2, rdzv_endpoint=f"127.0.0.1:{_free_port()}")
    run_id, d = create_run(resolve(RunConfig.from_dict(cfg)).to_dict())
    threading.Timer(8.0, (d / CANCEL_FILE).touch).start()
    assert execute_run(d) == "cancelled"
    rec = get_run(run_id)
    assert rec.status == "cancelled" and rec.step == 0 and rec.error is None
    _wait(lambda: _ranks(d) == [], 30, "the ranks to exit")
