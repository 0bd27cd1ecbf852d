"""The function a submitit job runs on its node (the ``slurm`` back-end).

submitit pickles it *by value* (:func:`engine.runner.backends.slurm.submit` registers this module with
cloudpickle), so that unpickling it on the node needs only submitit, not masklab on ``sys.path``:
it then puts the checkout on ``sys.path`` itself. Keep it free of module-level masklab imports.
"""

import os
import sys


def run_worker(repo: str, run_dir: str, env: dict) -> int:
    """Run the worker of ``run_dir`` in this (the job's) process and return its exit code
    (:func:`engine.runner.worker.main`: 0 completed or cancelled, 1 failed or diverged, 2 held elsewhere).
    ``env``: :func:`engine.runner.backends.job_env`. The worker runs in-process so that ``scancel``'s
    SIGTERM reaches it directly (it then finishes its step and records ``cancelled``).

    Raises:
        RuntimeError: the worker cannot read or write the run folder on this node; the message is
            the worker's reason, which the dashboard records as the run's failure.
    """
    os.environ.update(env)
    if repo not in sys.path:
        sys.path.insert(0, repo)
    os.chdir(repo)
    from engine.runner.backends import REASON_PREFIX, check_workspace  # noqa: PLC0415 (imported after this job has put the checkout on sys.path)
    from engine.runner.worker import main  # noqa: PLC0415 (imported after this job has put the checkout on sys.path)

    problem = check_workspace(run_dir)
    if problem:
        raise RuntimeError(REASON_PREFIX + problem)
    return main(["--cluster", run_dir])
