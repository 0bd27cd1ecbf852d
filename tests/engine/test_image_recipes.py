"""The default image recipes: the example configs repeat them, New run proposes them, every image
size gets one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from app.modalities import task_train_defaults, train_defaults
from engine.config import load_config
from engine.data import load_dataset
from engine.tasks.image.recipe import RECIPES, recipe_for

REPO = Path(__file__).resolve().parents[2]
CONFIGS = {(8, 8): "configs/mae-digits.yaml", (28, 28): "configs/mae-fashion-mnist.yaml"}


@pytest.mark.parametrize("size", sorted(RECIPES))
def test_example_config_is_the_recipe(size):
    cfg = load_config(REPO / CONFIGS[size]).to_dict()
    recipe = RECIPES[size]
    for section, fields in recipe.items():
        assert {k: cfg[section][k] for k in fields} == fields, section
    assert cfg["masking"]["strategy"] == "random" and cfg["masking"]["ratio"] == 0.75


def test_recipe_for_known_and_other_sizes():
    assert recipe_for((1, 8, 8)) == RECIPES[(8, 8)]
    assert recipe_for((3, 28, 28)) == RECIPES[(28, 28)]
    r = recipe_for((1, 8, 8))
    r["train"]["steps"] = 1
    assert RECIPES[(8, 8)]["train"]["steps"] != 1  # a copy: callers may edit it
    # other sizes: the 8x8 recipe with the patch whose grid side is closest to 8
    assert recipe_for((3, 64, 64))["model"]["patch_size"] == 8
    assert recipe_for((3, 32, 48))["model"]["patch_size"] == 4  # 8x12 patches
    assert recipe_for((1, 7, 7))["model"]["patch_size"] == 1
    assert recipe_for((3, 64, 64))["train"] == RECIPES[(8, 8)]["train"]


def test_new_run_defaults_come_from_the_recipe(workspace):
    info = load_dataset("digits").info
    assert train_defaults("image_mim", info) == RECIPES[(8, 8)]["train"]
    text = type("Info", (), {"modality": "text"})()
    assert train_defaults("text_mlm", text) == task_train_defaults("text_mlm")
    # paired: Tux Paint's image-text recipe, and paired_audio: FSDD's audio-text recipe on an audio dataset; each is
    # the train section of its example config
    audio, paired = (type("Info", (), {"modality": m})() for m in ("audio", "paired"))
    for task, info, path in (("paired", paired, "paired-tuxpaint.yaml"), ("paired_audio", audio, "paired-audio-fsdd.yaml")):
        saved = yaml.safe_load((REPO / "configs" / path).read_text())["train"]
        proposed = train_defaults(task, info)
        assert proposed == {k: saved[k] for k in proposed}, path
    assert train_defaults("audio_mae", audio) == task_train_defaults("audio_mae")
