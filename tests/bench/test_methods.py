"""bench/methods.py, scaled down: four image methods (a teacher's latent target, HOG, attention-guided
masking, next to pixel MAE), one seed, 10 steps on the bundled digits, probes on 100 rows; the full
table (every method, Fashion-MNIST, 2,000 steps, 2 seeds) is in bench/README.md. Every method's model
and task are tested in tests/engine/test_methods.py."""

from __future__ import annotations

import pytest

from engine.methods.catalog import methods_for
from tests.bench import load_bench


@pytest.mark.slow
def test_scaled_down_methods_table_has_every_figure(workspace):
    bench = load_bench("methods")
    methods = ["mae", "data2vec", "maskfeat", "attmask"]
    assert set(methods) <= set(methods_for("image_mim"))
    df = bench.run_methods(workspace, "image", methods, [0], steps=10, rows=100, jobs=2, quiet=True, dataset="digits")
    assert df["method"].tolist() == methods and (df["status"] == "completed").all()
    cols = ["probe_acc", "probe_acc/random_init", "probe_acc/raw_input", "knn_acc", "knn_acc/random_init",
            "knn_acc/raw_input"]
    assert df[cols].notna().all().all() and ((df[cols] > 0.1) & (df[cols] <= 1)).all().all()  # above chance (10 classes)
    # the raw pixels are the same input for every method: one figure
    assert df["probe_acc/raw_input"].nunique() == 1
    latent = df.set_index("method")
    assert latent.loc["data2vec", "target_std_first"] > 0.5 and latent.loc["mae", "target_std_first"] != latent.loc["mae", "target_std_first"]
    lines, _ = bench.summarise(df, "image")
    assert lines[0].startswith("method") and len(lines) == len(methods) + 2 and lines[-1].startswith("pixel MAE, HOG")
