"""engine.training.schedule.lr_at: linear warmup then half-cycle cosine (MAE's lr_sched)."""

from __future__ import annotations

import math

import pytest

from engine.training.schedule import lr_at

KW = dict(base_lr=1e-3, min_lr=1e-5, warmup_steps=10, total_steps=100)


def test_warmup_is_linear_from_zero_to_base_lr():
    assert lr_at(0, **KW) == 0.0
    assert lr_at(5, **KW) == pytest.approx(5e-4)
    assert lr_at(10, **KW) == pytest.approx(1e-3)


def test_cosine_reaches_min_lr_at_the_end_and_stays():
    assert lr_at(100, **KW) == pytest.approx(1e-5)
    assert lr_at(1000, **KW) == pytest.approx(1e-5)
    assert lr_at(55, **KW) == pytest.approx(1e-5 + (1e-3 - 1e-5) * 0.5)  # half way: mid value


def test_monotone_increasing_in_warmup_and_decreasing_after():
    lrs = [lr_at(s, **KW) for s in range(101)]
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:11]))
    assert all(a > b for a, b in zip(lrs[10:100], lrs[11:101]))
    assert all(1e-5 <= v <= 1e-3 for v in lrs[10:])


def test_no_warmup_and_warmup_longer_than_run():
    assert lr_at(0, base_lr=1.0, min_lr=0.0, warmup_steps=0, total_steps=10) == 1.0
    assert lr_at(10, base_lr=1.0, min_lr=0.0, warmup_steps=0, total_steps=10) == pytest.approx(0.0)
    assert lr_at(5, base_lr=1.0, min_lr=0.1, warmup_steps=10, total_steps=5) == pytest.approx(0.5)
    assert math.isfinite(lr_at(20, base_lr=1.0, min_lr=0.1, warmup_steps=10, total_steps=5))


def test_bad_arguments():
    with pytest.raises(ValueError):
        lr_at(-1, **KW)
    with pytest.raises(ValueError):
        lr_at(0, base_lr=1.0, min_lr=0.0, warmup_steps=0, total_steps=0)
