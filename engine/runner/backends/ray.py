"""The ``ray`` back-end: a run's worker as a Ray Job on an existing Ray cluster.

The job's entrypoint is the worker's command line (``cd <checkout> && exec python -m engine.runner.worker
--cluster RUN_DIR``), submitted through Ray's Job Submission API (``ray.job_submission``, which
talks to the cluster's dashboard, ``http://head:8265``; ``ray[default]`` on the head) with the
resources the run asks for (``entrypoint_num_cpus``, ``entrypoint_num_gpus``,
``entrypoint_memory``: Ray places the entrypoint on a node that has them and sets
``CUDA_VISIBLE_DEVICES`` to its GPUs). The cluster's nodes must see this checkout, its venv and the
workspace at the same paths (or the workspace at ``launch.workspace``). Importing this module
imports Ray (the cluster extra).

References: Ray Jobs, https://docs.ray.io/en/latest/cluster/running-applications/job-submission/
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

from ray.job_submission import JobStatus, JobSubmissionClient

from engine.errors import BackendError
from engine.runner.backends import JobState, job_command, job_env, job_reason
from engine.runner.launcher import REPO_ROOT

ADDRESS_ENV = "RAY_ADDRESS"


def address(launch: dict) -> str:
    """The Ray cluster's dashboard address: ``launch.ray_address``, else ``$RAY_ADDRESS``.

    Raises:
        BackendError: neither is set.
    """
    addr = str(launch.get("ray_address") or os.environ.get(ADDRESS_ENV, "")).strip()
    if not addr:
        raise BackendError("launch.backend=ray needs the Ray cluster's address: set launch.ray_address "
                           "(e.g. http://head-node:8265) or $RAY_ADDRESS where the dashboard runs")
    return addr


def _client(addr: str) -> JobSubmissionClient:
    try:
        return JobSubmissionClient(addr)
    except Exception as e:  # ConnectionError, ValueError (bad address), RuntimeError (no dashboard)
        raise BackendError(f"cannot reach the Ray cluster at {addr} ({type(e).__name__}: {e}); start it "
                           f"(ray start --head --include-dashboard=true) or fix launch.ray_address / "
                           f"${ADDRESS_ENV}") from None


class RayBackend:
    """Ray Jobs (:class:`engine.runner.backends.Backend`)."""

    name = "ray"

    def preflight(self, launch: dict) -> None:
        """The address is set and the cluster's dashboard answers. Raises BackendError."""
        _client(address(launch))

    def submit(self, run_dir: Path, launch: dict, train: dict, node_ws: Path, job_name: str) -> dict:
        """Submit the run's worker as a Ray Job named ``job_name`` (its submission id); return the
        job record (``backend``, ``job_id``, ``address``, ``submitted_at``, ``resources``).

        Raises:
            BackendError: no address, the cluster cannot be reached, or it refused the job.
        """
        addr = address(launch)
        client = _client(addr)
        node_run = node_ws / "runs" / Path(run_dir).name
        entry = f"cd {shlex.quote(str(REPO_ROOT))} && exec {shlex.join(job_command(sys.executable, node_run))}"
        cpus = float(launch.get("cpus") or train.get("num_threads") or 1)
        gpus = float(launch.get("gpus") or 0)
        memory = int(float(launch.get("mem_gb") or 0) * 1e9)
        resources = {"num_cpus": cpus, "num_gpus": gpus, **({"memory": memory} if memory else {})}
        try:
            job_id = client.submit_job(entrypoint=entry, submission_id=job_name,
                                       runtime_env={"env_vars": job_env(REPO_ROOT, node_ws)},
                                       entrypoint_num_cpus=cpus, entrypoint_num_gpus=gpus,
                                       **({"entrypoint_memory": memory} if memory else {}),
                                       metadata={"masklab_run": Path(run_dir).name})
        except Exception as e:  # RuntimeError with the dashboard's answer
            raise BackendError(f"the Ray cluster at {addr} refused the job of run {Path(run_dir).name}: {e}") from None
        return {"backend": self.name, "job_id": job_id, "address": addr, "submitted_at": time.time(),
                "resources": resources}

    def cancel(self, job: dict) -> None:
        """``stop_job``: Ray sends the entrypoint SIGTERM, then SIGKILL a few seconds later.

        Raises:
            BackendError: the cluster cannot be reached.
        """
        try:
            _client(job["address"]).stop_job(job["job_id"])
        except BackendError:
            raise
        except Exception as e:
            raise BackendError(f"cannot stop Ray job {job['job_id']} at {job['address']}: {e}") from None

    def state(self, job: dict) -> JobState:
        """The job's status (``PENDING``, ``RUNNING``, ``STOPPED``, ``SUCCEEDED``, ``FAILED``); a failed
        job's reason is the worker's own line in the job's log, else Ray's message.

        Raises:
            BackendError: the cluster cannot be reached, or it does not know the job.
        """
        client = _client(job["address"])
        try:
            status = client.get_job_status(job["job_id"])
        except Exception as e:
            raise BackendError(f"cannot read Ray job {job['job_id']} at {job['address']}: {e}") from None
        reason = ""
        if status == JobStatus.FAILED:
            try:
                reason = job_reason(client.get_job_logs(job["job_id"]))
            except Exception:  # noqa: BLE001 - the message below still says something
                reason = ""
            if not reason:
                info = client.get_job_info(job["job_id"])
                reason = f"Ray job {job['job_id']} failed: {info.message or 'no message'}"
        return JobState(self.name, job["job_id"], str(status.value), status.is_terminal(), reason)


BACKEND = RayBackend()
