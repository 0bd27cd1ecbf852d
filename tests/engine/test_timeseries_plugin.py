"""A modality is a plug-in: 1-D time series (tests/plugins/timeseries.py), registered from outside
engine/ through $MASKLAB_PLUGINS, is detected, imported, masked with the span strategy (written for
tokens and frames, not edited for it), trained by the real worker into the real store and evaluated
by the worker's evaluation job (probes, fine-tune, reconstruction figures beside its baselines)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from engine.config import RunConfig
from engine.data import detect_modality, detect_source, import_source, inspect_source, list_datasets, load_dataset
from engine.data.tabular import ImportOptions
from engine.errors import ConfigError, DatasetError
from engine.masking import MASKING_REGISTRY, strategies_for
from engine.modalities import modality_names
from engine.runner.launcher import submit
from engine.store import get_run, load_samples, read_metrics
from engine.store.evaluations import latest_evaluation
from engine.tasks import resolve
from engine.tasks.checks import check_run

PLUGIN = "tests.plugins.timeseries"
T = 32


def write_series_csv(path, n_per_class: int = 90, seed: int = 0) -> None:
    """Two classes of noisy series, ``T`` steps, header ``label,t0,...``: 0 = sine of random phase,
    1 = square wave of random phase (a probe can tell them apart; the neighbours of a hidden step
    say a lot about it, more for the sine)."""
    rng = np.random.default_rng(seed)
    t = np.arange(T)
    rows = []
    for label in (0, 1):
        for _ in range(n_per_class):
            phase, period = rng.uniform(0, 2 * np.pi), rng.uniform(10, 16)
            wave = np.sin(2 * np.pi * t / period + phase)
            x = wave if label == 0 else np.sign(wave)
            rows.append([label, *(x + 0.05 * rng.standard_normal(T)).round(4)])
    rng.shuffle(rows)
    lines = ["label," + ",".join(f"t{i}" for i in range(T))] + [",".join(str(v) for v in [int(r[0]), *r[1:]]) for r in rows]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def series(workspace, monkeypatch, tmp_path):
    """The plug-in loaded (as every process loads it: $MASKLAB_PLUGINS) and a CSV of 180 series."""
    monkeypatch.setenv("MASKLAB_PLUGINS", PLUGIN)
    src = tmp_path / "waves.csv"
    write_series_csv(src)
    return src


def test_the_registry_derives_detection_masking_and_storage_for_the_plugin(series, tmp_path):
    assert detect_source(series) == "series_csv" and detect_modality(series) == "timeseries"
    words = tmp_path / "words.csv"
    words.write_text("label,text\nham,hello there\nspam,buy now\n")
    assert detect_source(words) == "text"  # the plug-in claims CSVs of numbers only
    assert "timeseries" in modality_names()

    # Masking: every strategy of a plain sequence (span included, unedited), none of text or audio only.
    offered = strategies_for("timeseries", 1)
    assert {"span", "span_starts", "random", "bernoulli", "periodic", "region", "hierarchical"} <= set(offered)
    assert not {"whole_word", "sentence_span", "time_mask", "voiced", "block", "superpixel"} & set(offered)
    assert MASKING_REGISTRY["span"].grids == ("seq-1d",) and "timeseries" in MASKING_REGISTRY["span"].modalities
    assert strategies_for("timeseries", 2) == []

    plan = inspect_source(series)
    assert (plan.modality, plan.n_items, plan.class_names) == ("timeseries", 180, ("0", "1"))
    assert plan.label_counts == {"0": 90, "1": 90}
    with pytest.raises(DatasetError, match="min_chars do not apply to a CSV of numbers"):
        inspect_source(series, ImportOptions(min_chars=3))

    report = import_source(series, "waves")
    info = report.dataset
    assert (info.modality, info.n_train + info.n_val, info.stats["length"]) == ("timeseries", 180, T)
    ds = load_dataset("waves")  # read back through the one storage path
    assert type(ds).__name__ == "SeriesDataset" and ds.values.shape == (180, T) and ds.values.dtype == np.float32
    assert [i.name for i in list_datasets(modality="timeseries")] == ["waves"]

    check_run(RunConfig.from_dict({"task": "series_mae", "data": {"dataset": "waves"},
                                   "masking": {"strategy": "span", "ratio": 0.3}}))
    with pytest.raises(ConfigError, match=r"masking\.strategy: 'whole_word' does not mask time steps; strategies for them: .*span"):
        check_run(RunConfig.from_dict({"task": "series_mae", "data": {"dataset": "waves"},
                                       "masking": {"strategy": "whole_word", "ratio": 0.3}}))


@pytest.mark.slow
def test_timeseries_trains_through_the_real_worker_and_is_evaluated(series, monkeypatch, one_thread):
    """Import, train in a background worker started by the launcher, and the worker's evaluation of
    the final checkpoint (``evaluation.auto``): about 15 s on one CPU thread."""
    import_source(series, "waves")
    monkeypatch.setenv("MASKLAB_AUTO_EVAL", "1")
    cfg = resolve(RunConfig.from_dict({
        "task": "series_mae", "data": {"dataset": "waves"}, "masking": {"strategy": "span", "ratio": 0.3},
        "train": {"steps": 300, "batch_size": 32, "eval_interval": 150, "lr": 3e-3, "warmup_steps": 10, "device": "cpu"},
        "evaluation": {"max_rows": 200, "finetune_epochs": 2, "tsne_max_rows": 0, "budget": None},
    }))  # fmt: skip
    assert (cfg.model.arch, cfg.objective.loss) == ("series_transformer", "mse")
    run_id = submit(cfg)
    deadline = time.time() + 150
    while get_run(run_id).is_active and time.time() < deadline:
        time.sleep(0.5)
    rec = get_run(run_id)
    assert rec.status == "completed", (rec.error, (rec.path / "worker.log").read_text())

    val = read_metrics([run_id], ["val_loss"], max_points=None)
    assert val.step.tolist() == [0, 150, 300]
    assert val.value.iloc[-1] < 0.7 * val.value.iloc[0]  # it learned to fill in hidden steps
    base = read_metrics([run_id], ["baseline/mean", "baseline/interp"], max_points=None)
    assert set(base.step) == {0}
    assert val.value.iloc[-1] < base.set_index("key").value.min()  # and beats both trivial predictors
    s = load_samples(run_id)
    assert s.kind == "series" and s["pred"].shape == (4, T) and s["mask"].dtype == bool

    ev = latest_evaluation(run_id)
    assert ev is not None and ev.step == 300, (rec.path / "worker.log").read_text()
    assert set(ev.quality) == {"trained", "mean", "interp"}
    assert ev.quality["trained"]["mse"] < ev.quality["mean"]["mse"]  # better than the trivial guess
    assert abs(ev.reconstruction["val_mse"] - ev.quality["trained"]["mse"]) < 1e-6  # one figure, two views
    rep = ev.representation
    assert set(rep) >= {"trained", "random_init", "raw_input", "chance"} and 0 <= rep["trained"]["probe_acc"] <= 1
    assert rep["trained"]["probe_acc"] > rep["chance"]["probe_acc"]
    assert set(ev.downstream) == {"trained", "random_init"} and ev.downstream["trained"]["finetune_steps"] > 0
    assert not [n for n in ev.notes if "fine-tune" in n]
