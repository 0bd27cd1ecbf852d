"""The users file: who may sign in to the dashboard, with which role.

``$MASKLAB_USERS_FILE``, else ``<workspace>/users.toml``; written by ``python -m engine users ...``
(through the workspace's durable write path, mode 0600) and read on every sign-in::

    # masklab users (python -m engine users). Passwords are argon2id hashes (argon2-cffi).
    default_role = "viewer"   # sign-in through an identity provider: role of an e-mail not listed
    roles_claim = "groups"    # optional: take the role from this claim of the ID token instead

    [users.alice]             # sign-in with a password
    role = "admin"
    password = "$argon2id$v=19$m=65536,t=3,p=4$..."

    [emails]                  # sign-in through an identity provider (st.login), by verified e-mail
    "bob@example.com" = "editor"

Passwords are hashed and checked with ``argon2-cffi`` (Argon2id, RFC 9106, its default
parameters); nothing here is our own cryptography. Sign-in is *configured* when the file lists a
user or an e-mail, or sets ``default_role`` (:func:`signin_configured`).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.access.policy import ROLES, Identity, permission
from engine.errors import ConfigError
from engine.messages import describe_error, format_problems
from engine.workspace import atomic_write_bytes, workspace_root

USERS_ENV = "MASKLAB_USERS_FILE"
NAME_RE = re.compile(r"[a-z0-9][a-z0-9._@-]{0,63}")
_HASHER = PasswordHasher()
_DUMMY_HASH = _HASHER.hash("masklab: no such user")  # an unknown name costs one verification too


class UserEntry(BaseModel):
    """One password user: ``role`` and the argon2 hash of the password."""

    model_config = ConfigDict(extra="forbid")
    role: str
    password: str = ""


class UsersFile(BaseModel):
    """The parsed users file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    default_role: str = ""
    roles_claim: str = ""
    users: dict[str, UserEntry] = Field(default_factory=dict)
    emails: dict[str, str] = Field(default_factory=dict)

    def problems(self) -> list[str]:
        """Unknown roles and bad names, in words (empty when the file is valid)."""
        out = [f"user {n!r}: role {u.role!r} is not one of {', '.join(ROLES)}" for n, u in self.users.items()
               if u.role not in ROLES]  # fmt: skip
        out += [f"user name {n!r} is not valid (a-z, 0-9, '.', '_', '@', '-')" for n in self.users
                if not NAME_RE.fullmatch(n)]  # fmt: skip
        out += [f"e-mail {e!r}: role {r!r} is not one of {', '.join(ROLES)}" for e, r in self.emails.items()
                if r not in ROLES]  # fmt: skip
        if self.default_role and self.default_role not in ROLES:
            out.append(f"default_role {self.default_role!r} is not one of {', '.join(ROLES)}")
        return out


def users_path(workspace: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """``$MASKLAB_USERS_FILE``, else ``<workspace>/users.toml``."""
    env = os.environ if environ is None else environ
    if env.get(USERS_ENV, "").strip():
        return Path(env[USERS_ENV]).expanduser()
    return workspace_root(workspace) / "users.toml"


def load_users(path: str | os.PathLike[str] | None = None, workspace: str | os.PathLike[str] | None = None) -> UsersFile:
    """The users file (an empty :class:`UsersFile` when it does not exist).

    Raises:
        ConfigError: the file is not valid TOML, has unknown keys, unknown roles or bad names
            (the message names the file and the problem).
    """
    p = Path(path) if path is not None else users_path(workspace)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return UsersFile()
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{p}: cannot read the users file ({describe_error(e)})") from None
    try:
        users = UsersFile.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"{p}: {format_problems(e)}") from None
    problems = users.problems()
    if problems:
        raise ConfigError(f"{p}: {'; '.join(problems)}")
    return users


def signin_configured(path: str | os.PathLike[str] | None = None, workspace: str | os.PathLike[str] | None = None) -> bool:
    """True when the users file lists a user or an e-mail or sets ``default_role``.

    Raises:
        ConfigError: as :func:`load_users` (a broken users file must not silently open the dashboard).
    """
    u = load_users(path, workspace)
    return bool(u.users or u.emails or u.default_role)


def verify_password(name: str, password: str, path: str | os.PathLike[str] | None = None,
                    workspace: str | os.PathLike[str] | None = None) -> Identity | None:
    """The identity of user ``name`` when ``password`` matches its hash, else None.

    An unknown name is verified against a dummy hash, so it takes as long as a wrong password.
    """
    entry = load_users(path, workspace).users.get(name.strip().lower())
    try:
        _HASHER.verify(entry.password if entry and entry.password else _DUMMY_HASH, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return None
    if entry is None or not entry.password:
        return None
    return Identity(name.strip().lower(), entry.role, "password")


def oidc_identity(claims: Mapping[str, Any], path: str | os.PathLike[str] | None = None,
                  workspace: str | os.PathLike[str] | None = None) -> Identity | None:
    """The identity of a user signed in through an identity provider, from its ID-token claims.

    The name is the ``email`` claim (refused when ``email_verified`` is false). The role is the
    highest masklab role named in the ``roles_claim`` claim (a string or a list) when the file sets
    one, else the file's ``[emails]`` entry for that e-mail (case-insensitive), else
    ``default_role``. Returns None when no role applies (the page then says so).
    """
    users = load_users(path, workspace)
    email = str(claims.get("email") or "").strip().lower()
    if not email or claims.get("email_verified") is False:
        return None
    role = ""
    if users.roles_claim:
        value = claims.get(users.roles_claim)
        named = [value] if isinstance(value, str) else list(value or [])
        known = [r for r in ROLES if r in {str(v).lower() for v in named}]
        role = known[-1] if known else ""
    if not role:
        role = {e.lower(): r for e, r in users.emails.items()}.get(email, users.default_role)
    return Identity(email, role, "oidc") if role else None


def _dump(users: UsersFile) -> bytes:
    """The users file as TOML (strings quoted as JSON, which TOML's basic strings accept)."""
    q = json.dumps
    lines = ["# masklab users (python -m engine users). Passwords are argon2id hashes (argon2-cffi).", ""]
    if users.default_role:
        lines.append(f"default_role = {q(users.default_role)}")
    if users.roles_claim:
        lines.append(f"roles_claim = {q(users.roles_claim)}")
    for name, u in sorted(users.users.items()):
        lines += ["", f"[users.{q(name)}]", f"role = {q(u.role)}", f"password = {q(u.password)}"]
    if users.emails:
        lines += ["", "[emails]"] + [f"{q(e)} = {q(r)}" for e, r in sorted(users.emails.items())]
    return ("\n".join(lines) + "\n").encode()


def _save(users: UsersFile, path: Path) -> None:
    problems = users.problems()
    if problems:
        raise ConfigError("; ".join(problems))
    atomic_write_bytes(path, _dump(users), what="the users file")
    os.chmod(path, 0o600)


def _target(prefix: str):
    return lambda a: f"{prefix}{a.get('name') or a.get('email')}"


@permission("users.manage", _target("user "), lambda _: {})
def set_user(name: str, role: str, password: str | None = None, *, path: str | os.PathLike[str] | None = None,
             workspace: str | os.PathLike[str] | None = None) -> Identity:
    """Add password user ``name`` or change its role and/or password (None keeps the password).

    Raises:
        ConfigError: bad name or role; a new user without a password; an empty password.
        PermissionDeniedError: ``actor`` is not an admin, or demo mode.
        StorageError: the file cannot be written.
    """
    p = Path(path) if path is not None else users_path(workspace)
    users = load_users(p)
    name = name.strip().lower()
    if not NAME_RE.fullmatch(name):
        raise ConfigError(f"user name {name!r} is not valid: 1-64 of a-z, 0-9, '.', '_', '@', '-'")
    if role not in ROLES:
        raise ConfigError(f"role {role!r} is not one of {', '.join(ROLES)}")
    old = users.users.get(name)
    if password is None and old is None:
        raise ConfigError(f"user {name!r} is new: give a password")
    if password is not None and not password:
        raise ConfigError("the password is empty")
    users.users[name] = UserEntry(role=role, password=_HASHER.hash(password) if password else old.password)
    _save(users, p)
    return Identity(name, role, "password")


@permission("users.manage", _target("user "), lambda _: {})
def remove_user(name: str, *, path: str | os.PathLike[str] | None = None,
                workspace: str | os.PathLike[str] | None = None) -> bool:
    """Remove password user ``name``; False when there was none. Raises as :func:`set_user`."""
    p = Path(path) if path is not None else users_path(workspace)
    users = load_users(p)
    if users.users.pop(name.strip().lower(), None) is None:
        return False
    _save(users, p)
    return True


@permission("users.manage", _target("e-mail "), lambda _: {})
def set_email_role(email: str, role: str | None, *, path: str | os.PathLike[str] | None = None,
                   workspace: str | os.PathLike[str] | None = None) -> None:
    """Give ``email`` (identity-provider sign-in) a role; None removes it. Raises as :func:`set_user`."""
    p = Path(path) if path is not None else users_path(workspace)
    users = load_users(p)
    email = email.strip().lower()
    if "@" not in email:
        raise ConfigError(f"{email!r} is not an e-mail address")
    if role is None:
        users.emails.pop(email, None)
    else:
        users.emails[email] = role
    _save(users, p)
