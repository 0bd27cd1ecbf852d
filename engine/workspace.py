"""Where masklab keeps its data: one workspace folder, its format version and the one durable write path.

Layout (see docs/architecture.md)::

    <workspace>/VERSION            the workspace format (an integer, see FORMAT)
    <workspace>/datasets/<name>/   registered datasets (meta.json + one .npy per array)
    <workspace>/runs/<run_id>/     one folder per run (config, status, metrics, checkpoints, samples)
    <workspace>/slots/             lock files bounding how many runs train at once
    <workspace>/queue/             one ticket per queued run (first come, first served)
    <workspace>/tokenizers/<id>/   trained text tokenizers, cached per dataset content + settings

The root is ``$MASKLAB_WORKSPACE`` when set, else ``./workspace`` relative to the current directory.

Every file the engine writes goes through :func:`atomic_write_bytes` (or :func:`write_new_file` +
:func:`fsync_dir` for a folder that is renamed into place as a whole): temporary name in the same
folder, write, fsync, rename, fsync the folder. A reader sees the old file or the new one, a crash
leaves at worst a temporary file (``.<name>.<pid>-<hex>.tmp``, which ``python -m engine doctor``
removes), and a failed write removes its temporary file and raises
:class:`~engine.errors.StorageError` naming the cause and what was being written.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from engine.errors import FormatVersionError, StorageError

log = logging.getLogger(__name__)
T = TypeVar("T")

ENV_VAR = "MASKLAB_WORKSPACE"
VERSION_FILE = "VERSION"
#: The workspace format this masklab writes. 1: masklab before workspace versions (no VERSION file,
#: no run lock, metrics compacted only at the end into ``metrics.parquet``). 2: run lock, statuses
#: ``interrupted``/``diverged``, metric parts compacted while training, checkpoint manifests,
#: config history, queue tickets. Format 1 is read as it is (nothing is rewritten). 3: audio-text
#: pairs are a task of their own (``paired_audio``): the runs stored as ``task: paired`` on an audio
#: dataset are renamed once (:func:`migrate_to_3`).
FORMAT = 3
READABLE_FORMATS = (1, 2, 3)
TMP_SUFFIX = ".tmp"

_checked: dict[Path, int] = {}  # workspace -> VERSION mtime_ns already checked (skip re-reading)


def workspace_root(path: str | os.PathLike[str] | None = None) -> Path:
    """Return the workspace folder (created if missing), after checking its format version.

    Args:
        path: explicit folder; when None, ``$MASKLAB_WORKSPACE`` or ``./workspace``.

    Raises:
        FormatVersionError: the workspace was written by a newer masklab (its ``VERSION`` is above
            :data:`FORMAT`) or its ``VERSION`` file is unreadable.
    """
    root = Path(path) if path is not None else Path(os.environ.get(ENV_VAR, "workspace"))
    root = root.expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    check_workspace_version(root)
    return root


def workspace_format(root: Path) -> int | None:
    """The format recorded in ``root/VERSION``; 1 for a workspace of format 1 (runs or datasets but no
    VERSION file); None for a new, empty workspace.

    Raises:
        FormatVersionError: ``VERSION`` exists but does not hold an integer.
    """
    try:
        text = (root / VERSION_FILE).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return 1 if any((root / d).is_dir() and any((root / d).iterdir()) for d in ("runs", "datasets")) else None
    except OSError as e:
        raise FormatVersionError(f"{root / VERSION_FILE}: cannot read the workspace format ({e})") from None
    try:
        return int(text)
    except ValueError:
        raise FormatVersionError(
            f"{root / VERSION_FILE}: expected the workspace format (an integer), found {text[:40]!r}; "
            f"this masklab writes format {FORMAT}") from None


def check_workspace_version(root: Path) -> int:
    """Refuse a newer workspace; record :data:`FORMAT` in a new or format-1 one. Returns the format
    found (``FORMAT`` for a new workspace).

    Formats 1 and 2 are migrated in place: run folders are read as they are but for the renamed
    audio-text runs (:func:`migrate_to_3`), then ``VERSION`` is written, last, so an interrupted
    migration runs again on the next open (each step is idempotent). A read-only workspace is read
    as it is (the writes are skipped).

    Raises:
        FormatVersionError: the workspace's format is newer than this masklab (it names both and says
            to upgrade), or ``VERSION`` is unreadable.
    """
    vfile = root / VERSION_FILE
    try:
        mtime = vfile.stat().st_mtime_ns
    except OSError:
        mtime = -1
    if _checked.get(root) == mtime and mtime != -1:
        return FORMAT
    found = workspace_format(root)
    if found is not None and found not in READABLE_FORMATS:
        raise FormatVersionError(
            f"workspace {root} has format {found}, written by a newer masklab; this masklab reads formats "
            f"{', '.join(map(str, READABLE_FORMATS))}. Upgrade masklab (git pull, then scripts/install.sh) "
            f"or point MASKLAB_WORKSPACE at another folder.")
    if found != FORMAT:
        try:
            if found is not None and found < 3:
                migrate_to_3(root)
            atomic_write_bytes(vfile, f"{FORMAT}\n".encode(), what="the workspace format version")
        except StorageError:
            return found or FORMAT  # read-only or full: read as it is; the next open tries again
        mtime = vfile.stat().st_mtime_ns
    _checked[root] = mtime
    return found or FORMAT


#: Format 3's rename: the task of audio-text pairs, ``paired`` before.
PAIRED_AUDIO_RENAME = ("paired", "paired_audio")


def _audio_pair_run(root: Path, run_dir: Path, config: dict) -> bool:
    """Whether a stored run config is ``task: paired`` on an audio dataset: ``data.audio`` set, the
    dataset's ``meta.json`` says audio, or the run's ``task.json`` recorded an audio stream."""
    if config.get("task") != PAIRED_AUDIO_RENAME[0]:
        return False
    data = config.get("data") if isinstance(config.get("data"), dict) else {}
    if data.get("audio") is not None:
        return True
    name = str(data.get("dataset") or "")
    checks = [(run_dir / "task.json", "stream")]
    if name and "/" not in name and not name.startswith("."):
        checks.append((root / "datasets" / name / "meta.json", "modality"))
    for path, key in checks:
        try:
            found = read_json(path)
        except (OSError, ValueError):
            continue
        if isinstance(found, dict) and found.get(key) == "audio":
            return True
    return False


def _config_3(config: dict, audio: bool) -> dict:
    """A stored ``paired`` config in format 3: renamed ``paired_audio`` on audio data; on image-text
    data without ``task_params.text_source`` (an audio-text parameter, always ``"text"`` there)."""
    if config.get("task") != PAIRED_AUDIO_RENAME[0]:
        return config
    if audio:
        return {**config, "task": PAIRED_AUDIO_RENAME[1]}
    params = config.get("task_params")
    if isinstance(params, dict) and "text_source" in params:
        return {**config, "task_params": {k: v for k, v in params.items() if k != "text_source"}}
    return config


def migrate_to_3(root: Path) -> list[str]:
    """Format 2 (or 1) -> 3: every run stored as ``task: paired`` on an audio dataset (audio-text
    pairs, :func:`_audio_pair_run`) becomes ``task: paired_audio``, and a ``paired`` run on image-text
    pairs loses ``task_params.text_source`` (now the audio-text task's own), in its ``config.json``
    and every entry of its ``config_history.json``. Each file is rewritten atomically, the history
    first, so a crash in between leaves ``config.json`` to say the run still needs it. Idempotent. A
    run folder whose config cannot be read is left as it is (``python -m engine doctor`` reports it).

    Returns:
        The ids of the runs rewritten.

    Raises:
        StorageError: a rewrite failed (read-only or full workspace); no file is half-written.
    """
    runs = root / "runs"
    done = []
    for d in sorted(runs.iterdir()) if runs.is_dir() else ():
        try:
            config = read_json(d / "config.json")
        except (OSError, ValueError):
            continue
        if not isinstance(config, dict) or config.get("task") != PAIRED_AUDIO_RENAME[0]:
            continue
        audio = _audio_pair_run(root, d, config)
        new = _config_3(config, audio)
        if new == config:
            continue
        try:
            history = read_json(d / "config_history.json")
        except (OSError, ValueError):
            history = None
        if isinstance(history, list):
            history = [{**e, "config": _config_3(e["config"], audio)} if isinstance(e, dict) and isinstance(e.get("config"), dict)
                       else e for e in history]
            atomic_write_json(d / "config_history.json", history, what=f"run {d.name}'s config history (format 3)")
        atomic_write_json(d / "config.json", new, what=f"run {d.name}'s config (format 3)")
        done.append(d.name)
    if done:
        log.info("workspace %s: %d paired run(s) moved to format 3 (audio-text ones renamed %r): %s", root, len(done),
                 PAIRED_AUDIO_RENAME[1], ", ".join(done))
    return done


# ---------------------------------------------------------------- durable writes


def temp_path(path: Path) -> Path:
    """A fresh temporary name beside ``path``: ``.<name>.<pid>-<hex>.tmp`` (see :func:`is_temp_name`)."""
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(3)}{TMP_SUFFIX}")


def is_temp_name(name: str) -> bool:
    """True for the temporary names this module and the checkpoint writer create (``.*.tmp``, ``.tmp-*``)."""
    return name.startswith(".") and (name.endswith(TMP_SUFFIX) or name.startswith(".tmp-"))


def storage_error(e: OSError, what: str, path: Path | None = None) -> StorageError:
    """A :class:`StorageError` for ``e``: ``"<cause> while writing <what> (<path>)"``, cause in words."""
    if isinstance(e, StorageError):
        return e
    cause = os.strerror(e.errno).lower() if e.errno else (str(e) or type(e).__name__)
    where = f" ({path})" if path is not None else ""
    return StorageError(f"{cause} while writing {what}{where}", e.errno)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until every byte is written (the single place where stored bytes hit the disk)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def write_new_file(path: Path, data: bytes | memoryview) -> None:
    """Create ``path`` (which must not exist), write ``data`` and fsync it. Raises OSError as is:
    the caller owns ``path`` (a temporary name) and removes it on failure."""
    _write_synced(path, os.O_CREAT | os.O_EXCL, 0o644, data)


def _write_synced(path: Path, flags: int, mode: int, data: bytes | memoryview) -> None:
    """Open ``path`` for writing with ``flags``, write every byte, fsync, close (OSError as is)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | flags, mode)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: Path) -> None:
    """fsync a folder so that a rename inside it survives a power cut. File systems that cannot
    fsync a folder (EINVAL, ENOTSUP) are left as they are."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def unlink_quietly(path: Path) -> None:
    """Remove a file if it exists; ignore every error (used on error paths only)."""
    try:
        os.unlink(path)
    except OSError:
        pass


def remove_temps(folder: Path) -> int:
    """Delete every temporary file and folder (:func:`is_temp_name`) under ``folder``. Only for a
    caller that holds the lock of the run in ``folder`` (so none belongs to a live writer). Returns
    how many were removed."""
    n = 0
    for root, dirs, files in os.walk(folder):
        for name in [d for d in dirs if is_temp_name(d)]:
            shutil.rmtree(Path(root) / name, ignore_errors=True)
            dirs.remove(name)
            n += 1
        for name in files:
            if is_temp_name(name):
                unlink_quietly(Path(root) / name)
                n += 1
    return n


def atomic_write_bytes(path: Path, data: bytes | memoryview, *, what: str | None = None) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never a part.

    Temporary file in the same folder, write, fsync, ``os.replace`` over ``path``, fsync the folder.

    Args:
        path: destination; its folder is created if missing.
        data: the bytes.
        what: what is being written, for the error message (e.g. ``"checkpoint step 500"``);
            defaults to the file name.

    Raises:
        StorageError: any OSError (disk full, quota, read-only, I/O error), after removing the
            temporary file; the message reads ``"<cause> while writing <what> (<path>)"``.
    """
    path = Path(path)
    what = what or path.name
    tmp = temp_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_new_file(tmp, data)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except StorageError:
        unlink_quietly(tmp)
        raise
    except OSError as e:
        unlink_quietly(tmp)
        raise storage_error(e, what, path) from e


def append_record(path: Path, data: bytes, *, what: str | None = None) -> None:
    """Append ``data`` (one record, e.g. a JSON line) to the end of ``path`` and fsync it.

    For append-only logs (the audit log): the file is opened with ``O_APPEND``, so records of
    concurrent writers (dashboard sessions, the CLI) never overwrite each other, and each record is
    one :func:`_write_all` call; a new file's folder is fsynced so the file survives a power cut.

    Raises:
        StorageError: any OSError (disk full, read-only...); the message names ``what`` and the path.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        _write_synced(path, os.O_APPEND | os.O_CREAT, 0o640, data)
        if new:
            fsync_dir(path.parent)
    except OSError as e:
        raise storage_error(e, what or path.name, path) from e


def atomic_write_json(path: Path, obj: Any, *, what: str | None = None) -> None:
    """Write ``obj`` as indented JSON with :func:`atomic_write_bytes` (same errors)."""
    data = (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()
    atomic_write_bytes(path, data, what=what)


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


def derived_folder(folder: Path, marker: str, open_: Callable[[Path], T | None], fill: Callable[[Path], None],
                   what: str) -> T | None:
    """A folder of derived data that any process may rebuild (``features/``, ``encoded/``): what
    ``open_(folder)`` makes of it, building the folder first when needed.

    ``open_`` returns None for a folder that is missing, incomplete or damaged; then ``fill(tmp)``
    writes a new one (``marker`` last), published with :func:`publish_folder` (replacing a complete
    folder that ``open_`` refused; a process that publishes first wins and its folder is used), and
    it is opened again. When the folder cannot be written (an OSError: a full disk, a path that is
    not a folder) nothing is left behind, a warning names ``what`` and the folder, and None is
    returned: the caller keeps the data in memory.
    """
    got = open_(folder)
    if got is not None:
        return got
    try:
        publish_folder(folder, fill, marker=marker, overwrite=(folder / marker).exists())
    except OSError as e:
        log.warning("%s: cannot keep them in %s (%s); they stay in memory", what, folder, e)
        return None
    return open_(folder)
