"""Start the dashboard, refusing an address that would expose it without sign-in.

    python -m app.serve [--address 127.0.0.1] [--port 8501] [-- more streamlit options]

(options that set the address, the port, the upload cap or the request protections are refused:
:data:`GUARDED_FLAGS`)

The rules (:func:`exposure_problem`), also checked by the entry script on every page load, so
``streamlit run app/streamlit_app.py --server.address 0.0.0.0`` started by hand serves only the
refusal:

- 127.0.0.1 / ::1 / localhost (the default, also in ``.streamlit/config.toml``) or a unix socket:
  no sign-in needed; without a users file or an identity provider the one local user is admin.
- any other address (``0.0.0.0``, a LAN address, a host name): sign-in must be configured (a users
  file with a user, or ``[auth]`` in ``.streamlit/secrets.toml`` for ``st.login``), unless
  ``MASKLAB_ALLOW_NO_SIGNIN=1``: then anyone who reaches the port is admin.
- demo mode (``MASKLAB_MODE=demo``, read-only) on such an address without sign-in needs its own
  opt-in, ``MASKLAB_PUBLIC_DEMO=1``: anyone who reaches the port sees every run.

The upload cap (Streamlit's ``server.maxUploadSize``) is ``$MASKLAB_MAX_UPLOAD_MB`` (default 200 MB);
in demo mode it is 0, so Streamlit's upload endpoint refuses every file (HTTP 413).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

from engine.api import MODE_ENV, ConfigError, MasklabError, is_demo, load_users

REPO = Path(__file__).resolve().parents[1]
ENTRY = REPO / "app" / "streamlit_app.py"
OPT_OUT_ENV = "MASKLAB_ALLOW_NO_SIGNIN"
PUBLIC_DEMO_ENV = "MASKLAB_PUBLIC_DEMO"
UPLOAD_ENV = "MASKLAB_MAX_UPLOAD_MB"
DEFAULT_UPLOAD_MB = 200
SECRETS_FILES = (REPO / ".streamlit" / "secrets.toml", Path.home() / ".streamlit" / "secrets.toml")
"""Where Streamlit reads ``st.secrets`` from (the project's folder, then the user's)."""


def is_loopback(address: str | None) -> bool:
    """True for 127.0.0.0/8, ::1, ``localhost`` and a unix socket; False for everything else,
    including an empty address (Streamlit then listens on every interface) and host names."""
    if not address:
        return False
    if address.startswith("unix://") or address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def oidc_configured(files: tuple[Path, ...] = SECRETS_FILES) -> bool:
    """True when a Streamlit secrets file has an ``[auth]`` section (``st.login``'s identity provider)."""
    for f in files:
        try:
            if "auth" in tomllib.loads(f.read_text(encoding="utf-8")):
                return True
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
    return False


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in ("1", "true", "yes")


def exposure_problem(address: str | None, signin: bool, environ: Mapping[str, str] | None = None) -> str | None:
    """Why the dashboard must not serve on ``address``, or None when it may.

    Args:
        address: Streamlit's ``server.address`` (None or "" = every interface).
        signin: whether sign-in is configured (users file or identity provider).
        environ: the environment (default ``os.environ``): ``MASKLAB_MODE``, the two opt-ins.
    """
    env = os.environ if environ is None else environ
    if signin or is_loopback(address):
        return None
    where = address or "every network interface"
    if is_demo(env):
        if _flag(env, PUBLIC_DEMO_ENV):
            return None
        return (f"masklab refuses to serve the demo ({MODE_ENV}=demo) on {where} without sign-in: anyone "
                f"who reaches it would see every run. Set {PUBLIC_DEMO_ENV}=1 to accept that, configure "
                "sign-in, or bind 127.0.0.1")
    if _flag(env, OPT_OUT_ENV):
        return None
    return (f"masklab refuses to serve on {where} without sign-in: anyone who reaches it could launch, "
            "cancel and delete runs. Configure sign-in (python -m engine users add NAME --role admin, or "
            f"an [auth] section in .streamlit/secrets.toml), bind 127.0.0.1, or set {OPT_OUT_ENV}=1 to "
            "accept the risk")


def signin_configured() -> bool:
    """A users file with a password user, or an identity provider in the secrets file (its e-mails'
    roles come from the users file; an e-mail without a role is refused at sign-in).

    Raises:
        ConfigError: a broken users file (it must not silently leave the dashboard open).
    """
    return bool(load_users().users) or oidc_configured()


def upload_cap_mb(environ: Mapping[str, str] | None = None) -> int:
    """``server.maxUploadSize`` in MB: 0 in demo mode, else ``$MASKLAB_MAX_UPLOAD_MB`` (default 200).

    Raises:
        ConfigError: the variable is not a whole number >= 1.
    """
    env = os.environ if environ is None else environ
    if is_demo(env):
        return 0
    raw = env.get(UPLOAD_ENV, "").strip() or str(DEFAULT_UPLOAD_MB)
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{UPLOAD_ENV}={raw!r} must be a whole number of megabytes, at least 1")
    return int(raw)


#: ``streamlit run`` options this launcher sets itself or that would weaken what it checks: where the
#: server listens, the upload cap, cross-site-request and cross-origin protection, static file serving.
GUARDED_FLAGS = ("server.address", "server.port", "server.maxUploadSize", "server.enableXsrfProtection",
                 "server.enableCORS", "server.enableStaticServing", "server.headless", "browser.serverAddress",
                 "browser.serverPort")


def refused_flag(streamlit_args: list[str]) -> str | None:
    """Why the extra ``streamlit run`` options are refused (one of :data:`GUARDED_FLAGS`, as
    ``--name value`` or ``--name=value``, any case), or None when they are fine."""
    for a in streamlit_args:
        name = a.removeprefix("--").split("=", 1)[0].strip().lower()
        if a.startswith("--") and name in {f.lower() for f in GUARDED_FLAGS}:
            return (f"{a.split('=', 1)[0]} is set by this launcher or weakens what it checks; use --address and "
                    "--port (the address is checked for sign-in), $MASKLAB_MAX_UPLOAD_MB for the upload cap")
    return None


def main(argv: list[str] | None = None) -> int:
    """Check the address, then replace this process by ``streamlit run``; returns 2 on a refusal."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    p = argparse.ArgumentParser(prog="python -m app.serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--address", default=os.environ.get("MASKLAB_ADDRESS", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8501")))
    p.add_argument("streamlit_args", nargs="*", help="more `streamlit run` options, after --")
    args = p.parse_args(argv)
    if why := refused_flag(args.streamlit_args):
        print(f"error: {why}", file=sys.stderr)
        return 2
    try:
        problem = exposure_problem(args.address, signin_configured())
        cap = upload_cap_mb()
    except MasklabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "streamlit", "run", str(ENTRY), "--server.headless", "true",
           "--server.address", args.address, "--server.port", str(args.port), "--server.maxUploadSize", str(cap),
           "--server.enableXsrfProtection", "true", "--browser.gatherUsageStats", "false", *args.streamlit_args]  # fmt: skip
    os.chdir(REPO)  # .streamlit/config.toml and secrets.toml are read from here
    os.execv(sys.executable, cmd)
    return 0  # unreachable


if __name__ == "__main__":
    sys.exit(main())
