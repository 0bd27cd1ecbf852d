"""The ``slurm`` back-end: a run's worker as an sbatch job, through submitit.

submitit writes the job (a pickled call of :func:`engine.runner.backends.node_job.run_worker`) and its sbatch
script into ``<run_dir>/submitit/``, submits it with ``sbatch``, and reads its state with ``sacct``;
cancel is ``scancel`` (``job.cancel()``). The sbatch options come from the run's ``launch`` section
(:func:`sbatch_parameters`). The dashboard must run where ``sbatch`` works (a login node), and the
nodes must see the workspace and this checkout with its venv at the same paths (submitit's folder
is inside the run folder). Importing this module imports submitit (the cluster extra).

``$MASKLAB_SUBMITIT_CLUSTER=local`` runs the same jobs with submitit's ``LocalExecutor`` (a real
subprocess of this machine, no Slurm): for tests, and to try a cluster config without a cluster.

References: submitit, https://github.com/facebookincubator/submitit; sbatch(1).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import submitit
from submitit.core import utils as submitit_utils
from submitit.slurm.slurm import _make_sbatch_string

from engine.errors import BackendError
from engine.runner.backends import JobState, job_env, job_reason, node_job
from engine.runner.launcher import REPO_ROOT

CLUSTER_ENV = "MASKLAB_SUBMITIT_CLUSTER"
SUBMITIT_DIR = "submitit"
#: The slurm job's time limit when ``launch.time_min`` is 0, in minutes.
DEFAULT_TIME_MIN = 24 * 60
#: States after which a job no longer runs (sacct's words; submitit's local ones after the slash).
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE", "REVOKED", "FINISHED", "INTERRUPTED")

_LOCAL_JOBS: dict[str, submitit.Job] = {}  # local jobs submitted by this process (their Popen)


def sbatch_parameters(launch: dict, train: dict, job_name: str) -> dict:
    """submitit's ``SlurmExecutor`` parameters (sbatch options) of a run.

    Args:
        launch: the run's ``launch`` section; ``cpus`` (0: ``train.num_threads``, else 1), ``gpus``,
            ``mem_gb``, ``time_min`` (0: :data:`DEFAULT_TIME_MIN`), ``slurm_partition``,
            ``slurm_account``, ``slurm_params`` (more sbatch options, verbatim).
        train: the run's ``train`` section. job_name: sbatch ``--job-name``.

    Returns:
        ``job_name``, ``nodes`` (1), ``ntasks_per_node`` (1: the worker, which starts the
        ``nproc_per_node`` ranks itself), ``cpus_per_task``, ``time`` (minutes), and where set
        ``gpus_per_node``, ``mem`` (``"<n>GB"``), ``partition``, ``account``, ``additional_parameters``.
    """
    params = {"job_name": job_name, "nodes": 1, "ntasks_per_node": 1,
              "cpus_per_task": int(launch.get("cpus") or train.get("num_threads") or 1),
              "time": int(launch.get("time_min") or DEFAULT_TIME_MIN)}
    if launch.get("gpus"):
        params["gpus_per_node"] = int(launch["gpus"])
    if launch.get("mem_gb"):
        params["mem"] = f"{max(1, round(float(launch['mem_gb'])))}GB"
    if launch.get("slurm_partition"):
        params["partition"] = str(launch["slurm_partition"])
    if launch.get("slurm_account"):
        params["account"] = str(launch["slurm_account"])
    if launch.get("slurm_params"):
        params["additional_parameters"] = {str(k): v for k, v in launch["slurm_params"].items()}
    return params


def sbatch_script(run_dir: Path, launch: dict, train: dict, job_name: str) -> str:
    """The sbatch script submitit writes for the run's job (its ``#SBATCH`` lines and the ``srun``
    of submitit's job runner); built without ``sbatch``, e.g. to show it before submitting."""
    folder = Path(run_dir) / SUBMITIT_DIR
    command = " ".join([sys.executable, "-u -m submitit.core._submit", str(folder)])
    return _make_sbatch_string(command=command, folder=folder, **sbatch_parameters(launch, train, job_name))


def cluster() -> str:
    """``slurm`` (sbatch), or ``local`` when ``$MASKLAB_SUBMITIT_CLUSTER`` says so."""
    kind = os.environ.get(CLUSTER_ENV, "slurm").strip() or "slurm"
    if kind not in ("slurm", "local"):
        raise BackendError(f"${CLUSTER_ENV}: {kind!r} is not slurm or local")
    return kind


def _executor(folder: Path, kind: str, launch: dict, train: dict, job_name: str):
    if kind == "local":
        ex = submitit.LocalExecutor(folder)
        ex.update_parameters(timeout_min=int(launch.get("time_min") or DEFAULT_TIME_MIN))
        return ex
    try:
        ex = submitit.SlurmExecutor(folder)
    except RuntimeError as e:  # "Could not detect srun"
        raise BackendError(f"launch.backend=slurm: {e}: the dashboard must run where sbatch and srun work (a "
                           f"Slurm login node)") from None
    ex.update_parameters(**sbatch_parameters(launch, train, job_name))
    return ex


def _submitit_job(job: dict) -> submitit.Job:
    folder = Path(job["folder"])
    if job.get("cluster") == "local":
        return _LOCAL_JOBS.get(job["job_id"]) or submitit.local.local.LocalJob(folder, job["job_id"])
    return submitit.SlurmJob(folder, job["job_id"])


def _result(j: submitit.Job) -> tuple[str, object] | None:
    """``("success", exit code)`` or ``("error", traceback text)`` once the job wrote its result."""
    try:
        return submitit_utils.pickle_load(j.paths.result_pickle)
    except (OSError, EOFError, ValueError):
        return None


class SlurmBackend:
    """Slurm through submitit (:class:`engine.runner.backends.Backend`)."""

    name = "slurm"

    def preflight(self, launch: dict) -> None:
        """``sbatch`` is on the PATH (not needed with ``$MASKLAB_SUBMITIT_CLUSTER=local``). Raises BackendError."""
        if cluster() == "slurm" and shutil.which("sbatch") is None:
            raise BackendError("launch.backend=slurm: sbatch is not on the PATH here: the dashboard must run where "
                               "Slurm jobs can be submitted (a login node)")

    def submit(self, run_dir: Path, launch: dict, train: dict, node_ws: Path, job_name: str) -> dict:
        """Submit the run's worker as one sbatch job named ``job_name``; return the job record
        (``backend``, ``job_id``, ``cluster``, ``folder``, ``submitted_at``, ``sbatch``: the options).

        Raises:
            BackendError: sbatch is not available here, or it refused the job.
        """
        kind = cluster()
        folder = Path(run_dir) / SUBMITIT_DIR
        ex = _executor(folder, kind, launch, train, job_name)
        cloudpickle.register_pickle_by_value(node_job)  # the node unpickles it without masklab on sys.path
        node_run = node_ws / "runs" / Path(run_dir).name
        try:
            j = ex.submit(node_job.run_worker, str(REPO_ROOT), str(node_run), job_env(REPO_ROOT, node_ws))
        except Exception as e:  # submitit.core.utils.FailedJobError: sbatch's answer
            raise BackendError(f"sbatch refused the job of run {Path(run_dir).name}: {e}") from None
        if kind == "local":
            _LOCAL_JOBS[j.job_id] = j
            threading.Thread(target=j._process.wait, name=f"reap-{j.job_id}", daemon=True).start()
        return {"backend": self.name, "job_id": str(j.job_id), "cluster": kind, "folder": str(folder),
                "submitted_at": time.time(), "sbatch": sbatch_parameters(launch, train, job_name)}

    def cancel(self, job: dict) -> None:
        """``scancel JOB_ID`` (submitit's ``job.cancel()``); a local job gets SIGINT, as submitit does.

        Raises:
            BackendError: scancel failed.
        """
        j = _submitit_job(job)
        if job.get("cluster") == "local" and getattr(j, "_process", None) is None:
            try:  # a job submitted by another process: its controller's pid is the job id
                os.kill(int(job["job_id"]), signal.SIGINT)
            except (OSError, ValueError):
                pass
            return
        try:
            j.cancel(check=True)
        except Exception as e:
            raise BackendError(f"scancel {job['job_id']} failed: {e}") from None

    def state(self, job: dict) -> JobState:
        """The job's state (sacct's word, e.g. ``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``,
        ``CANCELLED``); a failed job's reason is the worker's own (the exception it raised on the
        node), else the last line of its traceback."""
        j = _submitit_job(job)
        result = _result(j)
        if result is not None:
            ok = result[0] == "success"
            text = "" if ok else str(result[1])
            reason = job_reason(text) or (text.strip().splitlines()[-1] if text.strip() else "")
            return JobState(self.name, job["job_id"], "COMPLETED" if ok else "FAILED", True, reason)
        if job.get("cluster") == "local" and getattr(j, "_process", None) is None:
            state = "RUNNING" if _pid_alive(int(job["job_id"])) else "INTERRUPTED"
        else:
            state = str(j.state)
        ended = state.split(" ")[0] in ENDED
        reason = f"slurm job {job['job_id']} ended {state} without a result" if ended else ""
        return JobState(self.name, job["job_id"], state, ended, reason)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


BACKEND = SlurmBackend()
