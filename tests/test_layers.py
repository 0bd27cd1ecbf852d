"""Layer rules: the UI reaches the engine only through ``engine.api``; no module uses another's private names.

Every import is read with ``ast``, at the top of a file and inside functions alike, so a lazy
``from engine.store import x`` in a helper counts as much as one at the top.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import engine.api as api

REPO = Path(__file__).resolve().parents[1]
PROJECT = ("engine", "app", "pages")

#: The modality plug-ins' UI part (``app/modalities/``) draws masks and runs kept checkpoints, so it
#: may import the modality code itself, besides ``engine.api``: module prefix -> why.
PLUGIN_ALLOWED = {
    "engine.tasks": "the task's own previews, reconstructions, fill-in and retrieval on tensors, and "
                    "masking_problem on a batch of drawn masks",
    "engine.masking": "the preview masks come from the training code's own functions (draw_mask, "
                      "preview_masks, image_side_inputs) and mask_stats measures a batch of them",
    "engine.eval.inference": "loads a kept checkpoint's model for the interactive boxes (fill-in, retrieval)",
    "engine.audio.features": "the clip features (log-mel) a sample is drawn with, the model's own front end",
}
PLUGINS = REPO / "app" / "modalities"


def _py_files(*folders: str) -> list[Path]:
    files = [p for f in folders for p in sorted((REPO / f).rglob("*.py"))]
    assert files, f"no Python files under {folders}"
    return files


def _rel(p: Path) -> str:
    return str(p.relative_to(REPO))


def _engine_imports(path: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """``(line, module, names)`` of every absolute import of an engine module in ``path``
    (``import engine.x`` -> names ``()``; ``from engine import api`` -> module ``engine.api``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, ()) for a in node.names if a.name.split(".")[0] == "engine"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] == "engine":
            if node.module == "engine":  # `from engine import api, store`: each name is a module or a name of engine
                out += [(node.lineno, f"engine.{a.name}", ()) for a in node.names]
            else:
                out.append((node.lineno, node.module, tuple(a.name for a in node.names)))
    return out


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_ui_imports_the_engine_only_through_its_api():
    offenders = []
    for p in _py_files("pages", "app"):
        plugin = PLUGINS in p.parents
        for line, module, _ in _engine_imports(p):
            if module == "engine.api":
                continue
            if plugin and any(_under(module, prefix) for prefix in PLUGIN_ALLOWED):
                continue
            offenders.append(f"{_rel(p)}:{line}: {module}")
    assert offenders == [], "import these through engine.api (add the name there if it is missing):\n" + "\n".join(offenders)


def test_plugins_take_from_the_engine_directly_only_what_the_api_does_not_offer():
    offered = set(api.__all__)
    offenders = [f"{_rel(p)}:{line}: {name} from {module}"
                 for p in _py_files("app/modalities")
                 for line, module, names in _engine_imports(p) if module != "engine.api"
                 for name in names if name in offered]
    assert offenders == [], "take these from engine.api:\n" + "\n".join(offenders)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses(path: Path) -> list[str]:
    """Private names of other project modules that ``path`` imports (``from m import _x``,
    ``import m._x``) or reads as an attribute of an imported module or class (``m._x``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found, bound = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PROJECT:
                    if any(_private(part) for part in a.name.split(".")):
                        found.append(f"{node.lineno}: import {a.name}")
                    bound.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.level > 0 or node.module.split(".")[0] in PROJECT):
            where = "." * node.level + (node.module or "")
            if any(_private(part) for part in (node.module or "").split(".")):
                found.append(f"{node.lineno}: from {where} import ...")
            for a in node.names:
                if _private(a.name):
                    found.append(f"{node.lineno}: from {where} import {a.name}")
                bound.add(a.asname or a.name)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                and node.value.id in bound):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_uses_a_private_name_of_another():
    offenders = [f"{_rel(p)}:{hit}" for p in _py_files(*PROJECT) for hit in _private_uses(p)]
    assert offenders == [], "give these a public name (or call a public function):\n" + "\n".join(offenders)


def test_the_private_name_check_sees_each_form(tmp_path):
    # the three forms the rule forbids, and the aliases it allows (a public module bound to a private name)
    src = tmp_path / "m.py"
    src.write_text("from engine.data.importer import _labels\n"
                   "import engine.runner.backends._job\n"
                   "from engine.runner import launcher\n"
                   "def f():\n"
                   "    return launcher._env\n"
                   "from engine.tasks import image as _image\n")
    assert [h.split(": ", 1)[1] for h in _private_uses(src)] == [
        "from engine.data.importer import _labels", "import engine.runner.backends._job", "launcher._env"]


def test_the_api_names_resolve_without_loading_torch():
    # The sign-in gate and the Runs page import engine.api and never load torch; the masking and
    # task names load it on first use.
    code = ("import sys, engine.api as api; print('torch' in sys.modules);"
            "missing = [n for n in api.__all__ if getattr(api, n, None) is None]; print(missing);"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == ["False", "[]", "True"], out.stdout + out.stderr


def test_a_queued_worker_does_not_load_torch():
    """The worker module (and the prefetch helpers it starts) import without torch: a queued worker
    holds no torch memory until it has a slot (tests/engine/test_runqueue.py checks live workers)."""
    code = "import sys, engine.runner.worker; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
