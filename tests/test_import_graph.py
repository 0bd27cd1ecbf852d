"""The engine's import graph has no cycles, counting imports inside functions too (issue 31).

Every ``import``/``from ... import`` in every module under ``engine/`` is read with :mod:`ast`
(top level, inside functions and under ``if TYPE_CHECKING:`` alike, since a lazy import is still an
arrow between modules); a cycle is a strongly connected component of more than one module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def engine_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / "engine").rglob("*.py"))}


def imported(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Engine modules that ``path`` (module ``name``) imports, resolved to the deepest known module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # ``from pkg import sub`` is an arrow to the submodule; ``from pkg import name``, to pkg
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = engine_modules()
    return {n: imported(p, n, modules) for n, p in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read():
    """The reader sees real arrows, lazy ones included (so the cycle check below can fail)."""
    g = import_graph()
    assert "engine.config" in g["engine.runner.launcher"]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_no_import_cycles_among_engine_modules():
    found = cycles(import_graph())
    assert not found, "import cycles among engine modules:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_every_lazy_import_says_why():
    """ruff's PLC0415 (ruff.toml, run by scripts/test.sh) allows an import inside a function only
    where it is marked; the mark must carry its reason, ``# noqa: PLC0415 (why it is lazy)``."""
    bare = []
    for folder in ("engine", "app", "pages", "tests", "bench"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            if p == Path(__file__).resolve():  # this check names the mark itself
                continue
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                if "noqa: PLC0415" in line and "import" in line and not re.search(r"PLC0415\s*\(\S[^)]*\)", line):
                    bare.append(f"{p.relative_to(ROOT)}:{n}")
    assert bare == [], "lazy imports without a reason:\n" + "\n".join(bare)
