"""Run detail's evaluation panel and Compare's reconstruction-quality, fine-tune and FLOPs columns, in
AppTest on real runs trained and evaluated here: a digits MAE run and an AudioMAE run on real FSDD
clips (both evaluated at their end by the worker), and a digits run never evaluated."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.test_audio_pages import open_with
from tests.runs import EVALUATION as EVAL
from tests.runs import SHORT
from tests.stamps import completed_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shared_runs):
    """``{"image", "audio", "plain"}`` run ids in a workspace of their own: copies of the session's
    evaluated digits MAE and FSDD audio MAE runs (tests/runs.py: probes, kNN and a one-epoch
    fine-tune on 300 rows), and a 4-step digits run trained here without an evaluation."""
    ws, ids = shared_runs.copy("image_mae", "audio_mae", dest=tmp_path_factory.mktemp("evalviews") / "workspace")
    plain = {"name": "digits-plain", "model": {"preset": "tiny", "patch_size": 2},
             "evaluation": {**EVAL, "auto": False}, "train": {**SHORT, "steps": 4, "eval_interval": 2}}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(ws))
        yield {"image": ids["image_mae"], "audio": ids["audio_mae"], "plain": completed_run(plain, ws, evaluate=False)}


def page(path: str, **params: str) -> AppTest:
    return open_with(path, params)


def _captions(at: AppTest) -> list[str]:
    return [c.value for c in at.caption]


def test_run_detail_shows_fine_tune_ssim_and_flops_beside_baselines(runs):
    at = page("../pages/run_detail.py", run=runs["image"])
    assert "Evaluation" in [h.value for h in at.subheader]
    tables = [t.value for t in at.table]
    down = next(t for t in tables if "random init" in t.columns and "chance" in t.columns)
    assert list(down.index) == ["linear probe", "kNN (k=20)", "k-means NMI", "k-means ARI", "fine-tune"]
    assert down.loc["fine-tune", "this run"].endswith("%") and down.loc["fine-tune", "random init"].endswith("%")
    assert down.loc["fine-tune", "raw input"] == "–"  # no encoder to fine-tune
    quality = next(t for t in tables if "SSIM, masked patches ↑" in t.columns)
    assert list(quality.index) == ["this run (step 20)", "biharmonic inpainting", "kNN average (k=10)", "training mean image",
                                   "visible-pixel mean"]
    assert sum("★" in v for v in quality["SSIM, masked patches ↑"]) == 1
    assert any("GFLOPs per training step" in c and "batch 32" in c for c in _captions(at))
    assert any(c.startswith("This run's frozen features of the 179 val rows, in 2-D") for c in _captions(at))
    assert at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart")  # the map (and the curves)


def test_run_detail_shows_audio_spectral_error_beside_its_baselines(runs):
    at = page("../pages/run_detail.py", run=runs["audio"])
    quality = next(t.value for t in at.table if "log-mel L1, masked ↓" in t.value.columns)
    assert list(quality.index) == ["this run (step 6)", "interpolation in time", "training mean spectrogram"]
    assert {"log-spectral distance (dB), masked ↓", "spectral convergence, masked ↓"} <= set(quality.columns)
    assert not any("SSIM" in c for c in quality.columns)


def test_run_detail_without_an_evaluation_says_so(runs):
    at = page("../pages/run_detail.py", run=runs["plain"])
    assert any(c.startswith("No evaluation yet") for c in _captions(at))


def test_compare_puts_quality_fine_tune_and_flops_in_its_tables(runs):
    at = page("../pages/compare.py", runs=f"{runs['image']},{runs['audio']},{runs['plain']}")
    assert "Reconstruction quality beside the best baseline" in [h.value for h in at.subheader]
    tables = [t.value for t in at.table]
    # one table per kind of figures: the image run's SSIM, the audio run's spectral error (the plain run: none)
    image = next(t for t in tables if "SSIM, masked patches" in t.columns)
    audio = next(t for t in tables if "log-mel L1, masked" in t.columns)
    assert len(image) == len(audio) == 1 and not any("SSIM" in c for c in audio.columns)
    assert image["SSIM, masked patches · best baseline"].str.fullmatch(r"0\.\d{4} \((kNN average \(k=10\)|training mean image|biharmonic inpainting|visible-pixel mean)\)").all()
    assert not any("★" in v for v in image["SSIM, masked patches"])  # a lone value is not starred
    down = next(t for t in tables if "linear probe" in t.columns)
    assert not {"fine-tune", "fine-tune · random init", "fine-tune steps"} & set(down.columns)  # a table of its own
    tuned = next(t for t in tables if "fine-tune" in t.columns)
    assert list(tuned.columns) == ["step", "fine-tune", "fine-tune · random init", "fine-tune steps"] and len(tuned) == 2
    assert all(s.isdigit() and int(s) > 0 for s in tuned["fine-tune steps"])  # the full recipe (no budget limit)
    assert sum("★" in v for v in tuned["fine-tune"]) == 1 and not any("★" in v for v in tuned["fine-tune · random init"])
    eff = next(t for t in tables if "GFLOPs per step" in t.columns)
    flops = eff["GFLOPs per step"].tolist()
    assert sum(v != "–" for v in flops) == 2 and eff["training TFLOPs"].tolist().count("–") == 1
