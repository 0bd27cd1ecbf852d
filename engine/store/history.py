"""Config history of a run: which fields a resume changed, at which step.

``config_history.json`` in the run folder is a list of entries ``{"step", "config", "changed"}``:
the config the run trained with from ``step`` on, and the fields that differ from the entry before
(dotted names -> ``[old, new]``). The first entry is the submitted config at step 0. A run that was
never resumed has no file; :func:`read_config_history` then returns that single entry built from
``config.json``. Written only by the holder of the run lock (the resuming worker).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.errors import DamagedFileError
from engine.messages import describe_error
from engine.store.paths import CONFIG_FILE, note_write
from engine.workspace import atomic_write_json, read_json

HISTORY_FILE = "config_history.json"


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": 1}}`` -> ``{"train.lr": 1}`` (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    """Fields that differ, as dotted names -> ``[old, new]`` (None for a field one side lacks)."""
    a, b = flatten(old), flatten(new)
    return {k: [a.get(k), b.get(k)] for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def read_config_history(run_dir: Path) -> list[dict[str, Any]]:
    """The run's config history, oldest first (see the module docstring).

    Raises:
        DamagedFileError: ``config_history.json`` or ``config.json`` cannot be read.
    """
    run_dir = Path(run_dir)
    path = run_dir / HISTORY_FILE
    try:
        history = read_json(path)
        if not isinstance(history, list) or not all(isinstance(e, dict) and "config" in e for e in history):
            raise ValueError("expected a list of {step, config, changed} entries")
        return history
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as e:
        raise DamagedFileError(f"{path}: unreadable config history ({describe_error(e)})") from None
    try:
        return [{"step": 0, "config": read_json(run_dir / CONFIG_FILE), "changed": {}}]
    except (OSError, ValueError) as e:
        raise DamagedFileError(f"{run_dir / CONFIG_FILE}: unreadable run config ({describe_error(e)})") from None


def append_config_history(run_dir: Path, step: int, config: dict[str, Any]) -> dict[str, Any]:
    """Record that from ``step`` on the run trains with ``config``; make it the run's ``config.json``.

    Call when a resume starts (holding the run lock), with the resolved config it will train with
    and the step of the checkpoint it starts from. Returns the new entry (``changed`` may be empty:
    a resume with the same config is recorded too).

    Raises:
        DamagedFileError: the history cannot be read. StorageError: it cannot be written.
    """
    run_dir = Path(run_dir)
    history = read_config_history(run_dir)
    entry = {"step": int(step), "config": config, "changed": config_diff(history[-1]["config"], config)}
    history.append(entry)
    atomic_write_json(run_dir / HISTORY_FILE, history, what=f"the config history of run {run_dir.name}")
    atomic_write_json(run_dir / CONFIG_FILE, config, what=f"the config of run {run_dir.name}")
    note_write(run_dir)
    return entry
