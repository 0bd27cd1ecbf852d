"""Reading the audit log (:mod:`engine.access.journal` holds its format and writer): admins only."""

from __future__ import annotations

import os
from typing import Any

from engine.access.journal import AUDIT_FILE, FIELDS, AuditEntry, audit_path, read_entries, record
from engine.access.policy import check

__all__ = ["AUDIT_FILE", "FIELDS", "AuditEntry", "audit_path", "read_audit", "record"]


def read_audit(workspace: str | os.PathLike[str] | None = None, *, limit: int | None = 1000,
               actor: Any = None) -> list[AuditEntry]:
    """The newest ``limit`` lines (None: all), newest first. Admins only.

    A line that is not valid JSON (a write cut by a power loss) is skipped with a logged warning.

    Raises:
        PermissionDeniedError: ``actor`` (default: the current identity) is not an admin.
    """
    check("audit.read", actor)
    return read_entries(workspace, limit=limit)
