"""bench/throughput_floor.py: the recorder sees every matmul of a training step (forward, backward
and the optimiser), replays each category on fresh inputs, and the script prints its table."""

from __future__ import annotations

import re

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from engine.training.loop import param_groups
from engine.training.perf import adamw, count_step_flops
from tests.bench import load_bench


def _flops(func, args) -> int:
    """2 x M x K x N of a recorded mm / addmm / bmm / baddbmm call (its operand specs)."""
    name = func.overloadpacket.__name__
    a, b = (args[0], args[1]) if name in ("mm", "bmm") else (args[1], args[2])
    batch = a.shape[0] if name in ("bmm", "baddbmm") else 1
    m, k = a.shape[-2:]
    return 2 * batch * m * k * b.shape[-1]


def test_the_recorded_matmuls_are_every_matmul_of_the_step():
    """Under the math attention kernel (the one ``count_step_flops`` counts with), the matmuls the
    recorder sees in one step of masklab's MAE add up to the FLOP counter's total: none of the
    forward's, the backward's or the optimiser's operations is missed or counted twice."""
    floor = load_bench("throughput_floor")
    tt = floor.tt
    torch.manual_seed(0)
    case = tt.mae_case("mae_tiny", 8, 1, 28, 4, (64, 2, 2, 256), (32, 1, 2, 128), 0.75,
                       torch.Generator().manual_seed(0), torch.device("cpu"), hf=False)
    (side,) = case.sides
    side.opt = adamw(param_groups(side.model, 0.05), lr=1e-4, impl="fused")
    with sdpa_kernel(SDPBackend.MATH):
        calls = floor.record_step(side)
    recorded = sum(_flops(f, a) for cat, f, a, _ in calls if cat == "matmul")
    side.opt.zero_grad(set_to_none=True)
    assert recorded == count_step_flops(lambda: side.loss(0))
    cats = {cat for cat, *_ in calls}
    assert cats == {"matmul", "attention", "gelu", "layer_norm", "adamw"}
    parts = floor.replay_seconds(calls, repeats=1)
    assert set(parts) == cats and all(v > 0 for v in parts.values())


@pytest.mark.slow
def test_floor_script_prints_both_sides_and_the_best_ratio(capsys):
    pytest.importorskip("transformers")  # the reference side (requirements-bench.txt)
    floor = load_bench("throughput_floor")
    assert floor.main(["--scale", "32", "--repeats", "1", "--threads", "1", "--only", "mae_tiny"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^mae_tiny +masklab +[\d.]+( +[\d.]+){5} +[\d.]+ +-?[\d.]+ +[\d.]+$", out, re.M), out
    assert re.search(r"^ +HF ViTMAEForPreTraining +[\d.]+", out, re.M), out
    assert re.search(r"measured ratio [\d.]+x; best ratio if everything outside the floor cost nothing: [\d.]+x "
                     r"\((above|BELOW) the 1.3x target\); with every matmul warm: [\d.]+x \((above|BELOW)\)", out), out
