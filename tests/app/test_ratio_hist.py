"""Mask lab's ratio histogram: a visible bar however concentrated the ratios are."""

from __future__ import annotations

import numpy as np

from app.components.masks import FEW_BAR_PX, FEW_RATIO_BINS, ratio_hist_chart


def _spec(ratio, n):
    return ratio_hist_chart(np.asarray(ratio, dtype=float), n).to_dict()


def test_an_exact_ratio_on_a_wide_grid_is_a_fixed_width_bar_at_its_value():
    spec = _spec([0.8] * 64, 12_800)  # an exact strategy on a spectrogram grid: one bin of 1/50
    assert spec["mark"] == {"type": "bar", "size": FEW_BAR_PX}
    assert spec["encoding"]["x"]["field"] == "mid" and "x2" not in spec["encoding"]
    rows = list(spec["datasets"].values())[0]
    assert len(rows) == 1 and rows[0]["count"] == 64
    assert rows[0]["lo"] <= 0.8 < rows[0]["hi"] and abs(rows[0]["mid"] - 0.8) < 1e-9


def test_spread_ratios_keep_binned_bars_over_their_ranges():
    ratios = np.random.default_rng(0).uniform(0.2, 0.9, 500)
    spec = _spec(ratios, 12_800)
    assert spec["mark"] in ("bar", {"type": "bar"})
    assert spec["encoding"]["x"]["bin"] == "binned" and spec["encoding"]["x2"]["field"] == "hi"
    rows = list(spec["datasets"].values())[0]
    assert len(rows) > FEW_RATIO_BINS and sum(r["count"] for r in rows) == 500
