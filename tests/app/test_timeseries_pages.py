"""A plug-in modality shows on the dashboard with no edit outside its own files: the time-series
modality (tests/plugins/timeseries.py) names its views (tests/plugins/timeseries_ui.py) as its
``ui``; only ``$MASKLAB_PLUGINS=tests.plugins.timeseries`` is set, so Run detail and Compare find
the views through the registry and import them on demand."""

from __future__ import annotations

import json
import sys

import pytest

from app.modalities import UI_REGISTRY, sample_title, sample_view
from engine.data import import_source
from tests.app.pages import open_with
from tests.engine.test_timeseries_plugin import PLUGIN, write_series_csv
from tests.stamps import completed_run

CFG = {"task": "series_mae", "data": {"dataset": "waves"}, "masking": {"strategy": "span", "ratio": 0.3},
       "evaluation": {"auto": False},
       "train": {"steps": 4, "batch_size": 16, "eval_interval": 2, "checkpoint_interval": 4, "warmup_steps": 0,
                 "device": "cpu", "num_threads": 1}}


@pytest.fixture
def two_series_runs(workspace, monkeypatch, tmp_path):
    """Two tiny completed time-series runs (seeds 0 and 1) on 60 imported series."""
    monkeypatch.setenv("MASKLAB_PLUGINS", PLUGIN)
    src = tmp_path / "waves.csv"
    write_series_csv(src, n_per_class=30)
    import_source(src, "waves")
    return [completed_run({**CFG, "name": f"waves-{seed}", "train": {**CFG["train"], "seed": seed}}, workspace,
                          evaluate=False) for seed in (0, 1)]  # fmt: skip


def series_charts(at) -> list[str]:
    """The descriptions of the page's per-series charts (``series <i>``), in order."""
    specs = [json.loads(el.proto.spec) for el in at.get("vega_lite_chart")]
    return [s["description"] for s in specs if str(s.get("description", "")).startswith("series ")]


def test_run_detail_presentation_and_compare_show_the_plugin_modality(two_series_runs):
    first, second = two_series_runs
    at = open_with("../pages/run_detail.py", {"run": first})
    assert "tests.plugins.timeseries_ui" in sys.modules and "timeseries" in UI_REGISTRY  # imported on demand
    assert "Validation series and predictions" in [h.value for h in at.subheader]
    assert not [i.value for i in at.info if "no view" in i.value]
    assert any("fixed validation series" in c.value for c in at.caption)
    assert series_charts(at) == [f"series {i}" for i in range(4)]  # one chart per saved validation series
    assert sample_title({"task": "series_mae"}) == "Validation series and predictions"
    assert sample_view("series").compare is not None

    at = open_with("../pages/present.py", {"run": first})  # the presentation view draws them too
    assert "Validation series and predictions" in [h.value for h in at.subheader] and len(series_charts(at)) == 4

    at = open_with("../pages/compare.py", {"runs": f"{first},{second}"})
    assert not [c.value for c in at.caption if "No compare view" in c.value]
    assert any("Latest saved samples of each run" in c.value for c in at.caption)
    assert series_charts(at) == ["series 0", "series 1"]  # both runs' predictions on each
