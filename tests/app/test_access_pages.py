"""Sign-in, roles, demo mode and the exposure check in the dashboard (AppTest, in this process,
real engine) and in ``python -m app.serve`` (a real process)."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from app.serve import exposure_problem, is_loopback, refused_flag, upload_cap_mb
from app.serve import main as serve_main
from engine.access.policy import require_sign_in
from engine.access.users import set_user
from engine.config import RunConfig
from engine.errors import ConfigError, PermissionDeniedError
from engine.runner.launcher import cancel
from engine.store import create_run, list_runs, write_status
from engine.tasks import resolve

REPO = Path(__file__).resolve().parents[2]
ENTRY = REPO / "app" / "streamlit_app.py"
CFG = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2}, "train": {"steps": 50}}
WRITE_BUTTONS = {"Cancel", "Resume", "Launch", "Delete run", "Delete dataset", "Import"}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv("MASKLAB_MODE", raising=False)
    yield
    require_sign_in(False)


def _runs() -> tuple[str, str]:
    """A starting run (queued moments ago: it has a Cancel button) and a cancelled one."""
    starting, _ = create_run(resolve(RunConfig.from_dict({**CFG, "name": "starting"})).to_dict())
    ended, d = create_run(resolve(RunConfig.from_dict({**CFG, "name": "ended"})).to_dict())
    write_status(d, {"status": "cancelled", "step": 10, "total_steps": 50})
    return starting, ended


def _buttons(at: AppTest) -> set[str]:
    return {b.label for b in at.button} | {b.label for b in at.get("form_submit_button")}


def _sign_in(at: AppTest, name: str, password: str) -> AppTest:
    at.text_input(key="signin_name").input(name)
    at.text_input(key="signin_password").input(password)
    at.get("form_submit_button")[0].click()
    return at.run()


def _page(at: AppTest, page: str) -> AppTest:
    return at.switch_page(page).run()


def test_demo_mode_shows_runs_without_write_controls_and_refuses_direct_calls(workspace, monkeypatch):
    starting, ended = _runs()
    monkeypatch.setenv("MASKLAB_MODE", "demo")
    at = AppTest.from_file(str(ENTRY), default_timeout=60).run()
    assert not at.exception and at.title[0].value == "Runs"
    assert "Demo: read-only" in [c.value for c in at.sidebar.caption]
    assert not _buttons(at) & WRITE_BUTTONS, _buttons(at)
    at = _page(at, "../pages/run_detail.py")
    assert at.title[0].value == "Run detail" and not _buttons(at) & WRITE_BUTTONS
    assert st_config.get_option("server.maxUploadSize") == 0  # Streamlit's upload endpoint refuses every file
    with pytest.raises(PermissionDeniedError, match=r"demo mode \(MASKLAB_MODE=demo\): it cannot cancel runs"):
        cancel(starting)
    st_config.set_option("server.maxUploadSize", 200)


def test_editor_gets_the_controls_after_signing_in(workspace):
    starting, _ = _runs()
    set_user("ed", "editor", "pw-ed")
    at = AppTest.from_file(str(ENTRY), default_timeout=60).run()
    assert at.title[0].value == "Sign in to masklab" and not at.exception
    at = _sign_in(at, "ed", "wrong")
    assert [e.value for e in at.error] == ["Unknown user name or wrong password."]
    at = _sign_in(at, "ed", "pw-ed")
    assert at.title[0].value == "Runs"
    assert "Signed in as **ed** (editor)" in [c.value for c in at.sidebar.caption]
    assert "Cancel" in _buttons(at)
    at = _page(at, "../pages/data.py")
    assert at.title[0].value == "Data" and len(at.get("file_uploader")) == 1


def test_viewer_sees_runs_read_only_and_admin_gets_delete_and_audit(workspace):
    starting, ended = _runs()
    set_user("vera", "viewer", "pw-v")
    set_user("ada", "admin", "pw-a")
    at = _sign_in(AppTest.from_file(str(ENTRY), default_timeout=60).run(), "vera", "pw-v")
    assert at.title[0].value == "Runs" and not _buttons(at) & WRITE_BUTTONS
    at = _page(at, "../pages/run_detail.py")
    assert not _buttons(at) & WRITE_BUTTONS

    at = _sign_in(AppTest.from_file(str(ENTRY), default_timeout=60).run(), "ada", "pw-a")
    at.query_params["run"] = ended
    at = _page(at, "../pages/run_detail.py")
    assert "Delete run" in _buttons(at)
    at.checkbox(key=f"rd_delete_{ended}_sure").check().run()
    next(b for b in at.button if b.label == "Delete run").click().run()
    assert not at.exception and not at.error

    assert [r.run_id for r in list_runs()] == [starting]
    at = _page(at, "../pages/audit.py")
    assert at.title[0].value == "Audit"
    frame = at.dataframe[0].value
    assert list(zip(frame["user"], frame["action"], frame["target"])) == [
        ("ada", "run.delete", ended), ("ada", "auth.sign_in", "ada"), ("vera", "auth.sign_in", "vera"),
        (f"local:{getpass.getuser()}", "users.manage", "user ada"),
        (f"local:{getpass.getuser()}", "users.manage", "user vera")]  # newest first; each sign-in is a line


def test_bound_to_every_interface_without_sign_in_the_page_refuses(workspace):
    st_config.set_option("server.address", "0.0.0.0")
    try:
        at = AppTest.from_file(str(ENTRY), default_timeout=60).run()
    finally:
        st_config.set_option("server.address", "127.0.0.1")
    assert [e.value for e in at.error] == [exposure_problem("0.0.0.0", False, {})]
    assert not at.title  # no page ran


def test_exposure_rules():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.0.1.1")
    assert not any(is_loopback(a) for a in ("0.0.0.0", "", None, "::", "192.168.1.5", "masklab.example.org"))
    assert exposure_problem("127.0.0.1", False, {}) is None
    assert exposure_problem("0.0.0.0", True, {}) is None  # sign-in configured
    assert exposure_problem("0.0.0.0", False, {"MASKLAB_ALLOW_NO_SIGNIN": "1"}) is None  # the documented opt-out
    assert exposure_problem("0.0.0.0", False, {}).startswith("masklab refuses to serve on 0.0.0.0 without sign-in")
    demo = {"MASKLAB_MODE": "demo"}
    assert exposure_problem("0.0.0.0", False, {**demo, "MASKLAB_ALLOW_NO_SIGNIN": "1"}).startswith(
        "masklab refuses to serve the demo (MASKLAB_MODE=demo) on 0.0.0.0 without sign-in")  # its own opt-in
    assert exposure_problem("0.0.0.0", False, {**demo, "MASKLAB_PUBLIC_DEMO": "1"}) is None
    assert upload_cap_mb({}) == 200 and upload_cap_mb({"MASKLAB_MAX_UPLOAD_MB": "50"}) == 50
    assert upload_cap_mb(demo) == 0
    with pytest.raises(ConfigError, match="MASKLAB_MAX_UPLOAD_MB='big' must be a whole number of megabytes"):
        upload_cap_mb({"MASKLAB_MAX_UPLOAD_MB": "big"})


def test_serve_refuses_a_non_loopback_address_without_sign_in(workspace):
    env = {k: v for k, v in os.environ.items() if k not in ("MASKLAB_ALLOW_NO_SIGNIN", "MASKLAB_MODE")}
    out = subprocess.run([sys.executable, "-m", "app.serve", "--address", "0.0.0.0", "--port", "1"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == "error: " + exposure_problem("0.0.0.0", False, {})
    out = subprocess.run([sys.executable, "-m", "app.serve", "--address", "0.0.0.0", "--port", "1"], cwd=REPO,
                         env={**env, "MASKLAB_MODE": "demo", "MASKLAB_ALLOW_NO_SIGNIN": "1"}, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2 and "MASKLAB_PUBLIC_DEMO=1" in out.stderr


@pytest.mark.parametrize("extra", [["--server.address", "0.0.0.0"], ["--server.address=0.0.0.0"],
                                   ["--server.port=80"], ["--SERVER.enableXsrfProtection", "false"],
                                   ["--server.enableCORS=false"], ["--server.maxUploadSize", "10000"],
                                   ["--server.enableStaticServing", "true"]])
def test_serve_refuses_extra_flags_that_change_the_address_or_weaken_its_checks(extra, capsys):
    assert serve_main(["--address", "127.0.0.1", "--port", "1", "--", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {extra[0].split('=')[0]} is set by this launcher or weakens what it checks")
    assert refused_flag(["--server.runOnSave", "true", "--theme.base=dark"]) is None  # harmless options pass
