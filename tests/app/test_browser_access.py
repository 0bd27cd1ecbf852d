"""Real browser (Debian's Chromium through Playwright) against ``python -m app.serve``: demo mode shows
no control that writes, and its write paths refuse when called directly (Streamlit's upload
endpoint from the page's own session, the engine functions from this process); a users-file
sign-in shows each role its pages."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import playwright.sync_api as playwright_sync
import pytest
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from engine.access.users import set_email_role, set_user
from engine.config import RunConfig
from engine.errors import PermissionDeniedError
from engine.runner.launcher import cancel, delete_run, submit
from engine.store import create_run, get_run, write_status
from engine.tasks import resolve
from tests.app.test_browser import CHROMIUM, free_port, settle, shot, stop_server, wait_for_health

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.browser]
expect = playwright_sync.expect
CFG = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2}, "train": {"steps": 50}}
WRITE_CONTROLS = re.compile(r"^(Cancel|Resume|Launch|Import|Evaluate|Delete run|Delete dataset|Browse files)$")
# The sidebar of each role, in the router's order (app/streamlit_app.py).
VIEWER_PAGES = ["Runs", "Run detail", "Compare", "Sweeps", "Presentation"]
EDITOR_PAGES = ["Data", "Models", "New run", "Mask lab", *VIEWER_PAGES]
ADMIN_PAGES = [*EDITOR_PAGES, "Audit"]


def serve(workspace: Path, **env: str) -> tuple[subprocess.Popen, str]:
    """``python -m app.serve`` on a free loopback port with ``env`` added; wait for the health check."""
    port = free_port()
    log = open(workspace.parent / f"serve-{port}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "app.serve", "--port", str(port)], cwd=REPO,
                            env={**os.environ, "MASKLAB_WORKSPACE": str(workspace), **env}, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for_health(proc, url, log.name)
    return proc, url


@pytest.fixture(scope="module")
def browser():
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking"])  # fmt: skip
        yield b
        b.close()


@pytest.fixture
def running_run(workspace):
    """A run whose worker is alive (a process holds its lock, status running) and an ended one."""
    live, d = create_run(resolve(RunConfig.from_dict({**CFG, "name": "live"})).to_dict())
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from engine.store import RunLock; l = RunLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); time.sleep(600)"), str(d)], cwd=REPO, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    write_status(d, {"status": "running", "step": 10, "total_steps": 50, "pid": holder.pid})
    ended, d2 = create_run(resolve(RunConfig.from_dict({**CFG, "name": "ended"})).to_dict())
    write_status(d2, {"status": "cancelled", "step": 20, "total_steps": 50})
    yield live, ended
    holder.kill()
    holder.wait()


def _session_id(frame: bytes) -> str | None:
    """The session id of a ``new_session`` message from the server, else None."""
    msg = ForwardMsg()
    try:
        msg.ParseFromString(frame)
    except Exception:  # not a ForwardMsg
        return None
    return msg.new_session.initialize.session_id if msg.HasField("new_session") else None


def _visible_write_controls(page) -> list[str]:
    labels = [t.strip() for t in page.get_by_role("button").all_inner_texts()]
    return [t for t in labels if WRITE_CONTROLS.match(t)] + (["file uploader"] if page.get_by_test_id("stFileUploader").count() else [])


def test_demo_mode_has_no_write_controls_and_its_write_paths_refuse(workspace, running_run, browser, monkeypatch):
    live, ended = running_run
    proc, url = serve(workspace, MASKLAB_MODE="demo")
    ctx = browser.new_context(viewport={"width": 1400, "height": 2000})
    page = ctx.new_page()
    frames: list[bytes] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda p: frames.append(p if isinstance(p, bytes) else p.encode())))
    try:
        page.goto(url)
        expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=30_000)
        expect(page.get_by_text("running · step 10 / 50")).to_be_visible(timeout=30_000)  # the live run's progress line
        settle(page)
        titles = [t.strip() for t in page.get_by_test_id("stSidebarNavLink").all_inner_texts()]
        assert titles == VIEWER_PAGES
        expect(page.get_by_text("Demo: read-only")).to_be_visible()
        assert _visible_write_controls(page) == []
        shot(page, "demo-runs")

        page.goto(f"{url}/run_detail?run={ended}")
        expect(page.get_by_role("heading", name="Run detail")).to_be_visible(timeout=30_000)
        expect(page.get_by_text("cancelled").first).to_be_visible(timeout=30_000)
        settle(page)
        assert _visible_write_controls(page) == []
        shot(page, "demo-run-detail")

        page.goto(f"{url}/compare?runs={live},{ended}")  # read-only too: no Evaluate button
        expect(page.get_by_role("heading", name="Compare runs")).to_be_visible(timeout=30_000)
        settle(page)
        assert _visible_write_controls(page) == []
        shot(page, "demo-compare")

        page.goto(f"{url}/new_run")  # not in the demo's navigation
        settle(page)
        expect(page.get_by_role("button", name="Launch")).to_have_count(0)
        page.goto(f"{url}/data")
        settle(page)
        expect(page.get_by_test_id("stFileUploader")).to_have_count(0)

        # Streamlit's upload endpoint, called from the page with its own session and XSRF token. The
        # session id is in the server's first message; a listener attached a moment late misses it,
        # so reload until it is seen.
        for _ in range(5):
            frames.clear()
            page.reload()
            settle(page)
            sessions = {s for s in map(_session_id, frames) if s}
            if sessions:
                break
        (session,) = sessions
        status = page.evaluate("""async (sid) => {
            const xsrf = document.cookie.split('; ').find(c => c.startsWith('_streamlit_xsrf='));
            const fd = new FormData();
            fd.append('file', new Blob(['PK\\x05\\x06 a few bytes']), 'evil.zip');
            const r = await fetch(`/_stcore/upload_file/${sid}/file-1`, {method: 'PUT', body: fd,
                headers: {'X-Xsrftoken': decodeURIComponent(xsrf.split('=').slice(1).join('='))}});
            return r.status;
        }""", session)  # fmt: skip
        assert status == 413  # past the session and XSRF checks (400/403 otherwise): the cap of 0 refuses it
    finally:
        ctx.close()
        stop_server(proc)

    # The engine functions the pages call, called directly in a demo process.
    monkeypatch.setenv("MASKLAB_MODE", "demo")
    for call in (lambda: cancel(live), lambda: delete_run(ended), lambda: submit(resolve(RunConfig.from_dict(CFG)))):
        with pytest.raises(PermissionDeniedError, match=r"^masklab is in demo mode"):
            call()
    assert get_run(live).status == "running" and get_run(ended).status == "cancelled"


def _sign_in(page, url: str, name: str, password: str) -> None:
    page.goto(url)
    expect(page.get_by_role("heading", name="Sign in to masklab")).to_be_visible(timeout=30_000)
    page.get_by_label("User name", exact=True).fill(name)
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_text(f"Signed in as {name}")).to_be_visible(timeout=30_000)
    settle(page)


def test_users_file_sign_in_shows_each_role_its_pages(workspace, running_run, browser):
    set_user("vera", "viewer", "pw-vera")
    set_user("ed", "editor", "pw-ed")
    set_user("ada", "admin", "pw-ada")
    proc, url = serve(workspace)
    expected = {"vera": VIEWER_PAGES, "ed": EDITOR_PAGES, "ada": ADMIN_PAGES}
    try:
        for name, pages in expected.items():
            ctx = browser.new_context(viewport={"width": 1400, "height": 2000})
            page = ctx.new_page()
            _sign_in(page, url, name, f"pw-{name}")
            titles = [t.strip() for t in page.get_by_test_id("stSidebarNavLink").all_inner_texts()]
            assert titles == pages
            expect(page.get_by_text("running · step 10 / 50").first).to_be_visible(timeout=30_000)
            cancel_buttons = page.get_by_role("button", name="Cancel", exact=True)
            expect(cancel_buttons).to_have_count(0 if name == "vera" else 1)
            shot(page, f"signin-{name}-runs")
            ctx.close()
    finally:
        stop_server(proc)


def test_oidc_sign_in_against_a_local_provider_gives_each_role_its_pages(workspace, running_run, browser, tmp_path):
    """st.login against oidc-provider-mock started here; roles from the users file by e-mail."""
    from oidc_provider_mock import User, run_server_in_thread  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)

    set_email_role("vera@example.org", "viewer")
    set_email_role("ada@example.org", "admin")
    users = [User(sub=s, claims={"email": f"{s}@example.org", "email_verified": True}) for s in ("vera", "ada", "eve")]
    port = free_port()
    home = tmp_path / "home"
    (home / ".streamlit").mkdir(parents=True)
    with run_server_in_thread(user_claims=users) as provider:
        (home / ".streamlit" / "secrets.toml").write_text(
            "[auth]\n"
            f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
            'cookie_secret = "a-test-cookie-secret-of-some-length-0123456789"\n'
            'client_id = "masklab-test"\nclient_secret = "masklab-test-secret"\n'
            f'server_metadata_url = "http://localhost:{provider.server_port}/.well-known/openid-configuration"\n')
        log = open(workspace.parent / "serve-oidc.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "app.serve", "--port", str(port)], cwd=REPO,
                                env={**os.environ, "MASKLAB_WORKSPACE": str(workspace), "HOME": str(home)},
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_for_health(proc, url, log.name)
        expected = {"vera": VIEWER_PAGES, "ada": ADMIN_PAGES}
        try:
            for sub in ("vera", "ada", "eve"):
                ctx = browser.new_context(viewport={"width": 1400, "height": 2000})
                page = ctx.new_page()
                page.goto(url)
                expect(page.get_by_role("heading", name="Sign in to masklab")).to_be_visible(timeout=30_000)
                assert page.get_by_label("Password", exact=True).count() == 0  # no users file users: no form
                page.get_by_role("button", name="Sign in with your organisation's account").click()
                page.locator("input[name=sub]").wait_for(timeout=30_000)  # the provider's own form
                page.locator("input[name=sub]").fill(sub)
                page.get_by_role("button", name="Authorize").click()
                if sub == "eve":  # signed in at the provider, but no role in masklab
                    expect(page.get_by_text("eve@example.org has no role in masklab")).to_be_visible(timeout=30_000)
                    expect(page.get_by_test_id("stSidebarNavLink")).to_have_count(0)
                else:
                    expect(page.get_by_text(f"Signed in as {sub}@example.org")).to_be_visible(timeout=30_000)
                    settle(page)
                    titles = [t.strip() for t in page.get_by_test_id("stSidebarNavLink").all_inner_texts()]
                    assert titles == expected[sub]
                    expect(page.get_by_role("button", name="Cancel", exact=True)).to_have_count(0 if sub == "vera" else 1)
                shot(page, f"oidc-{sub}")
                ctx.close()
        finally:
            stop_server(proc)
