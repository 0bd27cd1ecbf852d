"""Where runs live: ``<workspace>/runs/<run id>/``, and the note a writer leaves for this process's run index."""

from __future__ import annotations

import sys
from pathlib import Path

from engine.errors import RunNotFoundError
from engine.workspace import workspace_root

CONFIG_FILE = "config.json"


def runs_root(workspace=None) -> Path:
    """``<workspace>/runs`` (created if missing)."""
    d = workspace_root(workspace) / "runs"
    d.mkdir(parents=True, exist_ok=True)
    return d


def run_dir(run_id: str, workspace=None) -> Path:
    """Folder of ``run_id``. Raises :class:`RunNotFoundError` if it does not exist or the id is malformed."""
    return run_dirs([run_id], workspace)[0]


def malformed_run_id(run_id: str) -> bool:
    """True for an id that cannot name a run folder: empty, a path, or hidden (``.x``)."""
    return not run_id or "/" in run_id or run_id.startswith(".")


def run_dirs(run_ids: list[str], workspace=None) -> list[Path]:
    """Folders of ``run_ids`` (the workspace resolved once). Raises :class:`RunNotFoundError` for the
    first that does not exist or is malformed."""
    root = runs_root(workspace)
    out = []
    for run_id in run_ids:
        if malformed_run_id(run_id):
            raise RunNotFoundError(f"no run {run_id!r}")
        d = root / run_id
        if not (d / CONFIG_FILE).exists():
            raise RunNotFoundError(f"no run {run_id!r} in {root}")
        out.append(d)
    return out


def note_write(d: Path) -> None:
    """Tell this process's run index (:mod:`engine.store.index`; if any is kept) that it has just
    replaced a file of run folder ``d``, so its next list shows the change at once."""
    index = sys.modules.get("engine.store.index")
    if index is not None:
        index.note_write(d)
