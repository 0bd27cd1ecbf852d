"""Every write entry point of the engine, Python and CLI, is refused for a viewer and in demo mode,
and every refusal is an audit line (issue 38).

The entry points are enumerated, not listed by hand: every public callable of :mod:`engine.api`
(its ``__all__``, the lazy ``_LAZY`` names and whatever else ``dir(engine.api)`` shows from the
engine) and every subcommand of the CLI's parser must be classified below as a write (with its
action and a call against a real workspace) or a read, so a new one fails
:func:`test_every_public_callable_of_the_api_is_classified` or
:func:`test_every_cli_command_is_classified` until it is. Each write is then called as a viewer
and, in demo mode, as the local admin: it raises :class:`PermissionDeniedError` (the CLI exits 2
with the reason), appends exactly one ``refused`` line for its action, and leaves every other file
of the workspace as it was, byte for byte.

Reads may fill caches (a tokenizer, a bundled dataset) or record what they find (a cluster job that
ended without its worker: ``job_state``, ``cluster_job``, ``python -m engine job``); ``sign_in``
records sign-in attempts. None of them changes what a user made. Writes outside the workspace
(``export-runs OUT.zip``, ``models export``, ``predict --out``) read the workspace: a viewer may
read everything and take it away, so they are reads here.
"""

from __future__ import annotations

import argparse
import getpass
import inspect
import json
import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
import torch

import engine.api as api
from engine.access import policy
from engine.access.policy import Identity, acting_as
from engine.cli import _parser
from engine.config import RunConfig
from engine.store import create_run, run_alive, write_status
from engine.store.checkpoints import save_checkpoint
from engine.tasks import resolve
from tests.cli import engine_main

VIEWER, EDITOR = Identity("vera", "viewer", "password"), Identity("ed", "editor", "password")
CFG = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
       "train": {"steps": 3, "batch_size": 8, "device": "cpu"}}
JOB = "20260101-000000-abcdef"  # an import job id that never ran


class Ctx:
    """The objects a call acts on: an ended run, an imported dataset ``kept``, a text file."""

    def __init__(self, ws: Path, run_id: str):
        self.ws, self.run_id, self.src = ws, run_id, ws.parent / "notes.txt"


# ---------------------------------------------------------------- the classification

#: engine.api name -> (its action in policy.ACTIONS, a call with minimal arguments).
WRITES: dict[str, tuple[str, Callable[[Ctx], Any]]] = {
    "submit": ("run.submit", lambda c: api.submit(RunConfig.from_dict(CFG))),
    "submit_sweep": ("run.submit", lambda c: api.submit_sweep(CFG, "masking.ratio", [0.5, 0.75])),
    "show_pretrained": ("run.submit", lambda c: api.show_pretrained("m", "kept")),
    "resume": ("run.resume", lambda c: api.resume(c.run_id)),
    "cancel": ("run.cancel", lambda c: api.cancel(c.run_id)),
    "evaluate": ("run.evaluate", lambda c: api.evaluate(c.run_id)),
    "annotate": ("run.annotate", lambda c: api.annotate(c.run_id, tags=["x"], note="n", archived=True)),
    "archive_run": ("run.annotate", lambda c: api.archive_run(c.run_id)),
    "set_note": ("run.annotate", lambda c: api.set_note(c.run_id, "n")),
    "set_tags": ("run.annotate", lambda c: api.set_tags(c.run_id, ["x"])),
    "tag_run": ("run.annotate", lambda c: api.tag_run(c.run_id, add=["x"])),
    "delete_run": ("run.delete", lambda c: api.delete_run(c.run_id)),
    "import_runs": ("run.import", lambda c: api.import_runs(c.src)),
    "import_source": ("data.import", lambda c: api.import_source(c.src, "other")),
    "start_import": ("data.import", lambda c: api.start_import(c.src, "other")),
    "cancel_import": ("data.import", lambda c: api.cancel_import(JOB)),
    "delete_dataset": ("data.delete", lambda c: api.delete_dataset("kept")),
    "import_path": ("model.import", lambda c: api.import_path(str(c.src), "m")),
    "import_upload": ("model.import", lambda c: api.import_upload([("config.json", b"{}")], "m")),
    "delete_pretrained": ("model.delete", lambda c: api.delete_pretrained("m")),
}
#: Reads that only some roles may do: refused and audited like a write.
CHECKED_READS: dict[str, tuple[str, Callable[[Ctx], Any]]] = {
    "read_audit": ("audit.read", lambda c: api.read_audit()),
}
#: engine.api names that write nothing a user made (see the module docstring), types included.
READS = {
    # access (process state, the users file read; sign_in records attempts, open to everyone by design)
    "acting_as", "can", "is_demo", "load_users", "local_admin", "oidc_identity", "require_sign_in", "sign_in",
    "verify_password",
    # config, methods, sweeps (pure)
    "apply_method", "apply_overrides", "config_diff", "load_config", "method_label", "methods_for", "new_sweep_id",
    "parse_seeds", "parse_values", "plan_sweep", "sweep_of", "sweep_table", "collapse_warning", "vocab_shortfall",
    "vocab_text",
    # runs and jobs (job_state, cluster_job: record a cluster job that ended without its worker)
    "backend_unavailable", "checkpoint_weights", "cluster_job", "dataset_bytes", "describe_job", "disk_usage",
    "evaluation_job", "export_runs", "format_bytes", "get_run", "has_evaluation_job", "job_state",
    "latest_checkpoint_step", "latest_evaluation", "latest_points", "list_runs", "load_maps", "load_samples",
    "gpu_overview", "max_runs", "nvidia_smi", "queue_room", "read_config_history", "read_gpus", "read_evaluations", "read_json", "read_log", "read_metrics",
    "read_provenance", "read_task_info", "run_bytes", "sample_files", "sample_steps", "masking_uses_ratio",
    "task_fact", "workspace_root",
    # datasets and models (export_zip: a scratch folder outside the workspace, removed)
    "bundled_status", "classes_text", "counted", "get_modality", "import_status", "inspect_source", "list_datasets",
    "load_dataset", "modality_names", "proposed_rate", "rates_text", "reads_option", "representative",
    "export_zip", "fixed_by_source", "get_pretrained", "list_pretrained", "source_input_shape",
    # lazy (torch): registries, resolving and checking a config, estimates, model views
    "check_run", "cls_attention", "distance_to_visible", "error_by_distance", "estimate_run", "fit_images",
    "get_masking", "get_model_spec", "get_task", "grid_shape", "identical_masks_warning", "no_validation_note",
    "ratio_at", "resolve", "strategies_for", "tasks_for",
    # types and errors: constructing one writes nothing
    "Annotations", "AudioConfig", "AuditEntry", "BackendError", "BundledStatus", "CheckpointWeights", "ConfigError",
    "DamagedFileError", "DatasetError", "DatasetInfo", "DiskUsage", "Evaluation", "EvaluationError",
    "FormatVersionError", "GpuOverview", "GpuReading", "Identity", "ImportJob", "ImportOptions", "ImportOutcome", "ImportReport", "JobState",
    "LaunchConfig", "MaskStats", "MaskingConfig", "MaskingStrategy", "MasklabError", "NothingImportedError",
    "PermissionDeniedError", "PortableRunsError", "PretrainedError", "PretrainedModel", "QueueFullError",
    "ResumeError", "RunActiveError", "RunConfig", "RunLockedError", "RunNotFoundError", "RunRecord", "Sample",
    "SignInLockedError", "SourcePlan", "StorageError", "TokenizerConfig",
}
#: Writers with no check of their own, called only inside a checked write path: never in engine.api.
INTERNAL = {"create_run", "start_worker", "check_workspace", "import_model", "write_status", "execute_run"}

#: CLI command (``data add``; a flag where it makes a read a write) -> (action, its arguments).
CLI_WRITES: dict[str, tuple[str, Callable[[Ctx], list[str]]]] = {
    "run": ("run.submit", lambda c: ["run", "--set", "train.steps=1"]),
    "submit": ("run.submit", lambda c: ["submit", "--set", "train.steps=1"]),
    "sweep": ("run.submit", lambda c: ["sweep", "--over", "masking.ratio=0.5,0.75"]),
    "join": ("run.submit", lambda c: ["join", c.run_id, "--node-rank", "1"]),
    "models show": ("run.submit", lambda c: ["models", "show", "m", "--dataset", "kept"]),
    "resume": ("run.resume", lambda c: ["resume", c.run_id]),
    "cancel": ("run.cancel", lambda c: ["cancel", c.run_id]),
    "evaluate": ("run.evaluate", lambda c: ["evaluate", c.run_id]),
    "evaluate --foreground": ("run.evaluate", lambda c: ["evaluate", c.run_id, "--foreground"]),
    "tag": ("run.annotate", lambda c: ["tag", c.run_id, "x"]),
    "note": ("run.annotate", lambda c: ["note", c.run_id, "n"]),
    "archive": ("run.annotate", lambda c: ["archive", c.run_id]),
    "delete": ("run.delete", lambda c: ["delete", c.run_id]),
    "import-runs": ("run.import", lambda c: ["import-runs", str(c.src)]),
    "data add": ("data.import", lambda c: ["data", "add", str(c.src), "--name", "other"]),
    "data delete": ("data.delete", lambda c: ["data", "delete", "kept"]),
    "models import": ("model.import", lambda c: ["models", "import", str(c.src), "--name", "m"]),
    "models delete": ("model.delete", lambda c: ["models", "delete", "m"]),
    "users add": ("users.manage", lambda c: ["users", "add", "x", "--role", "admin", "--password-stdin"]),
    "users remove": ("users.manage", lambda c: ["users", "remove", "x"]),
    "users email": ("users.manage", lambda c: ["users", "email", "x@example.com", "--role", "viewer"]),
    "doctor --repair": ("workspace.repair", lambda c: ["doctor", "--repair"]),
    "audit": ("audit.read", lambda c: ["audit"]),  # a checked read
}
#: CLI commands that read the workspace (``export-runs``, ``models export``, ``predict --out`` write
#: outside it; ``job`` records a cluster job that ended without its worker; ``doctor`` without --repair).
CLI_READS = {"runs", "log", "job", "doctor", "data list", "data inspect", "users list", "models list", "models export",
             "predict", "export-runs"}


def _public_callables() -> set[str]:
    """engine.api's public callables: ``__all__`` (the lazy names included) and any other engine
    callable its namespace shows (``dir``, which lists the lazy names too)."""
    names = set(api.__all__) | {n for n in dir(api) if not n.startswith("_")}
    out = set()
    for n in names:
        v = getattr(api, n)
        if callable(v) and (n in api.__all__ or (getattr(v, "__module__", "") or "").startswith("engine")):
            out.add(n)
    return out


def _cli_commands(parser: argparse.ArgumentParser, prefix: str = "") -> set[str]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {prefix}
    return {c for a in subs for name, p in a.choices.items() for c in _cli_commands(p, f"{prefix} {name}".strip())}


def test_every_public_callable_of_the_api_is_classified():
    public = _public_callables()
    checked = set(WRITES) | set(CHECKED_READS)
    assert not checked & READS
    assert not public - checked - READS, f"classify these new engine.api names in WRITES or READS: {sorted(public - checked - READS)}"
    assert not (checked | READS) - public, f"no longer in engine.api: {sorted((checked | READS) - public)}"
    assert not INTERNAL & set(dir(api)), "an unchecked writer is exported: call it inside authorized(...) instead"
    for name, (action, _) in {**WRITES, **CHECKED_READS}.items():
        assert action in policy.ACTIONS, name
        assert "actor" in inspect.signature(getattr(api, name)).parameters, f"{name} takes no actor="


def test_every_cli_command_is_classified():
    commands = _cli_commands(_parser())
    write_commands = {label.split(" --")[0] for label in CLI_WRITES}
    assert not commands - write_commands - CLI_READS, f"classify these CLI commands: {sorted(commands - write_commands - CLI_READS)}"
    assert not (write_commands | CLI_READS) - commands, f"no such CLI command: {sorted((write_commands | CLI_READS) - commands)}"
    assert not write_commands & CLI_READS - {"doctor"}  # doctor reads; doctor --repair writes
    covered = {a for a, _ in [*WRITES.values(), *CHECKED_READS.values(), *CLI_WRITES.values()]}
    assert covered == set(policy.ACTIONS), f"actions with no entry point here: {set(policy.ACTIONS) - covered}"


# ---------------------------------------------------------------- each write, refused and audited


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, str]:
    """A workspace with an ended run and an imported text dataset ``kept``, built once and copied per case."""
    ws = tmp_path_factory.mktemp("template") / "workspace"
    ws.mkdir()
    (ws.parent / "notes.txt").write_text("".join(f"document number {i} about masks\n" for i in range(20)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(ws))
        mp.delenv(policy.MODE_ENV, raising=False)
        run_id, d = create_run(resolve(RunConfig.from_dict(CFG)).to_dict(), ws)
        write_status(d, {"status": "failed", "step": 2, "total_steps": 3, "error": "test"})
        api.import_source(ws.parent / "notes.txt", "kept", workspace=ws, actor=EDITOR)
    shutil.rmtree(ws / "audit")
    return ws, run_id


@pytest.fixture
def ctx(workspace, template, monkeypatch) -> Ctx:
    src, run_id = template
    shutil.copytree(src, workspace, dirs_exist_ok=True)
    shutil.copy(src.parent / "notes.txt", workspace.parent / "notes.txt")
    monkeypatch.delenv(policy.MODE_ENV, raising=False)
    yield Ctx(workspace, run_id)
    policy.require_sign_in(False)


def _files(ws: Path) -> dict[str, bytes | None]:
    """Every path under ``ws`` but the audit log, with a file's bytes (None: a folder)."""
    return {str(p.relative_to(ws)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(ws.rglob("*")) if p.relative_to(ws).parts[0] != "audit"}


def _audit(ws: Path) -> list[dict]:
    p = ws / "audit" / "audit.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def _who(mode: str) -> tuple[Identity | None, str, Callable[[str], str]]:
    """The identity a case acts as, its name in the audit log, and the refusal's words for an action's words."""
    if mode == "viewer":
        return VIEWER, "vera", lambda words: f"vera (viewer) may not {words}: that needs the "
    return None, f"local:{getpass.getuser()}", lambda words: f"masklab is in demo mode (MASKLAB_MODE=demo): it cannot {words} here"


def _check_refused(ctx: Ctx, action: str, mode: str, call: Callable[[], str]) -> None:
    ident, user, words = _who(mode)
    before = _files(ctx.ws)
    with acting_as(ident) if ident is not None else nullcontext():
        message = call()
    assert message.startswith(words(policy.ACTIONS[action][1])) or words(policy.ACTIONS[action][1]) in message, message
    assert _files(ctx.ws) == before  # nothing written but the audit line
    (line,) = _audit(ctx.ws)
    assert (line["user"], line["action"], line["outcome"]) == (user, action, "refused")
    assert line["reason"].startswith(words(policy.ACTIONS[action][1]))


@pytest.mark.parametrize("mode", ["viewer", "demo"])
@pytest.mark.parametrize("name", sorted({**WRITES, **CHECKED_READS}))
def test_each_write_of_the_api_is_refused_and_audited(ctx, monkeypatch, name, mode):
    action, call = {**WRITES, **CHECKED_READS}[name]
    if mode == "demo":
        monkeypatch.setenv(policy.MODE_ENV, "demo")

    def attempt() -> str:
        with pytest.raises(api.PermissionDeniedError) as e:
            call(ctx)
        return str(e.value)

    _check_refused(ctx, action, mode, attempt)


@pytest.mark.parametrize("mode", ["viewer", "demo"])
@pytest.mark.parametrize("label", sorted(CLI_WRITES))
def test_each_write_of_the_cli_is_refused_and_audited(ctx, label, mode):
    action, argv = CLI_WRITES[label]
    env = {policy.MODE_ENV: "demo"} if mode == "demo" else {}

    def attempt() -> str:
        out = engine_main(*argv(ctx), env=env, stdin="pw\n")
        assert out.returncode == 2, (out.stdout, out.stderr)
        assert out.stderr.startswith("error: "), out.stderr
        return out.stderr.removeprefix("error: ").strip()

    _check_refused(ctx, action, mode, attempt)


def test_an_admin_repairs_the_workspace_and_the_repair_is_audited(ctx):
    out = engine_main("doctor", "--repair")
    assert out.returncode in (0, 1), out.stderr
    (line,) = _audit(ctx.ws)
    assert (line["action"], line["outcome"], line["target"]) == ("workspace.repair", "ok", str(ctx.ws.resolve()))
    assert {"repaired", "unresolved"} <= set(line)
    assert engine_main("doctor").returncode in (0, 1) and len(_audit(ctx.ws)) == 1  # a check alone is a read


# ---------------------------------------------------------------- a resume's outcome as it turns out


def test_a_resume_whose_worker_then_fails_adds_a_failed_line(ctx):
    """The launch's line says ``ok`` (the worker started); the worker, failing on a checkpoint that
    is whole but not the run's model's, adds a ``failed`` ``run.resume`` line in the resumer's name."""
    d = ctx.ws / "runs" / ctx.run_id
    model = torch.nn.Linear(2, 2)
    save_checkpoint(d, 2, model, torch.optim.SGD(model.parameters(), lr=0.1), RunConfig.from_dict(CFG), {})
    assert api.resume(ctx.run_id, actor=EDITOR) == 2
    deadline = time.time() + 60
    while api.get_run(ctx.run_id).status not in ("failed", "diverged", "completed") and time.time() < deadline:
        time.sleep(0.1)
    while run_alive(d) and time.time() < deadline:
        time.sleep(0.05)
    rec = api.get_run(ctx.run_id)
    assert rec.status == "failed"
    lines = [(e["user"], e["action"], e["target"], e["outcome"]) for e in _audit(ctx.ws)]
    assert lines == [("ed", "run.resume", ctx.run_id, "ok"), ("ed", "run.resume", ctx.run_id, "failed")]
    last = _audit(ctx.ws)[-1]
    assert (last["reason"], last["status"], last["worker"]) == (rec.error, "failed", True)
