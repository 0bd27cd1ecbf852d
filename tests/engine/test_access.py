"""Roles, demo mode and the audit log, through the engine calls the pages and the CLI make."""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.access import policy as access
from engine.access.audit import read_audit
from engine.access.policy import Identity, acting_as, can, require_sign_in
from engine.access.users import load_users, oidc_identity, set_user, signin_configured, users_path, verify_password
from engine.config import RunConfig
from engine.data import delete_dataset, import_source, list_datasets
from engine.errors import DatasetError, MasklabError, PermissionDeniedError, ResumeError, RunLockedError, RunNotFoundError
from engine.pretrained.manage import delete_pretrained, import_path
from engine.runner.doctor import check_workspace
from engine.runner.launcher import cancel, delete_run, evaluate, resume, submit
from engine.store import annotate, create_run, get_run, list_runs, run_alive, write_status
from engine.store.portable import import_runs
from engine.tasks import resolve

VIEWER, EDITOR, ADMIN = (Identity("vera", "viewer", "password"), Identity("ed", "editor", "password"),
                         Identity("ada", "admin", "password"))  # fmt: skip
CFG = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
       "train": {"steps": 3, "batch_size": 8, "eval_interval": 1000, "checkpoint_interval": 1000,
                 "warmup_steps": 1, "device": "cpu"}}
REPO = Path(__file__).resolve().parents[2]


def _ended_run(status: str = "failed") -> str:
    """A run folder as a finished worker leaves it (no worker process: nothing to wait for)."""
    run_id, d = create_run(resolve(RunConfig.from_dict(CFG)).to_dict())
    write_status(d, {"status": status, "step": 2, "total_steps": 3, "error": "test"})
    return run_id


def _texts(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("".join(f"document number {i} about masks\n" for i in range(20)), encoding="utf-8")
    return path


def _audit(workspace: Path) -> list[dict]:
    p = workspace / "audit" / "audit.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


@pytest.fixture(autouse=True)
def _no_leaked_state(monkeypatch):
    monkeypatch.delenv("MASKLAB_MODE", raising=False)
    yield
    require_sign_in(False)


# ---------------------------------------------------------------- each role on each write path


def test_a_viewer_is_refused_on_every_write_path_and_nothing_changes(workspace, tmp_path):
    run_id = _ended_run()
    src = _texts(tmp_path)
    import_source(src, "kept", actor=EDITOR)
    before = sorted(p.relative_to(workspace) for p in workspace.rglob("*") if "audit" not in p.parts)
    calls = {
        "run.submit": lambda: submit(resolve(RunConfig.from_dict(CFG)), actor=VIEWER),
        "run.resume": lambda: resume(run_id, actor=VIEWER),
        "run.cancel": lambda: cancel(run_id, actor=VIEWER),
        "run.evaluate": lambda: evaluate(run_id, actor=VIEWER),
        "run.delete": lambda: delete_run(run_id, actor=VIEWER),
        "run.annotate": lambda: annotate(run_id, tags=["x"], note="n", archived=True, actor=VIEWER),
        "run.import": lambda: import_runs(src, actor=VIEWER),
        "data.import": lambda: import_source(src, "other", actor=VIEWER),
        "data.delete": lambda: delete_dataset("kept", actor=VIEWER),
        "model.import": lambda: import_path(str(src), "m", actor=VIEWER),
        "model.delete": lambda: delete_pretrained("m", actor=VIEWER),
        "users.manage": lambda: set_user("x", "admin", "pw", actor=VIEWER),
        "audit.read": lambda: read_audit(actor=VIEWER),
        "workspace.repair": lambda: check_workspace(repair=True, actor=VIEWER),
    }
    assert set(calls) == set(access.ACTIONS)  # a new action gets a case here
    for action, call in calls.items():
        need, words = access.ACTIONS[action]
        with pytest.raises(PermissionDeniedError) as e:
            call()
        assert str(e.value) == f"vera (viewer) may not {words}: that needs the {need} role; ask an admin. Nothing was changed"
    after = sorted(p.relative_to(workspace) for p in workspace.rglob("*") if "audit" not in p.parts)
    assert after == before
    refused = [(a["user"], a["action"], a["outcome"]) for a in _audit(workspace) if a["outcome"] == "refused"]
    assert refused == [("vera", a, "refused") for a in calls]  # a refused read of the audit log too


def test_an_editor_launches_resumes_cancels_and_imports_but_cannot_delete(workspace, tmp_path):
    run_id = _ended_run()
    # authorised: each call reaches the engine's own checks (a missing dataset, no checkpoint, ended run)
    with pytest.raises(MasklabError, match="data.dataset: no dataset .missing."):
        submit(resolve(RunConfig.from_dict({**CFG, "data": {"dataset": "missing"}})), actor=EDITOR)
    with pytest.raises(ResumeError):
        resume(run_id, actor=EDITOR)
    assert cancel(run_id, actor=EDITOR) is False  # already ended
    with pytest.raises(MasklabError, match="has no complete checkpoint to evaluate"):
        evaluate(run_id, actor=EDITOR)
    report = import_source(_texts(tmp_path), "mine", actor=EDITOR)
    assert report.dataset.name == "mine"
    for call, words in ((lambda: delete_run(run_id, actor=EDITOR), "delete runs"),
                        (lambda: delete_dataset("mine", actor=EDITOR), "delete datasets"),
                        (lambda: set_user("x", "viewer", "pw", actor=EDITOR), "manage users"),
                        (lambda: read_audit(actor=EDITOR), "read the audit log")):
        with pytest.raises(PermissionDeniedError, match=f"ed \\(editor\\) may not {words}: that needs the admin role"):
            call()
    assert get_run(run_id).status == "failed" and "mine" in {i.name for i in list_datasets()}
    lines = [(a["action"], a["target"], a["outcome"]) for a in _audit(workspace)]
    assert lines[:5] == [("run.submit", "new run on missing", "failed"), ("run.resume", run_id, "failed"),
                         ("run.cancel", run_id, "ok"), ("run.evaluate", run_id, "failed"),
                         ("data.import", "mine", "ok")]


def test_an_admin_deletes_runs_and_datasets_and_reads_the_audit(workspace, tmp_path):
    run_id = _ended_run("cancelled")
    import_source(_texts(tmp_path), "old", actor=EDITOR)
    delete_run(run_id, actor=ADMIN)
    assert [r.run_id for r in list_runs()] == [] and not any((workspace / "runs").iterdir())
    with pytest.raises(RunNotFoundError):
        delete_run(run_id, actor=ADMIN)
    delete_dataset("old", actor=ADMIN)
    assert "old" not in {i.name for i in list_datasets()}
    with pytest.raises(DatasetError, match="'digits' is a bundled dataset: it cannot be deleted"):
        delete_dataset("digits", actor=ADMIN)
    entries = read_audit(actor=ADMIN)
    assert [(e.user, e.role, e.action, e.target, e.outcome) for e in entries[:4]] == [
        ("ada", "admin", "data.delete", "digits", "failed"), ("ada", "admin", "data.delete", "old", "ok"),
        ("ada", "admin", "run.delete", run_id, "failed"), ("ada", "admin", "run.delete", run_id, "ok")]
    assert entries[0].details["reason"].startswith("'digits' is a bundled dataset")
    assert entries[-1].action == "data.import" and entries[-1].details["accepted"] == 20


def test_a_live_run_is_not_deleted(workspace):
    run_id = _ended_run()
    d = get_run(run_id).path
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from engine.store import RunLock; l = RunLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); time.sleep(60)"), str(d)], cwd=REPO, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError, match=f"run {run_id} is queued or running: cancel it first"):
            delete_run(run_id, actor=ADMIN)
        assert get_run(run_id).run_id == run_id
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_an_editor_launches_a_real_run(workspace):
    run_id = submit(resolve(RunConfig.from_dict(CFG)), actor=EDITOR)
    end = time.time() + 120
    while get_run(run_id).status not in ("completed", "failed") and time.time() < end:
        time.sleep(0.3)
    assert get_run(run_id).status == "completed"
    while run_alive(get_run(run_id).path) and time.time() < end:
        time.sleep(0.1)
    assert [(a["user"], a["action"], a["target"], a["outcome"]) for a in _audit(workspace)] == [
        ("ed", "run.submit", run_id, "ok")]


# ---------------------------------------------------------------- demo mode, nobody signed in, the context


def test_demo_mode_refuses_every_write_even_for_an_admin_and_writes_nothing(workspace, tmp_path, monkeypatch):
    run_id = _ended_run()
    monkeypatch.setenv("MASKLAB_MODE", "demo")
    before = sorted(p for p in workspace.rglob("*") if "audit" not in p.parts)
    for call in (lambda: submit(resolve(RunConfig.from_dict(CFG)), actor=ADMIN), lambda: cancel(run_id, actor=ADMIN),
                 lambda: resume(run_id, actor=ADMIN), lambda: evaluate(run_id, actor=ADMIN), lambda: delete_run(run_id), lambda: import_source(_texts(tmp_path), "d"),
                 lambda: delete_dataset("x", actor=ADMIN), lambda: set_user("x", "admin", "pw"),
                 lambda: annotate(run_id, tags=["x"], actor=ADMIN)):  # fmt: skip
        with pytest.raises(PermissionDeniedError, match=r"^masklab is in demo mode \(MASKLAB_MODE=demo\): it cannot "):
            call()
    assert sorted(p for p in workspace.rglob("*") if "audit" not in p.parts) == before  # only the refusals' lines
    assert [(a["action"], a["outcome"]) for a in _audit(workspace)] == [
        (a, "refused") for a in ("run.submit", "run.cancel", "run.resume", "run.evaluate", "run.delete", "data.import",
                                 "data.delete", "users.manage", "run.annotate")]
    assert not can("run.submit", ADMIN) and can("audit.read", ADMIN) is False
    monkeypatch.setenv("MASKLAB_MODE", "demonstration")
    with pytest.raises(Exception, match="MASKLAB_MODE='demonstration' is not one of normal, demo"):
        cancel(run_id)


def test_without_an_identity_the_local_admin_acts_until_sign_in_is_required(workspace):
    run_id = _ended_run()
    assert cancel(run_id) is False  # no actor, no context: the local admin (CLI, dashboard without sign-in)
    assert _audit(workspace)[-1]["user"] == f"local:{getpass.getuser()}"
    require_sign_in()
    with pytest.raises(PermissionDeniedError, match="nobody is signed in: sign in to cancel runs"):
        cancel(run_id)
    with acting_as(EDITOR):  # the dashboard's per-session context
        assert cancel(run_id) is False
        with pytest.raises(PermissionDeniedError, match="ed \\(editor\\) may not delete runs"):
            delete_run(run_id)
    assert [a["user"] for a in _audit(workspace)] == [f"local:{getpass.getuser()}", "(nobody)", "ed", "ed"]


def test_the_cli_acts_as_the_local_admin(workspace, tmp_path):
    run_id = _ended_run()
    env = {"MASKLAB_WORKSPACE": str(workspace), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "engine", "delete", run_id], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert list_runs() == []
    (line,) = _audit(workspace)
    assert (line["user"], line["role"], line["source"], line["action"], line["outcome"]) == (
        f"local:{getpass.getuser()}", "admin", "local", "run.delete", "ok")
    out = subprocess.run([sys.executable, "-m", "engine", "audit"], cwd=REPO, env={**env, "MASKLAB_MODE": "demo"},
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 2 and "demo mode" in out.stderr


# ---------------------------------------------------------------- users file


def test_users_file_hashes_passwords_and_checks_them(workspace):
    assert not signin_configured()
    set_user("Alice", "editor", "correct horse")
    path = users_path()
    text = path.read_text()
    assert "correct horse" not in text and '"$argon2id$' in text
    assert path.stat().st_mode & 0o777 == 0o600
    assert signin_configured()
    assert verify_password("alice", "correct horse") == Identity("alice", "editor", "password")
    assert verify_password("alice", "wrong") is None and verify_password("nobody", "correct horse") is None
    set_user("alice", "admin")  # a role change keeps the password
    assert verify_password("alice", "correct horse").role == "admin"
    assert load_users().users["alice"].role == "admin"

    path.write_text(text + '\n[emails]\n"Bob@Example.com" = "viewer"\n')
    assert oidc_identity({"email": "bob@example.com"}) == Identity("bob@example.com", "viewer", "oidc")
    assert oidc_identity({"email": "bob@example.com", "email_verified": False}) is None
    assert oidc_identity({"email": "eve@example.com"}) is None  # no default_role: no access
    path.write_text('roles_claim = "groups"\ndefault_role = "viewer"\n')
    assert oidc_identity({"email": "c@x.org", "groups": ["staff", "editor"]}).role == "editor"
    assert oidc_identity({"email": "c@x.org", "groups": "admin"}).role == "admin"
    assert oidc_identity({"email": "c@x.org"}).role == "viewer"
    path.write_text('[users.x]\nrole = "root"\npassword = ""\n')
    with pytest.raises(Exception, match="user 'x': role 'root' is not one of viewer, editor, admin"):
        signin_configured()
