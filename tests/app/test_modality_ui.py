"""The dashboard's per-modality views come from registrations: each Modality names its UI module,
each task names its sample kind and interactive box, and every lookup a page makes is derived."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.modalities import (
    UI_REGISTRY,
    ModalityUI,
    SampleView,
    example_config,
    interactive_box,
    register_ui,
    sample_title,
    sample_view,
    task_params_defaults,
    task_train_defaults,
    ui_for,
)
from engine.api import get_task, modality_names
from engine.modalities import MODALITY_REGISTRY
from engine.tasks import TASK_REGISTRY

BUILTIN_TASKS = ("image_mim", "text_mlm", "text_span", "audio_mae", "audio_frames", "paired")


def test_every_builtin_task_finds_its_views_through_the_registry():
    for name in BUILTIN_TASKS:
        task = get_task(name)
        ui = ui_for(task.modality)
        assert ui is not None and ui.modality == task.modality, name
        view = sample_view(task.sample_kind)
        assert view is not None and view.compare is not None, name
        assert sample_title({"task": name}) == view.title != "Samples"
        box = interactive_box({"task": name})
        assert (box is None) == (not task.interactive), name
        if task.interactive:
            assert box is ui.boxes[task.interactive]
    # today's lookups, now derived
    assert sample_title({"task": "text_span"}) == "Completions of validation texts"
    assert interactive_box({"task": "image_mim"}).__name__ == "masking_box"
    assert interactive_box({"task": "audio_mae"}) is None


def test_every_registered_task_with_samples_has_a_view():
    for name, task in TASK_REGISTRY.items():
        if task.sample_kind and ui_for(task.modality) is not None:
            assert sample_view(task.sample_kind) is not None, name


def test_unknown_tasks_and_modalities_read_as_none():
    assert sample_title({"task": "no_such_task"}) == "Samples"
    assert interactive_box({"task": "no_such_task"}) is None and interactive_box({}) is None
    assert ui_for("no_such_modality") is None
    assert sample_view("no_such_kind") is None


def test_each_builtin_modality_page_functions():
    for m in ("image", "text", "audio", "paired"):
        ui = ui_for(m)
        assert m in modality_names() and UI_REGISTRY[m] is ui
        assert None not in (ui.data_section, ui.run_fields, ui.mask_preview, ui.lab_controls, ui.lab_results,
                            ui.import_fields, ui.describe), m
    assert (ui_for("audio").item, ui_for("audio").plan_item) == ("clip", "audio file")


def test_train_and_task_params_defaults_are_task_attributes_read_from_the_example_configs():
    assert task_train_defaults("text_mlm") == {"steps": 2000, "batch_size": 64, "lr": 1e-3, "warmup_steps": 100,
                                               "eval_interval": 200}
    assert task_train_defaults("image_mim") == {}
    saved = example_config("paired-tuxpaint")["train"]
    assert task_train_defaults("paired") == {k: saved[k] for k in task_train_defaults("paired")}
    assert task_params_defaults("text_span") == example_config("mlm-span-fortunes")["task_params"]
    assert task_params_defaults("text_mlm") == {}


def test_a_sample_kind_belongs_to_one_modality():
    taken = sample_view("image")
    with pytest.raises(ValueError, match="sample kind.*'image'.*modality 'image'"):
        register_ui(ModalityUI("not_image", samples=(SampleView("image", "x", taken.view),)))
    assert "not_image" not in UI_REGISTRY


def test_a_ui_module_that_registers_nothing_is_named(monkeypatch):
    modality_names()  # the built-ins registered
    monkeypatch.setitem(MODALITY_REGISTRY, "broken", replace(MODALITY_REGISTRY["text"], name="broken", ui="json"))
    with pytest.raises(ImportError, match="'broken': its ui module 'json' registered no ModalityUI"):
        ui_for("broken")
    monkeypatch.setitem(MODALITY_REGISTRY, "broken", replace(MODALITY_REGISTRY["text"], name="broken", ui="no.such.module"))
    with pytest.raises(ImportError, match="'no.such.module' cannot be imported"):
        ui_for("broken")
