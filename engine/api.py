"""The engine's one face: everything the dashboard (``pages/``, ``app/``) and the CLI call.

Pages import nothing else from the engine (``tests/test_layers.py`` checks it); the modality views
in ``app/modalities/`` also draw masks and run checkpoints, so they may import the modality code
(``engine.tasks``, ``engine.masking``, ``engine.models``, ``engine.eval.inference``,
``engine.audio.features``) directly.

This is a facade: the functions live in their modules, with their docstrings and raised errors;
this module only names them. Importing it does not import torch (the Runs page and the sign-in
gate never load it): the names that need torch (masking strategies, tasks, objectives, the
pre-flight check) are listed in ``_LAZY`` and load on first use, e.g. ``from engine.api import
get_task`` at the top of New run.

    >>> from engine import api
    >>> run_id = api.submit(api.RunConfig.from_dict({"data": {"dataset": "digits"}}), actor=me)
    >>> api.get_run(run_id).status, api.read_metrics([run_id], ["loss"], max_points=500)
"""

# ruff: noqa: I001  (imports grouped by what the UI does with them, each group under its comment)
from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

# --- errors the UI catches (all typed; each message says what is wrong and what to do) ---
from engine.errors import (
    BackendError, ConfigError, DamagedFileError, DatasetError, EvaluationError, FormatVersionError, MasklabError,
    NothingImportedError, PermissionDeniedError, QueueFullError, ResumeError, RunActiveError, RunLockedError,
    RunNotFoundError, StorageError,
)

# --- access: identity, roles, users, audit ---
from engine.access.throttle import SignInLockedError, sign_in
from engine.access.audit import AuditEntry, read_audit
from engine.access.policy import MODE_ENV, Identity, acting_as, can, is_demo, local_admin, require_sign_in
from engine.access.users import load_users, oidc_identity, verify_password

# --- config: load, validate (``RunConfig.from_dict`` raises ConfigError naming the field), diff ---
from engine.config import (
    LAUNCH_BACKENDS, AudioConfig, LaunchConfig, MaskingConfig, RunConfig, TokenizerConfig, apply_overrides, load_config,
    vocab_shortfall, vocab_text,  # a tokenizer's real vocabulary against its request, in words
)
from engine.store.history import config_diff

# --- runs: submit, cancel, resume, evaluate, delete (each checks the actor's role and is audited) ---
from engine.runner.launcher import cancel, delete_run, evaluate, job_state, resume, submit
from engine.runner.backends import JobState
from engine.runner.backends import describe as describe_job
from engine.runner.backends import read_job as cluster_job  # a cluster run's job record, or None
from engine.runner.backends import unavailable as backend_unavailable  # why a back-end cannot run here, or ""
from engine.runner.queue import max_runs, queue_room
from engine.runner.gpus import GpuOverview, GpuReading, gpu_overview, nvidia_smi, read_gpus  # New run's GPU panel

# --- sweeps: one field over values x seeds, each run a normal run ---
from engine.runner.sweep import new_sweep_id, parse_seeds, parse_values, plan_sweep, submit_sweep, sweep_of, sweep_table

# --- methods: what a config trains (data2vec, MaskFeat, ...), a method on a config, the collapse watch ---
from engine.methods.catalog import METHOD_FIELD, apply_method, method_label, methods_for
from engine.methods.collapse import TARGET_STD, collapse_warning

# --- reading runs: records, statuses, metrics (DuckDB over Parquet), samples, logs, checkpoints ---
from engine.store import (
    ACTIVE, RESUMABLE, STATUSES, Annotations, CheckpointWeights, DiskUsage, RunRecord, Sample, annotate, archive_run,
    checkpoint_weights, dataset_bytes, disk_usage, format_bytes, get_run, latest_checkpoint_step, latest_points,
    list_runs, load_samples, read_config_history, read_log, read_metrics, run_bytes, sample_files, sample_steps, set_note, set_tags,
    tag_run,
)
from engine.facts import masking_uses_ratio, task_fact
from engine.store import CHECKPOINT_CHOICES, ImportReport, PortableRunsError, export_runs, import_runs, read_provenance

# --- evaluations: the background evaluation job and what it saved ---
from engine.store.evaluations import Evaluation, latest_evaluation, load_maps, read_evaluations
from engine.store.evaluations import has_job as has_evaluation_job  # one stat: did the run ever have one
from engine.store.evaluations import read_job as evaluation_job  # the run's evaluation job state, or None
from engine.store.evaluations import PHASES as EVAL_PHASES  # an evaluation's phases, in order, with their words

# --- datasets: list, load, bundled sets, import jobs (another process), samples to show ---
from engine.data import (
    VIEW_SEED, BundledStatus, DatasetInfo, ImportOptions, SourcePlan, bundled_status, delete_dataset, import_source,
    inspect_source, list_datasets, load_dataset, representative,
)
from engine.data.audio import EXTENSIONS as AUDIO_EXTENSIONS
from engine.data.audio import SAMPLE_RATES as AUDIO_SAMPLE_RATES
from engine.data.audio import UPSAMPLED as AUDIO_UPSAMPLED  # the note an upsampled clip's import carries
from engine.data.audio import proposed_rate, rates_text
from engine.data.dataset import classes_text, counted
from engine.data.images import NOTE_LOST_ON_FILL
from engine.data.jobs import ImportJob, ImportOutcome, cancel_import, import_status, start_import
from engine.data.tabular import ROLES as COLUMN_ROLES
from engine.data.tabular import TABLE_EXTENSIONS
from engine.modalities import get_modality, modality_names  # a Modality names its dashboard views (.ui)
from engine.modalities import reads_option  # whether a modality's importers read an import option
from engine.modalities.grids import GRID_KINDS  # the unit grids masking strategies work on

# --- imported (pretrained) models: list, import (upload, path, Hub id), show on a dataset, delete ---
from engine.pretrained.export import EXPORTS, export_zip
from engine.pretrained.manage import (
    FOLDER_FILES,
    delete_pretrained,
    source_input_shape,
    fixed_by_source,
    import_path,
    import_upload,
    show_pretrained,
)
from engine.pretrained.store import PretrainedError, PretrainedModel, get_pretrained, list_pretrained

# --- workspace ---
from engine.runner.resume import TASK_INFO
from engine.workspace import read_json, workspace_root


def read_task_info(run_dir: str | Path) -> dict[str, Any]:
    """What training recorded of the run's task at its start (``task.json``: device, dataset hash...).

    Raises:
        OSError: not written yet (the run has not started training).
        ValueError: being replaced or damaged.
    """
    return read_json(Path(run_dir) / TASK_INFO)


# --- registries and checks that need torch (masking, tasks, models, objectives, pre-flight):
# loaded on first use (PEP 562) ---
_LAZY: dict[str, tuple[str, str]] = {
    # name here: (module, name there)
    "MASKING_REGISTRY": ("engine.masking", "MASKING_REGISTRY"),
    "MaskingStrategy": ("engine.masking.registry", "MaskingStrategy"),
    "get_masking": ("engine.masking", "get_masking"),
    "strategies_for": ("engine.masking", "strategies_for"),
    "grid_shape": ("engine.masking", "grid_shape"),
    "ratio_at": ("engine.masking", "ratio_at"),
    "identical_masks_warning": ("engine.masking", "identical_masks_warning"),
    "MaskStats": ("engine.masking.stats", "MaskStats"),
    "get_model_spec": ("engine.models", "get_model_spec"),  # .presets: the sizes New run offers
    "get_task": ("engine.tasks", "get_task"),
    "tasks_for": ("engine.tasks", "tasks_for"),
    "resolve": ("engine.tasks", "resolve"),  # the complete config (New run's preview and pre-flight)
    "DEFAULT_IMAGE_PATCH": ("engine.tasks.image.recipe", "DEFAULT_PATCH"),
    "OBJECTIVE_REGISTRY": ("engine.objectives", "OBJECTIVE_REGISTRY"),
    "fit_images": ("engine.pretrained.runs", "fit_images"),
    "distance_to_visible": ("engine.eval.distance", "distance_to_visible"),  # engine.eval's package loads torch
    "error_by_distance": ("engine.eval.distance", "error_by_distance"),  # a dataset's images as an imported model takes them
    "check_run": ("engine.tasks.checks", "check_run"),
    "no_validation_note": ("engine.tasks.checks", "no_validation_note"),
    "estimate_run": ("engine.runner.estimate", "estimate_run"),  # how long a config trains and evaluates here
    "cls_attention": ("engine.methods.attention", "cls_attention"),  # an MAE's class-token attention (AttMask)
}

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from engine.masking import (  # noqa: F401
        MASKING_REGISTRY,
        get_masking,
        grid_shape,
        identical_masks_warning,
        ratio_at,
        strategies_for,
    )
    from engine.masking.registry import MaskingStrategy  # noqa: F401
    from engine.masking.stats import MaskStats  # noqa: F401
    from engine.models import get_model_spec  # noqa: F401
    from engine.objectives import OBJECTIVE_REGISTRY  # noqa: F401
    from engine.tasks import get_task, resolve, tasks_for  # noqa: F401
    from engine.tasks.checks import check_run, no_validation_note  # noqa: F401
    from engine.runner.estimate import estimate_run  # noqa: F401
    from engine.tasks.image.recipe import DEFAULT_PATCH as DEFAULT_IMAGE_PATCH  # noqa: F401
    from engine.eval.distance import distance_to_visible, error_by_distance  # noqa: F401
    from engine.pretrained.runs import fit_images  # noqa: F401
    from engine.methods.attention import cls_attention  # noqa: F401


def __getattr__(name: str) -> Any:
    """A lazy name's value (imported once, then kept in this module); AttributeError for others."""
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    # errors
    "BackendError", "ConfigError", "DamagedFileError", "DatasetError", "EvaluationError", "FormatVersionError",
    "MasklabError", "NothingImportedError", "PermissionDeniedError", "QueueFullError", "ResumeError",
    "RunActiveError", "RunLockedError", "RunNotFoundError", "StorageError",
    # access
    "AuditEntry", "Identity", "MODE_ENV", "acting_as", "can", "is_demo", "load_users", "local_admin",
    "oidc_identity", "read_audit", "require_sign_in", "verify_password",
    # config
    "AudioConfig", "LAUNCH_BACKENDS", "LaunchConfig", "MaskingConfig", "RunConfig", "TokenizerConfig",
    "apply_overrides", "config_diff", "load_config", "vocab_shortfall", "vocab_text",
    # runs: writes
    "JobState", "backend_unavailable", "cancel", "cluster_job", "delete_run", "describe_job", "evaluate",
    "job_state", "max_runs", "queue_room", "resume", "submit",
    "GpuOverview", "GpuReading", "gpu_overview", "nvidia_smi", "read_gpus",
    # sweeps
    "new_sweep_id", "parse_seeds", "parse_values", "plan_sweep", "submit_sweep", "sweep_of", "sweep_table",
    # methods
    "METHOD_FIELD", "TARGET_STD", "apply_method", "collapse_warning", "method_label", "methods_for",
    # runs: reads
    "ACTIVE", "Annotations", "CheckpointWeights", "DiskUsage", "RESUMABLE", "RunRecord", "STATUSES", "Sample",
    "annotate", "archive_run", "checkpoint_weights", "dataset_bytes", "disk_usage", "format_bytes", "get_run",
    "latest_checkpoint_step", "latest_points", "list_runs", "load_samples", "read_config_history", "read_log",
    "read_metrics", "read_task_info", "run_bytes", "sample_files", "sample_steps",
    "masking_uses_ratio", "task_fact", "SignInLockedError", "sign_in", "CHECKPOINT_CHOICES", "ImportReport", "PortableRunsError", "export_runs", "import_runs", "read_provenance", "set_note", "set_tags", "tag_run",
    # evaluations
    "EVAL_PHASES", "Evaluation", "evaluation_job", "has_evaluation_job", "latest_evaluation", "load_maps", "read_evaluations",
    # datasets
    "AUDIO_EXTENSIONS", "AUDIO_SAMPLE_RATES", "AUDIO_UPSAMPLED", "BundledStatus", "COLUMN_ROLES", "DatasetInfo", "GRID_KINDS",
    "ImportJob", "ImportOptions", "ImportOutcome", "NOTE_LOST_ON_FILL", "SourcePlan", "TABLE_EXTENSIONS",
    "VIEW_SEED", "bundled_status", "cancel_import", "classes_text", "counted", "delete_dataset", "get_modality",
    "import_source", "import_status", "inspect_source", "list_datasets", "load_dataset", "modality_names", "proposed_rate",
    "rates_text", "reads_option", "representative", "start_import",
    # imported models
    "EXPORTS", "FOLDER_FILES", "PretrainedError", "export_zip", "PretrainedModel", "delete_pretrained", "fixed_by_source", "get_pretrained", "import_path",
    "import_upload", "list_pretrained", "show_pretrained", "source_input_shape",
    # workspace
    "workspace_root",
    # lazy (torch): masking, tasks, objectives, pre-flight
    *_LAZY,
]
