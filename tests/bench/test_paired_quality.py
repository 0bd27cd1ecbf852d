"""bench/paired_quality.py, scaled down: the Tux Paint recipe for one seed and fewer steps, through the
real engine on the real stamps. Behaviour, not the full run's numbers: retrieval above chance, the
caption predicted from the image above the most frequent token at each position, reconstruction
better than the mean image. 600 steps, not fewer: at 300 steps the model is still in the part of
training where a run's figures swing with the machine's floating-point order (Recall@10
8.0% in one run, 25.6% in another, chance 8.2%). Over a minute for that reason (README, "Tests")."""

from __future__ import annotations

import pytest

from tests.bench import load_bench, paired_reports

STEPS = 600  # the run measured in bench/README.md as "scaled, one seed"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_short_paired_recipe_on_tuxpaint_beats_chance(workspace, shared_data, capsys):
    bench = load_bench("paired_quality")
    out = bench.run(workspace, seeds=[0], steps=STEPS)
    (r,) = out["runs"]
    m = out["mean"]
    assert out["pairs"] == 623 and r["steps"] == STEPS
    assert r["config"]["task"] == "paired" and r["config"]["train"]["num_threads"] == 1
    for d in ("t2i", "i2t"):
        assert m[f"val_{d}_r10"] > m[f"baseline/chance/{d}_r10"], (d, m)
        assert 0 < m[f"baseline/chance/{d}_r1"] < m[f"baseline/chance/{d}_r5"] < m[f"baseline/chance/{d}_r10"]
        assert m[f"baseline/cca/{d}_r5"] > m[f"baseline/chance/{d}_r5"]  # the classical baseline is a real one
    assert m["val_caption_acc"] > m["baseline/position"] > m["baseline/unigram"], m
    assert m["val_mse"] < m["baseline/mean_image/mse"], m
    assert set(out["checks"]) == {"t2i R@5 above CCA", "caption acc above the image-hidden model",
                                  "caption acc above the per-position baseline", "recon error lower with the caption"}
    # the report, then the CLI reading the same run back from the store (--collect): the same figures
    first, second, figures = paired_reports(bench, out, workspace, bench.IMAGE, ["--collect", str(workspace)], capsys)
    assert "t2i R@5 CCA" in first and "s CPU" in first and "s CPU" not in second and len(figures) > len(out["checks"])
