"""Typed errors of the engine. Each message says what is wrong and, where it can, what to do."""


class MasklabError(Exception):
    """Base class of every error the engine raises on purpose (a user mistake or a failed run)."""


class ConfigError(MasklabError, ValueError):
    """A run configuration is invalid. The message names the field (``train.steps``) and the bad value."""


class DatasetError(MasklabError):
    """A dataset cannot be found, read or imported. The message names the dataset or file."""


class NothingImportedError(DatasetError):
    """An import found no usable item: every candidate file or row was refused. The message names the
    source and the first reasons; ``rejected`` and ``skipped`` hold every ``(file, reason)``, for a
    table of them."""

    def __init__(self, message: str, rejected=(), skipped=()):
        super().__init__(message)
        self.rejected = [tuple(x) for x in rejected]
        self.skipped = [tuple(x) for x in skipped]


class RunNotFoundError(MasklabError, KeyError):
    """No run with the given id exists in the workspace."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "run not found"


class NonFiniteLossError(MasklabError):
    """The training or validation loss (or the weights) became NaN or infinite; the run ends ``diverged``
    with this message and no checkpoint of that step is written."""


class StorageError(MasklabError, OSError):
    """Writing to the workspace failed: disk full, quota, read-only or I/O error.

    The message names the cause and what was being written, e.g. ``no space left on device while
    writing checkpoint step 500 (runs/.../state.pt)``; ``errno`` is the OS error number. Nothing
    half-written is left behind: the temporary file is removed before this is raised.
    """

    def __init__(self, message: str, errno_: int | None = None):
        super().__init__(message)
        self.errno = errno_

    def __str__(self) -> str:
        return str(self.args[0])


class DamagedFileError(MasklabError):
    """A stored file cannot be read (truncated, garbage, wrong schema). The message names the file."""


class FormatVersionError(MasklabError):
    """A workspace, run folder or checkpoint was written by a newer masklab than this one reads."""


class RunLockedError(MasklabError):
    """Another live process holds the run's lock (its worker, or ``doctor --repair`` repairing it)."""


class QueueFullError(MasklabError):
    """``submit`` refused a run because ``$MASKLAB_MAX_QUEUED`` runs are already waiting for a slot."""


class ResumeError(MasklabError):
    """A run cannot be resumed: it is not failed/cancelled/diverged/interrupted, it is starting, or it
    has no complete checkpoint. The message says which and what to do instead."""


class PermissionDeniedError(MasklabError, PermissionError):
    """The identity acting may not do this (its role is too low, no one is signed in, or the dashboard
    is in demo mode). The message names who, what and the role needed; nothing was changed."""


class EvaluationError(MasklabError):
    """An evaluation cannot be computed: a task without raw-input features or labels, a run without a
    kept checkpoint at the asked step, a dataset changed since the run. The message says which."""


class EvaluationCancelled(MasklabError):
    """A run's final evaluation stopped because the run was cancelled (``python -m engine cancel``, the
    cancel button, SIGTERM or SIGINT) while its last checkpoint was being evaluated. The run stays
    completed; the evaluation job is recorded failed with this message. Not an :class:`EvaluationError`,
    which says that an evaluation cannot be computed."""


class RunActiveError(MasklabError):
    """An operation refused because a run (or an evaluation job of it) is still queued or running,
    e.g. deleting it: the message says to cancel it first."""


class BackendError(MasklabError):
    """A cluster back-end (``launch.backend`` ray or slurm) cannot take or control a run: its extra is
    not installed (``pip install -r requirements-cluster.txt``), the cluster cannot be reached, or it
    refused the job. The message names the back-end, the address or command, and what to do."""
