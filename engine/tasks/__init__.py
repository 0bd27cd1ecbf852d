"""Tasks: one registered recipe per modality (see :mod:`engine.tasks.base` for the interface).

Public API (re-exported from :mod:`engine.tasks.registry`, where the task modules import it from):
    TASK_REGISTRY, register_task, get_task, tasks_for(modality) — the registry
    Task — the base class a modality implements
    resolve(cfg) — the complete config of a run (the task's defaults filled in), once per config version
    resolve_masking(masking_cfg) — a ``masking`` section with its strategy's parameters filled in
    build_task(cfg, device, workspace) — the run-time instance the training loop drives

Each modality's tasks are a subpackage, one concept per module: ``recipe`` (the :class:`Task`
classes), ``preview`` (what New run and Mask lab show before a run), ``inference`` (the interactive
views on a checkpoint) and ``common`` (what those share). Built-in tasks register when this package
is imported. Tasks defined elsewhere (a lab's own modality, or a test's toy task) are loaded from
the modules listed in ``$MASKLAB_PLUGINS`` (comma-separated module names, importable from the repo
root or ``PYTHONPATH``), in every process: the dashboard, the CLI and each worker (the launcher
passes the environment on), so a plug-in trains through the real worker.
"""

from __future__ import annotations

from engine.registry import PLUGINS_ENV  # noqa: F401  kept public here
from engine.tasks.base import Task
from engine.tasks.registry import DEFAULT_TASK, TASK_REGISTRY, build_task, get_task, register_task, resolve, resolve_masking, tasks_for  # noqa: F401

# The built-in tasks register themselves on import, in this order (the registry's and tasks_for's).
# isort: off
from engine.tasks.image import recipe as _image  # noqa: F401  image_mim
from engine.tasks.text import recipe as _text  # noqa: F401  text_mlm, text_span
from engine.tasks.audio import recipe as _audio  # noqa: F401  audio_mae, audio_frames
from engine.tasks.paired import recipe as _paired  # noqa: F401  paired
from engine.tasks.paired_audio import recipe as _paired_audio  # noqa: F401  paired_audio
# isort: on

__all__ = ["TASK_REGISTRY", "Task", "build_task", "get_task", "register_task", "resolve", "resolve_masking",
           "tasks_for"]
