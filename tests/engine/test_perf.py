"""engine.training.perf: the AdamW implementation choice, model FLOPs of a step, MFU, device copies."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engine.training.perf import adamw, count_rows_flops, count_step_flops, mfu, peak_flops, pin, to_device


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))


def test_auto_picks_fused_on_cpu_and_every_impl_gives_adamw_s_update():
    results = {}
    for impl in ("auto", "fused", "foreach", "loop"):
        m = _model()
        opt = adamw(m.parameters(), lr=1e-2, impl=impl, weight_decay=0.1)
        if impl == "auto":
            assert opt.defaults["fused"] is True
        x = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))
        for _ in range(3):
            opt.zero_grad()
            m(x).pow(2).mean().backward()
            opt.step()
        results[impl] = torch.cat([p.detach().flatten() for p in m.parameters()])
    for impl in ("fused", "foreach", "auto"):
        torch.testing.assert_close(results[impl], results["loop"], rtol=1e-5, atol=1e-6)
    assert not torch.equal(results["loop"], torch.cat([p.detach().flatten() for p in _model().parameters()]))


def test_adamw_refuses_an_unknown_impl():
    with pytest.raises(ValueError, match="impl must be auto, fused, foreach or loop"):
        adamw(_model().parameters(), lr=1e-3, impl="apex")


def test_count_step_flops_counts_forward_and_backward_matmuls():
    m = _model()
    x = torch.randn(5, 8)
    # forward 2*B*(8*16 + 16*4); backward: weight grads of both layers, input grad of the second only
    fwd = 2 * 5 * (8 * 16 + 16 * 4)
    assert count_step_flops(lambda: m(x).sum()) == fwd + fwd + 2 * 5 * 16 * 4
    assert all(p.grad is not None for p in m.parameters())


def test_count_step_flops_sees_attention():
    q = torch.randn(2, 3, 7, 4, requires_grad=True)
    f = count_step_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q).sum())
    # forward q k^T and p v: 2 * (2*3*7*7*4) each; backward four more of the same size
    assert f == 6 * 2 * (2 * 3 * 7 * 7 * 4)


def test_mfu_and_peaks():
    assert mfu(1e12, 0.5, 4e12) == pytest.approx(0.5)
    assert peak_flops(torch.device("cpu")) is None


def test_copies_on_cpu_are_the_tensor_itself():
    t = torch.arange(4)
    assert pin(t, torch.device("cpu")) is t and to_device(t, torch.device("cpu")) is t


def test_a_step_too_large_for_the_device_is_counted_on_fewer_rows_and_scaled():
    m = torch.nn.Linear(16, 4)
    x = torch.randn(12, 16)
    freed = []

    def step_for(rows):
        if rows > 3:  # as a CUDA step whose math attention does not fit
            raise torch.OutOfMemoryError("CUDA out of memory")
        return lambda: m(x[:rows]).sum()

    flops, rows = count_rows_flops(step_for, 12, lambda: freed.append(1))
    assert (flops, rows, len(freed)) == (count_step_flops(lambda: m(x).sum()), 3, 2)  # 12 -> 6 -> 3 rows

    def never_fits(rows):
        raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(torch.OutOfMemoryError):
        count_rows_flops(never_fits, 4)
