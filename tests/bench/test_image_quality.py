"""bench/image_quality.py, scaled down: the default digits recipe, shortened, through the real engine."""

from __future__ import annotations

import pytest

from tests.bench import load_bench


def _bench():
    return load_bench("image_quality")


@pytest.mark.slow
def test_short_default_digits_run_beats_the_mean_image_and_visible_mean(workspace, capsys):
    bench = _bench()
    out = bench.run("digits", workspace, steps=600)
    cfg = out["config"]
    assert cfg["train"]["steps"] == 600 and cfg["masking"] == {**cfg["masking"], "strategy": "random", "ratio": 0.75}
    assert cfg["model"]["patch_size"] == 2  # New run's 8x8 recipe
    base = out["baselines"]
    assert set(base) == {"mean_image", "visible_mean", "biharmonic", "knn"}
    assert out["mse"] < base["mean_image"]["mse"] and out["mse"] < base["visible_mean"]["mse"]
    assert out["psnr"] > base["mean_image"]["psnr"]
    assert out["vs_mean_image"] == pytest.approx(out["mse"] / base["mean_image"]["mse"])
    assert bench.main(["digits", "--steps", "3", "--workspace", str(workspace.parent / "cli")]) == 0
    text = capsys.readouterr().out
    assert "baseline: knn" in text and "run / best baseline" in text and "3 steps x batch 128" in text
