"""Typed errors of the engine. Each message says what is wrong and, where it can, what to do."""


class MasklabError(Exception):
    """Base class of every error the engine raises on purpose (a user mistake or a failed run)."""


class ConfigError(MasklabError, ValueError):
    """A run configuration is invalid. The message names the field (``train.steps``) and the bad value."""


class DatasetError(MasklabError):
    """A dataset cannot be found, read or imported. The message names the dataset or file."""


class RunNotFoundError(MasklabError, KeyError):
    """No run with the given id exists in the workspace."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "run not found"


class NonFiniteLossError(MasklabError):
    """The training loss became NaN or infinite; the run is marked failed with this message."""
