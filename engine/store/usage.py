"""Disk space used by the workspace: per run, per dataset, in total.

Sizes are the files' apparent sizes in bytes (``st_size``, as ``du --apparent-size -b`` counts
them), summed over every regular file below a folder; symbolic links are not followed (a link
counts nothing), and a file that vanishes while it is counted (a worker compacting its metrics)
counts nothing. Walking a run folder stats each file once: a few dozen files per run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from engine.store.paths import run_dir
from engine.workspace import workspace_root


def folder_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of all regular files below ``path`` (0 when it does not exist); links not followed."""
    total = 0
    stack = [os.fspath(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        elif e.is_file(follow_symlinks=False):
                            total += e.stat(follow_symlinks=False).st_size
                    except OSError:  # gone meanwhile
                        continue
        except OSError:  # missing or unreadable folder
            continue
    return total


@dataclass(frozen=True)
class DiskUsage:
    """Bytes used in a workspace.

    Attributes:
        runs: run id -> bytes of its folder (config, status, metrics, checkpoints, samples, log).
        datasets: dataset name -> bytes of its folder (registered datasets only).
        other: everything else (tokenizers, imports, audit log, queue...).
        total: the whole workspace: ``sum(runs) + sum(datasets) + other``.
    """

    runs: dict[str, int] = field(default_factory=dict)
    datasets: dict[str, int] = field(default_factory=dict)
    other: int = 0

    @property
    def runs_total(self) -> int:
        """Bytes of all run folders."""
        return sum(self.runs.values())

    @property
    def datasets_total(self) -> int:
        """Bytes of all dataset folders."""
        return sum(self.datasets.values())

    @property
    def total(self) -> int:
        """Bytes of the whole workspace."""
        return self.runs_total + self.datasets_total + self.other


def _split(folder: Path) -> tuple[dict[str, int], int]:
    """(visible sub-folder name -> bytes, bytes of everything else directly in ``folder``)."""
    named: dict[str, int] = {}
    rest = 0
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return named, rest
    for d in entries:
        if d.is_dir() and not d.is_symlink() and not d.name.startswith("."):
            named[d.name] = folder_bytes(d)
        elif d.is_dir() and not d.is_symlink():
            rest += folder_bytes(d)
        elif d.is_file() and not d.is_symlink():
            try:
                rest += d.stat().st_size
            except OSError:
                continue
    return named, rest


def run_bytes(run_id: str, workspace=None) -> int:
    """Bytes used by one run's folder.

    Raises:
        RunNotFoundError: no such run.
    """
    return folder_bytes(run_dir(run_id, workspace))


def dataset_bytes(name: str, workspace=None) -> int:
    """Bytes used by registered dataset ``name`` (0 for a bundled set not stored yet, or a name that
    is no folder of ``datasets/``)."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return 0
    return folder_bytes(workspace_root(workspace) / "datasets" / name)


def disk_usage(workspace=None) -> DiskUsage:
    """Bytes used per run, per registered dataset, and by everything else in the workspace. Hidden
    folders in ``runs/`` and ``datasets/`` (a deletion or an import in progress) count as other."""
    root = workspace_root(workspace)
    tops, other = _split(root)
    runs, runs_rest = _split(root / "runs")
    datasets, datasets_rest = _split(root / "datasets")
    other += sum(b for name, b in tops.items() if name not in ("runs", "datasets")) + runs_rest + datasets_rest
    return DiskUsage(runs, datasets, other)


def format_bytes(n: int) -> str:
    """``512 B``, ``3.4 kB``, ``12.0 MB``, ``1.25 GB`` (decimal units, as disk makers count)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{n} B"
