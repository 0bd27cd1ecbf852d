"""masklab engine: data, masking, models, objectives, training, run store and job launcher.

Nothing here imports streamlit: the engine runs headless (``python -m engine``) and inside
the background training processes that the dashboard launches.
"""

from engine.errors import (
    ConfigError,
    DamagedFileError,
    DatasetError,
    FormatVersionError,
    MasklabError,
    NonFiniteLossError,
    QueueFullError,
    RunLockedError,
    RunNotFoundError,
    StorageError,
)

__all__ = ["ConfigError", "DamagedFileError", "DatasetError", "FormatVersionError", "MasklabError",
           "NonFiniteLossError", "QueueFullError", "RunLockedError", "RunNotFoundError", "StorageError"]
__version__ = "0.1.0"
