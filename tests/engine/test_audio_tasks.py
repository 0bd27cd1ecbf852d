"""The audio tasks through the task seam: config resolution and errors, pre-flight checks, training
through the real loop and store (both tasks, both targets), samples, features, inference loading."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.fsdd import subset_zip
from engine.audio.features import ClipFeatures, DatasetClips
from engine.config import RunConfig, load_config
from engine.data import ImportOptions, import_source, load_dataset
from engine.errors import ConfigError
from engine.eval.inference import load_model
from engine.masking import get_masking
from engine.runner.worker import execute_run
from engine.store import create_run, get_run, load_samples
from engine.tasks import build_task, get_task, resolve
from engine.tasks.audio.common import Grid, interp_time, width_text
from engine.tasks.audio.preview import train_masks
from engine.tasks.checks import check_run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ws(tmp_path_factory, shared_data):
    """A workspace with ``digits4``: 48 real FSDD clips (digits 0-3, jackson and theo, 6 takes each),
    split by speaker through a manifest's group column, at 8 kHz."""
    ws = tmp_path_factory.mktemp("audio-tasks") / "workspace"
    subset_zip(shared_data, ws.parent / "digits4.zip", "0123", ("jackson", "theo"), 6)
    ws.mkdir()
    rep = import_source(ws.parent / "digits4.zip", "digits4", ImportOptions(group_column="speaker", sample_rate=8000,
                                                                             val_fraction=0.5), workspace=ws)
    assert rep.accepted == 48
    return ws


def cfg_of(task="audio_mae", **over):
    d = {"task": task, "data": {"dataset": "digits4", "audio": {"n_mels": 32, "clip_seconds": 0.5}},
         "model": {"preset": "tiny"}, "train": {"steps": 3, "batch_size": 8, "eval_interval": 3, "checkpoint_interval": 3,
                                                "num_vis": 2, "warmup_steps": 1}}
    for k, v in over.items():
        d[k] = {**d.get(k, {}), **v} if isinstance(v, dict) else v
    return resolve(RunConfig.from_dict(d))


def test_audio_tasks_fill_their_defaults():
    cfg = resolve(RunConfig.from_dict({"task": "audio_mae", "data": {"dataset": "x"}}))
    assert (cfg.model.arch, cfg.model.patch_size, cfg.objective.loss) == ("audio_mae_vit", 8, "mse")
    assert cfg.data.audio.model_dump() == {"n_mels": 64, "window_ms": 25.0, "hop_ms": 10.0, "f_min": 0.0, "f_max": None,
                                           "clip_seconds": 1.0}
    assert cfg.task_params == {"patch_frames": None}
    f = resolve(RunConfig.from_dict({"task": "audio_frames", "data": {"dataset": "x"}}))
    assert (f.model.arch, f.model.patch_size, f.task_params["target"]) == ("frame_transformer", 2, "mel")
    assert resolve(RunConfig.from_dict(f.to_dict())).to_dict() == f.to_dict()  # resolved config is a fixed point
    assert get_task("audio_mae").headline == ("val_spec_mse", "min")


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"data\.audio: task 'image_mim' does not use it; remove it"):
        resolve(RunConfig.from_dict({"data": {"audio": {}}}))
    with pytest.raises(ConfigError, match=r"data\.tokenizer: task 'audio_mae' does not use it"):
        resolve(RunConfig.from_dict({"task": "audio_mae", "data": {"dataset": "x", "tokenizer": {}}}))
    with pytest.raises(ConfigError, match=r"data\.audio: hop_ms \(30\) must not exceed window_ms \(25\)"):
        resolve(RunConfig.from_dict({"task": "audio_mae", "data": {"dataset": "x", "audio": {"hop_ms": 30}}}))
    with pytest.raises(ConfigError, match=r"task_params\.target"):
        resolve(RunConfig.from_dict({"task": "audio_frames", "data": {"dataset": "x"}, "task_params": {"target": "hubert"}}))


def test_preflight_names_what_does_not_fit(ws):
    with pytest.raises(ConfigError, match=r"model\.patch_size: 5 does not divide the 32 mel bins .* sizes that fit: 1, 2, 4, 8, 16, 32"):
        check_run(cfg_of(model={"patch_size": 5}), ws)
    with pytest.raises(ConfigError, match=r"data\.audio\.f_max: 6000 Hz is above half the sample rate \(4000 Hz\)"):
        check_run(cfg_of(data={"dataset": "digits4", "audio": {"f_max": 6000}}), ws)
    with pytest.raises(ConfigError, match=r"masking\.strategy: 'span' does not apply to the patch grid of audio_mae"):
        check_run(cfg_of(masking={"strategy": "span", "ratio": 0.5}), ws)
    with pytest.raises(ConfigError, match=r"masking\.ratio: random at ratio 1 masks all eligible patches"):
        check_run(cfg_of(masking={"strategy": "random", "ratio": 1.0}), ws)
    assert check_run(cfg_of(), ws).name == "digits4"


@pytest.mark.parametrize("task, strategy, params, cells", [
    ("audio_mae", "specaugment", {"F": 27, "mF": 2, "T": 40, "mT": 2, "p": 0.2}, {"F": 3, "T": 5}),  # 8x8 patches
    ("audio_frames", "time_mask", {"T": 40, "mT": 2, "p": 0.2}, {"T": 20}),  # tokens of 2 frames
])
def test_specaugment_widths_count_mel_bins_and_frames_on_any_grid(ws, task, strategy, params, cells):
    """F and T are the paper's mel bins and frames: on a grid of 8x8 patches (or 2-frame tokens)
    the masks are exactly SpecAugment's drawn there with F // 8 rows and T // 8 (or // 2) columns,
    and their time bands stay within each clip's own frames."""
    over = {"task_params": {"patch_frames": 8}, "model": {"preset": "tiny", "patch_size": 8}} if task == "audio_mae" else {}
    cfg = cfg_of(task, masking={"strategy": strategy, "params": params}, **over)
    mask, eligible = train_masks(cfg, 12, ws)
    expected = get_masking(strategy)(tuple(mask.shape), generator=torch.Generator().manual_seed(cfg.train.seed),
                                     eligible=eligible, **{**params, **cells})
    assert torch.equal(mask, expected) and mask.any() and not (mask & ~eligible).any()


def test_a_specaugment_width_under_one_patch_is_refused_in_its_units(ws):
    cfg = cfg_of(masking={"strategy": "specaugment", "params": {"F": 2, "mF": 1, "T": 3, "mT": 1}})
    with pytest.raises(ConfigError) as e:
        check_run(cfg, ws)
    assert "masks 0 of the" in str(e.value)
    assert ("(F=2 mel bins = 0 rows of 8 mel bins; T=3 frames = 0 columns of 8 frames: F and T count mel bins and "
            "frames; F >= 8 or T >= 8 hides whole ones)") in str(e.value)


@pytest.mark.parametrize("strategy, params, grid, text", [
    ("specaugment", {"F": 27, "mF": 2, "T": 40, "mT": 2, "p": 0.2}, (8, 8, 2),
     "F=27 mel bins = 3 rows of 8 mel bins; T=40 frames = 5 columns of 8 frames"),
    ("time_mask", {"T": 40, "mT": 2, "p": 0.2}, (64, 2, 1), "T=40 frames = 20 frame tokens of 2 frames"),
    ("freq_mask", {"F": 27, "mF": 2}, (4, 4, 2), "F=27 mel bins = 6 rows of 4 mel bins"),
    ("specaugment", {"F": 27, "mF": 2, "T": 40, "mT": 2, "p": 0.2}, (1, 1, 2), ""),  # cells of one bin and frame
    ("random", {}, (8, 8, 2), ""),
])
def test_width_text_says_what_specaugment_widths_come_to_on_the_grid(strategy, params, grid, text):
    cfg = cfg_of(masking={"strategy": strategy, "params": params})
    assert width_text(cfg, Grid(n_mels=64, frames=104, pf=grid[0], pt=grid[1], dims=grid[2])) == text


def test_grid_maps_masks_to_cells_and_interpolation_fills_in_time():
    g = Grid(n_mels=4, frames=6, pf=2, pt=3, dims=2)
    mask = torch.tensor([[[True, False], [False, True]]])
    cells = g.cells(mask)
    assert cells.shape == (1, 4, 6) and cells[0, :2, :3].all() and not cells[0, :2, 3:].any() and cells[0, 2:, 3:].all()
    f = Grid(n_mels=4, frames=6, pf=4, pt=2, dims=1)
    assert torch.equal(f.cells(torch.tensor([[False, True, False]]))[0, :, 2:4], torch.ones(4, 2, dtype=torch.bool))
    spec = torch.tensor([[[0.0, 9.0, 9.0, 3.0, 9.0, 9.0]]])
    vis = torch.tensor([[[True, False, False, True, False, False]]])
    assert torch.allclose(interp_time(spec, vis), torch.tensor([[[0.0, 1.0, 2.0, 3.0, 3.0, 3.0]]]))
    assert torch.equal(interp_time(spec, torch.zeros_like(vis)), torch.zeros_like(spec))


@pytest.mark.parametrize("task, extra", [
    ("audio_mae", {"masking": {"strategy": "random", "ratio": 0.8}}),
    ("audio_mae", {"masking": {"strategy": "specaugment", "params": {"F": 16, "mF": 1, "T": 12, "mT": 1, "p": 1.0}},
                   "objective": {"loss": "l1", "norm_pix_loss": True}, "task_params": {"patch_frames": 4}}),
    ("audio_frames", {"masking": {"strategy": "span_starts", "params": {"p": 0.2, "length": 3}}}),
    ("audio_frames", {"masking": {"strategy": "voiced", "ratio": 0.5, "params": {"max_len": 3}}, "task_params": {"target": "ema", "ema_decay": 0.9}}),
])
def test_a_run_trains_through_the_real_loop_and_store(ws, monkeypatch, task, extra):
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    cfg = cfg_of(task, **extra)
    run_id, d = create_run(cfg.to_dict(), ws)
    assert execute_run(d) == "completed", get_run(run_id, ws).error
    rec = get_run(run_id, ws)
    latest = rec.latest
    for k in ("loss", "val_loss", "val_spec_mse", "baseline/mean_spec_mse", "baseline/interp_spec_mse", "mask_ratio"):
        assert np.isfinite(latest[k]), k
    if cfg.task_params.get("target") == "ema":
        assert "loss/readout" in latest
    s = load_samples(run_id, workspace=ws)
    assert s.kind == "audio_spec" and s["spec"].shape == s["pred"].shape == s["mask"].shape
    n, F, T = s["spec"].shape
    assert (n, F) == (2, 32) and s["wave"].shape == s["wave_recon"].shape == s["wave_gl"].shape == (2, (T - 1) * 80)
    assert s["wave"].dtype == np.int16 and s.meta["sample_rate"] == 8000
    assert not (s["mask"] & ~s["real"][:, None, :]).any()  # padding never shown masked
    loaded = load_model(run_id, workspace=ws)  # the checkpoint rebuilds from task.json's model_dims
    if task == "audio_frames" and cfg.task_params["target"] == "ema":
        state = loaded.model.state_dict()
        teacher = [k for k in state if k.startswith("teacher.")]
        assert teacher and any(not torch.equal(state[k], state["encoder." + k[len("teacher."):]]) for k in teacher)


def test_features_average_every_window_of_a_clip(ws):
    cfg = cfg_of("audio_frames", data={"dataset": "digits4", "audio": {"n_mels": 32, "clip_seconds": 0.2}})
    torch.manual_seed(0)
    task = build_task(cfg, "cpu", ws)
    x, y = task.features("val")
    ds = load_dataset("digits4", ws)
    assert x.shape == (ds.info.n_val, 256) and np.array_equal(y, ds.labels[ds.indices("val")])
    # the longest val clip spans several 0.2 s windows: its feature is their average weighted by real frames
    rows = ds.indices("val")
    i = int(np.argmax(task.feats.n_frames[rows].numpy()))
    row, start = task.feats.windows([rows[i]], task.grid.frames)
    assert len(row) >= 3
    w = task.feats.window(row, start, task.grid.frames)
    f = task.model.features(w.spec[:, None], task.grid.eligible(w), stats=True)
    wt = w.real.sum(dim=1).float()
    assert np.allclose(x[i], ((f * wt[:, None]).sum(0) / wt.sum()).numpy(), atol=1e-5)


AUDIO_CONFIGS = ("configs/audio-mae-asterisk.yaml", "configs/audio-frames-fsdd.yaml")


def test_example_configs_pass_the_preflight_on_an_imported_set(ws):
    for path in AUDIO_CONFIGS:
        cfg = load_config(REPO / path, ["data.dataset=digits4"])
        assert cfg.task in ("audio_mae", "audio_frames")
        assert check_run(cfg, ws).name == "digits4"


@pytest.mark.slow
def test_audio_frames_config_runs_from_the_cli(ws):
    """`python -m engine run configs/audio-frames-fsdd.yaml --set data.dataset=NAME`, shortened."""
    out = subprocess.run([sys.executable, "-m", "engine", "run", "configs/audio-frames-fsdd.yaml", "--set",
                          "data.dataset=digits4", "--set", "train.steps=4", "--set", "train.eval_interval=2"],
                         capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={**os.environ, "MASKLAB_WORKSPACE": str(ws)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "completed: step 4/4" in out.stdout


def test_the_task_keeps_its_frames_in_the_workspace_and_reads_them_through_a_map(ws):
    """The frames are computed at the first task on a dataset + spec, into <workspace>/features, and
    mapped (not held in the process's memory); the next task maps the same files, and an in-memory
    computation of the same clips gives the very same batches."""
    task = build_task(cfg_of(), torch.device("cpu"), ws)
    store = task.feats.stored
    assert store is not None and store.parent == ws / "features" and isinstance(task.feats.frames, np.memmap)
    files = {p.name: p.stat().st_mtime_ns for p in store.iterdir()}
    again = build_task(cfg_of(), torch.device("cpu"), ws)
    assert again.feats.stored == store and {p.name: p.stat().st_mtime_ns for p in store.iterdir()} == files
    other = build_task(cfg_of(data={"dataset": "digits4", "audio": {"n_mels": 16, "clip_seconds": 0.5}}),
                       torch.device("cpu"), ws)
    assert other.feats.stored not in (None, store)  # another spec, another folder
    ds = load_dataset("digits4", ws)
    mem = ClipFeatures(DatasetClips(ds), task.spec, stats_rows=task.train_rows)
    rows = torch.as_tensor(task.train_rows[:8])
    g = torch.Generator().manual_seed(1)
    starts = task.feats.random_starts(rows, task.grid.frames, g)
    a, b = task.feats.window(rows, starts, task.grid.frames), mem.window(rows, starts, task.grid.frames)
    assert torch.equal(a.spec, b.spec) and torch.equal(a.voiced, b.voiced) and torch.equal(a.real, b.real)
