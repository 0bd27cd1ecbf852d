"""Run detail for a span-completion run in AppTest: each figure next to the baselines that score
the same thing (the teacher-forced bigram only under teacher forcing), and the caption on the
per-position figure. One short run on 300 TREC questions trains through the real engine."""

from __future__ import annotations

import pytest

from app.components.quality import predictor_name
from engine.config import RunConfig
from engine.data import ImportOptions, import_source
from engine.store import create_run, get_run
from engine.worker import execute_run
from tests.app.pages import open_with


@pytest.fixture(scope="module")
def span_run(tmp_path_factory, shared_data):
    ws = tmp_path_factory.mktemp("span") / "workspace"
    ws.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(ws))
        src = ws.parent / "trec300.tsv"
        src.write_text("\n".join((shared_data / "trec" / "train.tsv").read_text(encoding="utf-8").splitlines()[:301]) + "\n",
                       encoding="utf-8")
        import_source(src, "trec", ImportOptions(label_column="label"))
        cfg = RunConfig.from_dict({
            "name": "span-views", "task": "text_span", "task_params": {"decoder_input_mask": 1.0},
            "data": {"dataset": "trec", "tokenizer": {"vocab_size": 300, "max_len": 48}},
            "masking": {"strategy": "sentence_span"}, "model": {"preset": "tiny"},
            "train": {"steps": 6, "batch_size": 8, "eval_interval": 3, "checkpoint_interval": 6, "warmup_steps": 1,
                      "device": "cpu"}})
        run_id, d = create_run(cfg.to_dict())
        assert execute_run(d) == "completed", get_run(run_id).error
        yield run_id


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
