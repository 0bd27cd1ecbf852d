"""Where masklab keeps its data: one workspace folder.

Layout (see docs/architecture.md)::

    <workspace>/datasets/<name>/   registered datasets (meta.json + data.npz)
    <workspace>/runs/<run_id>/     one folder per run (config, status, metrics, checkpoints, samples)
    <workspace>/slots/             lock files bounding how many runs train at once
    <workspace>/tokenizers/<id>/   trained text tokenizers, cached per dataset content + settings

The root is ``$MASKLAB_WORKSPACE`` when set, else ``./workspace`` relative to the current directory.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV_VAR = "MASKLAB_WORKSPACE"


def workspace_root(path: str | os.PathLike[str] | None = None) -> Path:
    """Return the workspace folder (created if missing).

    Args:
        path: explicit folder; when None, ``$MASKLAB_WORKSPACE`` or ``./workspace``.
    """
    root = Path(path) if path is not None else Path(os.environ.get(ENV_VAR, "workspace"))
    root = root.expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never a part.

    Writes a temporary file in the same folder, fsyncs it, then ``os.replace``s it over ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON with :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def read_json(path: Path) -> Any:
    """Read a JSON file written by :func:`atomic_write_json`."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def publish_folder(target: Path, fill: Callable[[Path], None], *, marker: str, overwrite: bool = False) -> bool:
    """Create the folder ``target`` atomically: readers see all of it or nothing.

    ``fill(tmp)`` writes the files into a hidden temporary folder beside ``target``
    (``.tmp-<name>-*``), which is then renamed into place. ``target`` counts as existing when
    ``target / marker`` exists. Replacing (``overwrite=True``) moves the old folder aside, renames
    the new one in, then deletes the old one; if the second rename fails the old folder is put back.
    The temporary folder is removed whatever happens.

    Returns:
        True when this call published ``target``; False when it already existed and ``overwrite``
        is False (also when another process published it first): nothing was changed then.
    Raises:
        OSError: the rename failed and ``target`` does not exist; whatever ``fill`` raises.
    """
    root = target.parent
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=root))
    try:
        fill(tmp)
        if not (target / marker).exists():
            try:
                os.rename(tmp, target)  # fails if a non-empty target appeared meanwhile
                return True
            except OSError:
                if not (target / marker).exists():
                    raise
        if not overwrite:
            return False
        old = Path(tempfile.mkdtemp(prefix=f".old-{target.name}-", dir=root))
        os.replace(target, old)  # `old` is an empty folder, so this rename succeeds
        try:
            os.rename(tmp, target)
        except OSError:
            os.replace(old, target)
            raise
        shutil.rmtree(old, ignore_errors=True)
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # no-op once renamed into place
