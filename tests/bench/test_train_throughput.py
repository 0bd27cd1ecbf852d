"""bench/train_throughput.py at tiny batch sizes, one repeat: every case runs end to end and prints
both sides, their ratio and the fraction of the matmul limit (no figure is asserted)."""

from __future__ import annotations

import re

import pytest

from tests.bench import load_bench

pytest.importorskip("transformers")


@pytest.mark.slow
def test_bench_prints_both_sides_and_a_ratio_for_every_case(capsys):
    bench = load_bench("train_throughput")
    assert bench.main(["--scale", "32", "--repeats", "1", "--steps", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"float32 2048x2048 matmul: [\d.]+ GFLOP/s", out)) == 4  # one before each case
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^(mae_tiny|mae_small|bert_mini|audio_frames) .*$", out, re.M)}
    assert set(rows) == {"mae_tiny", "mae_small", "bert_mini", "audio_frames"}
    for case in ("mae_tiny", "mae_small", "bert_mini"):
        assert re.search(r"masklab .* \d+% +[\d.]+x  \(repeats: [\d.]+\)$", rows[case]), rows[case]
    assert out.count("HF ViTMAEForPreTraining") == 2 and out.count("HF BertForMaskedLM") == 1
    assert "no Hugging Face model of this recipe" in rows["audio_frames"]


def test_bench_cases_see_the_same_masks_on_both_sides():
    """The reference hides exactly masklab's patches (the case builder checks it) and both MAE sides
    count the same model FLOPs per step, except the patch embedding of the masked patches, which
    masklab skips (forward and weight gradient: 2 x 2 x B x masked x P*P*C x D)."""
    import torch

    from engine.perf import count_step_flops

    bench = load_bench("train_throughput")
    torch.manual_seed(0)
    case = bench.build_cases(["mae_tiny"], 32, torch.device("cpu"))[0]
    ml, hf = case.sides
    B, masked = case.batch, 49 - int(49 * 0.25)
    assert count_step_flops(lambda: hf.loss(0)) - count_step_flops(lambda: ml.loss(0)) == 4 * B * masked * 16 * 192
