"""Cluster back-ends (engine.runner.backends): Ray Jobs on a real local Ray head, Slurm through submitit's
LocalExecutor (real subprocesses) and its sbatch script, and the worker's workspace check."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import RunConfig
from engine.data import load_dataset
from engine.errors import BackendError, ConfigError
from engine.runner.backends import JOB_FILE, REASON_PREFIX, WORKSPACE_EXIT, check_workspace, read_job, unavailable
from engine.runner.launcher import cancel, job_state, resume, submit
from engine.store import create_run, get_run, list_runs, read_metrics, read_status
from engine.tasks import resolve
from tests.engine.procs import wait_until

REPO = Path(__file__).resolve().parents[2]
CFG = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
       "train": {"steps": 100_000, "batch_size": 32, "eval_interval": 20, "checkpoint_interval": 10,
                 "warmup_steps": 5, "device": "cpu", "num_threads": 1}}


def _cfg(backend: str, **launch) -> RunConfig:
    return resolve(RunConfig.from_dict({**CFG, "launch": {"backend": backend, **launch}}))


# --- config and sbatch script (no cluster) --------------------------------------------------------------


def test_old_launch_sections_stay_valid_and_cluster_fields_round_trip():
    """A launch section saved before the back-ends (no cluster fields) still validates; a ray config
    keeps its fields through to_dict; a one-process local config still saves without a launch section."""
    old = resolve(RunConfig.from_dict({**CFG, "launch": {"nproc_per_node": 2, "backend": "local"}}))
    assert old.launch.backend == "local" and old.launch.gpus == 0
    ray = _cfg("ray", gpus=1, cpus=4, ray_address="http://head:8265")
    assert resolve(RunConfig.from_dict(ray.to_dict())).launch == ray.launch
    assert "launch" not in resolve(RunConfig.from_dict(CFG)).to_dict()


@pytest.mark.parametrize("launch, field", [
    ({"backend": "kubernetes"}, "launch.backend"),
    ({"backend": "slurm", "nnodes": 2, "rdzv_endpoint": "n0:29400"}, "launch.nnodes"),
    ({"backend": "ray", "gpus": -1}, "launch.gpus"),
])
def test_bad_launch_fields_name_the_field(launch, field):
    with pytest.raises(ConfigError, match=field):
        resolve(RunConfig.from_dict({**CFG, "launch": launch}))


def test_sbatch_script_carries_the_run_parameters(tmp_path):
    """The script submitit's SlurmExecutor would hand to sbatch (built without sbatch) has every
    option of the run's launch section, and runs submitit's job runner on the run's folder."""
    pytest.importorskip("submitit")  # the cluster extra (MASKLAB_TEST_CLUSTER=1, as CI installs it)
    from engine.runner.backends.slurm import DEFAULT_TIME_MIN, sbatch_script  # noqa: PLC0415 (needs the cluster extra, skipped above without it)

    run = tmp_path / "runs" / "R1"
    launch = {"cpus": 4, "gpus": 2, "mem_gb": 16, "time_min": 90, "slurm_partition": "gpu",
              "slurm_account": "proj-7", "slurm_params": {"qos": "high", "constraint": "a100"}}
    text = sbatch_script(run, launch, {}, "masklab-R1-1")
    for line in ("--partition=gpu", "--account=proj-7", "--time=90", "--cpus-per-task=4", "--gpus-per-node=2",
                 "--mem=16GB", "--qos=high", "--constraint=a100", "--job-name=masklab-R1-1", "--nodes=1",
                 "--ntasks-per-node=1", f"--output={run}/submitit/%j_0_log.out"):
        assert f"#SBATCH {line}\n" in text
    assert f"-m submitit.core._submit {run}/submitit" in text
    bare = sbatch_script(run, {}, {"num_threads": 3}, "j")  # defaults: the run's threads, 24 h, nothing else
    assert f"#SBATCH --time={DEFAULT_TIME_MIN}\n" in bare and "#SBATCH --cpus-per-task=3\n" in bare
    assert "--partition" not in bare and "--gpus" not in bare and "--mem" not in bare and "--account" not in bare


def test_a_missing_extra_is_a_clear_error_and_creates_nothing(workspace, monkeypatch):
    """Without ray (an import that fails, as where the extra is not installed), a ray run is refused
    with the install command; local runs and the back-end listing still work."""
    for name in ("ray", "ray.job_submission"):  # importing them raises ImportError, even after an earlier import
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "engine.runner.backends.ray", raising=False)
    assert "pip install -r requirements-cluster.txt" in unavailable("ray")
    assert unavailable("local") == ""
    with pytest.raises(BackendError, match=r"launch.backend=ray needs the cluster extra.*requirements-cluster.txt"):
        submit(_cfg("ray", ray_address="http://127.0.0.1:9"))
    assert list_runs() == []


def test_unreachable_ray_cluster_or_no_address_creates_nothing(workspace, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(BackendError, match="launch.ray_address"):
        submit(_cfg("ray"))
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BackendError, match=f"cannot reach the Ray cluster at http://127.0.0.1:{port}"):
        submit(_cfg("ray", ray_address=f"http://127.0.0.1:{port}"))
    assert list_runs() == []


def test_slurm_without_sbatch_creates_nothing(workspace, monkeypatch):
    pytest.importorskip("submitit")
    monkeypatch.delenv("MASKLAB_SUBMITIT_CLUSTER", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BackendError, match="sbatch is not on the PATH"):
        submit(_cfg("slurm"))
    assert list_runs() == []


# --- the worker's workspace check ------------------------------------------------------------------------


def _can_unshare() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-rm", "true"], capture_output=True).returncode == 0


def test_workspace_check_names_a_missing_run_folder(tmp_path):
    reason = check_workspace(tmp_path / "elsewhere" / "runs" / "R")
    assert f"the run folder {tmp_path}/elsewhere/runs/R does not exist on host {socket.gethostname()}" in reason
    assert "a filesystem that this node and the dashboard share" in reason


def test_worker_on_a_read_only_workspace_fails_fast_with_the_reason(workspace):
    """The worker of a cluster job sees the workspace read-only (a read-only bind mount in a user
    namespace: as the node of a cluster that mounts it so): it exits 3 at once, writes nothing, and
    prints the reason naming the folder, the host and the OS error."""
    if not _can_unshare():
        pytest.skip("unshare -rm (user namespaces) is not allowed here")

    run_id, d = create_run(_cfg("slurm").to_dict(), workspace)
    before = sorted(p.name for p in d.iterdir())
    cmd = (f"mount --bind -o ro {workspace} {workspace} && exec {sys.executable} -m engine.runner.worker --cluster {d}")
    out = subprocess.run(["unshare", "-rm", "sh", "-c", cmd], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == WORKSPACE_EXIT, out.stderr
    assert (f"{REASON_PREFIX}the worker on host {socket.gethostname()} cannot write the workspace at {d} "
            f"(Read-only file system)") in out.stderr
    assert sorted(p.name for p in d.iterdir()) == before and read_status(d)["status"] == "queued"


# --- real back-ends: submitit's LocalExecutor and a local Ray head ----------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A real Ray head on this machine (2 CPUs, dashboard for the Job API, 100 MB object store),
    stopped with ``ray stop`` afterwards; yields its dashboard address."""
    pytest.importorskip("ray")
    ray = str(Path(sys.executable).with_name("ray"))
    port, dash = _free_port(), _free_port()
    temp = Path(f"/tmp/ray-masklab-{port}")  # short: Ray's socket paths must fit in 107 bytes
    cmd = [ray, "start", "--head", f"--port={port}", "--num-cpus=2", "--num-gpus=0", "--include-dashboard=true",
           "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--object-store-memory=100000000",
           "--disable-usage-stats", f"--temp-dir={temp}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    try:
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        yield f"http://127.0.0.1:{dash}"
    finally:
        subprocess.run([ray, "stop"], capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(params=["ray", "slurm"])
def backend(request, monkeypatch, workspace):
    """(name, launch fields) of a real back-end: a Ray head, or submitit's LocalExecutor."""
    if request.param == "ray":
        return "ray", {"ray_address": request.getfixturevalue("ray_head")}
    pytest.importorskip("submitit")
    monkeypatch.setenv("MASKLAB_SUBMITIT_CLUSTER", "local")
    return "slurm", {}


def _steps(run_id: str) -> list[int]:
    df = read_metrics([run_id], ["loss"], max_points=None)
    return sorted(int(s) for s in df.step)


@pytest.mark.slow
def test_submit_watch_cancel_and_resume_a_cluster_run(workspace, backend):
    """Submit to the back-end, watch the metrics arrive in the store, cancel (the job ends and the
    run records ``cancelled``), resume (a second job) to completion: one row per step throughout."""
    name, launch = backend
    load_dataset("digits")
    run_id = submit(_cfg(name, **launch))
    job = read_job(get_run(run_id).path)
    assert job["backend"] == name and job["jobs"] == [{"job_id": job["job_id"], "submitted_at": job["submitted_at"]}]
    assert job_state(run_id).state in ("PENDING", "RUNNING")
    wait_until(lambda: len(_steps(run_id)) >= 12, 240, "metrics in the store")
    rec = get_run(run_id)
    assert rec.status == "running" and rec.extra["placement"]["backend"] == name
    assert cancel(run_id) is True
    wait_until(lambda: get_run(run_id).status == "cancelled", 60, "status cancelled")
    wait_until(lambda: job_state(run_id).ended, 60, "the job to end")
    stopped = get_run(run_id).step
    assert 10 <= stopped < 100_000 and _steps(run_id) == list(range(1, stopped + 1))

    assert resume(run_id, [f"train.steps={stopped + 15}"]) == stopped  # cancel checkpointed its step
    second = read_job(get_run(run_id).path)
    assert len(second["jobs"]) == 2 and second["job_id"] != job["job_id"]
    wait_until(lambda: get_run(run_id).status == "completed", 240, "the resumed run to complete")
    assert _steps(run_id) == list(range(1, stopped + 16))
    wait_until(lambda: job_state(run_id).ended, 60, "the second job to end")
    assert job_state(run_id).state in ("SUCCEEDED", "COMPLETED") and get_run(run_id).status == "completed"


@pytest.mark.slow
def test_a_worker_that_cannot_see_the_workspace_fails_the_run_with_the_reason(workspace, backend, tmp_path):
    """The nodes see the workspace at another path (launch.workspace), where it is not: the worker
    exits at once and the run ends ``failed`` with the worker's reason, naming that path."""
    name, launch = backend
    elsewhere = tmp_path / "not-mounted"
    run_id = submit(_cfg(name, workspace=str(elsewhere), **launch))
    wait_until(lambda: job_state(run_id).ended, 120, "the job to end")
    rec = get_run(run_id)
    assert rec.status == "failed"
    assert rec.error.startswith(f"the run folder {elsewhere}/runs/{run_id} does not exist on host "
                                f"{socket.gethostname()}: the workspace must be on a filesystem")
    assert (rec.path / JOB_FILE).exists() and _steps(run_id) == []
    out = subprocess.run([sys.executable, "-m", "engine", "job", run_id], cwd=REPO, capture_output=True, text=True,
                         timeout=120)  # another process finds the job from the run folder
    assert out.returncode == 0, out.stderr
    job_id = read_job(rec.path)["job_id"]
    assert out.stdout.startswith(f"{name} job {job_id}: FAILED (the run folder {elsewhere}/runs/{run_id} does not")
    assert out.stdout.endswith(f"run {run_id}: failed\n")
