"""Safe deployment, checked statically (this machine has no Docker engine; where one exists the image
is built and started too): the Dockerfile, .streamlit/config.toml, the README's commands, and no
unpickling of loaded files anywhere in the repository."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions ``(KEYWORD, arguments)``, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, rest = line.partition(" ")
            out.append((key.upper(), rest.strip()))
    return out


def test_dockerfile_runs_as_a_non_root_user_with_the_workspace_as_its_volume():
    ins = _instructions()
    users = [arg for key, arg in ins if key == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    uid = int(users[-1].split(":")[0])
    assert f"--uid {uid}" in next(arg for key, arg in ins if key == "RUN" and "useradd" in arg)
    last_user = max(i for i, (key, _) in enumerate(ins) if key == "USER")
    assert all(key not in ("RUN", "COPY", "ADD") for key, _ in ins[last_user:])  # nothing runs as root after it
    assert ("VOLUME", '["/workspace"]') in ins
    assert "chown masklab:masklab /workspace" in next(arg for key, arg in ins if key == "RUN" and "useradd" in arg)
    assert all("--chown" not in arg for key, arg in ins if key == "COPY")  # the code stays root's, read-only
    env = " ".join(arg for key, arg in ins if key == "ENV")
    assert "MASKLAB_WORKSPACE=/workspace" in env and "MASKLAB_ALLOW_NO_SIGNIN" not in env


def test_dockerfile_exposes_the_port_checks_health_and_starts_through_the_guard():
    ins = _instructions()
    assert ("EXPOSE", "8501") in ins
    health = next(arg for key, arg in ins if key == "HEALTHCHECK")
    assert "http://127.0.0.1:8501/_stcore/health" in health and "--interval=" in health
    cmd = next(arg for key, arg in ins if key == "CMD")
    assert cmd == '["python", "-m", "app.serve", "--address", "0.0.0.0", "--port", "8501"]'
    copied = [arg.split()[0] for key, arg in ins if key == "COPY"]
    assert all((REPO / c).exists() for c in copied), copied
    assert ".streamlit" not in copied  # never secrets.toml
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".streamlit/secrets.toml" in ignored and "workspace" in ignored


def test_streamlit_config_binds_loopback_keeps_xsrf_and_caps_uploads():
    server = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())["server"]
    assert server["address"] == "127.0.0.1"
    assert server["enableXsrfProtection"] is True
    assert server["maxUploadSize"] == 200


def test_readme_publishes_docker_on_loopback_only_and_shows_sign_in():
    readme = (REPO / "README.md").read_text()
    runs = [shlex.split(c) for c in re.findall(r"^docker run .*$", readme, flags=re.M)]
    assert runs
    for args in runs:
        published = [args[i + 1] for i, a in enumerate(args) if a == "-p"]
        if "MASKLAB_ALLOW_NO_SIGNIN=1" in args:  # no sign-in: this machine only
            assert published and all(p.startswith("127.0.0.1:") for p in published), args
    assert "python -m engine users add" in readme and "st.login" in readme
    assert "MASKLAB_PUBLIC_DEMO=1" in readme and "MASKLAB_MAX_UPLOAD_MB" in readme


def test_nothing_is_unpickled():
    """Every torch.load passes weights_only=True; no np.load with allow_pickle=True; no pickle.load."""
    bad = []
    for path in REPO.rglob("*.py"):
        if any(part in (".venv", "test-artifacts") for part in path.parts) or path == Path(__file__):
            continue
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"torch\.load\(([^()]*(\([^()]*\))?)*\)", text):
            if "weights_only=True" not in m.group(0):
                bad.append(f"{path.relative_to(REPO)}: {m.group(0)}")
        bad += [f"{path.relative_to(REPO)}: {m}" for m in re.findall(r"allow_pickle=True|pickle\.load\(|pickle\.loads\(", text)
                if "tests/engine/test_tokenizer.py" not in str(path)]  # that test pickles its own tokenizer
    assert bad == []


def _docker_engine() -> bool:
    """True when a Docker client is installed and its engine answers."""
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _docker_engine(), reason="no Docker engine on this machine")
def test_image_builds_and_answers_its_health_check():  # pragma: no cover - needs a Docker engine
    subprocess.run(["docker", "build", "-t", "masklab-test", str(REPO)], check=True, timeout=3600)
    cid = subprocess.run(["docker", "run", "-d", "--read-only", "--tmpfs", "/tmp", "-p", "127.0.0.1::8501",
                          "-e", "MASKLAB_ALLOW_NO_SIGNIN=1", "masklab-test"], check=True, capture_output=True,
                         text=True).stdout.strip()  # fmt: skip
    try:
        assert subprocess.run(["docker", "exec", cid, "id", "-u"], capture_output=True, text=True).stdout.strip() != "0"
        end = time.time() + 120
        while time.time() < end:
            status = subprocess.run(["docker", "inspect", "-f", "{{.State.Health.Status}}", cid],
                                    capture_output=True, text=True).stdout.strip()  # fmt: skip
            if status == "healthy":
                break
            time.sleep(2)
        assert status == "healthy"
        refused = subprocess.run(["docker", "run", "--rm", "masklab-test"], capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and "refuses to serve on 0.0.0.0 without sign-in" in refused.stderr
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
