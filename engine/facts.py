"""What the run list needs to know about the built-in tasks and masking strategies, without torch.

The Runs page, Compare's tables and the CLI's run list name each run's headline figure, modality and
whether its masking strategy uses ``masking.ratio``. Those are class attributes of the task and
strategy classes, whose modules load torch (seconds at a cold start). ``engine/tasks/facts.json`` keeps
them for the built-in tasks and strategies; :func:`task_fact` and :func:`masking_uses_ratio` read it,
and fall back to the registries (torch) for a name it lacks (a plug-in's). The file is generated
from the registries (``python -m engine.facts``) and a test compares it with them, so it never goes
stale unnoticed.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

FACTS_FILE = Path(__file__).parent / "tasks" / "facts.json"  # data beside the tasks: read, never imported
#: The task attributes kept (each JSON-safe).
TASK_FIELDS = ("modality", "headline", "figures", "sample_kind")


@cache
def _facts() -> dict[str, Any]:
    try:
        return json.loads(FACTS_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"tasks": {}, "masking": {}}


def task_fact(task: str | None, field: str) -> Any:
    """The built-in task's ``field`` (one of :data:`TASK_FIELDS`; a tuple as a list), from the file.

    Raises:
        KeyError: a task or field the file lacks (a plug-in's task): ask the registry instead.
    """
    return _facts()["tasks"][task or _facts()["default_task"]][field]


def masking_uses_ratio(strategy: str) -> bool:
    """Whether the built-in masking ``strategy`` reads ``masking.ratio``, from the file.

    Raises:
        KeyError: a strategy the file lacks (a plug-in's): ask the registry instead.
    """
    return bool(_facts()["masking"][strategy]["uses_ratio"])


def generate() -> dict[str, Any]:
    """The facts as the live registries give them (loads torch and every built-in task)."""
    from engine.masking import MASKING_REGISTRY  # noqa: PLC0415 (generating the file is the one place that loads them)
    from engine.tasks import DEFAULT_TASK, TASK_REGISTRY  # noqa: PLC0415 (generating the file is the one place that loads them)

    def plain(v: Any) -> Any:
        return [plain(x) for x in v] if isinstance(v, (tuple, list)) else v

    tasks = {name: {f: plain(getattr(cls, f, None)) for f in TASK_FIELDS} for name, cls in sorted(TASK_REGISTRY.items())
             if cls.__module__.startswith("engine.")}
    masking = {name: {"uses_ratio": bool(s.uses_ratio)} for name, s in sorted(MASKING_REGISTRY.items())
               if getattr(s.fn, "__module__", "").startswith("engine.")}  # the built-in ones, not a plug-in's
    return {"default_task": DEFAULT_TASK, "tasks": tasks, "masking": masking}


if __name__ == "__main__":
    FACTS_FILE.write_text(json.dumps(generate(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {FACTS_FILE}", file=sys.stderr)
