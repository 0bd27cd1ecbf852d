"""Sign-in attempts are limited per user and per address, the lockout expires, every attempt is an
audit line, and the sign-in form says how long to wait (engine/access/throttle.py)."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from engine.access import throttle as th
from engine.access.policy import require_sign_in
from engine.access.throttle import LOCKOUT_S, MAX_FAILURES, SignInLockedError, Throttle, sign_in
from engine.access.users import set_user
from tests.app.pages import ENTRY


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _audit(ws) -> list[tuple[str, str, str]]:
    lines = (ws / "audit" / "audit.jsonl").read_text().splitlines()
    return [(e["action"], e["target"], e["outcome"]) for e in map(json.loads, lines) if e["action"] == "auth.sign_in"]


def test_a_user_is_locked_out_after_repeated_failures_until_it_expires(workspace):
    set_user("alice", "editor", "correct horse")
    clock = Clock()
    t = Throttle(clock)
    for _ in range(MAX_FAILURES):
        assert sign_in("alice", "wrong", "10.0.0.1", throttle=t) is None
    with pytest.raises(SignInLockedError, match=rf"try again in {int(LOCKOUT_S) + 1} s"):
        sign_in("Alice", "correct horse", "10.0.0.2", throttle=t)  # the right password, another address: still locked
    clock.t += LOCKOUT_S - 1
    with pytest.raises(SignInLockedError, match="try again in 2 s"):
        sign_in("alice", "correct horse", throttle=t)
    clock.t += 1
    assert sign_in("alice", "correct horse", throttle=t).name == "alice"
    assert _audit(workspace) == [("auth.sign_in", "alice", "failed")] * MAX_FAILURES + [
        ("auth.sign_in", "alice", "refused")] * 2 + [("auth.sign_in", "alice", "ok")]


def test_an_address_is_locked_out_whatever_names_it_tries_and_a_success_resets_only_the_user(workspace):
    set_user("bob", "viewer", "pw")
    clock = Clock()
    t = Throttle(clock)
    for i in range(MAX_FAILURES - 1):
        assert sign_in("bob", "no", "10.0.0.9", throttle=t) is None
    assert sign_in("bob", "pw", "10.0.0.9", throttle=t) is not None  # bob's count starts again
    assert sign_in("bob", "no", "10.0.0.9", throttle=t) is None  # one failure: not locked
    for i in range(MAX_FAILURES * th.ADDRESS_FACTOR - MAX_FAILURES):  # the address's limit, over many names
        assert sign_in(f"guess{i}", "x", "10.0.0.9", throttle=t) is None
    with pytest.raises(SignInLockedError):
        sign_in("bob", "pw", "10.0.0.9", throttle=t)
    assert sign_in("bob", "pw", "10.0.0.10", throttle=t) is not None  # another address is free
    clock.t += th.WINDOW_S + LOCKOUT_S
    assert sign_in("bob", "pw", "10.0.0.9", throttle=t) is not None


def test_the_sign_in_form_says_how_long_to_wait(workspace, monkeypatch):
    monkeypatch.setattr(th, "THROTTLE", Throttle(Clock()))
    set_user("carol", "admin", "secret")
    try:
        at = AppTest.from_file(str(ENTRY), default_timeout=60).run()
        for _ in range(MAX_FAILURES):
            at.text_input(key="signin_name").input("carol")
            at.text_input(key="signin_password").input("nope")
            at.get("form_submit_button")[0].click()
            at.run()
        assert [e.value for e in at.error] == ["Unknown user name or wrong password."]
        at.text_input(key="signin_password").input("secret")
        at.get("form_submit_button")[0].click()
        at.run()
        assert [e.value for e in at.error] == [f"Too many failed sign-ins: try again in {int(LOCKOUT_S) + 1} s."]
        assert at.title[0].value == "Sign in to masklab"
    finally:
        require_sign_in(False)
