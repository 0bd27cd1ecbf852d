"""The task registry: tasks by name, and the config resolution that asks them.

Task modules import :func:`register_task` from here (never from the ``engine.tasks`` package, whose
``__init__`` imports the built-in task modules), so no task module and the package import each other.

Public API:
    TASK_REGISTRY, register_task, get_task, tasks_for(modality) — the registry
    resolve(cfg) — the complete config of a run (the task's defaults filled in), once per config version
    resolve_masking(masking_cfg) — a ``masking`` section with its strategy's parameters filled in
    build_task(cfg, device, workspace) — the run-time instance the training loop drives
"""

from __future__ import annotations

import torch

from engine.config import MaskingConfig, RunConfig
from engine.errors import ConfigError
from engine.masking.registry import get_masking
from engine.modalities.image import DEFAULT_TASK  # the task a config without one trains
from engine.registry import load_plugins, registrar
from engine.tasks.base import Task

TASK_REGISTRY: dict[str, type[Task]] = {}


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: register a :class:`Task` subclass under ``cls.name``.

    Raises:
        ValueError: the name is taken.
    """
    return registrar(TASK_REGISTRY, "task", cls.name)(cls)


def get_task(name: str) -> type[Task]:
    """The task class registered as ``name`` (plug-ins from ``$MASKLAB_PLUGINS`` are imported first).

    Raises:
        ConfigError: unknown task (names the ``task`` field and lists the known ones), or a plug-in
            module that cannot be imported.
    """
    if name not in TASK_REGISTRY:
        load_plugins()  # one loader for tasks and modalities (engine.registry)
    try:
        return TASK_REGISTRY[name]
    except KeyError:
        raise ConfigError(f"task: unknown task {name!r}; known tasks: {', '.join(sorted(TASK_REGISTRY))}") from None


def tasks_for(modality: str) -> list[str]:
    """Names of the registered tasks that train on datasets of ``modality`` (:meth:`Task.trains_on`),
    in registration order."""
    load_plugins()
    return [n for n, t in TASK_REGISTRY.items() if t.trains_on(modality)]


def resolve(cfg: RunConfig) -> RunConfig:
    """A new, complete copy of ``cfg``: the strategy's ``masking.params`` and the task's own
    defaults filled in (``task_params``, ``model.arch``, ``objective.loss``, ``model.patch_size``,
    ``data.tokenizer`` / ``data.audio``, as :meth:`Task.resolve` does) and checked. ``cfg`` is left
    as it was; resolving a resolved config gives the same config.

    Called once per config version of a run (``submit``, ``python -m engine run``, each config of
    a sweep, a resume that changes fields); the stored result is trained as it is.

    Raises:
        ConfigError: ``invalid run config: <field>: <problem>`` (an unknown task or strategy, a bad
            parameter, an arch the task does not train...).
    """
    out = cfg.model_copy(deep=True)
    out.task = out.task or DEFAULT_TASK
    try:
        out.masking = resolve_masking(out.masking)
        get_task(out.task).resolve(out)
    except ConfigError as e:
        raise ConfigError(f"invalid run config: {e}") from None
    return RunConfig.from_dict(out.to_dict())  # every field validated again, as saved


def resolve_masking(m: MaskingConfig) -> MaskingConfig:
    """A copy of the ``masking`` section with every parameter of its strategy filled in
    (:meth:`~engine.masking.MaskingStrategy.parse_params`), checked against the strategy.

    Raises:
        ConfigError: an unknown strategy, a bad parameter (``masking.params.<field>``), or a ratio
            schedule for a strategy with its own budget (``masking.schedule``).
    """
    strategy = get_masking(m.strategy)
    params = strategy.parse_params(m.params).model_dump(mode="json")
    if m.schedule != "constant" and not strategy.uses_ratio:
        raise ConfigError(f"masking.schedule: strategy {m.strategy!r} sets its own budget (masking.params), "
                          f"so a ratio schedule has no effect; use schedule 'constant'")
    return m.model_copy(update={"params": params})


def build_task(cfg, device: torch.device | str = "cpu", workspace=None) -> Task:
    """Instantiate the run-time task of ``cfg`` (loads data, builds the model on ``device``).

    Raises:
        ConfigError, DatasetError: from the task.
    """
    return get_task(cfg.task)(cfg, torch.device(device), workspace)
