"""bench/paired_step_time.py, scaled down: one short run per paired architecture through the worker."""

from __future__ import annotations

import pytest

from engine.data import load_dataset
from tests.bench import load_bench


@pytest.mark.slow
def test_each_architecture_trains_the_recipe_and_logs_its_step_times(workspace):
    bench = load_bench("paired_step_time")

    load_dataset("tuxpaint-stamps")
    sizes = {}
    for arch in bench.ARCHS:
        times, sizes[arch] = bench.step_times(workspace, arch, steps=14, threads=1)
        assert len(times) == 14 - bench.WARMUP_STEPS and all(t > 0 for t in times)  # one per timed step
    # FLAVA-style splits M3AE's joint encoder into image, text and fusion blocks: another model
    assert sizes["m3ae"] > 0 and sizes["flava"] > 0 and sizes["m3ae"] != sizes["flava"]
