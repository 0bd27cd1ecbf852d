"""bench/paired_quality.py, scaled down: the Tux Paint recipe for one seed and 150 steps, through the
real engine on the real stamps. The recipe's claims against CCA and the per-position baseline need
600 steps and more (bench/README.md, "Paired image-text"): they are the bench's. CI checks what a
short run shows in every seed tried (0, 1, 2 at 150 steps: image->text R@10 16.0 to 22.4% and
text->image 13.6 to 18.4% against chance 8.2%; pixel MSE of the hidden patches 0.118 to 0.121 with the
caption against 0.129 to 0.148 with it hidden too), and that every figure and baseline is logged and
read back alike by the CLI. About 25 s (600 steps took 123 to 165 s in CI)."""

from __future__ import annotations

import pytest

from tests.bench import load_bench, paired_reports

STEPS = 150


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_short_paired_recipe_on_tuxpaint_retrieves_above_chance_and_uses_the_caption(workspace, shared_data, capsys):
    bench = load_bench("paired_quality")
    out = bench.run(workspace, seeds=[0], steps=STEPS)
    (r,) = out["runs"]
    m = out["mean"]
    assert out["pairs"] == 623 and r["steps"] == STEPS
    assert r["config"]["task"] == "paired" and r["config"]["train"]["num_threads"] == 1
    for d in ("t2i", "i2t"):
        assert m[f"val_{d}_r10"] > 1.5 * m[f"baseline/chance/{d}_r10"], (d, m)
        assert 0 < m[f"baseline/chance/{d}_r1"] < m[f"baseline/chance/{d}_r5"] < m[f"baseline/chance/{d}_r10"]
        assert m[f"baseline/cca/{d}_r5"] > m[f"baseline/chance/{d}_r5"]  # the classical baseline is a real one
    assert m["val_mse"] < m["val_mse_no_caption"], m  # the caption helps restore the hidden patches
    assert 0 < m["baseline/unigram"] < m["baseline/position"] and 0 <= m["val_caption_acc"] <= 1, m
    assert 0 < m["baseline/mean_image/mse"] and 0 <= m["val_caption_blank_acc"] <= 1, m
    assert set(out["checks"]) == {"t2i R@5 above CCA", "caption acc above the image-hidden model",
                                  "caption acc above the per-position baseline", "recon error lower with the caption"}
    # the report, then the CLI reading the same run back from the store (--collect): the same figures
    first, second, figures = paired_reports(bench, out, workspace, bench.IMAGE, ["--collect", str(workspace)], capsys)
    assert "t2i R@5 CCA" in first and "s CPU" in first and "s CPU" not in second and len(figures) > len(out["checks"])
