"""Launch back-ends: where a run's worker executes (``launch.backend``).

Every back-end starts the same worker, ``python -m engine.runner.worker RUN_DIR`` (:mod:`engine.runner.worker`),
which holds the run lock and writes the run's status, metrics and checkpoints into the run folder:
the run store stays the one source of truth wherever the worker runs. A back-end only starts,
stops and reports on that worker's *job*:

=========  ==================================================  ==========================  ===========================
back-end   start                                               stop (after the marker)     job state
=========  ==================================================  ==========================  ===========================
local      a process of this machine (:mod:`engine.runner.launcher`)  SIGTERM to the lock holder  the run lock (no job)
ray        a Ray Job (``JobSubmissionClient.submit_job``)      ``stop_job``                ``get_job_status``
slurm      an sbatch job through submitit                      ``scancel`` (``job.cancel``) ``sacct``/``squeue``
=========  ==================================================  ==========================  ===========================

The job of a cluster run is recorded in its folder (:data:`JOB_FILE`), so that any dashboard or
CLI process can cancel it, resume it or ask for its state later. Ray and submitit are optional
(``requirements-cluster.txt``) and imported only when a run uses them: :func:`get_backend` raises
:class:`~engine.errors.BackendError` saying how to install the missing one.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from engine.errors import BackendError, ConfigError
from engine.workspace import atomic_write_json, read_json

#: The run folder's record of its cluster jobs: ``backend``, ``job_id`` (the latest job), ``jobs``
#: (every job of the run, oldest first: a resume submits a new one) and what the back-end needs to
#: find them again (Ray's ``address``, submitit's ``folder`` and ``cluster``).
JOB_FILE = "job.json"
#: The pip requirement file that installs the cluster back-ends' libraries.
CLUSTER_EXTRA = "requirements-cluster.txt"
#: Exit code of a worker that failed the workspace check (:func:`check_workspace`).
WORKSPACE_EXIT = 3
#: The prefix of the worker's one-line reason for ending before it could write the run folder;
#: back-ends find it in the job's log and record it as the run's failure.
REASON_PREFIX = "masklab: cannot run here: "
#: Settings that describe this machine, not the run: never passed on to a cluster job.
NODE_LOCAL_ENV = ("MASKLAB_GPUS", "MASKLAB_MAIN_NODE", "MASKLAB_WORKSPACE")


@dataclass(frozen=True)
class JobState:
    """A cluster job's state as its back-end reports it.

    ``state``: the back-end's own word (Ray's ``PENDING``/``RUNNING``/``SUCCEEDED``/``FAILED``/
    ``STOPPED``, submitit's ``PENDING``/``RUNNING``/``COMPLETED``/``FAILED``/``CANCELLED``/...);
    ``ended``: True once the job can no longer run the worker; ``reason``: why it ended, when it
    failed (the worker's own reason where it gave one, e.g. a workspace it cannot write)."""

    backend: str
    job_id: str
    state: str
    ended: bool
    reason: str = ""


class Backend(Protocol):
    """What a cluster back-end does (``ray``, ``slurm``); ``local`` is the launcher's own processes."""

    name: str

    def preflight(self, launch: dict) -> None:
        """Check, before the run is created, that a job can be submitted (the address is set and
        the cluster answers; sbatch exists). Raises BackendError saying what is missing."""

    def submit(self, run_dir: Path, launch: dict, train: dict, node_ws: Path, job_name: str) -> dict:
        """Submit the worker of ``run_dir`` (seen at ``node_ws/runs/<id>`` on the nodes); return the
        job record (``job_id`` and what :meth:`cancel` / :meth:`state` need). Raises BackendError."""

    def cancel(self, job: dict) -> None:
        """Stop the job (pending or running). Raises BackendError when the cluster cannot be reached."""

    def state(self, job: dict) -> JobState:
        """The job's state now. Raises BackendError when the cluster cannot be reached."""


def _module(name: str):
    if name not in ("ray", "slurm"):
        raise ConfigError(f"launch.backend: {name!r} is not a cluster back-end (ray, slurm)")
    try:
        return importlib.import_module(f"engine.runner.backends.{name}")
    except ImportError as e:  # ray or submitit missing
        raise BackendError(f"launch.backend={name} needs the cluster extra, which is not installed here "
                           f"({e.name or e}): pip install -r {CLUSTER_EXTRA}") from None


def get_backend(name: str) -> Backend:
    """The back-end called ``name`` (``ray`` or ``slurm``).

    Raises:
        BackendError: its library (ray, submitit) is not installed; the message says how to install it.
        ConfigError: not a cluster back-end.
    """
    return _module(name).BACKEND


def unavailable(name: str) -> str:
    """Why back-end ``name`` cannot be used in this environment, in plain words; ``""`` when it can
    (``local`` always can). Imports nothing heavy: checks that the library is installed."""
    if name == "local":
        return ""

    lib = {"ray": "ray", "slurm": "submitit"}.get(name)
    if lib is None:
        return f"{name!r} is not a back-end"
    try:
        missing = importlib.util.find_spec(lib) is None
    except (ValueError, ImportError):  # a broken or blocked install
        missing = True
    if missing:
        return f"{lib} is not installed here (pip install -r {CLUSTER_EXTRA})"
    return ""


def node_workspace(launch: dict, ws: Path) -> Path:
    """The workspace's path on the cluster's nodes: ``launch.workspace``, else the same path as here."""
    return Path(launch.get("workspace") or ws)


def read_job(run_dir: Path) -> dict | None:
    """The run's job record (:data:`JOB_FILE`), or None for a run that never went to a cluster."""
    try:
        job = read_json(Path(run_dir) / JOB_FILE)
    except (OSError, ValueError):
        return None
    return job if isinstance(job, dict) and job.get("job_id") else None


def write_job(run_dir: Path, job: dict) -> dict:
    """Record a newly submitted job (the launcher, once the back-end accepted it): it becomes the
    run's current job and joins ``jobs``. Returns the record written. Raises StorageError."""
    old = read_job(run_dir) or {}
    jobs = [*old.get("jobs", []), {"job_id": job["job_id"], "submitted_at": job.get("submitted_at", time.time())}]
    record = {**job, "jobs": jobs}
    atomic_write_json(Path(run_dir) / JOB_FILE, record, what=f"the cluster job of run {Path(run_dir).name}")
    return record


def check_workspace(run_dir: Path) -> str:
    """The worker's first step on a cluster node: can it read the run folder and write into it?
    Returns ``""`` when it can, else the reason, naming the path, this host and the problem (the
    run folder is missing here: the workspace is not on a filesystem this node shares; or a file
    cannot be created in it: read-only mount, permissions, quota)."""
    run_dir = Path(run_dir)
    host = socket.gethostname()
    if not (run_dir / "config.json").is_file():
        return (f"the run folder {run_dir} does not exist on host {host}: the workspace must be on a filesystem "
                f"that this node and the dashboard share (set launch.workspace to its path on the nodes)")
    probe = run_dir / f".write-check-{host}-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"ok")
        probe.unlink()
    except OSError as e:
        return (f"the worker on host {host} cannot write the workspace at {run_dir} ({e.strerror or e}): the "
                f"workspace must be writable by the cluster job's user on every node")
    return ""


def job_reason(log_text: str) -> str:
    """The worker's own reason for ending early: what follows :data:`REASON_PREFIX` on the last line
    of a job's log (or traceback) that has it; ``""`` when none has."""
    lines = [ln for ln in log_text.splitlines() if REASON_PREFIX in ln]
    return lines[-1].split(REASON_PREFIX, 1)[1].strip() if lines else ""


def job_command(python: str, run_dir: Path) -> list[str]:
    """The worker's command line on a node: ``python -m engine.runner.worker --cluster RUN_DIR``."""
    return [python, "-m", "engine.runner.worker", "--cluster", str(run_dir)]


def job_env(repo: Path, node_ws: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment variables a cluster job sets for the worker: this process's ``MASKLAB_*``
    settings (auto-evaluation, dataset folders, limits...) but the node-local ones (``MASKLAB_GPUS``),
    the workspace as the nodes see it, and this checkout on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k.startswith("MASKLAB_") and k not in NODE_LOCAL_ENV}
    return {**env, "MASKLAB_WORKSPACE": str(node_ws), "PYTHONPATH": str(repo), **(extra or {})}


def describe(job: dict | None) -> str:
    """``ray job masklab-xyz-1`` / ``slurm job 1234``, or ``""``."""
    return f"{job['backend']} job {job['job_id']}" if job else ""

