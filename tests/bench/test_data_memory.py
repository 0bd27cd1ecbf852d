"""bench/data_memory.py, scaled down: random-pixel image sets of 50 MB and 200 MB, registered in
the memory-mapped format and trained a few steps in a worker subprocess each; the larger set's
peak private memory (RssAnon high-water) stays within 10% of the smaller one's, and the bench
deletes its files."""

from __future__ import annotations

import pytest

from tests.bench import load_bench


@pytest.mark.slow
def test_peak_memory_grows_with_the_batch_not_with_the_dataset(tmp_path, monkeypatch):
    bench = load_bench("data_memory")
    monkeypatch.setenv("MASKLAB_AUTO_EVAL", "0")
    rows = bench.measure([50, 200], steps=3, batch=64, root=tmp_path)
    small, large = rows
    assert (small["rows"], large["rows"]) == (50_000_000 // 3072, 200_000_000 // 3072)  # 32x32x3 images
    assert large["disk_bytes"] > 3.9 * small["disk_bytes"]
    assert all(r["status"] == "completed" for r in rows)
    assert large["peak_mem_bytes"] <= 1.10 * small["peak_mem_bytes"], rows
    assert list(tmp_path.iterdir()) == []  # the generated datasets are deleted
