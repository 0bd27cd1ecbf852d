"""The audit log: who launched, resumed, cancelled, deleted or imported what, and when.

One append-only file, ``<workspace>/audit/audit.jsonl``: one JSON object per line, appended with
:func:`engine.workspace.append_record` (``O_APPEND``, one write, fsync), never rewritten by masklab.
Each line::

    {"time": "2026-11-30T18:40:12.345Z", "user": "alice", "role": "editor", "source": "password",
     "action": "run.submit", "target": "20261130-184012-ab12cd", "outcome": "ok", ...details}

``outcome`` is ``ok``, ``failed`` (the action raised; ``reason`` holds the message) or ``refused``
(the permission check failed; ``reason`` says why). Lines come from :func:`engine.access.policy.authorized`,
which every write path opens. Admins read it with :func:`engine.access.audit.read_audit` (the Audit page, or
``python -m engine audit``); :func:`read_entries` is the unchecked reader under it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engine.errors import MasklabError
from engine.workspace import append_record, workspace_root

log = logging.getLogger(__name__)

AUDIT_FILE = Path("audit") / "audit.jsonl"
FIELDS = ("time", "user", "role", "source", "action", "target", "outcome")


@dataclass(frozen=True)
class AuditEntry:
    """One line of the audit log (see the module docstring); ``details`` holds every other key."""

    time: str
    user: str
    role: str
    source: str
    action: str
    target: str
    outcome: str
    details: dict[str, Any] = field(default_factory=dict)


def audit_path(workspace: str | os.PathLike[str] | None = None) -> Path:
    """``<workspace>/audit/audit.jsonl``."""
    return workspace_root(workspace) / AUDIT_FILE


def record(action: str, target: str, outcome: str, who: Any, workspace: str | os.PathLike[str] | None = None,
           *, quiet: bool = False, **details: Any) -> dict[str, Any]:
    """Append one line; return it as a dict.

    Args:
        action: an :data:`engine.access.policy.ACTIONS` key, or ``auth.sign_in`` (:mod:`engine.access.throttle`).
        target: what it acted on (run id, dataset name, user name).
        outcome: ``"ok"``, ``"failed"`` or ``"refused"``.
        who: the :class:`engine.access.policy.Identity` (None: nobody signed in).
        quiet: log a failed write instead of raising (the action itself is already decided).
    Raises:
        StorageError: the line cannot be written (unless ``quiet``).
    """
    line = {
        "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "user": getattr(who, "name", "(nobody)"), "role": getattr(who, "role", ""),
        "source": getattr(who, "source", ""), "action": action, "target": str(target), "outcome": outcome,
        **{k: v for k, v in details.items() if k not in FIELDS},
    }  # fmt: skip
    data = (json.dumps(line, ensure_ascii=False, default=str) + "\n").encode()
    try:
        append_record(audit_path(workspace), data, what="the audit log")
    except MasklabError as e:  # StorageError, FormatVersionError
        if not quiet:
            raise
        log.error("audit line not written (%s): %s", e, data.decode().strip())
    return line


def read_entries(workspace: str | os.PathLike[str] | None = None, *, limit: int | None = 1000) -> list[AuditEntry]:
    """The newest ``limit`` lines (None: all), newest first, with no permission check (callers check:
    :func:`engine.access.audit.read_audit`). A line that is not valid JSON (a write cut by a power loss)
    is skipped with a logged warning."""
    path = audit_path(workspace)
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    out: list[AuditEntry] = []
    for n, raw in enumerate(reversed(lines)):
        if limit is not None and len(out) >= limit:
            break
        try:
            d = json.loads(raw)
            out.append(AuditEntry(**{k: str(d.pop(k, "")) for k in FIELDS}, details=d))
        except (ValueError, TypeError, AttributeError):
            log.warning("%s: line %d is not a JSON object; skipped", path, len(lines) - n)
    return out
