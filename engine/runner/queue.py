"""The run queue without a daemon: slot locks bound how many runs train, tickets keep their order.

* **Slots.** At most ``$MASKLAB_MAX_RUNS`` (default 2) runs train at once: a worker trains while it
  holds one of the ``flock``s ``<workspace>/slots/slot-K.lock``. The kernel drops it when the
  process exits, however it exits, so a killed worker never leaks a slot.
* **First come, first served.** A queued run has a ticket ``<workspace>/queue/<queued_at µs>-<run_id>``
  (created by the launcher at submit, and by the worker if missing). A waiting worker tries the
  slots only when no older ticket belongs to a live run (its run lock is held, or the launcher has
  just created it and its worker is starting). Tickets of dead runs are ignored and removed.
* **Cap.** ``submit`` refuses a run while ``$MASKLAB_MAX_QUEUED`` (default 20) runs are waiting.
* **No torch while queued.** Nothing here imports torch; the worker imports it only once it has a slot.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from engine.errors import ConfigError
from engine.store.lock import run_alive
from engine.store.runs import is_starting, read_status
from engine.workspace import atomic_write_bytes, unlink_quietly

DEFAULT_MAX_RUNS = 2
DEFAULT_MAX_QUEUED = 20
QUEUE_DIR, SLOTS_DIR = "queue", "slots"


def _env_int(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"${name}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"${name}: must be at least {minimum}, got {value}")
    return value


def max_runs() -> int:
    """How many runs may train at once on this machine: ``$MASKLAB_MAX_RUNS`` (default 2, at least 1)."""
    return _env_int("MASKLAB_MAX_RUNS", DEFAULT_MAX_RUNS, 1)


def max_queued() -> int:
    """How many runs may wait for a slot: ``$MASKLAB_MAX_QUEUED`` (default 20, at least 1)."""
    return _env_int("MASKLAB_MAX_QUEUED", DEFAULT_MAX_QUEUED, 1)


def _ticket_name(run_dir: Path, queued_at: float | None = None) -> str:
    if queued_at is None:
        st = read_status(run_dir)
        queued_at = float(st.get("queued_at") or st.get("created_at") or time.time())
    return f"{int(queued_at * 1e6):020d}-{run_dir.name}"


def enqueue(workspace: Path, run_dir: Path, queued_at: float | None = None) -> Path:
    """Create the run's ticket (named by its ``queued_at``: the status's, unless given, e.g. when an
    evaluation job of the run was asked for) if missing; return its path.

    Raises StorageError when it cannot be written.
    """
    path = Path(workspace) / QUEUE_DIR / _ticket_name(Path(run_dir), queued_at)
    if not path.exists():
        atomic_write_bytes(path, b"", what=f"the queue ticket of run {Path(run_dir).name}")
    return path


def dequeue(workspace: Path, run_id: str) -> None:
    """Remove the run's tickets (it got a slot, or ended)."""
    for p in _tickets(workspace):
        if p.name.split("-", 1)[1] == run_id:
            unlink_quietly(p)


def _tickets(workspace: Path) -> list[Path]:
    folder = Path(workspace) / QUEUE_DIR
    try:
        return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and "-" in p.name)
    except FileNotFoundError:
        return []


def _waiting(workspace: Path, ticket: Path) -> bool:
    d = Path(workspace) / "runs" / ticket.name.split("-", 1)[1]
    return d.is_dir() and (run_alive(d) or is_starting(d))


def waiting_runs(workspace: Path, *, prune: bool = False) -> list[str]:
    """Run ids of the live queued runs, first come first. ``prune`` removes dead runs' tickets."""
    out = []
    for t in _tickets(workspace):
        if _waiting(workspace, t):
            out.append(t.name.split("-", 1)[1])
        elif prune:
            unlink_quietly(t)
    return out


def queue_room(workspace: Path) -> tuple[int, int]:
    """``(room, cap)``: how many more runs may be queued now (``$MASKLAB_MAX_QUEUED`` minus the live
    queued runs, at least 0) and the cap. A read for planning (New run's sweep section, a sweep
    submit); ``submit`` checks the cap again under :func:`submit_lock`.

    Raises:
        ConfigError: ``$MASKLAB_MAX_QUEUED`` is not a whole number of at least 1.
    """
    cap = max_queued()
    return max(0, cap - len(waiting_runs(Path(workspace)))), cap


@contextmanager
def submit_lock(workspace: Path) -> Iterator[None]:
    """Serialise submits, so that two at once cannot both pass the queue cap."""
    folder = Path(workspace) / QUEUE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".submit.lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _try_slot(workspace: Path):
    slots = Path(workspace) / SLOTS_DIR
    slots.mkdir(parents=True, exist_ok=True)
    for k in range(max_runs()):
        f = open(slots / f"slot-{k}.lock", "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return f
        except BlockingIOError:
            f.close()
    return None


def _older_waiting(workspace: Path, mine: Path) -> bool:
    """True if a live run queued before ``mine``; dead runs' older tickets, and older tickets of this
    same run (left by an earlier worker of it that died while queued), are removed on the way."""
    run_id = mine.name.split("-", 1)[1]
    for t in _tickets(workspace):
        if t.name >= mine.name:
            return False
        if t.name.split("-", 1)[1] != run_id and _waiting(workspace, t):
            return True
        unlink_quietly(t)
    return False


@contextmanager
def run_slot(workspace: Path, run_dir: Path, should_stop: Callable[[], bool], poll_s: float = 0.5,
             queued_at: float | None = None) -> Iterator[int | None]:
    """Wait for this run's turn and a free slot, hold the slot while the body runs; yields the slot's
    number K (``slots/slot-K.lock``; it picks the run's GPUs, :func:`engine.runner.devices.slot_devices`),
    or None if stopped while waiting. The caller holds the run lock (so its ticket counts as live).
    ``queued_at``: the ticket's date (default: the run status's ``queued_at``)."""
    workspace, run_dir = Path(workspace), Path(run_dir)
    mine = enqueue(workspace, run_dir, queued_at)
    slot = None
    try:
        while True:
            if should_stop():
                yield None
                return
            if not mine.exists():  # pruned by someone who saw us dead (we were slow to start)
                mine = enqueue(workspace, run_dir, queued_at)
            if not _older_waiting(workspace, mine):
                slot = _try_slot(workspace)
                if slot is not None:
                    break
            time.sleep(poll_s)
        dequeue(workspace, run_dir.name)
        yield int(Path(slot.name).stem.rsplit("-", 1)[1])
    finally:
        dequeue(workspace, run_dir.name)
        if slot is not None:
            fcntl.flock(slot, fcntl.LOCK_UN)
            slot.close()
