"""bench/audio_probe.py, scaled down: 4 real FSDD speakers x 4 digits x 5 takes, one short
pretraining per fold, the protocol's rules checked (the held-out speaker, pretraining on the other
three only, the baseline on the same clips)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.fsdd import subset_zip
from engine.config import RunConfig
from engine.data import load_dataset
from engine.eval import linear_probe, logmel_stats
from engine.store import get_run
from engine.tasks import build_task, resolve
from tests.bench import load_bench


@pytest.mark.slow
def test_speaker_folds_pretrain_on_three_speakers_and_probe_the_fourth(workspace, shared_data, capsys):
    bench = load_bench("audio_probe")
    src = subset_zip(shared_data, workspace.parent / "fsdd-small.zip", "0123", bench.SPEAKERS, 5)
    speakers = bench.manifest_speakers(src)
    assert len(speakers) == 80
    for s in bench.SPEAKERS:  # each speaker alone is the validation split of its fold
        name = bench.import_fold(src, s, workspace)
        ds = load_dataset(name, workspace)
        assert {ds.info.group_names[g] for g in ds.groups[ds.split == 1]} == {s} and ds.info.n_val == 20
    out = bench.run_fold("fsdd-theo", "mel", workspace, steps=20, untrained=True)
    cfg = out["config"]
    assert cfg["train"]["num_threads"] == 1 and cfg["train"]["steps"] == 20 and cfg["task_params"]["target"] == "mel"
    assert get_run(out["run_id"], workspace).config["data"]["dataset"] == "fsdd-theo"  # trained on theo's fold only
    for k in ("model", "baseline", "untrained"):
        assert 0.0 <= out[k] <= 1.0
    # the baseline figure is the probe on log-mel mean/std of the same clips
    task = build_task(resolve(RunConfig.from_dict(cfg)), "cpu", workspace)
    ds = task._ds
    tr, va = ds.indices("train"), ds.indices("val")
    want = linear_probe(logmel_stats(task.feats, tr), ds.labels[tr], logmel_stats(task.feats, va), ds.labels[va],
                        groups=ds.groups[tr]).accuracy
    assert out["baseline"] == pytest.approx(want)
    assert np.isfinite(out["val_spec_mse"]) and out["cpu_seconds"] > 0
    assert bench.main(["--source", str(src), "--folds", "jackson", "--targets", "ema", "--steps", "3",
                       "--workspace", str(workspace.parent / "cli")]) == 0
    text = capsys.readouterr().out
    assert "log-mel mean/std" in text and "pretrained, ema target" in text and "3 steps x batch 32" in text
