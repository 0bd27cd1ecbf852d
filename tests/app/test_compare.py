"""The Compare page and its tables, on real evaluated runs (digits, tiny MAE: the session's shared
runs tests/runs.COMPARE_FOUR)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app.components.compare import config_diff, downstream_frame, efficiency_frame, mark_best, report_html, time_to_loss
from engine.store import get_run, read_metrics
from engine.store.evaluations import latest_evaluation
from tests.app.test_pages_apptest import ENTRY
from tests.runs import COMPARE_FOUR


def test_config_diff_shows_only_differing_fields():
    a = {"name": "a", "masking": {"ratio": 0.5, "strategy": "random"}, "train": {"seed": 0, "num_threads": 1}}
    b = {"name": "b", "masking": {"ratio": 0.75, "strategy": "random"}, "train": {"seed": 0, "num_threads": 2},
         "evaluation": {"auto": False}}
    d = config_diff({"r1": a, "r2": b}, {"r1": "A", "r2": "B"})
    assert list(d.index) == ["evaluation.auto", "masking.ratio"]
    assert d.loc["masking.ratio"].tolist() == ["0.5", "0.75"] and d.loc["evaluation.auto"].tolist() == ["(unset)", "False"]
    assert config_diff({"r1": a, "r2": a}).empty and config_diff({"r1": a}).empty


def test_mark_best_and_time_to_loss():
    df = pd.DataFrame({"run": ["a", "b", "c"], "x": [0.5, 0.9, np.nan], "y": [0.2, 0.1, 0.2]})
    out = mark_best(df, ["x", "y"])
    assert out["x"].tolist() == ["50.0%", "90.0% ★", "–"] and out["y"].tolist() == ["20.0% ★", "10.0%", "20.0% ★"]
    lone = mark_best(pd.DataFrame({"x": [np.nan, 0.3]}), ["x"])
    assert lone["x"].tolist() == ["–", "30.0%"]  # one value is not the best of anything
    none = mark_best(pd.DataFrame({"x": [np.nan, np.nan]}), ["x"])
    assert none["x"].tolist() == ["–", "–"]  # not computed for any run: dashes, not blank cells
    loss = pd.DataFrame({"run_id": ["a"] * 4 + ["b"] * 2, "step": [1, 2, 3, 4, 1, 2],
                         "value": [1.0, 0.5, 0.2, 0.1, 1.0, 0.9], "wall_time": [10, 11, 13, 20, 0, 1]})
    assert time_to_loss(loss, 0.3, smoothing_points=1) == {"a": (3, 3.0), "b": None}
    assert time_to_loss(loss, 0.3, smoothing_points=2) == {"a": (4, 10.0), "b": None}  # mean(0.2, 0.1) = 0.15


@pytest.fixture
def four_runs(shared_runs, workspace):
    """Two seeds of two mask ratios (two seed groups), evaluated: the session's shared runs
    (tests/runs.COMPARE_FOUR), copied into this test's workspace in the order r0.5-s0, r0.5-s1,
    r0.75-s0, r0.75-s1."""
    _, ids = shared_runs.copy(*COMPARE_FOUR, dest=workspace)
    return [ids[k] for k in COMPARE_FOUR]


def _compare(ids, **params) -> AppTest:
    at = AppTest.from_file(str(ENTRY), default_timeout=120).run()
    at.switch_page("../pages/compare.py")
    at.query_params["runs"] = ",".join(ids)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _matrix(at) -> dict:
    (m,) = [e for e in at.get("bidi_component") if e.proto.component_name == "masklab_recon_matrix"]
    return json.loads(m.proto.json)


@pytest.mark.slow
def test_compare_page_on_four_evaluated_runs(four_runs):
    ids = four_runs
    recs = [get_run(r) for r in ids]
    assert all(r.extra["peak_mem_bytes"] > 50 * 2**20 for r in recs)  # torch alone takes more than 50 MiB
    labels = {r: r[-6:] for r in ids}
    frame = downstream_frame({r: latest_evaluation(r) for r in ids}, labels)
    assert len(frame) == 4 and frame["step"].tolist() == [12] * 4
    eff = efficiency_frame(recs, read_metrics(ids, ["loss", "throughput"]), labels, target_loss=10.0)
    assert (eff["throughput (samples/s)"] > 0).all() and (eff["step to loss"] == 1).all()
    html = report_html("t", [("Downstream", frame)], [("col", np.zeros((4, 4, 3), np.uint8)), ("grey", np.zeros((4, 4, 1), np.uint8))])
    assert "<table" in html and "data:image/png;base64," in html and "<script" not in html

    at = _compare(ids, group="0")  # run by run
    assert not at.error, [e.value for e in at.error]
    headers = [h.value for h in at.header]
    assert headers == ["Curves", "Configs and results", "Reconstructions of the validation inputs",
                       "Downstream: probes and fine-tuning", "Training cost"]
    results = at.dataframe[0].value
    assert sorted(results[["masking.ratio", "train.seed"]].values.tolist()[:4]) == [["0.5", "0"], ["0.5", "1"], ["0.75", "0"], ["0.75", "1"]]
    assert [r for r in results["run"] if r.startswith("baseline · ")]  # the trivial baselines, pinned under the runs
    tables = [t.value for t in at.table]
    down = next(t for t in tables if "linear probe" in t.columns)
    assert len(down) == 4 and sum("★" in v for v in down["linear probe"]) >= 1
    assert not any("★" in v for v in down["linear probe · random init"])
    captions = [img.caption for el in at.get("image") for img in el.proto.imgs]
    assert captions[0] == "original" and len(captions) == 1 + 2 * 4

    # The matrix: every run's column at the same step, the step control's stops every stored step.
    m = _matrix(at)
    assert m["steps"] == [0, 6, 12] and m["step"] == 12 and m["view"] == "recon"
    assert [c["sub"] for c in m["columns"]] == ["step 12"] * 4 and len(m["row_labels"]) == 6
    assert all(len(c["cells"]) == 6 for c in m["columns"])
    m = _matrix(_compare(ids, mstep="6", mview="error"))
    assert [c["sub"] for c in m["columns"]] == ["step 6"] * 4 and m["view"] == "error"
    m = _matrix(_compare(ids, mstep="7"))  # typed between two stops: the earlier one, said
    assert m["step"] == 6 and m["notes"][0].startswith("No run stored step 7: step 6 shown")
    notes = [c["note"] for c in m["columns"]]  # the same inputs; masks follow each run's seed and ratio, all differ
    assert notes == [""] + ["other masks than the first column"] * 3, notes

    # Seed groups: two groups with bands in the downstream table; one expanded shows its runs.
    at = _compare(ids, expand="masking.ratio=0.5 (2 seeds)", band="std")
    down = next(t.value for t in at.table if "linear probe" in t.value.columns)
    rows = list(down.index)
    g = rows.index("▸ masking.ratio=0.5 (2 seeds)")
    assert [r[:2] for r in rows[g + 1:g + 3]] == ["↳ ", "↳ "] and "▸ masking.ratio=0.75 (2 seeds)" in rows
    assert sum(r.startswith("↳ ") for r in rows) == 2  # the other group stays one row
    assert " ± " in down.loc[rows[g], "linear probe"] and "baseline · random init" in rows

    # Presentation of the four: the two groups as rows of means and bands, above each run's numbers.
    pres = AppTest.from_file(str(ENTRY), default_timeout=120).run()
    pres.switch_page("../pages/present.py")
    pres.query_params["runs"] = ",".join(ids)
    pres.run()
    assert not pres.exception and [h.value for h in pres.subheader][:2] == ["Seed groups", "Key numbers"]
    groups = next(t.value for t in pres.table if "runs" in t.value.columns)
    assert sorted(groups.index) == ["masking.ratio=0.5 (2 seeds)", "masking.ratio=0.75 (2 seeds)"]
    assert all("[" in v for v in groups["linear probe"])

    # A baseline run from the URL: every other run's figures carry a delta.
    at = _compare(ids, base=ids[0], group="0")
    res = at.dataframe[0].value
    runs = res[~res["run"].str.startswith("baseline · ")]
    is_base = runs["run"].str.endswith("(baseline)")
    assert is_base.sum() == 1 and runs["run"][is_base].iloc[0].startswith("r0.5-s0")
    assert all("(" in v for v in runs["linear probe"][~is_base]) and "(" not in runs["linear probe"][is_base].iloc[0]

    # A loss target left in the URL by another selection, outside these runs' losses, would make every
    # run read "step 1" (or never): it gives way to this selection's default.
    default = next(n for n in at.number_input if n.label.startswith("Time to reach training loss")).value
    at = AppTest.from_file(str(ENTRY), default_timeout=120).run()
    at.switch_page("../pages/compare.py")
    at.query_params["runs"] = ",".join(ids)
    at.query_params["loss"] = "99.0"
    at.run()
    box = next(n for n in at.number_input if n.label.startswith("Time to reach training loss"))
    assert box.value == default != 99.0
    eff_table = next(t.value for t in at.table if "step to loss" in t.value.columns)
    assert not (eff_table["step to loss"].astype(str) == "1").all()


def test_config_diff_marks_a_ratio_that_a_strategy_ignores():
    """SpecAugment's and span starts' budgets come from their parameters: their masking.ratio is not
    a difference between runs; a ratio that is used still is."""
    spec = {"masking": {"strategy": "specaugment", "ratio": 0.75}}
    spec2 = {"masking": {"strategy": "specaugment", "ratio": 0.8}}
    rand = {"masking": {"strategy": "random", "ratio": 0.8}}
    assert config_diff({"a": spec, "b": spec2}).empty
    d = config_diff({"a": spec, "b": rand}, {"a": "A", "b": "B"})
    assert d.loc["masking.ratio"].to_dict() == {"A": "(not used)", "B": "0.8"}
