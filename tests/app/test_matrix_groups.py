"""The reconstruction matrix's parts (steps, pages, cells of every sample kind on the session's real
runs), seed groups and their bands, and a baseline run's deltas coloured by each figure's direction."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from app.components.distance import distance_frame
from app.components.groups import (
    BAD,
    BANDS,
    FIGURES,
    GOOD,
    SAME,
    band,
    baseline_rows,
    deltas,
    group_curves,
    group_table,
    results_frame,
    results_styler,
    seed_groups,
)
from app.components.matrix import page_bounds, shown_step, token_html, union_steps
from app.components.present import group_key_table
from app.modalities import sample_view
from engine.store import load_samples


def test_a_step_between_stops_shows_the_nearest_earlier_one_and_says_so():
    steps = {"a": [0, 10, 20], "b": [0, 20, 40]}
    assert union_steps(steps) == [0, 10, 20, 40]
    assert shown_step(steps["a"], 20) == (20, "")
    assert shown_step(steps["b"], 10) == (0, "no step 10: its step 0")
    assert shown_step(steps["a"], 40) == (20, "no step 40: its step 20")
    assert shown_step([30, 40], 10) == (30, "nothing at or before step 10: its first, step 30")
    assert shown_step([], 10) == (None, "no samples yet")


def test_pages_of_fifty_runs_and_a_page_out_of_range():
    assert page_bounds(50, 0, 10) == (0, 10, 0, 5)
    assert page_bounds(50, 4, 10) == (40, 50, 4, 5)
    assert page_bounds(50, 9, 10) == (40, 50, 4, 5)  # a link from a larger selection: the last page
    assert page_bounds(3, -2, 10) == (0, 3, 0, 1)
    assert page_bounds(0, 0, 10) == (0, 0, 0, 1)


def test_text_cells_escape_what_the_model_and_the_data_wrote():
    tokens = ["[CLS]", "<b>", "bold", "##er", "[SEP]", "[PAD]"]
    mask = [False, True, False, True, False, False]
    assert token_html(tokens, mask) == "<mark>&lt;b&gt;</mark> bold<mark>er</mark>"
    got = token_html(tokens, mask, fill=["", "<i>", "", "##x", "", ""], right=[False, False, False, True, False, False])
    assert got == "<mark class='bad'>&lt;i&gt;</mark> bold<mark class='ok'>x</mark>"


@pytest.mark.parametrize("kind", ["image_mae", "text_mlm", "text_span", "audio_mae", "paired_image_text",
                                  "paired_audio_text"])
def test_every_sample_kind_gives_matrix_cells_for_each_view(shared_runs, kind):
    run = shared_runs.get(kind)
    sample = load_samples(run.run_id, workspace=run.workspace)
    cells = sample_view(sample.kind).cells(sample, 3)
    assert 0 < len(cells) <= 3
    for c in cells:
        if "html_recon" in c:  # text: escaped markup, the hidden tokens marked
            assert {"html_original", "html_recon", "html_error"} <= set(c) and "<mark" in c["html_original"]
            assert "<script" not in "".join(c.values())
        else:
            for v in ("original", "recon", "error"):
                assert c[v].startswith("data:image/png;base64,"), v
            assert c["recon"] != c["original"]  # the hidden parts are the model's
        if kind == "audio_mae":
            assert c["audio_recon"].startswith("data:audio/wav;base64,")
        if kind.startswith("paired"):
            assert "” → “" in c["note"]  # the caption, and the one written from the image or clip
    got = distance_frame(sample)
    if kind == "text_span":
        assert got is None  # a generated span has no token-by-token alignment: no distance plot
        return
    frame, unit, metric = got
    assert set(frame.predictor) >= {"this run"} and len(set(frame.predictor)) >= 2  # and a trivial baseline
    assert (frame.distance >= 1).all() and (frame.units > 0).all() and frame.value.notna().all()


def _run(i, ratio, seed, name=None):
    return {"name": name or f"r{ratio}-s{seed}", "masking": {"ratio": ratio, "strategy": "random"},
            "train": {"seed": seed, "num_threads": 1 + i % 2, "steps": 10}}


def test_four_seeds_of_two_ratios_are_two_groups_named_by_their_ratio():
    configs = {f"r{i}": _run(i, ratio, seed) for i, (ratio, seed) in enumerate((r, s) for r in (0.5, 0.75) for s in range(4))}
    configs["lone"] = {**_run(9, 0.5, 0), "train": {"seed": 0, "steps": 20}}  # another length: not a replicate
    groups = seed_groups(configs)
    assert groups == {"masking.ratio=0.5 · train.steps=10 (4 seeds)": ["r0", "r1", "r2", "r3"],
                      "masking.ratio=0.75 · train.steps=10 (4 seeds)": ["r4", "r5", "r6", "r7"], "lone": ["lone"]}
    assert list(seed_groups({k: configs[k] for k in ("r0", "r1")})) == ["same config (2 seeds)"]


def test_bands_min_max_std_and_sem():
    x = [1.0, 2.0, 4.0, np.nan]
    assert band(x, "minmax") == (7 / 3, 1.0, 4.0)
    sd = float(np.std([1, 2, 4], ddof=1))
    assert band(x, "std") == pytest.approx((7 / 3, 7 / 3 - sd, 7 / 3 + sd))
    assert band(x, "sem") == pytest.approx((7 / 3, 7 / 3 - sd / np.sqrt(3), 7 / 3 + sd / np.sqrt(3)))
    assert band([5.0], "std") == (5.0, 5.0, 5.0) and all(np.isnan(band([], "sem")))
    with pytest.raises(ValueError, match="minmax"):
        band(x, "iqr")
    assert set(BANDS) == {"minmax", "std", "sem"}


def test_group_curves_and_tables_hold_each_groups_mean_and_band():
    df = pd.DataFrame({"run_id": ["a", "a", "b", "b", "c"], "key": ["val_loss"] * 5, "step": [0, 10, 0, 10, 0],
                       "value": [1.0, 0.5, 3.0, 0.7, 9.0]})
    curves = group_curves(df, {"g": ["a", "b"], "c": ["c"]}, "minmax")
    g = curves[curves.group == "g"].set_index("step")
    assert g.loc[0, ["mean", "low", "high", "n"]].tolist() == [2.0, 1.0, 3.0, 2]
    assert g.loc[10, "mean"] == pytest.approx(0.6)
    frame = pd.DataFrame({"run": ["A", "B", "C"], "step": [10, 10, 10], "linear probe": [0.8, 0.6, 0.5],
                          "linear probe · random init": [0.4, 0.2, 0.3], "chance": [0.1, 0.1, 0.1]})
    labels = {"a": "A", "b": "B", "c": "C"}
    t = group_table(frame[["run", "step", "linear probe"]], {"g": ["a", "b"], "c": ["c"]}, labels, "minmax",
                    ["linear probe"], expand=["g"])
    assert t["run"].tolist() == ["▸ g", "↳ A", "↳ B", "C"]
    assert t["linear probe"].tolist() == ["70.0% [60.0%–80.0%]", "80.0%", "60.0%", "50.0%"]
    pins = baseline_rows(frame, ["linear probe"], {"random init": "baseline · random init", "chance": "baseline · chance"})
    assert pins["linear probe"].tolist() == pytest.approx([0.3, 0.1])


@pytest.mark.parametrize("figure,direction", [(f, d) for f, d in FIGURES.items() if d])
def test_a_deltas_sign_and_colour_follow_its_figures_direction(figure, direction):
    runs = pd.DataFrame({"run": ["base", "up", "down", "same"], figure: [0.5, 0.7, 0.3, 0.5]})
    styled = results_styler(runs, {figure: direction}, "base")
    html = styled.to_html()
    text = dict(zip(runs["run"], styled.data[figure]))
    up, down = ("better", "worse") if direction == "max" else ("worse", "better")
    assert deltas({figure: 0.7}, {figure: 0.5}, {figure: direction})[figure] == (pytest.approx(0.2), up)
    assert deltas({figure: 0.3}, {figure: 0.5}, {figure: direction})[figure] == (pytest.approx(-0.2), down)
    assert deltas({figure: 0.5}, {figure: 0.5}, {figure: direction})[figure] == (0.0, "same")
    assert re.search(r"\(\+", text["up"]) and re.search(r"\(-", text["down"]) and "(" not in text["base"]
    assert styled.data["run"].tolist()[0] == "base (baseline)"
    colour = {"better": GOOD, "worse": BAD}
    cells = dict(re.findall(r"#(T_\w+_row\d+_col1) \{\s*color: (#\w+);", html))
    rows = {1: colour[up], 2: colour[down], 3: SAME}
    for row, want in rows.items():
        assert any(k.endswith(f"row{row}_col1") and v == want for k, v in cells.items()), (row, cells)


def test_pinned_baseline_rows_are_grey_and_never_get_a_delta():
    df = pd.DataFrame({"run": ["base", "other", "baseline · chance"], "linear probe": [0.5, 0.6, 0.1]})
    styled = results_styler(df, {"linear probe": "max"}, "base")
    assert styled.data["linear probe"].tolist() == ["50.0%", "60.0% (+10.0 pts)", "10.0%"]
    assert "font-style: italic" in styled.to_html()


def test_results_frame_puts_config_fields_before_figures():
    recs = [SimpleNamespace(run_id=r, tags=("x",) if r == "a" else (), note="n",
                            config={"task": "image_mim", "task_params": {"target": "hog" if r == "b" else "pixel"}})
            for r in ("a", "b")]
    diff = pd.DataFrame({"A": ["0.5"], "B": ["0.75"]}, index=pd.Index(["masking.ratio"], name="field"))
    ev = SimpleNamespace(representation={"trained": {"probe_acc": 0.8, "knn_acc": 0.7}}, downstream={}, quality={})
    df, dirs = results_frame(recs, {"a": "A", "b": "B"}, {"a": ev, "b": None},
                             {"a": ("val loss ↓", "min", 0.1), "b": ("val loss ↓", "min", 0.2)}, diff,
                             {"a": {"wall time (s)": 3.0}, "b": {"wall time (s)": 4.0}})
    assert list(df.columns) == ["run", "method", "tags", "note", "masking.ratio", "val loss ↓", "linear probe",
                                "kNN (k=20)", "wall time (s)"]
    assert df["method"].tolist() == ["mae", "maskfeat"]
    assert dirs == {"val loss ↓": "min", "linear probe": "max", "kNN (k=20)": "max", "wall time (s)": "min"}
    assert df["tags"].tolist() == ["x", ""] and df["masking.ratio"].tolist() == ["0.5", "0.75"]


def test_presentation_shows_each_seed_group_as_one_row_of_means_and_bands():


    def numbers(value, probe):
        return {"metric": "val_loss", "better": "min", "title": "val loss", "value": value, "probe": probe,
                "knn": None, "finetune": None}

    nums = {"a": numbers(0.1, 0.8), "b": numbers(0.3, 0.6), "c": numbers(0.2, 0.5)}
    t = group_key_table({"g (2 seeds)": ["a", "b"], "c": ["c"]}, nums, "minmax")
    assert t["group"].tolist() == ["g (2 seeds)"]  # a run alone is no group
    row = t.iloc[0]
    assert row["runs"] == 2 and row["value"] == "0.2000 [0.1000–0.3000]" and row["linear probe"] == "70.0% [60.0%–80.0%]"
    assert row["kNN (k=20)"] == "–"
    assert group_key_table({"g": ["a", "b"]}, nums, "std").iloc[0]["linear probe"] == "70.0% ± 14.1%"
