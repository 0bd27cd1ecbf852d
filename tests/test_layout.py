"""House rules on the code layout: the engine runs without the UI; pages hold no training code."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_engine_never_imports_streamlit():
    offenders = [str(p.relative_to(REPO)) for p in (REPO / "engine").rglob("*.py")
                 if any(n == "streamlit" or n.startswith("streamlit.") for n in _imports(p))]
    assert offenders == []
    # and importing the whole engine, CLI included, does not pull it in transitively
    code = ("import sys, engine, engine.cli, engine.runner.launcher, engine.runner.worker, engine.training.loop, engine.store, engine.data;"
            "print('streamlit' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_pages_contain_no_training_code():
    # engine.models is allowed for its PRESETS table (sizes to choose from); nothing that trains is.
    forbidden_modules = {"engine.training.loop", "engine.runner.worker", "torch.optim", "engine.models.mae"}
    forbidden_text = (".backward(", "optimizer.step", "fit(", "execute_run(")
    pages = list((REPO / "pages").glob("*.py")) + list((REPO / "app").rglob("*.py"))
    assert pages, "no pages found"
    for p in pages:
        assert not (_imports(p) & forbidden_modules), f"{p.name} imports training code"
        src = p.read_text(encoding="utf-8")
        assert not any(t in src for t in forbidden_text), f"{p.name} contains training code"


def test_no_legacy_pages_folder_next_to_the_entry():
    # A pages/ folder beside the entry script would switch on Streamlit's automatic page menu.
    assert (REPO / "app" / "streamlit_app.py").exists()
    assert not (REPO / "app" / "pages").exists()
