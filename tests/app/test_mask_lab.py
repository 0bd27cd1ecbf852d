"""Mask lab and the masking controls of New run, in Streamlit's AppTest against the real engine.

The render test is parametrized over ``strategies_for("image", 2)`` at collection time, so every
image strategy that is registered is covered. A probe strategy with one field of each kind is
registered for some tests (and removed after) to check how the form maps a pydantic model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pytest
import torch
from pydantic import Field, model_validator
from streamlit.testing.v1 import AppTest

from app.components.masks import FIXED_PART_BATCH, identical_batch_note
from engine.masking import MASKING_REGISTRY, register_masking, strategies_for
from engine.masking.registry import StrategyParams, check_eligible
from engine.masking.stats import mask_stats

ENTRY = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"
LAB = "../pages/mask_lab.py"
NEW_RUN = "../pages/new_run.py"
IMAGE_STRATEGIES = strategies_for("image", 2)
CHART_TITLES = ["Mask ratio per sample", "Masked regions by size", "Masking frequency per position"]


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(str(ENTRY), default_timeout=120).run()
    at.switch_page(page).run()
    return at


def chart_titles(at: AppTest) -> list[str]:
    out = []
    for el in at.get("vega_lite_chart"):
        title = json.loads(el.proto.spec).get("title")
        out.append(title["text"] if isinstance(title, dict) else title)
    return out


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def n_images(at: AppTest) -> int:
    return sum(len(el.proto.imgs) for el in at.get("image"))


# ----------------------------------------------------------------------------- a probe strategy


class ProbeParams(StrategyParams):
    k: int = Field(2, ge=1, le=8, description="columns masked")
    offset: int = Field(0, ge=0, le=8, description="first masked column")
    axis: Literal["cols", "rows"] = Field("cols", description="mask columns or rows")
    scale: float = Field(1.0, gt=0.0, le=2.0, description="unused scale")
    widths: list[int] = Field(default_factory=lambda: [1, 2], description="unused list")
    cap: int | None = Field(None, ge=1, le=64, description="unused optional cap")
    invert: bool = Field(False, description="mask the others instead")

    @model_validator(mode="after")
    def _offset_below_k(self) -> "ProbeParams":
        if self.offset >= self.k:
            raise ValueError(f"offset ({self.offset}) must be < k ({self.k})")
        return self


@pytest.fixture
def probe():
    """Register ``ui_probe`` (image, 2-D, own budget) for one test; removed afterwards."""

    def probe_mask(shape, ratio=0.0, *, generator, eligible=None, k=2, offset=0, axis="cols", scale=1.0,
                   widths=(1, 2), cap=None, invert=False):  # fmt: skip
        B, h, w = shape
        ok = check_eligible(eligible, shape, generator.device, "ui_probe")
        idx = torch.arange(w if axis == "cols" else h, device=generator.device)
        line = (idx >= offset) & (idx < k)
        m = (line[None, None, :] if axis == "cols" else line[None, :, None]).expand(B, h, w).clone()
        m = ~m if invert else m
        return m if ok is None else m & ok

    register_masking("ui_probe", params=ProbeParams, grid_dims=(2,), grids=("patch-2d",), uses_ratio=False,
                     summary="test probe: fixed columns")(probe_mask)  # fmt: skip
    yield "ui_probe"
    MASKING_REGISTRY.pop("ui_probe", None)


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("strategy", IMAGE_STRATEGIES)
def test_mask_lab_renders_every_image_strategy_on_digits(workspace, strategy):
    at = open_page(LAB)
    assert at.selectbox(key="ml_dataset").value == "digits"
    assert at.title[0].value == "Mask lab"
    assert at.selectbox(key="ml_strategy").options == IMAGE_STRATEGIES  # names; the summary is under the box
    at.selectbox(key="ml_strategy").set_value(strategy).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert n_images(at) == 16  # 8 validation digits, original and masked
    assert chart_titles(at) == CHART_TITLES
    m = metrics(at)
    assert set(m) == {"Mean mask ratio", "Regions per sample", "Mean region size", "Masks / s"}
    ratio = float(m["Mean mask ratio"])
    assert 0.0 <= ratio <= 1.0
    assert float(m["Masks / s"].replace(",", "")) > 0
    assert any("256 masks of 4x4 patches (2x2 px each)" in c.value for c in at.caption)
    cfg = json.loads(at.json[0].value)
    assert cfg["strategy"] == strategy and set(cfg["params"]) == set(MASKING_REGISTRY[strategy].params.model_fields)


def test_mask_lab_stats_follow_ratio_and_patch(workspace):
    at = open_page(LAB)
    at.selectbox(key="ml_strategy").set_value("random").run()
    assert metrics(at)["Mean mask ratio"] == "0.750"  # exact: 12 of 16
    at.slider(key="ml_ratio").set_value(0.5).run()
    assert metrics(at)["Mean mask ratio"] == "0.500"
    at.selectbox(key="ml_patch_8x8").set_value(1).run()  # 8x8 grid
    assert any("256 masks of 8x8 patches (1x1 px each)" in c.value for c in at.caption)
    heat = at.get("vega_lite_chart")[2].proto
    assert json.loads(heat.spec)["mark"]["type"] == "rect"
    cells = pa.ipc.open_stream(heat.datasets[0].data.data).read_pandas()
    assert len(cells) == 64 and cells["frequency"].mean() == pytest.approx(0.5)  # exactly 32 of 64 per mask
    assert (cells["frequency"] - 0.5).abs().max() < 0.16  # uniform: per cell sd ~ 0.031 over 256 masks, 5 sd
    at.number_input(key="ml_n").set_value(64).run()
    assert any(c.value.startswith("64 masks") for c in at.caption)
    assert not at.exception and not at.error


def test_schedule_shows_final_ratio_and_its_curve(workspace):
    at = open_page(LAB)
    at.selectbox(key="ml_strategy").set_value("random").run()
    assert "Mask ratio over training" not in chart_titles(at)
    at.selectbox(key="ml_schedule").set_value("linear").run()
    at.slider(key="ml_final_ratio").set_value(0.25).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert chart_titles(at)[-1] == "Mask ratio over training"
    cfg = json.loads(at.json[0].value)
    assert cfg["schedule"] == "linear" and cfg["final_ratio"] == 0.25


def test_params_form_maps_each_pydantic_field(workspace, probe):
    at = open_page(LAB)
    at.selectbox(key="ml_strategy").set_value(probe).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "Mask ratio" not in [s.label for s in at.slider]  # uses_ratio=False: no ratio, no schedule
    assert "ml_schedule" not in [s.key for s in at.selectbox]
    k = at.number_input(key="ml_ui_probe_k")
    assert (k.value, k.min, k.max, k.step) == (2, 1, 8, 1) and "columns masked" in k.help and "≥ 1" in k.help
    scale = at.number_input(key="ml_ui_probe_scale")
    assert (scale.value, scale.min, scale.max) == (1.0, 0.0, 2.0) and "> 0.0" in scale.help
    assert at.selectbox(key="ml_ui_probe_axis").options == ["cols", "rows"]
    assert at.text_input(key="ml_ui_probe_widths").value == "1, 2"
    assert at.checkbox(key="ml_ui_probe_invert").value is False
    assert at.checkbox(key="ml_ui_probe_cap__set").value is False
    unset = at.text_input(key="ml_ui_probe_cap__unset")
    assert unset.disabled and unset.value == "" and unset.placeholder == "None"  # no made-up number
    # every value reaches the config, parsed
    at.number_input(key="ml_ui_probe_k").set_value(3)
    at.selectbox(key="ml_ui_probe_axis").set_value("rows")
    at.text_input(key="ml_ui_probe_widths").input(" 4,8 , 16")
    at.checkbox(key="ml_ui_probe_cap__set").check().run()
    at.number_input(key="ml_ui_probe_cap").set_value(5)
    at.checkbox(key="ml_ui_probe_invert").check().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    cfg = json.loads(at.json[0].value)
    assert cfg == {"strategy": "ui_probe", "ratio": 0.75, "schedule": "constant", "final_ratio": None,
                   "params": {"k": 3, "offset": 0, "axis": "rows", "scale": 1.0, "widths": [4, 8, 16],
                              "cap": 5, "invert": True}}  # fmt: skip
    # rows 0..2 of the 4x4 grid inverted: exactly 1 of 4 rows masked in every sample
    assert metrics(at)["Mean mask ratio"] == "0.250"
    assert metrics(at)["Regions per sample"] == "1.0" and metrics(at)["Mean region size"] == "4.0"


@pytest.mark.parametrize(
    "widget, value, message",
    [
        ("number_input:offset", 5, "masking.params: offset (5) must be < k (2)"),
        ("text_input:widths", "1, x", "masking.params.widths.1: "),
        ("number_input:scale", 0.0, "masking.params.scale: must be more than 0"),
    ],
)
def test_bad_param_is_an_error_naming_the_field(workspace, probe, widget, value, message):
    at = open_page(LAB)
    at.selectbox(key="ml_strategy").set_value(probe).run()
    kind, field = widget.split(":")
    w = getattr(at, kind)(key=f"ml_ui_probe_{field}")
    (w.input(value) if kind == "text_input" else w.set_value(value)).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(message in e.value for e in at.error), [e.value for e in at.error]
    assert n_images(at) == 0 and not at.metric  # nothing drawn with a bad config
    assert at.button(key="ml_use").disabled


def test_new_run_offers_every_image_strategy_and_builds_its_config(workspace):
    at = open_page(NEW_RUN)
    box = next(s for s in at.selectbox if s.label == "Masking strategy")
    assert box.options == IMAGE_STRATEGIES
    other = next(n for n in IMAGE_STRATEGIES if n != "random")
    box.set_value(other).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    resolved = json.loads(at.json[0].value)
    assert resolved["masking"]["strategy"] == other
    assert set(resolved["masking"]["params"]) == set(MASKING_REGISTRY[other].params.model_fields)
    assert resolved["train"]["seed"] == 0 and resolved["data"]["dataset"] == "digits"
    assert n_images(at) == 16 and any(f"({other})" in c.value for c in at.caption)


def test_new_run_with_probe_strategy_params(workspace, probe):
    at = open_page(NEW_RUN)
    next(s for s in at.selectbox if s.label == "Masking strategy").set_value(probe).run()
    at.number_input(key="nr_m_ui_probe_k").set_value(3).run()
    resolved = json.loads(at.json[0].value)
    assert resolved["masking"]["strategy"] == "ui_probe" and resolved["masking"]["params"]["k"] == 3
    assert any("12 of 16 patches masked" in c.value for c in at.caption)  # columns 0..2 of the 4x4 grid
    at.number_input(key="nr_m_ui_probe_offset").set_value(3).run()
    assert any("offset (3) must be < k (3)" in e.value for e in at.error) and not at.exception
    assert at.button[0].disabled  # Launch


def test_use_in_new_run_carries_the_settings(workspace):
    at = open_page(LAB)
    other = next(n for n in IMAGE_STRATEGIES if n != "random")
    at.selectbox(key="ml_strategy").set_value(other).run()
    at.selectbox(key="ml_patch_8x8").set_value(1).run()
    at.number_input(key="ml_seed").set_value(7).run()
    at.button(key="ml_use").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "New run"
    resolved = json.loads(at.json[0].value)
    assert resolved["masking"]["strategy"] == other
    assert resolved["model"]["patch_size"] == 1 and resolved["train"]["seed"] == 7
    assert any("of 64 patches masked" in c.value for c in at.caption)


def test_patch_sizes_that_cannot_run_are_not_offered(workspace):
    """Bernoulli at 0.95 masks every patch of most samples on a small grid: only the 8x8 grid of
    1-pixel patches can run, so Mask lab and New run offer only it (the pre-flight's own check)."""
    at = open_page(LAB)
    at.selectbox(key="ml_strategy").set_value("bernoulli").run()
    at.slider(key="ml_ratio").set_value(0.5).run()
    assert at.selectbox(key="ml_patch_8x8").options[-1].startswith("4 px")
    at.slider(key="ml_ratio").set_value(0.95).run()
    assert [o.split(" ")[0] for o in at.selectbox(key="ml_patch_8x8").options] == ["1"]
    assert any("Not offered with this masking: 2 px, 4 px, 8 px" in c.value for c in at.caption)
    assert not any("would be refused" in w.value for w in at.warning)

    at = open_page(NEW_RUN)
    next(s for s in at.selectbox if s.label == "Masking strategy").set_value("bernoulli").run()
    next(s for s in at.slider if s.label == "Mask ratio").set_value(0.95).run()
    assert [o.split(" ")[0] for o in next(s for s in at.selectbox if s.label == "Patch size").options] == ["1"]
    assert not at.error and not next(b for b in at.button if b.label == "Launch").disabled


def test_untrainable_masks_are_flagged_before_launch(workspace, probe):
    """A probe that masks 8 columns masks every patch at every patch size: all sizes are offered
    (none runs), Mask lab warns and New run shows the launcher's refusal with Launch disabled."""
    at = open_page(LAB)
    at.selectbox(key="ml_strategy").set_value(probe).run()
    at.number_input(key="ml_ui_probe_k").set_value(8).run()
    assert len(at.selectbox(key="ml_patch_8x8").options) == 4
    assert any("would be refused" in w.value and "masking.params" in w.value for w in at.warning)

    at = open_page(NEW_RUN)
    next(s for s in at.selectbox if s.label == "Masking strategy").set_value(probe).run()
    at.number_input(key="nr_m_ui_probe_k").set_value(8).run()
    assert any("every" in e.value or "encoder would see nothing" in e.value for e in at.error) and not at.exception
    assert next(b for b in at.button if b.label == "Launch").disabled


def fixed_part_warnings(at: AppTest) -> list[str]:
    return [w.value for w in at.warning if w.value.startswith(("A fixed part", "Every sample gets the same mask"))]


def test_a_setting_with_a_fixed_part_is_warned_in_mask_lab_and_new_run(workspace):
    """Square BEiT blocks of at least 8 patches on the 4x4 grid of the 8x8 digits are 3x3 or 4x4:
    the centre 2x2 is in every block. Mask lab and New run say so; the defaults say nothing."""
    at = open_page(LAB)
    at.selectbox(key="ml_strategy").set_value("hierarchical").run()
    assert not fixed_part_warnings(at) and not at.exception
    at.selectbox(key="ml_strategy").set_value("block").run()
    assert not fixed_part_warnings(at)
    at.number_input(key="ml_block_min_patches").set_value(8)
    at.number_input(key="ml_block_min_aspect").set_value(1.0).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (msg,) = fixed_part_warnings(at)
    assert "block" in msg and "4x4 grid" in msg and "4 of 16 positions" in msg and "(1, 1)" in msg

    at = open_page(NEW_RUN)
    next(s for s in at.selectbox if s.label == "Masking strategy").set_value("block").run()
    assert not fixed_part_warnings(at)
    at.number_input(key="nr_m_block_min_patches").set_value(8)
    at.number_input(key="nr_m_block_min_aspect").set_value(1.0).run()
    assert any("4 of 16 positions" in w for w in fixed_part_warnings(at)), [w.value for w in at.warning]


def test_a_real_batch_with_one_mask_or_a_fixed_part_is_named():
    same = torch.zeros(32, 20, dtype=torch.bool)
    same[:, 5:11] = True  # the same 6 of 20 frames in every clip
    assert "all 32 masks of this batch hide the same 6 of 20 positions" in identical_batch_note(mask_stats(same), "voiced")
    assert identical_batch_note(mask_stats(same), "periodic") is None  # rule-based: the same by design
    g = torch.Generator().manual_seed(0)
    part = torch.rand(FIXED_PART_BATCH, 20, generator=g) < 0.5
    part[:, 3] = True
    assert identical_batch_note(mask_stats(part[:64]), "random") is None  # too few samples to call it fixed
    assert "A fixed part: 1 of 20 positions" in identical_batch_note(mask_stats(part), "random")
    part[:, 3] = False
    assert identical_batch_note(mask_stats(part), "random") is None
