"""Sign-in attempts limited per user and per address, with a lockout that expires (issue 38).

A password sign-in goes through :func:`sign_in`: a user name or a client address with
:data:`MAX_FAILURES` failed attempts within :data:`WINDOW_S` is locked out for :data:`LOCKOUT_S`
(an address gets :data:`ADDRESS_FACTOR` times as many attempts: people behind one proxy share it).
While locked, no password is even checked (the answer does not tell a right password from a wrong
one), and the refusal says how long to wait. Every attempt is an audit line (``auth.sign_in``: ok,
failed, or refused while locked out). The counts live in the dashboard process's memory: a restart
forgets them, as it forgets the sessions.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable

from engine.access import journal
from engine.access.policy import Identity
from engine.access.users import verify_password
from engine.errors import PermissionDeniedError

MAX_FAILURES = 5
WINDOW_S = 600.0
LOCKOUT_S = 300.0
ADDRESS_FACTOR = 4


class SignInLockedError(PermissionDeniedError):
    """Too many failed sign-ins for this user or from this address: the message says how long to wait."""


class Throttle:
    """Failed attempts per key (``user:<name>``, ``addr:<ip>``) in a sliding window, and lockouts."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._fails: dict[str, deque[float]] = {}
        self._locked: dict[str, float] = {}  # key -> until
        self._lock = threading.Lock()

    def wait_s(self, keys: list[tuple[str, int]]) -> float:
        """Seconds until every key is free (0: none is locked)."""
        now = self.clock()
        with self._lock:
            return max([self._locked.get(k, 0.0) - now for k, _ in keys] + [0.0])

    def failed(self, keys: list[tuple[str, int]]) -> None:
        """Count a failure for each ``(key, allowed failures)``; lock a key that reached its limit."""
        now = self.clock()
        with self._lock:
            for key, limit in keys:
                q = self._fails.setdefault(key, deque())
                q.append(now)
                while q and q[0] < now - WINDOW_S:
                    q.popleft()
                if len(q) >= limit:
                    self._locked[key] = now + LOCKOUT_S
                    q.clear()

    def succeeded(self, keys: list[tuple[str, int]]) -> None:
        """A right password: the user's count starts again (the address's stays)."""
        with self._lock:
            for key, _ in keys:
                if key.startswith("user:"):
                    self._fails.pop(key, None)


THROTTLE = Throttle()


def sign_in(name: str, password: str, address: str | None = None, *, path: str | os.PathLike[str] | None = None,
            workspace: str | os.PathLike[str] | None = None, throttle: Throttle | None = None) -> Identity | None:
    """:func:`engine.access.users.verify_password` behind the throttle: the identity, or None for an
    unknown name or a wrong password (counted against the name and ``address``).

    Raises:
        SignInLockedError: the name or the address is locked out (the password is not checked).
    """
    t = throttle or THROTTLE
    user = name.strip().lower()
    keys = [(f"user:{user}", MAX_FAILURES)] + ([(f"addr:{address}", MAX_FAILURES * ADDRESS_FACTOR)] if address else [])
    wait = t.wait_s(keys)
    if wait > 0:
        journal.record("auth.sign_in", user, "refused", None, workspace, quiet=True, address=address,
                       reason="locked out after repeated failures")
        raise SignInLockedError(f"Too many failed sign-ins: try again in {int(wait) + 1} s.")
    ident = verify_password(name, password, path, workspace)
    if ident is None:
        t.failed(keys)
        journal.record("auth.sign_in", user, "failed", None, workspace, quiet=True, address=address,
                       reason="unknown user name or wrong password")
        return None
    t.succeeded(keys)
    journal.record("auth.sign_in", user, "ok", ident, workspace, quiet=True, address=address)
    return ident
