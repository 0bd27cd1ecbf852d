"""Who may do what: roles, the identity that acts, demo mode, and the one permission check of every write path.

Roles (each includes the ones before it):

=========  ==============================================================================
``viewer``  read everything (runs, metrics, samples, datasets); change nothing
``editor``  + launch, resume and cancel runs; tag, annotate and archive runs; import datasets
``admin``   + delete runs and datasets, manage users, read the audit log, repair the workspace
=========  ==============================================================================

Every engine function that changes the workspace on a user's behalf opens :func:`authorized` with
its action from :data:`ACTIONS`; a refusal raises :class:`~engine.errors.PermissionDeniedError`
before anything is written, and every attempt is an audit line (:mod:`engine.access.journal`), a
refusal included (in demo mode too: the line is the only thing a refused call writes). The
identity: ``actor=``, else :func:`acting_as`'s context, else the local admin, or nobody after
:func:`require_sign_in`. Demo mode (``MASKLAB_MODE=demo``) refuses every action. Design:
docs/architecture.md, "Access". tests/engine/test_write_entry_points.py classifies every public
name of :mod:`engine.api` and every CLI command as a read or a write and checks each write's refusal.

    >>> with acting_as(Identity("bob", "viewer", "password")):
    ...     submit(cfg)      # PermissionDeniedError: bob (viewer) may not launch runs: ...
"""

from __future__ import annotations

import functools
import getpass
import inspect
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.access import journal
from engine.errors import ConfigError, PermissionDeniedError

log = logging.getLogger(__name__)

ROLES = ("viewer", "editor", "admin")
"""Roles from the least to the most allowed; each includes the ones before it."""

ACTIONS: dict[str, tuple[str, str]] = {
    "run.submit": ("editor", "launch runs"),
    "run.resume": ("editor", "resume runs"),
    "run.cancel": ("editor", "cancel runs"),
    "run.evaluate": ("editor", "evaluate runs"),
    "run.annotate": ("editor", "tag, annotate or archive runs"),
    "run.delete": ("admin", "delete runs"),
    "run.import": ("editor", "import runs"),
    "data.import": ("editor", "import datasets"),
    "data.delete": ("admin", "delete datasets"),
    "model.import": ("editor", "import pretrained models"),
    "model.delete": ("admin", "delete imported models"),
    "users.manage": ("admin", "manage users"),
    "audit.read": ("admin", "read the audit log"),
    "workspace.repair": ("admin", "repair the workspace"),
}
"""action -> (the least role allowed to do it, what it is in words)."""

MODE_ENV = "MASKLAB_MODE"
MODES = ("normal", "demo")


@dataclass(frozen=True)
class Identity:
    """Who acts.

    Attributes:
        name: a user name, an e-mail (sign-in through an identity provider) or ``local:<OS user>``.
        role: one of :data:`ROLES`.
        source: how it was established: ``"local"`` (CLI, dashboard without sign-in), ``"password"``
            (the users file), ``"oidc"`` (an identity provider through ``st.login``).
    """

    name: str
    role: str
    source: str = "local"

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"role {self.role!r} of {self.name!r} is not one of {', '.join(ROLES)}")

    @property
    def label(self) -> str:
        """``"alice (editor)"``."""
        return f"{self.name} ({self.role})"


def local_admin() -> Identity:
    """The single local user of a masklab without sign-in (and of the CLI): ``local:<OS user>``, admin."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (some containers)
        user = str(os.getuid())
    return Identity(f"local:{user}", "admin", "local")


_CURRENT: ContextVar[Identity | None] = ContextVar("masklab_identity", default=None)
_sign_in_required = False


def mode(environ: Mapping[str, str] | None = None) -> str:
    """``"demo"`` when ``MASKLAB_MODE=demo``, else ``"normal"`` (unset or empty).

    Raises:
        ConfigError: any other value (naming the variable and the values it takes).
    """
    raw = (os.environ if environ is None else environ).get(MODE_ENV, "").strip().lower() or "normal"
    if raw not in MODES:
        raise ConfigError(f"{MODE_ENV}={raw!r} is not one of {', '.join(MODES)}")
    return raw


def is_demo(environ: Mapping[str, str] | None = None) -> bool:
    """True in demo mode (``MASKLAB_MODE=demo``): every write is refused."""
    return mode(environ) == "demo"


def require_sign_in(required: bool = True) -> None:
    """From now on a call in this process with neither ``actor=`` nor :func:`acting_as` is refused
    instead of acting as the local admin. The dashboard calls it when sign-in is configured."""
    global _sign_in_required
    _sign_in_required = required


@contextmanager
def acting_as(identity: Identity | None) -> Iterator[Identity | None]:
    """Within the block, calls without ``actor=`` act as ``identity`` (None: nobody signed in)."""
    token = _CURRENT.set(identity)
    try:
        yield identity
    finally:
        _CURRENT.reset(token)


def current_identity() -> Identity | None:
    """The identity set by :func:`acting_as`; else the local admin, or None once
    :func:`require_sign_in` was called (nobody is signed in)."""
    ident = _CURRENT.get()
    if ident is not None or _sign_in_required:
        return ident
    return local_admin()


def role_allows(role: str, action: str) -> bool:
    """True when ``role`` is at least the role :data:`ACTIONS` needs for ``action``.

    Raises:
        KeyError: an unknown action (a programming error).
    """
    need, _ = ACTIONS[action]
    return role in ROLES and ROLES.index(role) >= ROLES.index(need)


def refusal(action: str, actor: Identity | None, environ: Mapping[str, str] | None = None) -> str | None:
    """Why ``actor`` may not do ``action`` now, in words, or None when it may."""
    need, words = ACTIONS[action]
    if is_demo(environ):
        return (f"masklab is in demo mode ({MODE_ENV}=demo): it cannot {words} here; nothing was changed. "
                f"Use a masklab without {MODE_ENV}=demo to change anything")
    if actor is None:
        return f"nobody is signed in: sign in to {words}; nothing was changed"
    if not role_allows(actor.role, action):
        return (f"{actor.label} may not {words}: that needs the {need} role; ask an admin. Nothing was "
                "changed")
    return None


def can(action: str, actor: Identity | None = None) -> bool:
    """True when ``actor`` (default :func:`current_identity`) may do ``action`` now (pages hide the
    controls of what it cannot do; the engine call checks again)."""
    return refusal(action, actor if actor is not None else current_identity()) is None


def check(action: str, actor: Identity | None = None) -> Identity:
    """Return the identity acting, or raise.

    Raises:
        PermissionDeniedError: demo mode, nobody signed in, or a role below what ``action`` needs.
    """
    who = actor if actor is not None else current_identity()
    why = refusal(action, who)
    if why is not None:
        raise PermissionDeniedError(why)
    assert who is not None
    return who


def authorize(action: str, target: str, *, actor: Identity | None = None,
              workspace: str | os.PathLike[str] | Path | None = None) -> Identity:
    """:func:`check`, with a refusal recorded in the audit log (demo mode's too); returns the identity.

    For an action whose outcome another process records (a background import), or that the caller
    records itself; else use :func:`authorized`.

    Raises:
        PermissionDeniedError: as :func:`check`.
    """
    who = actor if actor is not None else current_identity()
    why = refusal(action, who)
    if why is not None:
        journal.record(action, target, "refused", who, workspace, quiet=True, reason=why)
        raise PermissionDeniedError(why)
    assert who is not None
    return who


@contextmanager
def authorized(action: str, target: str, *, actor: Identity | None = None,
               workspace: str | os.PathLike[str] | Path | None = None) -> Iterator[dict[str, Any]]:
    """Check ``action`` for ``actor`` and record the attempt in the audit log.

    Yields a dict for the block to fill (``target`` may be replaced once known, e.g. by the new run's
    id; other keys are kept as details). The audit line says ``ok`` when the block ends normally,
    ``failed`` with the error when it raises, ``refused`` with the reason when the check fails (then
    the block does not run; demo mode's refusals too, the only line a demo writes).

    Raises:
        PermissionDeniedError: as :func:`check`, before the block runs.
        Whatever the block raises.
    """
    who = authorize(action, target, actor=actor, workspace=workspace)
    entry: dict[str, Any] = {"target": target}
    try:
        yield entry
    except BaseException as e:
        journal.record(action, entry.pop("target"), "failed", who, workspace, quiet=True,
                     reason=str(e) or type(e).__name__, **entry)
        raise
    journal.record(action, entry.pop("target"), "ok", who, workspace, quiet=True, **entry)


def permission(action: str, target: Callable[[dict[str, Any]], str],
               outcome: Callable[[Any], dict[str, Any]] | None = None) -> Callable:
    """Decorator: the function runs inside :func:`authorized` and takes a keyword ``actor=``.

    ``target(arguments)`` names what it acts on from its bound arguments (defaults applied);
    ``outcome(result)`` adds details (and may replace ``target``) to the audit line. The function's
    ``workspace`` argument, when it has one, is where the line is written.
    """

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args: Any, actor: Identity | None = None, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            with authorized(action, target(bound.arguments), actor=actor,
                            workspace=bound.arguments.get("workspace")) as entry:
                result = fn(*args, **kwargs)
                if outcome is not None:
                    entry.update(outcome(result))
                return result

        actor_param = inspect.Parameter("actor", inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation="Identity | None")
        wrapper.__signature__ = sig.replace(parameters=[*sig.parameters.values(), actor_param])  # type: ignore[attr-defined]
        return wrapper

    return decorate
