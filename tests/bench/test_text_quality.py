"""bench/text_quality.py, scaled down: the TREC MLM recipe and the AG News span recipe, shortened,
through the real engine on real data."""

from __future__ import annotations

import pytest

from tests.bench import load_bench

MLM_STEPS, MLM_MARGIN = 2000, 0.0  # two thirds of the recipe: above the best baseline (the full run: +5 points)
SPAN_STEPS = 1000  # a third of the span recipe (bench/README.md: 4.36% against 4.06% at this length)


def _bench():
    return load_bench("text_quality")


@pytest.mark.slow
def test_short_mlm_recipe_on_trec_beats_the_three_baselines(workspace, shared_data, capsys):
    """MLM_STEPS steps of the TREC recipe (two thirds of it): val top-1 above the best count baseline, on
    the run's own masks and tokenizer."""
    bench = _bench()
    out = bench.run("mlm", workspace, steps=MLM_STEPS)
    cfg = out["config"]
    assert cfg["train"]["steps"] == MLM_STEPS and cfg["data"]["tokenizer"]["kind"] == "char"
    assert cfg["masking"]["ratio"] == 0.15 and cfg["model"]["preset"] == "tiny"
    base = out["baselines"]
    assert set(base) == {"unigram_top1", "position_top1", "bigram_top1"}
    assert base["unigram_top1"] < base["position_top1"] < base["bigram_top1"] == out["best_baseline"]
    assert out["value"] >= out["best_baseline"] + MLM_MARGIN, (out["value"], base)
    assert out["latest"]["val_top5"] > out["value"]
    assert bench.main(["mlm", "--steps", "3", "--workspace", str(workspace.parent / "cli")]) == 0
    text = capsys.readouterr().out
    assert "baseline: bigram_top1" in text and "margin over the best baseline" in text and "s CPU" in text
    assert "tokenizer: char" in text and "3 steps x batch 32" in text


@pytest.mark.slow
def test_short_span_recipe_on_ag_news_beats_the_three_baselines(workspace, shared_data):
    """SPAN_STEPS steps of the AG News span recipe: the per-position span token accuracy above the
    best count baseline, on the run's own spans and tokenizer; the greedy figures are logged too."""
    bench = _bench()
    out = bench.run("span", workspace, steps=SPAN_STEPS)
    cfg = out["config"]
    assert cfg["task"] == "text_span" and cfg["task_params"] == {"decoder_input_mask": 1.0}
    assert out["metric"] == "val_span_acc_pos" and cfg["train"]["steps"] == SPAN_STEPS
    base = out["baselines"]
    assert set(base) == {"unigram_acc", "position_acc", "bigram_acc"}
    assert out["value"] > out["best_baseline"], (out["value"], base)
    for k in ("val_span_acc", "val_span_acc_len", "val_span_acc_tf", "val_exact"):
        assert k in out["latest"], k
