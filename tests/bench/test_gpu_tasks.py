"""bench/gpu_tasks.py at its smallest, on the CPU: two tasks of four steps through the real launcher,
worker and store, and the sharing check (two runs train, the others wait, the third completes after
waiting, a cancelled run ends cancelled); the JSON says it ran on the CPU. The evaluation job is left
out (``--no-eval``: its process start and figures would take this test past 40 s here); a full CPU
run of the script (its docstring's command) evaluates one. The sharing runs train 20 steps, so
that the two in the slots surely overlap however their processes' starts differ."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.bench import load_bench


@pytest.mark.slow
def test_tasks_train_through_the_worker_queue_and_cancel_on_the_cpu(tmp_path, monkeypatch):
    for name in ("MASKLAB_WORKSPACE", "MASKLAB_AUTO_EVAL", "MASKLAB_MAX_RUNS"):
        monkeypatch.delenv(name, raising=False)  # main sets them; the test's end puts them back
    bench = load_bench("gpu_tasks")
    monkeypatch.setattr(bench, "smi", lambda: None)  # the CPU path, even where nvidia-smi answers
    rc = bench.main(["--out", str(tmp_path), "--tasks", "image_mae,text_mlm", "--steps", "4", "--share-steps", "20",
                     "--threads", "1", "--no-eval"])
    result = json.loads((tmp_path / "gpu_tasks.json").read_text(encoding="utf-8"))
    assert rc == 0, result["checks"]
    assert result["cpu_only"] and result["device_name"] == "cpu" and result["passed"]
    assert result["checks"] == {"point 1": [], "point 2": []}
    assert set(result["runs"]) == {"image_mae", "text_mlm"}
    for task, r in result["runs"].items():
        assert (r["status"], r["device"], r["steps"], r["nan"]) == ("completed", "cpu", 4, False), task
        assert math.isfinite(r["loss_first"]) and math.isfinite(r["loss_last"]), task
        assert r["loss_falls"] is None, task  # 4 steps: not judged
        assert r["samples"] == r["val_points"] == 3 and "val_loss" in r["val_keys"], task  # steps 0, 2 and 4
        assert r["peak_mib"] > 0 and r["samples_per_s"] > 0 and r["amp"] is True, task
    assert "evaluation" not in result
    sh = result["sharing"]
    assert sh["most_running_at_once"] == 2 and "share-c" in sh["queued_while_two_ran"] and sh["queued_then_completed"]
    assert sh["statuses_seen"]["share-c"] == ["queued", "running", "completed"]
    assert (sh["cancelled_status"], sh["process_gone"], sh["memory_freed"]) == ("cancelled", True, None)
    log = (tmp_path / "gpu_tasks.log").read_text(encoding="utf-8").splitlines()
    assert log[0].startswith("NO GPU") and log[-1] == "NO GPU: ran on the CPU"
    assert log[-3:-1] == ["point 1: PASS", "point 2: PASS"]


def test_the_data_is_built_from_the_repository_alone(tmp_path, workspace):
    """What the device sees (the repository, scikit-learn): sentences of the three docs, labelled by
    file; four kinds of clips whose pitch moves as named; every row imported by the engine's importers."""
    bench = load_bench("gpu_tasks")
    rows = bench.sentences(400)
    assert len(rows) == 400 and {label for _, label in rows} == {"readme", "architecture", "bench"}
    assert all(30 <= len(text) <= 400 and not text.startswith(("|", "#")) for text, _ in rows)
    rng = np.random.default_rng(0)
    for kind, moves in [(0, 0), (1, 1), (2, -1), (3, 0)]:
        x = bench.clip(kind, rng)
        assert x.shape == (bench.RATE // 2,) and np.abs(x).max() <= 1.0
        halves = [np.abs(np.fft.rfft(h)).argmax() for h in (x[: len(x) // 2], x[len(x) // 2 :])]
        assert np.sign(halves[1] - halves[0]) == moves or moves == 0 and abs(halves[1] - halves[0]) <= 2, (kind, halves)
    counts = bench.build_data(tmp_path, n_texts=60, n_clips=16, n_pairs=20)
    assert counts == {"digits": 1797, "docs-text": 60, "tones": 16, "digit-captions": 20}
