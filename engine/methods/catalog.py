"""The methods on masklab's menu, by name: what each sets in a run config, and the method a config is.

A *method* is a combination of fields spread over the config: the model (MAE or SimMIM), the target
(``task_params.target``: pixels, HOG, an EMA teacher's features), the corruption (masking or noise),
the objective (a contrastive term mixed in) and the masking (attention-guided). The tasks declare
theirs in ``engine/tasks/methods.json`` (data beside the tasks: read, never imported):
:func:`apply_method` puts one on a base config (the sweep field ``method`` does that, so a sweep's x
axis can be the method; ``configs/method-*.yaml`` are such configs), :func:`method_label` names the
method of any config. Torch-free: the dashboard reads it.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

METHODS_FILE = Path(__file__).resolve().parents[1] / "tasks" / "methods.json"
#: The sweep field that varies the method (:func:`engine.runner.sweep.sweep_configs`).
METHOD_FIELD = "method"


@cache
def _catalog() -> dict[str, Any]:
    data = json.loads(METHODS_FILE.read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if not k.startswith("_")}


def methods_for(task: str | None) -> dict[str, str]:
    """``{name: summary}`` of the methods of ``task``, in menu order (``{}`` for a task without any)."""
    return {n: m["summary"] for n, m in (_catalog().get(task or "", {}).get("methods") or {}).items()}


def apply_method(base: dict[str, Any], name: str) -> dict[str, Any]:
    """A copy of the partial or resolved run config ``base`` made into method ``name``: the task's
    method-defining fields reset (the model arch, the objective, ``task_params`` but the ones the task
    keeps, an attention-guided masking back to random), then the method's own values set. The data,
    the masking ratio, the model size and the training stay.

    Raises:
        KeyError: ``name`` is not a method of ``base``'s task (the message lists the task's methods).
    """
    task = base.get("task") or ""
    entry = _catalog().get(task)
    if entry is None or name not in entry["methods"]:
        known = ", ".join(methods_for(task)) or "none"
        raise KeyError(f"{name!r} is not a method of task {task or '(default)'!r}; its methods: {known}")
    d = copy.deepcopy(base)
    keep = set(entry.get("keep_params", ()))
    d["task_params"] = {k: v for k, v in (d.get("task_params") or {}).items() if k in keep}
    for section, values in entry["reset"].items():
        if isinstance(values, dict) and values:
            d.setdefault(section, {}).update(copy.deepcopy(values))
    masking = d.setdefault("masking", {})
    if masking.get("strategy") == "attention":
        masking["strategy"], masking["params"] = "random", {}
    for section, values in entry["methods"][name]["config"].items():
        if section == "task_params":
            d["task_params"].update(copy.deepcopy(values))
        else:
            d.setdefault(section, {}).update(copy.deepcopy(values))
    return d


def _fact(config: dict[str, Any], path: str) -> Any:
    if path == "contrastive":
        terms = (config.get("objective") or {}).get("terms") or []
        return any(t.get("loss") == "contrastive" and float(t.get("weight", 1.0)) > 0 for t in terms)
    node: Any = config
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def method_label(config: dict[str, Any]) -> str:
    """The method a (resolved or partial) run config trains: the names of every method of its task
    whose signature it matches, joined with ``+`` (``data2vec+attmask``), the task's plain method
    (``mae``, ``mlm``) when none matches, and the task's own name for a task without methods."""
    task = config.get("task") or ""
    methods = (_catalog().get(task) or {}).get("methods") or {}
    if not methods:
        return task or "run"
    hits = [n for n, m in methods.items() if m["signature"]
            and all(_fact(config, k) == v for k, v in m["signature"].items())]
    return "+".join(hits) if hits else next(n for n, m in methods.items() if not m["signature"])
