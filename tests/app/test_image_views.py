"""Run detail for an image run in AppTest: the figures next to the baselines, the reconstruction
views (main view, step slider, error maps) and the interactive masking box.

The session's shared digits MAE run (tests/runs.py, trained through the worker's code path: real
checkpoints and samples) is rendered by the real page.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from engine.store import get_run, load_samples

ENTRY = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"


@pytest.fixture(scope="module")
def image_run(shared_runs):
    """The session's 20-step digits MAE run (evaluations at steps 0, 10 and 20, a checkpoint at 20),
    its workspace ``$MASKLAB_WORKSPACE`` for the module's tests."""
    run = shared_runs.get("image_mae")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(run.workspace))
        yield run.run_id


def run_detail(run_id: str) -> AppTest:
    at = AppTest.from_file(str(ENTRY), default_timeout=60)
    at.query_params["run"] = run_id
    at.run().switch_page("../pages/run_detail.py")
    at.query_params["run"] = run_id
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def captions(at: AppTest) -> list[str]:
    return [img.caption for el in at.get("image") for img in el.proto.imgs]


def row_labels(at: AppTest) -> list[str]:
    return [m.value.strip("*") for m in at.markdown if m.value.startswith("**") and m.value.endswith("**")]


def test_quality_table_puts_pixel_figures_next_to_every_baseline(image_run):
    at = run_detail(image_run)
    rec = get_run(image_run)
    table = next(d.value for d in at.dataframe if "predictor" in d.value.columns)
    assert list(table.columns) == ["predictor", "MSE (masked units) ↓", "pixel MSE ↓", "PSNR (dB) ↑"]
    assert list(table.predictor) == ["this run (step 20)", "biharmonic inpainting", "kNN average (k=10)",
                                    "training mean image", "visible-pixel mean"]
    knn = table.set_index("predictor").loc["kNN average (k=10)"]
    assert knn["pixel MSE ↓"].split()[0] == f"{rec.latest['baseline/knn/mse']:.4f}"
    assert knn["PSNR (dB) ↑"].split()[0] == f"{rec.latest['baseline/knn/psnr']:.2f}"
    assert table["pixel MSE ↓"].iloc[0].split()[0] == f"{rec.latest['val_mse']:.4f}"
    # exactly one star per column, on the lowest MSE and on the highest PSNR
    mse = [float(v.split()[0]) for v in table["pixel MSE ↓"]]
    psnr = [float(v.split()[0]) for v in table["PSNR (dB) ↑"]]
    assert [v.endswith("★") for v in table["pixel MSE ↓"]] == [m == min(mse) for m in mse]
    assert [v.endswith("★") for v in table["PSNR (dB) ↑"]] == [p == max(psnr) for p in psnr]
    note = next(c.value for c in at.caption if c.value.startswith("★ best of each column"))
    assert "pixel MSE: this run at" in note and "of the best baseline (kNN average (k=10))" in note
    assert "biharmonic on the first 512 validation images" in note


def test_reconstructions_main_view_first_then_rows_and_a_step_slider(image_run):
    at = run_detail(image_run)
    labels = row_labels(at)
    assert labels[:5] == ["Reconstruction + visible patches", "Original", "Masked input",
                          "Prediction at masked patches (grey: visible, not scored)",
                          "Squared error at masked patches (black 0 → yellow ≥ 0.25)"]
    caps = captions(at)
    s20 = load_samples(image_run, 20)
    classes = [s20.meta["class_names"][int(y)] for y in s20["labels"]]
    assert [c.split(" · ")[0] for c in caps[:8]] == classes and all(" · MSE 0." in c for c in caps[:8])
    main = at.get("image")[0].proto.imgs[0]
    assert main.caption == caps[0]
    slider = at.select_slider(key=f"recon_step_{image_run}")
    assert slider.options == ["0", "10", "20"] and slider.value == 20
    assert any(c.value.startswith("Step 20 · 8 fixed validation images") for c in at.caption)
    slider.set_value(0).run()
    assert any(c.value.startswith("Step 0 · 8 fixed validation images") for c in at.caption)
    s0 = load_samples(image_run, 0)
    assert captions(at)[:8] != caps[:8] or not np.allclose(s0["pasted"], s20["pasted"])


def test_masking_box_reconstructs_the_patches_the_user_hides(image_run):
    at = run_detail(image_run)
    assert any(h.value == "Mask it yourself" for h in at.subheader)
    s = load_samples(image_run)
    prefix = f"mim_{image_run}_0"
    rows = [g for g in at.get("button_group") if g.key and g.key.startswith(f"{prefix}_row")]
    assert len(rows) == 4  # digits at P=2: a 4x4 grid of toggles, one row of buttons per patch row
    assert [sorted(r.value) for r in rows] == [sorted(np.flatnonzero(s["mask"][0][k]).tolist()) for k in range(4)]
    box_caption = next(c.value for c in at.caption if "patches hidden" in c.value)
    assert box_caption.startswith(f"{int(s['mask'][0].sum())} of 16 patches hidden · checkpoint of step 20")
    at.button(key=f"{prefix}_none").click().run()  # show every patch
    assert all(r.value == [] for r in at.get("button_group") if r.key and r.key.startswith(f"{prefix}_row"))
    assert any("0 of 16 patches hidden" in c.value for c in at.caption)
    rows = [g for g in at.get("button_group") if g.key and g.key.startswith(f"{prefix}_row")]
    rows[1].set_value([2, 3]).run()  # hide patches 7 and 8 (row 2, columns 3 and 4)
    assert not at.exception
    assert any(c.value.startswith("2 of 16 patches hidden") for c in at.caption)
