"""A run's config is data, resolved once per version: :func:`engine.tasks.resolve` runs in ``submit``
and in a resume that changes fields, never in the worker; validating a config needs no torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.config import RunConfig
from engine.errors import ConfigError
from engine.masking import MASKING_REGISTRY
from engine.runner.launcher import cancel, resume, submit
from engine.runner.sweep import sweep_configs
from engine.store import get_run, run_dir
from engine.store.checkpoints import checkpoint_step, latest_complete_checkpoint
from engine.tasks import TASK_REGISTRY, resolve
from tests.engine.procs import wait_until

PLUGIN = "tests.plugins.counted_task"


def test_validating_a_config_imports_neither_torch_nor_the_tasks():
    code = ("import sys\n"
            "from engine.config import RunConfig, load_config\n"
            "RunConfig.from_dict({'task': 'text_mlm', 'masking': {'strategy': 'span', 'params': {'p': 0.3}},\n"
            "                     'train': {'steps': 5}})\n"
            "load_config('configs/mae-digits.yaml', ['train.steps=3'])\n"
            "print([m for m in ('torch', 'engine.tasks', 'engine.masking', 'engine.models') if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_validation_leaves_the_task_defaults_to_resolve():
    cfg = RunConfig.from_dict({"task": "text_mlm", "masking": {"strategy": "span"}})
    assert (cfg.model.arch, cfg.objective.loss, cfg.data.tokenizer, cfg.masking.params) == ("", "", None, {})
    full = resolve(cfg)
    assert (full.model.arch, full.objective.loss, full.data.tokenizer.kind) == ("bert", "cross_entropy", "wordpiece")
    assert full.masking.params == {"p": 0.2, "max_len": 10, "lengths": "geometric"}
    assert cfg.model.arch == "" and cfg.masking.params == {}  # the input is left as it was


@pytest.mark.parametrize("task", sorted(TASK_REGISTRY))
def test_resolve_is_idempotent_for_every_task(task):
    once = resolve(RunConfig.from_dict({"task": task}))
    assert once.model.arch in TASK_REGISTRY[task].archs and (once.objective.loss or once.objective.terms)
    again = resolve(once)
    assert again == once and again.to_dict() == once.to_dict()
    assert resolve(RunConfig.from_dict(json.loads(json.dumps(once.to_dict())))) == once  # as stored and read back


def test_strategy_problems_are_found_by_resolve():
    cfg = RunConfig.from_dict({"masking": {"strategy": "specaugment", "schedule": "linear", "final_ratio": 0.5}})
    with pytest.raises(ConfigError, match=r"^invalid run config: masking\.schedule: strategy 'specaugment' sets its own"):
        resolve(cfg)
    with pytest.raises(ConfigError, match=r"^invalid run config: masking\.strategy: unknown strategy 'nope'"):
        resolve(RunConfig.from_dict({"masking": {"strategy": "nope"}}))
    with pytest.raises(ConfigError, match=r"masking\.params\.p"):
        resolve(RunConfig.from_dict({"masking": {"strategy": "span", "params": {"p": 7}}}))


def _checkpointed(run_id: str, after: int = 0) -> bool:
    ckpt = latest_complete_checkpoint(run_dir(run_id))
    return ckpt is not None and checkpoint_step(ckpt) > after


def _ended(run_id: str) -> bool:
    return not get_run(run_id).is_active


@pytest.mark.slow
def test_a_runs_config_is_resolved_once_per_version(workspace, tmp_path, monkeypatch):
    """submit resolves (1), the worker trains the stored config (still 1), a resume whose ``--set``
    changes nothing adds none, a resume that changes ``train.steps`` resolves its new version (2).
    Three worker processes run; ``counted_mim`` logs every resolve of any process to one file."""
    log = tmp_path / "resolves.log"
    monkeypatch.setenv("MASKLAB_PLUGINS", PLUGIN)  # the workers inherit both
    monkeypatch.setenv("MASKLAB_RESOLVE_LOG", str(log))

    def resolves() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    cfg = RunConfig.from_dict({"task": "counted_mim", "model": {"preset": "tiny"},
                               "train": {"steps": 100_000, "batch_size": 16, "eval_interval": 100_000,
                                         "checkpoint_interval": 2, "warmup_steps": 1, "device": "cpu",
                                         "num_threads": 1}})
    run_id = submit(cfg)
    assert len(resolves()) == 1
    stored = get_run(run_id).config
    assert stored["model"]["arch"] == "mae_vit" and stored["model"]["patch_size"] == 2  # the stored config is complete

    wait_until(lambda: _checkpointed(run_id), 60, "the first checkpoint")
    cancel(run_id)
    wait_until(lambda: _ended(run_id), 60, "the cancel")
    assert get_run(run_id).status == "cancelled", get_run(run_id).error
    assert len(resolves()) == 1, resolves()  # the worker did not resolve

    step = resume(run_id, ["train.device=cpu"])  # a field set to the value it has: no new version
    assert len(resolves()) == 1, resolves()
    wait_until(lambda: _checkpointed(run_id, step), 60, "a checkpoint after the resume")
    cancel(run_id)
    wait_until(lambda: _ended(run_id), 60, "the second cancel")
    assert len(resolves()) == 1, resolves()

    last = checkpoint_step(latest_complete_checkpoint(run_dir(run_id)))
    step = resume(run_id, [f"train.steps={last + 6}"])  # a new version, resolved once
    assert step == last and len(resolves()) == 2, resolves()
    wait_until(lambda: _ended(run_id), 60, "the resumed run's end")
    rec = get_run(run_id)
    assert rec.status == "completed", rec.error
    assert rec.config["train"]["steps"] == step + 6 and rec.config["model"]["arch"] == "mae_vit"
    assert len(resolves()) == 2, resolves()


def test_a_sweep_resolves_each_of_its_configs_once(workspace, tmp_path, monkeypatch):
    """:func:`sweep_configs` resolves each run's config once; ``submit_sweep`` stores them as they
    are (``submit(..., resolved=True)``), so the plan is what the runs get."""
    log = tmp_path / "resolves.log"
    monkeypatch.setenv("MASKLAB_PLUGINS", PLUGIN)
    monkeypatch.setenv("MASKLAB_RESOLVE_LOG", str(log))
    cfgs = sweep_configs({"task": "counted_mim", "masking": {"strategy": "block"}}, "masking.ratio", [0.5, 0.6],
                         seeds=[0, 1])
    assert len(log.read_text().splitlines()) == 4
    assert {(c.model.arch, c.model.patch_size) for c in cfgs} == {("mae_vit", 2)}

    assert all(set(c.masking.params) == set(MASKING_REGISTRY["block"].params.model_fields) for c in cfgs)
