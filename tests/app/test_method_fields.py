"""New run's method fields (AppTest against the real engine): the Method select and the contrastive
weight set the run config's target, objective and teacher; a link's method comes back in the form;
Run detail's method line and collapse watch read a run's logged target spread."""

from __future__ import annotations

import pytest

from engine.methods.catalog import method_label
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
