"""The task seam: registry, config resolution, and a toy task from tests/ trained by the real worker."""

from __future__ import annotations

import os
import time

import pytest

from engine.config import RunConfig
from engine.errors import ConfigError, DatasetError
from engine.runner.launcher import submit
from engine.store import get_run, load_samples, read_metrics
from engine.tasks import TASK_REGISTRY, get_task, resolve
from engine.tasks.checks import check_run

PLUGIN = "tests.plugins.toy_task"


def test_image_task_fills_its_defaults():
    cfg = resolve(RunConfig.from_dict({}))
    assert cfg.task == "image_mim"
    assert (cfg.model.arch, cfg.model.patch_size, cfg.objective.loss, cfg.data.tokenizer) == ("mae_vit", 2, "mse", None)
    again = resolve(RunConfig.from_dict(cfg.to_dict()))  # the resolved config is a fixed point
    assert again.to_dict() == cfg.to_dict()


def resolve_dict(d: dict) -> RunConfig:
    return resolve(RunConfig.from_dict(d))


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"task: unknown task 'nope'; known tasks: .*image_mim"):
        resolve_dict({"task": "nope"})
    with pytest.raises(ConfigError, match=r"model\.arch: task 'image_mim' trains mae_vit, simmim_vit, not 'x'"):
        resolve_dict({"model": {"arch": "x"}})
    with pytest.raises(ConfigError, match=r"objective\.loss: unknown objective 'hinge'"):
        resolve_dict({"objective": {"loss": "hinge"}})
    with pytest.raises(ConfigError, match=r"objective\.loss: 'cross_entropy' needs model outputs logits, labels"):
        resolve_dict({"objective": {"loss": "cross_entropy"}})
    with pytest.raises(ConfigError, match=r"objective\.terms\.1\.loss: 'contrastive' needs"):
        resolve_dict({"model": {"arch": "simmim_vit"},  # SimMIM has no pooled views to contrast (mae_vit has)
                      "objective": {"terms": [{"loss": "mse"}, {"loss": "contrastive", "weight": 0.5}]}})
    with pytest.raises(ConfigError, match=r"objective\.terms: at least one weight must be > 0"):
        resolve_dict({"objective": {"terms": [{"loss": "mse", "weight": 0}]}})


def test_unknown_plugin_module_is_a_config_error(monkeypatch):
    monkeypatch.setenv("MASKLAB_PLUGINS", "tests.plugins.no_such_module")
    with pytest.raises(ConfigError, match=r"MASKLAB_PLUGINS: cannot import plug-in module 'tests\.plugins\.no_such_module'"):
        get_task("not-registered")


def test_check_refuses_a_dataset_of_another_modality(workspace, monkeypatch):
    monkeypatch.setenv("MASKLAB_PLUGINS", PLUGIN)
    cls = get_task("toy_pixels")
    monkeypatch.setattr(cls, "modality", "toy-modality")
    with pytest.raises(DatasetError, match=r"'digits' is a image dataset, but task 'toy_pixels' trains on toy-modality"):
        check_run(resolve_dict({"task": "toy_pixels"}))


@pytest.mark.slow
def test_toy_task_from_tests_trains_through_the_real_worker_and_store(workspace, monkeypatch):
    """A task defined under tests/ (nothing under engine/ knows it) runs in a background worker
    process started by the launcher, and its metrics and samples land in the store."""
    monkeypatch.setenv("MASKLAB_PLUGINS", PLUGIN)  # the worker inherits it
    cfg = resolve_dict({"task": "toy_pixels", "masking": {"strategy": "span", "ratio": 0.3},
                        "train": {"steps": 60, "batch_size": 64, "eval_interval": 30, "lr": 3e-3,
                                  "warmup_steps": 5, "device": "cpu"}})
    assert cfg.model.arch == "toy_mlp" and cfg.model.patch_size is None
    run_id = submit(cfg)
    deadline = time.time() + 120
    while get_run(run_id).is_active and time.time() < deadline:
        time.sleep(0.5)
    rec = get_run(run_id)
    assert rec.status == "completed", (rec.error, (rec.path / "worker.log").read_text())
    val = read_metrics([run_id], ["val_loss"], max_points=None)
    assert val.step.tolist() == [0, 30, 60]
    assert val.value.iloc[-1] < 0.7 * val.value.iloc[0]  # it learned something
    s = load_samples(run_id)
    assert s.kind == "toy" and s["pred"].shape == (4, 64)
    assert "toy_pixels" in TASK_REGISTRY and os.environ["MASKLAB_PLUGINS"] == PLUGIN
