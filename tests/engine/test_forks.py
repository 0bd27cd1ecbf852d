"""Forks (issue 33, point 1): a run that starts from an imported model or another run's checkpoint
(``model.init_from``, ``model.init_step``), with its own data, masking, objective or length.

Its step-0 validation loss is its parent's on the same masks and data; the weights that fit are
loaded and the rest initialised and listed (``task.json``'s ``init``, the run's log); a text fork
reads with its parent's tokenizer. Parents: a tiny ViT-MAE made with transformers and imported, and
the session's shared digits MAE and TREC MLM runs (copied: the shared workspaces are read-only)."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from engine.config import RunConfig
from engine.errors import ConfigError
from engine.eval.inference import checkpoint_path
from engine.pretrained.importers import import_model
from engine.pretrained.manage import view_config
from engine.store import get_run, read_metrics
from engine.tasks import resolve
from engine.tasks.checks import check_run
from engine.workspace import read_json
from tests.pretrained_image_checkpoints import hf_model, save_hf_folder
from tests.runs import SPECS
from tests.stamps import completed_run

SHORT = {"batch_size": 16, "warmup_steps": 1, "device": "cpu", "num_threads": 1, "eval_interval": 2,
         "checkpoint_interval": 2, "num_vis": 2}


def val_loss_at(run_id: str, ws, step: int) -> float:
    df = read_metrics([run_id], ["val_loss"], workspace=ws)
    return float(df[df["step"] == step]["value"].iloc[0])


def task_info(run_id: str, ws) -> dict:
    return read_json(get_run(run_id, ws).path / "task.json")


@pytest.fixture(scope="module")
def parents(shared_runs, tmp_path_factory):
    """A workspace with the shared digits MAE and TREC MLM runs and a tiny imported ViT-MAE
    (32x32 RGB, patch 8): ``(workspace, {"image_mae": id, "text_mlm": id})``."""
    root = tmp_path_factory.mktemp("forks")
    ws, ids = shared_runs.copy("image_mae", "text_mlm", dest=root / "workspace")
    import_model(str(save_hf_folder(hf_model(seed=3), root / "mae32")), "mae32", workspace=ws)
    return ws, ids


def test_fork_of_an_imported_mae_starts_at_its_loss_and_trains(parents):
    ws, _ = parents
    view = completed_run(view_config("mae32", "digits", ws), ws, evaluate=False)
    cfg = view_config("mae32", "digits", ws)
    cfg.update(name="mae32 fork", train={**SHORT, "steps": 2, "lr": 1e-4})
    fork = completed_run(cfg, ws, evaluate=False)
    assert val_loss_at(fork, ws, 0) == pytest.approx(val_loss_at(view, ws, 0), rel=1e-6)
    assert get_run(fork, ws).step == 2
    init = task_info(fork, ws)["init"]
    assert init["from"] == "mae32" and init["kind"] == "model" and init["fresh"] == [] and init["unused"] == []
    after = load_file(str(checkpoint_path(fork, 2, ws) / "model.safetensors"))
    before = load_file(str(checkpoint_path(view, 0, ws) / "model.safetensors"))
    assert any(not (after[k] == before[k]).all() for k in before)  # it trained


def test_fork_of_a_run_loads_its_checkpoint_with_another_masking(parents, capfd):
    ws, ids = parents
    parent = ids["image_mae"]
    pcfg = get_run(parent, ws).config
    cfg = {**SPECS["image_mae"][1], "name": "fork", "evaluation": {"auto": False},
           "model": {**pcfg["model"], "init_from": parent}, "masking": {"strategy": "block", "ratio": 0.5},
           "train": {**SHORT, "steps": 2}}
    fork = completed_run(cfg, ws, evaluate=False)
    init = task_info(fork, ws)["init"]
    parent_step = max(int(p.name.split("-")[1]) for p in (get_run(parent, ws).path / "checkpoints").iterdir())
    assert init["kind"] == "run" and init["from"] == parent and init["step"] == parent_step
    assert init["fresh"] == [] and init["unused"] == [] and init["loaded"] > 0
    assert f"starting from run {parent} at step {parent_step}: {init['loaded']} tensors loaded" in capfd.readouterr().err
    # same masks, data and seed: the fork's step 0 is the parent's last evaluation
    same = {**cfg, "name": "fork-same", "masking": pcfg["masking"]}
    twin = completed_run(same, ws, evaluate=False)
    assert val_loss_at(twin, ws, 0) == pytest.approx(val_loss_at(parent, ws, parent_step), rel=1e-6)


def test_fork_with_another_patch_lists_what_it_initialised(parents):
    ws, ids = parents
    parent = ids["image_mae"]
    cfg = {**SPECS["image_mae"][1], "name": "fork-p4", "evaluation": {"auto": False},
           "model": {"preset": "tiny", "patch_size": 4, "init_from": parent}, "train": {**SHORT, "steps": 0}}
    fork = completed_run(cfg, ws, evaluate=False)
    init = task_info(fork, ws)["init"]
    fresh = {f.split(" ")[0] for f in init["fresh"]}
    assert fresh == {"patch_embed.weight", "decoder_pred.weight", "decoder_pred.bias"}
    assert "[96, 1, 2, 2] in the source, [96, 1, 4, 4] here" in " ".join(init["fresh"])


def test_text_fork_reads_with_its_parents_tokenizer(parents):
    ws, ids = parents
    parent = ids["text_mlm"]
    pcfg = get_run(parent, ws).config
    cfg = {**SPECS["text_mlm"][1], "name": "mlm-fork", "model": {**pcfg["model"], "init_from": parent},
           "masking": {"strategy": "span", "ratio": 0.15}, "train": {**SHORT, "steps": 2, "batch_size": 8}}
    fork = completed_run(cfg, ws, evaluate=False)
    assert task_info(fork, ws)["tokenizer_id"] == task_info(parent, ws)["tokenizer_id"]
    assert task_info(fork, ws)["init"]["fresh"] == []


@pytest.mark.parametrize("change, words", [
    ({"model": {"init_from": "nope"}}, "model.init_from: no imported model or run named 'nope'"),
    ({"model": {"init_step": 3}}, "model.init_step: it picks a checkpoint"),
    ({"model": {"init_from": "{parent}", "init_step": 7}}, "model.init_step: run {parent} keeps checkpoints at steps"),
    ({"model": {"init_from": "mae32", "init_step": 1, "patch_size": 8}}, "model.init_step: mae32 is an imported model"),
    ({"model": {"init_from": "{parent}", "arch": "simmim_vit"}}, "model.arch: run {parent} trains mae_vit"),
    ({"model": {"init_from": "{text}"}}, "model.init_from: run {text} trained text_mlm; a fork trains the same task (this run: image_mim)"),
])
def test_fork_refusals_name_the_field(parents, change, words):
    ws, ids = parents
    fill = {"parent": ids["image_mae"], "text": ids["text_mlm"]}
    model = {"preset": "tiny", "patch_size": 2, **{k: (v.format(**fill) if isinstance(v, str) else v)
                                                   for k, v in change["model"].items()}}
    with pytest.raises(ConfigError, match=words.format(**fill).replace("(", r"\(").replace(")", r"\)")):
        check_run(resolve(RunConfig.from_dict({"data": {"dataset": "digits"}, "model": model})), ws)
