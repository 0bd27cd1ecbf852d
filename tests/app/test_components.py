"""Unit tests of the UI components that do not need a running page."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app.components.charts import counts_chart, ema, metrics_chart
from app.components.images import (
    ERROR_MAX,
    ERROR_VISIBLE_RGB,
    MASK_GREY,
    chw_to_hwc_uint8,
    error_colors,
    error_map,
    mask_overlay,
    masked_only,
    recon_rows,
    upscale,
)
from app.components.masks import MAX_HEATMAP_WIDTH, frequency_heatmap
from app.components.run_summary import device_text
from app.components.runs import (
    format_duration,
    job_progress,
    placement_label,
    run_label,
    runs_frame,
    same_task_first,
    short_label,
)
from app.modalities.audio import plural_unit
from engine.config import RunConfig
from engine.runner.launcher import cancel, submit
from engine.store import RunRecord, get_run


def test_upscale_is_nearest_neighbour_to_about_96_px():
    img = np.arange(64, dtype=np.uint8).reshape(8, 8)
    big = upscale(img)
    assert big.shape == (96, 96)
    assert (big[:12, :12] == img[0, 0]).all() and (big[-12:, -12:] == img[7, 7]).all()
    assert upscale(np.zeros((128, 100, 3), np.uint8)).shape == (128, 100, 3)  # large: unchanged


def test_mask_overlay_greys_exactly_the_masked_patches():
    rng = np.random.default_rng(0)
    x = rng.random((2, 1, 8, 8), dtype=np.float32)
    mask = np.zeros((2, 4, 4), bool)
    mask[0, 0, 0] = mask[1, 3, 2] = True  # P = 2
    out = mask_overlay(x, mask)
    assert out.shape == (2, 8, 8, 3) and out.dtype == np.uint8
    grey = round(MASK_GREY * 255)
    assert (out[0, :2, :2] == grey).all() and (out[1, 6:, 4:6] == grey).all()
    visible = chw_to_hwc_uint8(np.repeat(x, 3, axis=1))
    keep = ~mask.repeat(2, 1).repeat(2, 2)
    assert (out[keep] == visible[keep]).all()
    with pytest.raises(ValueError, match="does not tile"):
        mask_overlay(x, np.zeros((2, 3, 3), bool))


def test_recon_rows_are_the_mae_rows_and_the_error_map():
    x = np.full((3, 3, 4, 4), 0.25, np.float32)
    rows = recon_rows(x, np.ones((3, 2, 2), bool), x, x)
    assert [r[0] for r in rows] == ["Original", "Masked input", "Prediction at masked patches (grey: visible, not scored)",
                                    "Reconstruction + visible patches",
                                    "Squared error at masked patches (black 0 → yellow ≥ 0.25)"]
    assert all(r[1].shape == (3, 4, 4, 3) for r in rows)


def test_masked_only_greys_the_visible_patches():
    pred = np.full((1, 1, 4, 4), 0.8, np.float32)
    mask = np.array([[[True, False], [False, True]]])
    out = masked_only(pred, mask)
    assert out.shape == (1, 4, 4, 3)
    assert (out[0, :2, :2] == round(0.8 * 255)).all() and (out[0, 2:, 2:] == round(0.8 * 255)).all()
    assert (out[0, :2, 2:] == round(MASK_GREY * 255)).all() and (out[0, 2:, :2] == round(MASK_GREY * 255)).all()


def test_error_map_colours_and_per_image_mse():
    images = np.zeros((2, 1, 4, 4), np.float32)
    pred = np.zeros((2, 1, 4, 4), np.float32)
    pred[0, 0, :2, :2] = 0.5  # squared error 0.25 = ERROR_MAX at the top-left patch of image 0
    pred[0, 0, 2:, 2:] = 2.0  # clipped to 1: squared error 1, saturates
    mask = np.array([[[True, False], [False, True]], [[False, False], [False, False]]])
    rgb, mse = error_map(images, pred, mask)
    assert rgb.shape == (2, 4, 4, 3)
    assert (rgb[0, :2, :2] == error_colors(np.float32(ERROR_MAX))).all()
    assert (rgb[0, 2:, 2:] == error_colors(np.float32(ERROR_MAX))).all()  # saturated
    assert (rgb[0, :2, 2:] == ERROR_VISIBLE_RGB).all() and (rgb[1] == ERROR_VISIBLE_RGB).all()
    assert mse[0] == pytest.approx((0.25 * 4 + 1.0 * 4) / 8) and np.isnan(mse[1])  # nothing masked in image 1


def test_error_colors_run_dark_to_bright():
    c = error_colors(np.linspace(0, ERROR_MAX, 50)).astype(int)
    assert tuple(c[0]) == (0, 0, 4) and tuple(c[-1]) == (252, 255, 164)
    assert (np.diff(c.sum(axis=1)) >= 0).all()  # brightness never drops along the ramp


def test_ema_is_per_series_and_debiased():
    df = pd.DataFrame({"run_id": ["a"] * 3 + ["b"] * 3, "key": ["loss"] * 6, "step": [0, 1, 2] * 2,
                       "value": [1.0, 0.0, 0.0, 5.0, 5.0, 5.0]})  # fmt: skip
    assert ema(df, 0.0).tolist() == df["value"].tolist()
    s = ema(df, 0.5)
    assert s.iloc[0] == 1.0  # debiased: the first point is not pulled towards 0
    assert s.iloc[1] == pytest.approx(1 / 3) and s.iloc[3:].tolist() == [5.0, 5.0, 5.0]
    with pytest.raises(ValueError):
        ema(df, 1.0)


def test_metrics_chart_layers_and_empty():
    assert metrics_chart(pd.DataFrame(columns=["run_id", "key", "step", "value"])) is None
    df = pd.DataFrame({"run_id": ["r"] * 4, "key": ["loss", "loss", "loss", "val_loss"],
                       "step": [1, 2, 3, 3], "value": [1.0, 0.5, 0.25, 0.4]})  # fmt: skip
    spec = metrics_chart(df, smoothing=0.6, run_labels={"r": "mine"}).to_dict()
    marks = [layer["mark"]["type"] for layer in spec["layer"]]
    assert marks == ["line", "line", "point"]  # faint raw, smoothed, points of sparse series
    values = next(iter(spec["datasets"].values()))
    assert {v["run"] for v in values} == {"mine"}
    assert [v["smoothed"] for v in values if v["key"] == "val_loss"] == [0.4]  # eval metric not smoothed


def test_metrics_chart_samples_seen_axis():
    df = pd.DataFrame({"run_id": ["a", "a", "b", "b"], "key": ["loss"] * 4, "step": [1, 2, 1, 2],
                       "value": [1.0, 0.5, 1.0, 0.5]})
    spec = metrics_chart(df, x="samples", batch_sizes={"a": 32, "b": 128}).to_dict()
    values = next(iter(spec["datasets"].values()))
    assert {(v["run_id"], v["step"]): v["samples"] for v in values} == {("a", 1): 32, ("a", 2): 64, ("b", 1): 128,
                                                                       ("b", 2): 256}
    assert spec["layer"][0]["encoding"]["x"]["field"] == "samples"
    # without the batch sizes the step axis is kept
    assert metrics_chart(df, x="samples").to_dict()["layer"][0]["encoding"]["x"]["field"] == "step"


def _record(**kw) -> RunRecord:
    base = dict(
        run_id="20260101-000000-abcdef", name="mae", status="running", created_at=0.0, started_at=100.0,
        ended_at=175.0, step=50, total_steps=200, error=None, latest={"loss": 0.1},
        config={"task": "image_mim", "data": {"dataset": "digits"}}, pid=None, path=None,
    )  # fmt: skip
    return RunRecord(**{**base, **kw})


def test_runs_frame_and_labels():
    rec = _record()
    row = runs_frame([rec]).iloc[0]
    assert row["step"] == "50 / 200" and row["time"] == "1m 15s"
    assert row["loss"] == "0.1000" and row["validation"] == "–" and row["dataset"] == "digits"
    assert (row["task"], row["units"], row["status"]) == ("image_mim", "", "running")
    assert run_label(rec) == "mae · 20260101-000000-abcdef" and short_label(rec) == "mae · abcdef"
    unnamed = _record(name="20260101-000000-abcdef")  # the store names unnamed runs by their id
    assert run_label(unnamed) == unnamed.run_id and runs_frame([unnamed]).iloc[0]["run"] == unnamed.run_id
    assert format_duration(None) == "" and format_duration(5) == "5s" and format_duration(3700) == "1h 01m"


def test_runs_frame_shows_hyperparameters_and_each_figure_with_its_step():
    image = _record(config={"task": "image_mim", "data": {"dataset": "digits"}, "model": {"patch_size": 2, "preset": "tiny"},
                            "train": {"lr": 0.002}}, latest={"loss": 0.05, "val_loss": 0.07})
    text = _record(run_id="20260101-000000-fedcba", config={
        "task": "text_mlm", "data": {"dataset": "trec", "tokenizer": {"kind": "wordpiece", "vocab_size": 8000}},
        "model": {"preset": "mini"}, "train": {"lr": 0.001}}, latest={"loss": 3.1, "val_top1": 0.412})
    points = {(image.run_id, "loss"): (37, 0.05), (image.run_id, "val_loss"): (0, 0.0741),
              (text.run_id, "val_top1"): (2000, 0.412)}
    frame = runs_frame([image, text], points)
    a, b = frame.iloc[0], frame.iloc[1]
    assert (a["units"], a["preset"], a["lr"], a["loss"]) == ("patch 2", "tiny", 0.002, "0.0500 @ 37")
    assert a["recipe"] == "lr 0.002 · patch 2 · tiny · random · image_mim"
    assert a["validation"] == "0.0741 val loss @ 0"  # a cancelled run's val loss is the step-0 one: said so
    assert (b["task"], b["units"], b["preset"]) == ("text_mlm", "wordpiece 8000", "mini")
    assert b["validation"] == "41.2% top-1 @ 2000"  # a text run's headline metric
    assert runs_frame([image]).iloc[0]["validation"] == "0.0700 val loss"  # no metrics read: no step claimed


def test_runs_frame_shows_each_runs_masking():
    def masking(**m):
        return runs_frame([_record(config={"data": {"dataset": "digits"}, "masking": m})]).iloc[0]["masking"]

    assert masking(strategy="random", ratio=0.75, schedule="constant") == "random 0.75"
    assert masking(strategy="block", ratio=0.5, schedule="cosine", final_ratio=0.9) == "block 0.5→0.9 cosine"
    assert masking(strategy="region", ratio=0.75, schedule="constant") == "region"  # its params set the budget


def test_ema_equals_pandas_ewm_per_series_with_gaps():
    rng = np.random.default_rng(0)
    n = 600
    df = pd.DataFrame({"run_id": rng.choice(["a", "b", "c"], n), "key": rng.choice(["loss", "val_loss"], n),
                       "value": rng.normal(size=n)}).sort_values(["run_id", "key"], kind="stable")
    df.loc[df.index[[5, 6, 300]], "value"] = np.nan
    for smoothing in (0.3, 0.9):
        ref = df.groupby(["run_id", "key"], sort=False)["value"].transform(
            lambda s: s.ewm(alpha=1.0 - smoothing, adjust=True).mean())
        np.testing.assert_allclose(ema(df, smoothing).to_numpy(), ref.to_numpy(), rtol=1e-12, atol=1e-12)


def test_default_selection_keeps_to_the_newest_runs_task():
    runs = [SimpleNamespace(run_id=i, config={"task": t}) for i, t in
            [("t3", "text_mlm"), ("i2", "image_mim"), ("t2", "text_mlm"), ("i1", "image_mim"), ("t1", "text_mlm")]]
    assert same_task_first(runs, 2) == ["t3", "t2"]
    assert same_task_first(runs[1:], 3) == ["i2", "i1"]
    assert same_task_first([], 3) == []


@pytest.mark.parametrize("extra, launch, short, full", [
    ({}, None, "", "local · 1 process"),  # a run of an older masklab, or one not started yet
    ({"placement": {"backend": "local", "hosts": ["vm"], "processes": 1}}, None, "", "local · host vm · 1 process"),
    ({"placement": {"backend": "local", "hosts": ["vm"], "processes": 1, "devices": ["3"]}}, None, "GPU 3",
     "local · host vm · 1 process · GPU 3"),
    ({"placement": {"backend": "local", "hosts": ["vm"], "processes": 2, "devices": ["0,1"]}}, {"nproc_per_node": 2},
     "2 processes · GPU 0,1", "local · host vm · 2 processes · GPU 0,1"),
    ({}, {"nproc_per_node": 2, "nnodes": 2}, "2 nodes x 2 processes", "local · 2 nodes x 2 processes"),
    ({"placement": {"backend": "local", "hosts": ["a", "b"], "processes": 2}}, {"nproc_per_node": 1, "nnodes": 2},
     "2 nodes x 1 process", "local · hosts a, b · 2 nodes x 1 process"),
    ({}, {"backend": "ray"}, "ray", "ray · 1 process"),  # a cluster run still in its cluster's queue
    ({"placement": {"backend": "slurm", "hosts": ["n3"], "processes": 2, "devices": ["0,1"]}},
     {"backend": "slurm", "nproc_per_node": 2}, "slurm · 2 processes · GPU 0,1", "slurm · host n3 · 2 processes · GPU 0,1"),
])
def test_where_a_run_trains_in_the_table_and_on_run_detail(extra, launch, short, full):
    rec = _record(config={"data": {"dataset": "digits"}, **({"launch": launch} if launch else {})}, extra=extra)
    assert placement_label(rec) == short == runs_frame([rec]).iloc[0]["where"]
    assert placement_label(rec, full=True) == full


@pytest.mark.parametrize("n_classes", [3, 12, 13, 42])
def test_class_counts_chart_writes_every_class_name(n_classes):
    """Up to 12 classes stand on the x axis; more lie along y, one row each, no name dropped."""

    counts = pd.DataFrame([{"class_name": f"topic-{i}", "split": s, "count": i + 1}
                           for i in range(n_classes) for s in ("train", "val")])
    spec = counts_chart(counts, unit="texts").to_dict()
    enc = spec["encoding"]
    if n_classes <= 12:
        assert enc["x"]["field"] == "class_name" and spec["height"] == 260
    else:
        assert enc["y"]["field"] == "class_name" and enc["y"]["axis"]["labelOverlap"] is False
        assert spec["height"] >= 18 * n_classes


@pytest.mark.parametrize("grid", [(4, 4), (8, 13), (8, 100), (64, 64), (2, 200), (40, 3)])
def test_frequency_heatmap_fits_half_a_column_with_square_cells(grid):
    """Mask lab's heatmap: square cells, the plot never wider than MAX_HEATMAP_WIDTH and the legend
    under it (a wide audio grid ran over the explanation beside the chart)."""

    spec = frequency_heatmap(np.random.default_rng(0).random(grid)).to_dict()
    rows, cols = grid
    assert spec["width"] <= MAX_HEATMAP_WIDTH and spec["width"] % cols == 0 and spec["height"] == spec["width"] // cols * rows
    assert spec["encoding"]["color"]["legend"]["orient"] == "bottom"


def test_a_spectrogram_heatmap_draws_low_mel_bands_at_the_bottom_like_the_spectrograms():
    freq = np.random.default_rng(0).random((8, 13))
    plain = frequency_heatmap(freq).to_dict()["encoding"]["y"]
    spec = frequency_heatmap(freq, spectrogram=True).to_dict()["encoding"]["y"]
    assert plain["sort"] == "ascending" and plain["title"] == "row"  # an image grid: row 0 at the top
    assert spec["sort"] == "descending" and spec["title"] == "mel band (low at the bottom)"


def test_run_detail_names_the_device_a_live_run_trains_on(workspace):
    """``auto`` before the worker starts; the resolved device (``cpu`` here) while it trains, from
    what training wrote at its start, and after it ends, from what the worker recorded."""

    cfg = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
           "train": {"steps": 100_000, "batch_size": 16, "eval_interval": 100_000, "checkpoint_interval": 100_000}}
    run_id = submit(RunConfig.from_dict(cfg))
    deadline = time.time() + 120
    while get_run(run_id).step == 0:
        assert time.time() < deadline and get_run(run_id).status in ("queued", "running")
        time.sleep(0.2)
    rec = get_run(run_id)
    assert rec.status == "running" and "device" not in (rec.extra or {}) and device_text(rec) == "cpu"
    cancel(run_id)
    while get_run(run_id).status == "running":
        assert time.time() < deadline + 60
        time.sleep(0.2)
    assert get_run(run_id).extra.get("device") == "cpu" and device_text(get_run(run_id)) == "cpu"


def _report_page(rejected: list, accepted: int, dataset):
    from app.components.importing import show_report  # noqa: PLC0415 (AppTest.from_function runs this function's source as a script of its own)
    from engine.data.jobs import ImportOutcome  # noqa: PLC0415 (AppTest.from_function runs this function's source as a script of its own)

    show_report(ImportOutcome("image", dataset, accepted, [tuple(r) for r in rejected]), "upload.zip")


@pytest.mark.parametrize("rejected, accepted, dataset, banner, text", [
    ([], 12, "mnist", "success", "Imported all 12 images from upload.zip as dataset **mnist**."),
    ([], 1, "one", "success", "Imported 1 image from upload.zip as dataset **one**."),
    ([["5/bad.png", "empty file"]], 1, "one", "warning",
     "Imported 1 image from upload.zip as **one**; 1 refused (listed below)."),
    ([["5/bad.png", "empty file"]], 0, None, "error",
     "Nothing was imported from upload.zip: the file was refused (listed below); nothing was registered."),
    ([["3/bomb.png", "declares 100000x100000 px"]], 12, "mnist", "warning",
     "Imported 12 images from upload.zip as **mnist**; 1 refused (listed below)."),
    ([["3/bomb.png", "declares 100000x100000 px"], ["5/bad.png", "empty file"]], 0, None, "error",
     "Nothing was imported from upload.zip: all 2 files were refused (listed below); nothing was registered."),
])
def test_the_import_banner_has_the_outcomes_colour_and_every_refusal_is_in_the_table(rejected, accepted, dataset,
                                                                                   banner, text):
    at = AppTest.from_function(_report_page, args=(rejected, accepted, dataset)).run()
    assert not at.exception
    shown = {kind: [a.value for a in getattr(at, kind)] for kind in ("success", "warning", "error")}
    assert shown == {kind: [text] if kind == banner else [] for kind in shown}
    if rejected:
        table = at.table[0].value
        assert list(table.index) == [f for f, _ in rejected] and list(table["reason"]) == [r for _, r in rejected]
    else:
        assert len(at.table) == 0


def test_a_tasks_unit_in_the_plural():
    assert [plural_unit(u) for u in ("patch", "frame", "position", "token")] == ["patches", "frames", "positions", "tokens"]


def _lab_statistics_page(empty_rows: int, strategy: str):
    import torch  # noqa: PLC0415 (AppTest.from_function runs this function's source as a script of its own)

    from app.components.masks import lab_statistics  # noqa: PLC0415 (AppTest.from_function runs this function's source as a script of its own)
    from engine.masking.stats import mask_stats  # noqa: PLC0415 (AppTest.from_function runs this function's source as a script of its own)

    mask = torch.zeros(20, 4, 4, dtype=torch.bool)
    mask[empty_rows:, :2] = True  # rows past the first `empty_rows` hide 8 of 16 positions
    lab_statistics((mask_stats(mask), None, None), lambda s: f"{s.batch_size} masks.", strategy=strategy)


@pytest.mark.parametrize("empty_rows, strategy, warning, caption", [
    (0, "random", [], "20 masks."),
    (2, "random", [], "20 masks. 2 of 20 have nothing masked."),  # a tenth: said, not warned
    (3, "random", ["3 of 20 samples have nothing masked, so they train nothing (the loss covers masked positions "
                   "only): raise the mask ratio or use smaller patches."], "20 masks."),
    (3, "time_mask", ["3 of 20 samples have nothing masked, so they train nothing (the loss covers masked positions "
                      "only): each time band is at most p x the clip's own frames (and at most T), so on short clips a "
                      "larger T changes nothing: raise p or use patches of fewer frames."], "20 masks."),
    (3, "freq_mask", ["3 of 20 samples have nothing masked, so they train nothing (the loss covers masked positions "
                      "only): raise F to the mel bins of one patch row at least."], "20 masks."),
    (3, "region", ["3 of 20 samples have nothing masked, so they train nothing (the loss covers masked positions "
                   "only): widen the strategy's parameters or use smaller patches."], "20 masks."),
])
def test_mask_lab_says_how_many_samples_have_nothing_masked_and_how_to_mask_them(empty_rows, strategy, warning,
                                                                                 caption):
    at = AppTest.from_function(_lab_statistics_page, args=(empty_rows, strategy)).run()
    assert not at.exception
    assert [w.value for w in at.warning] == warning and at.caption[0].value == caption


def test_an_evaluations_progress_says_when_its_budget_ends():
    """job.json as :class:`engine.eval.progress.EvalProgress` writes it, during the fine-tune of an
    evaluation with a 60 s budget started 20 s ago; none once the budget is spent or without one."""
    now = time.time()
    job = {"status": "running", "step": 300, "phase": "finetune", "done": 3, "total": 24, "eta_s": 35.0,
           "phases_done": {"setup": 1.0, "features": 2.0}, "started_at": now - 20, "budget_s": 60.0}
    share, text = job_progress(job)
    assert text.startswith("Evaluating step 300: fine-tuning, step 3 of 24 · about 35 s left in this phase · "
                           "its budget ends in about 40 s") or "its budget ends in about 39 s" in text, text
    assert 0 < share < 1
    assert "budget" not in job_progress({**job, "started_at": now - 61})[1]  # spent: nothing to promise
    assert "budget" not in job_progress({**job, "budget_s": None})[1]  # no limit
