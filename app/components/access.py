"""Who this browser session is, the sign-in form, and which pages and controls it gets.

The engine decides (``engine.access.policy``); this module only finds the session's identity and hides
what it may not do. Every write call of a page passes ``actor=actor()`` explicitly, because a
self-refreshing fragment reruns without the entry script (so without its ``acting_as`` context).

- No sign-in configured (no users file user, no ``[auth]`` in the secrets): the local admin, as
  before (the exposure check keeps that to 127.0.0.1 unless opted out).
- A users file with users: a user name / password form (``engine.access.users.verify_password``); the
  identity is kept in the session and re-read from the file on every rerun (a removed user or a
  changed role takes effect at once).
- ``[auth]`` in ``.streamlit/secrets.toml``: a "Sign in with ..." button (``st.login``); the role comes
  from the users file's ``roles_claim``, ``[emails]`` or ``default_role`` (``engine.access.users.oidc_identity``).
"""

from __future__ import annotations

import functools

import streamlit as st

from app.components.errors import user_errors
from app.serve import oidc_configured
from engine.api import (
    Identity,
    SignInLockedError,
    can,
    is_demo,
    load_users,
    local_admin,
    oidc_identity,
    require_sign_in,
    sign_in,
)

SESSION_KEY = "masklab_identity"


def _oidc() -> bool:
    try:
        return "auth" in st.secrets
    except (FileNotFoundError, OSError):  # no secrets file
        return oidc_configured()


def methods() -> tuple[bool, bool]:
    """``(password, identity provider)``: which sign-in methods are configured."""
    return bool(load_users().users), _oidc()


def actor() -> Identity | None:
    """The identity of this session (None: sign-in is configured and nobody is signed in)."""
    password, oidc = methods()
    if not (password or oidc):
        return local_admin()
    if oidc and st.user.is_logged_in:
        return oidc_identity(st.user.to_dict())
    held = st.session_state.get(SESSION_KEY)
    if held is None or not password:
        return None
    entry = load_users().users.get(held.name)
    return Identity(held.name, entry.role, "password") if entry is not None else None


def sign_in_gate() -> Identity:
    """Return the session's identity; without one, show the sign-in form and stop the script."""
    password, oidc = methods()
    require_sign_in(password or oidc)
    who = actor()
    if who is not None:
        return who
    st.title("Sign in to masklab")
    if oidc:
        if st.user.is_logged_in:  # signed in at the provider, but no masklab role
            st.error(f"{st.user.get('email') or 'this account'} has no role in masklab: ask an admin to add "
                     "it (python -m engine users email ADDRESS --role viewer).")
            st.button("Sign out", on_click=st.logout)
        else:
            st.button("Sign in with your organisation's account", type="primary", on_click=st.login)
    if password:
        with st.form("signin"):
            name = st.text_input("User name", key="signin_name")
            pw = st.text_input("Password", type="password", key="signin_password")
            go = st.form_submit_button("Sign in", type="primary")
        if go:
            try:
                ident = sign_in(name, pw, st.context.ip_address)  # rate-limited per user and address, audited
            except SignInLockedError as e:
                st.error(str(e))
                ident = None
            else:
                if ident is None:
                    st.error("Unknown user name or wrong password.")
            if ident is not None:
                st.session_state[SESSION_KEY] = ident
                st.rerun()
    st.stop()
    raise AssertionError("unreachable")


def sign_out() -> None:
    """Forget the session's password sign-in, and sign out of the identity provider."""
    st.session_state.pop(SESSION_KEY, None)
    if _oidc() and st.user.is_logged_in:
        st.logout()


def identity_bar(who: Identity) -> None:
    """The sidebar line: who is signed in, the role, demo mode, and Sign out."""
    with st.sidebar:
        if is_demo():
            st.caption("Demo: read-only")
        if who.source != "local":
            st.caption(f"Signed in as **{who.name}** ({who.role})")
            st.button("Sign out", key="sign_out", on_click=sign_out)


def read_only(who: Identity | None = None) -> bool:
    """True when this session can change nothing (a viewer, or demo mode): it gets the read-only pages."""
    return not can("run.cancel", who if who is not None else actor())


def allowed(action: str, fn):
    """``fn`` bound to this session's identity (``actor=``) when it may do ``action``, else None
    (the page then shows no control for it)."""
    who = actor()
    return functools.partial(fn, actor=who) if who is not None and can(action, who) else None


def delete_panel(what: str, text: str, key: str, remove, forget) -> None:
    """An expander "Delete this <what>" with ``text``, a confirmation tick box and the button; on
    success ``forget()`` (drop the page's selection) and rerun. Engine errors become ``st.error``."""
    with st.expander(f"Delete this {what}"):
        st.markdown(text)
        sure = st.checkbox("I understand it cannot be undone", key=f"{key}_sure")
        if st.button(f"Delete {what}", disabled=not sure, key=key):
            with user_errors():
                remove()
                forget()
                st.rerun()
