"""bench/train_throughput.py at tiny batch sizes, one repeat: every case runs end to end and prints
both sides, their ratio and the fraction of the matmul limit (no figure is asserted)."""

from __future__ import annotations

import re

import pytest
import torch

from engine.training.perf import count_step_flops
from tests.bench import load_bench


@pytest.mark.slow
def test_bench_prints_both_sides_and_a_ratio_for_every_case(capsys):
    pytest.importorskip("transformers")  # the benchmark-only extra (requirements-bench.txt)
    bench = load_bench("train_throughput")
    assert bench.main(["--scale", "32", "--repeats", "1", "--steps", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"float32 2048x2048 matmul: [\d.]+ GFLOP/s", out)) == len(bench.CASES)  # one before each
    rows = {m.group(1): m.group(0) for m in re.finditer(rf"^({'|'.join(bench.CASES)}) .*$", out, re.M)}
    assert set(rows) == set(bench.CASES) == {"mae_tiny", "mae_small", "bert_mini", "audio_mae", "audio_frames",
                                             "paired_m3ae", "paired_flava"}
    for case in ("mae_tiny", "mae_small", "bert_mini", "audio_mae"):
        assert re.search(r"masklab .* \d+% +[\d.]+x  \(repeats: [\d.]+\)$", rows[case]), rows[case]
    assert out.count("HF ViTMAEForPreTraining") == 3 and out.count("HF BertForMaskedLM") == 1
    for case in ("audio_frames", "paired_m3ae", "paired_flava"):
        assert re.search(r"masklab .* \d+% +-  \(no Hugging Face model of this recipe\)$", rows[case]), rows[case]


@pytest.mark.parametrize("name, L, keep, patch_values, D, Dd, mlp", [
    ("mae_tiny", 49, int(49 * 0.25), 4 * 4 * 1, 192, 128, 512),
    ("audio_mae", 64, int(64 * 0.2), 8 * 8 * 1, 192, 128, 512),
])
def test_bench_cases_see_the_same_masks_on_both_sides(name, L, keep, patch_values, D, Dd, mlp):
    """The reference hides exactly masklab's patches (the case builder checks it) and both MAE sides
    count the same model FLOPs per step, except the work masklab skips because the loss never reads
    it: the patch embedding of the masked patches (forward and weight gradient: 2 x 2 x B x masked x
    P*P*C x D), and the last decoder block and pixel head at the rows that are not predicted (the
    class token and the visible patches: query and output projections, MLP, head, and their
    attention rows, forward and both gradients: 3 x the forward's FLOPs)."""
    pytest.importorskip("transformers")  # the reference side
    bench = load_bench("train_throughput")
    torch.manual_seed(0)
    case = bench.build_cases([name], 32, torch.device("cpu"))[0]
    ml, hf = case.sides
    B, masked, skipped = case.batch, L - keep, 1 + keep
    embed = 4 * B * masked * patch_values * D
    last_block = 3 * B * skipped * (2 * (2 * Dd * Dd + 2 * Dd * mlp + Dd * patch_values) + 4 * (1 + L) * Dd)
    assert count_step_flops(lambda: hf.loss(0)) - count_step_flops(lambda: ml.loss(0)) == embed + last_block


def test_paired_cases_hide_the_recipes_shares_of_patches_and_caption_tokens():
    """The paired batches: 75% of the 16 patches, round(15%) of each caption's real tokens (at least
    one), never [CLS], [SEP] or padding; a step's loss is finite and reaches every trained weight."""
    bench = load_bench("train_throughput")
    for case in bench.build_cases(["paired_m3ae", "paired_flava"], 1, torch.device("cpu")):
        (side,) = case.sides
        imgs, ids, real, img_mask, txt_mask = case.batches[0]
        assert imgs.shape == (32, 3, 32, 32) and ids.shape == real.shape == txt_mask.shape == (32, 48)
        assert (img_mask.sum(1) == 12).all()
        n = real.sum(1)
        assert ((n >= 5) & (n <= 30)).all()
        specials = torch.zeros(32, 48, dtype=torch.long)  # [CLS] first, [SEP] after the last real token, then [PAD]
        specials[:, 0] = bench.CLS_ID
        specials[torch.arange(32), n + 1] = bench.SEP_ID
        assert torch.equal(ids.masked_fill(real, 0), specials) and (ids[real] >= len(bench.SPECIAL_IDS)).all()
        assert torch.equal(txt_mask.sum(1), (0.15 * n).round().clamp_min(1).long()) and not (txt_mask & ~real).any()
        loss = side.loss(0)
        loss.backward()
        assert torch.isfinite(loss)
        assert [k for k, p in side.model.named_parameters() if p.requires_grad and p.grad is None] == [], case.name
