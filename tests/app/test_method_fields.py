"""New run's method fields (AppTest against the real engine): the Method select and the contrastive
weight set the run config's target, objective and teacher; a link's method comes back in the form;
Run detail's method line and collapse watch read a run's logged target spread."""

from __future__ import annotations

import pytest

from engine.config import RunConfig
from engine.methods.catalog import method_label
from engine.methods.collapse import TARGET_STD
from engine.store import create_run
from engine.store.metrics import MetricsWriter
from engine.store.runs import write_status
from engine.tasks import resolve
from tests.app.pages import open_with

FORM = {"dataset": "digits", "train.steps": "5", "train.batch_size": "32"}


def command(at) -> str:
    return next(c.value for c in at.code if "python -m engine run" in c.value)


def test_the_method_and_the_contrastive_weight_make_the_config(workspace):
    at = open_with("../pages/new_run.py", FORM)
    method = at.selectbox(key="nr_m_method_image_mim")
    assert method.value == "mae" and "simmim" in method.options[1]
    at.selectbox(key="nr_m_method_image_mim").set_value("data2vec").run()
    assert not at.exception and not at.error
    assert at.number_input(key="nr_m_top_k").value == 2 and at.number_input(key="nr_m_ema").value == 0.998
    at.number_input(key="nr_m_top_k").set_value(3).run()
    at.number_input(key="nr_m_contrastive").set_value(0.2).run()
    cmd = command(at)
    assert "task_params.target=latent" in cmd and "task_params.top_k=3" in cmd
    assert "objective.terms" in cmd and "contrastive" in cmd
    at.selectbox(key="nr_m_method_image_mim").set_value("maskfeat").run()
    assert at.selectbox(key="nr_m_hog_cells").options == ["1", "2"]  # the divisors of the 2-pixel patch
    assert "task_params.target=hog" in command(at) and "top_k=3" not in command(at)
    at.selectbox(key="nr_m_method_image_mim").set_value("simmim").run()
    assert at.number_input(key="nr_m_contrastive").disabled  # SimMIM has no pooled views
    assert "model.arch=simmim_vit" in command(at)


@pytest.mark.parametrize("params, method", [({"task_params.target": "hog"}, "maskfeat"),
                                            ({"task_params.corruption": "noise", "task_params.noise_sigma": "0.3"}, "denoise"),
                                            ({"model.arch": "simmim_vit"}, "simmim")])
def test_a_link_opens_its_method(workspace, params, method):
    at = open_with("../pages/new_run.py", {**FORM, **params})
    assert at.selectbox(key="nr_m_method_image_mim").value == method
    if method == "denoise":
        assert at.slider(key="nr_m_sigma").value == 0.3


def test_text_methods(workspace):
    at = open_with("../pages/new_run.py", {"dataset": "fortunes", "task": "text_mlm", "train.steps": "5"})
    at.selectbox(key="nr_m_method_text_mlm").set_value("data2vec-text").run()
    assert not at.exception and not at.error
    cmd = command(at)
    assert "task_params.target=latent" in cmd and "objective.loss=mse" in cmd
    assert method_label({"task": "text_mlm", "task_params": {"target": "latent"}}) == "data2vec-text"
    at.selectbox(key="nr_m_method_text_mlm").set_value("denoise-text").run()
    assert not [s for s in at.slider if s.key == "nr_m_mask_share"]  # no [MASK] share to choose
    cmd = command(at)
    assert "task_params.mask_share=0.0" in cmd and "task_params.random_share=1.0" in cmd and "target=latent" not in cmd


@pytest.mark.parametrize("series, collapsed", [([1.0, 0.98, 0.97], False), ([1.0, 0.5, 0.02], True)])
def test_run_detail_watches_a_latent_target_for_collapse(workspace, series, collapsed):
    cfg = resolve(RunConfig.from_dict({"name": "latent", "data": {"dataset": "digits"}, "model": {"patch_size": 2},
                                       "task_params": {"target": "latent"}, "train": {"steps": 3}}))
    run_id, d = create_run(cfg.to_dict())
    w = MetricsWriter(d, run_id, flush_interval=0)
    for s, v in enumerate(series, start=1):
        w.log(s, {"loss": 1.0, TARGET_STD: v})
    w.close()
    write_status(d, {"status": "completed", "step": 3, "total_steps": 3, "started_at": 1.0, "ended_at": 2.0})
    at = open_with("../pages/run_detail.py", {"run": run_id})
    texts = [c.value for c in at.caption]
    assert any(t.startswith("Method: **data2vec**") for t in texts)
    warnings = [x.value for x in at.warning if "Collapse" in x.value]
    assert bool(warnings) == collapsed
    if collapsed:
        assert "fell from 1 to 0.02" in warnings[0]
    else:
        assert any("no collapse" in t for t in texts)
