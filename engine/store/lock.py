"""Run identity: the run lock. Liveness and cancellation are decided by it, never by a PID.

The process that writes a run (its worker; ``doctor --repair`` or a resume only once the worker is
provably gone) holds an exclusive ``flock`` on ``<run_dir>/lock`` for its whole life. The kernel
drops the lock when that process dies, however it dies (SIGKILL, OOM killer, power cut: the lock is
not on disk), so:

* **alive** = someone holds the lock. A reader tries a non-blocking shared lock on its own file
  descriptor and releases it at once (:func:`run_alive`); it never looks at PIDs or command lines.
* **cancel** signals only the process that holds the lock (:func:`signal_holder`): the holder is
  read from ``/proc/locks`` (the kernel's table of locks, keyed by the lock file's inode), confirmed
  in ``/proc/<pid>/fdinfo`` (that process has the lock file open with the lock on it), pinned with a
  pidfd, confirmed again, then signalled through the pidfd. A PID stored in a status file is never
  used, so a stale PID of a dead run cannot get a live process killed.

Linux only (``/proc``); elsewhere :func:`lock_holder` returns None and cancel relies on the
``cancel`` marker file that the worker polls every step.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from pathlib import Path

from engine.errors import RunLockedError
from engine.workspace import storage_error

LOCK_FILE = "lock"


class RunLock:
    """The exclusive lock on ``<run_dir>/lock``, held while this process writes the run.

    Use as a context manager or with :meth:`acquire` / :meth:`release`. The PID of the holder is
    written into the file for humans (``cat runs/<id>/lock``); nothing trusts it.
    """

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None

    def acquire(self, timeout: float = 10.0, poll_s: float = 0.05) -> "RunLock":
        """Take the lock, waiting up to ``timeout`` seconds (a reader's probe holds it for microseconds).

        Raises:
            RunLockedError: another live process holds it after ``timeout`` (the run's worker is
                running, or ``doctor --repair`` is working on it); the message names its PID.
            StorageError: the lock file cannot be created (disk full, read-only).
        """
        if self._fd is not None:
            return self
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise storage_error(e, f"the lock of run {self.path.parent.name}", self.path) from e
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    holder = lock_holder(self.path.parent)
                    raise RunLockedError(
                        f"run {self.path.parent.name} is held by another live process"
                        f"{f' (pid {holder})' if holder else ''}: its worker is running, or "
                        f"`python -m engine doctor --repair` is working on it") from None
                time.sleep(poll_s)
        self._fd = fd
        try:  # for humans only; a full disk must not stop the run here
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        return self

    def release(self) -> None:
        """Drop the lock (the kernel does it anyway when the process exits)."""
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def run_alive(run_dir: Path) -> bool:
    """True while some process holds the run's lock (its worker is alive).

    Tries a non-blocking shared ``flock`` on a separate file descriptor and releases it at once;
    no lock file means no worker ever took it (a format-1 run, or a worker not started yet).
    """
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def lock_claimed(run_dir: Path) -> bool:
    """True once some process has taken the lock: the file holds the PID that :meth:`RunLock.acquire`
    writes right after its ``flock``. A lock file that is missing or empty belongs to a process
    between creating it and locking it (or one that never got further), which a reader must not
    take for a process that died holding it."""
    try:
        return bool((Path(run_dir) / LOCK_FILE).read_bytes().strip())
    except OSError:
        return False


def _holds(pid: int, dev: int, ino: int) -> bool:
    """True if process ``pid`` has a file descriptor on (dev, ino) with an exclusive flock on it."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for n in fds:
        try:
            st = os.stat(f"/proc/{pid}/fd/{n}")
            if (st.st_dev, st.st_ino) != (dev, ino):
                continue
            with open(f"/proc/{pid}/fdinfo/{n}", encoding="ascii", errors="replace") as f:
                info = f.read()
        except OSError:
            continue
        if any(line.startswith("lock:") and " FLOCK " in line and " WRITE " in line for line in info.splitlines()):
            return True
    return False


def lock_holder(run_dir: Path) -> int | None:
    """PID of the process that holds the run's lock, from the kernel (``/proc/locks``), or None.

    A candidate from ``/proc/locks`` (an exclusive FLOCK on the lock file's inode) counts only if
    ``/proc/<pid>/fdinfo`` shows that process holding that lock on a descriptor of this very file.
    """
    path = Path(run_dir) / LOCK_FILE
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read().splitlines()
    except OSError:
        return None
    found = set()
    for line in table:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:2147815 0 EOF"; "1: -> FLOCK ..." is a waiter
        if len(parts) < 6 or parts[1] != "FLOCK" or parts[3] != "WRITE":
            continue
        try:
            pid, ino = int(parts[4]), int(parts[5].rsplit(":", 1)[1])
        except (ValueError, IndexError):
            continue
        if ino == st.st_ino and pid > 0 and _holds(pid, st.st_dev, st.st_ino):
            found.add(pid)
    return found.pop() if len(found) == 1 else None


def signal_holder(run_dir: Path, sig: int = signal.SIGTERM) -> int | None:
    """Send ``sig`` to the process that holds the run's lock; return its PID, or None if none was signalled.

    The holder is found with :func:`lock_holder`, pinned with ``pidfd_open`` (a pidfd names one
    process for good: if it dies, its PID can be reused but the pidfd never points at the new
    process), checked again with :func:`lock_holder` (so the pinned process held the lock after it
    was pinned), and signalled through the pidfd (which fails, signalling nobody, if the process
    died in between). Without pidfd support it falls back to ``os.kill`` right after the second check.
    """
    pid = lock_holder(run_dir)
    if pid is None:
        return None
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except (AttributeError, OSError):  # kernel < 5.3 or not Linux
        pidfd = None
    try:
        if lock_holder(run_dir) != pid:
            return None
        if pidfd is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(pidfd, sig)
        return pid
    except ProcessLookupError:
        return None
    finally:
        if pidfd is not None:
            os.close(pidfd)
