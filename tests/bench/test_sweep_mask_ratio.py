"""bench/sweep_mask_ratio.py, scaled down: 2 ratios x 1 seed, 40 steps, probes on 300 rows of real MNIST."""

from __future__ import annotations

import pytest

from tests.bench import load_bench


def _bench():
    return load_bench("sweep_mask_ratio")


@pytest.mark.slow
def test_scaled_down_sweep_gives_every_figure_per_ratio(workspace):
    bench = _bench()
    df = bench.run_sweep(workspace, [0.5, 0.9], [0], steps=40, rows=300, quiet=True)
    assert df["value"].tolist() == [0.5, 0.9] and (df["status"] == "completed").all()
    cols = ["probe_acc", "probe_acc/random_init", "probe_acc/raw_input", "knn_acc", "knn_acc/random_init",
            "knn_acc/raw_input"]
    assert df[cols].notna().all().all() and ((df[cols] > 0.1) & (df[cols] <= 1)).all().all()  # above chance
    # the baselines do not depend on the ratio: same seed, same initial weights, same pixels
    assert df["probe_acc/random_init"].nunique() == 1 and df["probe_acc/raw_input"].nunique() == 1
    assert df["probe_acc/raw_input"].iloc[0] > 0.7  # logistic regression on 300 MNIST digits' pixels
    lines, _ = bench.summarise(df)
    assert lines[-2].startswith("trained > random init") and lines[-1].startswith("best ratio")
