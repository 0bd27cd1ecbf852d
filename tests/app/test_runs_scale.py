"""The Runs page with more runs than a page: its table is filtered and paged on the server (100 rows),
with the filter and page in the URL; the workspace is built with the store's own writers
(bench/store_scale.py's builder)."""

from __future__ import annotations

import numpy as np
from streamlit.testing.v1 import AppTest

from bench.store_scale import build
from tests.app.pages import ENTRY


def _runs_page(params: dict[str, str]) -> AppTest:
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_run_table_is_filtered_and_paged_on_the_server(workspace):
    ids = build(workspace, 130, 0, 20, np.random.default_rng(0), ["completed"] * 3 + ["failed"])
    at = _runs_page({})
    table = at.dataframe[0].value
    assert len(table) == 100 and list(table["run id"]) == ids[::-1][:100]  # newest first, one page
    assert any("130 runs, rows 1–100 shown" in c.value for c in at.caption)
    at = _runs_page({"page": "2"})
    assert list(at.dataframe[0].value["run id"]) == ids[::-1][100:]
    at = _runs_page({"q": "bench-011", "status": "completed"})
    names = sorted(at.dataframe[0].value["run"])
    want = [f"bench-{i:04d}" for i in range(110, 120) if i % 4 != 3]  # every 4th built run failed
    assert [n.split(" · ")[0] for n in names] == want
    assert any(f"{len(want)} of 130 runs match" in c.value for c in at.caption)
    at = _runs_page({"page": "2"})
    at.text_input(key="runs_q").set_value("bench").run()  # all 130 match: still 2 pages, but back to the first
    assert list(at.dataframe[0].value["run id"]) == ids[::-1][:100] and "page" not in at.query_params
    at.text_input(key="runs_q").set_value("no such run").run()
    assert not at.dataframe and "No run matches the filter." in [c.value for c in at.caption]
    assert at.query_params["q"] in ("no such run", ["no such run"]) and "page" not in at.query_params
