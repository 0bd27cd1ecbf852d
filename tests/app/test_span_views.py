"""Run detail for a span-completion run in AppTest: each figure next to the baselines that score
the same thing (the teacher-forced bigram only under teacher forcing), and the caption on the
per-position figure. One short run on 300 TREC questions trains through the real engine."""

from __future__ import annotations

import pytest

from app.components.quality import predictor_name
from engine.store import get_run
from tests.app.pages import open_with


@pytest.fixture(scope="module")
def span_run(shared_runs):
    """The session's span run (tests/runs.py: 6 steps on the first 300 TREC questions, sentence spans,
    decoder input hidden), its workspace ``$MASKLAB_WORKSPACE`` for the module's tests."""
    run = shared_runs.get("text_span")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(run.workspace))
        yield run.run_id


def test_span_figures_sit_next_to_the_baselines_that_score_the_same_thing(span_run):
    at = open_with("../pages/run_detail.py", {"run": span_run})
    rec = get_run(span_run)
    table = next(d.value for d in at.dataframe if "predictor" in d.value.columns).set_index("predictor")
    assert list(table.columns) == ["span accuracy ↑", "span accuracy, teacher-forced ↑", "span accuracy, per position ↑"]
    assert list(table.index) == ["this run (step 6)", "bigram (both neighbours)", "bigram, teacher-forced",
                                  "most frequent per position", "most frequent token"]
    # the teacher-forced bigram reads the true previous token: it is a baseline of the teacher-forced figure only
    assert table.loc["bigram, teacher-forced", "span accuracy ↑"] == "–" == table.loc["bigram, teacher-forced", "span accuracy, per position ↑"]
    assert table.loc["bigram, teacher-forced", "span accuracy, teacher-forced ↑"].split()[0] == \
        f"{rec.latest['baseline/bigram_tf_acc/span_acc_tf']:.1%}"
    for name in ("unigram", "position", "bigram"):  # the count baselines score greedy and per-position spans alike
        row = predictor_name(f"{name}_acc")
        a, b = table.loc[row, "span accuracy ↑"], table.loc[row, "span accuracy, per position ↑"]
        assert a.split()[0] == b.split()[0] == f"{rec.latest[f'baseline/{name}_acc']:.1%}"
    note = next(c.value for c in at.caption if c.value.startswith("★ best of each column"))
    assert "span accuracy, per position: this run" in note
