"""Tasks: one registered recipe per modality (see :mod:`engine.tasks.base` for the interface).

Public API:
    TASK_REGISTRY, register_task, get_task, tasks_for(modality) — the registry
    Task — the base class a modality implements
    resolve(cfg) — the complete config of a run (the task's defaults filled in), once per config version
    resolve_masking(masking_cfg) — a ``masking`` section with its strategy's parameters filled in
    build_task(cfg, device, workspace) — the run-time instance the training loop drives

Built-in tasks register on import. Tasks defined elsewhere (a lab's own modality, or a test's toy
task) are loaded from the modules listed in ``$MASKLAB_PLUGINS`` (comma-separated module names,
importable from the repo root or ``PYTHONPATH``), in every process: the dashboard, the CLI and each
worker (the launcher passes the environment on), so a plug-in trains through the real worker.
"""

from __future__ import annotations

import torch

from engine.config import MaskingConfig, RunConfig
from engine.errors import ConfigError
from engine.registry import PLUGINS_ENV, load_plugins, registrar  # noqa: F401  PLUGINS_ENV: kept public here
from engine.tasks.base import Task
from engine.modalities.image import DEFAULT_TASK  # the task a config without one trains

TASK_REGISTRY: dict[str, type[Task]] = {}


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: register a :class:`Task` subclass under ``cls.name``.

    Raises:
        ValueError: the name is taken.
    """
    return registrar(TASK_REGISTRY, "task", cls.name)(cls)


def _load_plugins() -> None:
    load_plugins()  # one loader for tasks and modalities (engine.registry)


def get_task(name: str) -> type[Task]:
    """The task class registered as ``name`` (plug-ins from ``$MASKLAB_PLUGINS`` are imported first).

    Raises:
        ConfigError: unknown task (names the ``task`` field and lists the known ones), or a plug-in
            module that cannot be imported.
    """
    if name not in TASK_REGISTRY:
        _load_plugins()
    try:
        return TASK_REGISTRY[name]
    except KeyError:
        raise ConfigError(f"task: unknown task {name!r}; known tasks: {', '.join(sorted(TASK_REGISTRY))}") from None


def tasks_for(modality: str) -> list[str]:
    """Names of the registered tasks that train on datasets of ``modality`` (:meth:`Task.trains_on`:
    ``paired`` also on audio datasets), in registration order."""
    _load_plugins()
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
    from engine.masking.registry import get_masking

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


# Built-in tasks register themselves on import (after the registry exists).
from engine.tasks import image as _image  # noqa: E402,F401  image_mim
from engine.tasks import text as _text  # noqa: E402,F401  text_mlm, text_span
from engine.tasks import audio as _audio  # noqa: E402,F401  audio_mae, audio_frames
from engine.tasks import paired as _paired  # noqa: E402,F401  paired

__all__ = ["TASK_REGISTRY", "Task", "build_task", "get_task", "register_task", "resolve", "resolve_masking",
           "tasks_for"]
