"""Reading the audit log (:mod:`engine.access.journal` holds its format and writer): admins only."""

from __future__ import annotations

import os
from typing import Any

from engine.access.journal import AUDIT_FILE, FIELDS, AuditEntry, audit_path, read_entries, record
from engine.access.policy import authorize

__all__ = ["AUDIT_FILE", "FIELDS", "AuditEntry", "audit_path", "read_audit", "record"]


def read_audit(workspace: str | os.PathLike[str] | None = None, *, limit: int | None = 1000,
               actor: Any = None) -> list[AuditEntry]:
    """The newest ``limit`` lines (None: all), newest first. Admins only.

    A line that is not valid JSON (a write cut by a power loss) is skipped with a logged warning. A
    refused read is itself an audit line (``audit.read``, ``refused``); an allowed one is not.

    Raises:
        PermissionDeniedError: ``actor`` (default: the current identity) is not an admin, or demo mode.
    """
    authorize("audit.read", "the audit log", actor=actor, workspace=workspace)
    return read_entries(workspace, limit=limit)
