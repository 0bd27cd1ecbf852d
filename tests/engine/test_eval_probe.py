"""The linear probe and the log-mel mean/std baseline (engine.eval)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import LeaveOneGroupOut, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from engine.audio.features import ClipFeatures, FeatureSpec
from engine.config import AudioConfig
from engine.eval import linear_probe, logmel_stats


def blobs(n_per=30, d=5, shift=4.0, seed=0):
    """Three Gaussian classes whose means differ by ``shift`` along one axis each."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.normal(size=(n_per, d)) + shift * np.eye(d)[k] for k in range(3)])
    return x, np.repeat(np.arange(3), n_per)


def test_probe_reads_linearly_separable_classes_and_not_noise():
    x, y = blobs()
    xv, yv = blobs(seed=1)
    r = linear_probe(x, y, xv, yv)
    assert r.accuracy >= 0.95 and r.dim == 5 and set(r.cv) == {0.01, 0.1, 1.0} and r.C in r.cv
    # labels that the features do not carry: near chance (1/3) on 90 rows
    noise = linear_probe(x, np.random.default_rng(2).permutation(y), xv, yv)
    assert noise.accuracy < 0.6


def test_probe_chooses_the_strength_by_leaving_one_group_out():
    x, y = blobs(n_per=20)
    groups = np.tile(np.arange(4), 15)
    r = linear_probe(x, y, *blobs(seed=3), groups=groups, Cs=(0.1, 1.0))

    for C in (0.1, 1.0):
        pipe = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000, random_state=0))
        want = cross_val_score(pipe, x, y, groups=groups, cv=LeaveOneGroupOut()).mean()
        assert r.cv[C] == pytest.approx(want)


def test_probe_refuses_one_class_and_mismatched_rows():
    x, y = blobs()
    with pytest.raises(ValueError, match="at least two classes"):
        linear_probe(x, np.zeros_like(y), x, y)
    with pytest.raises(ValueError, match="89 val rows for 90 labels"):
        linear_probe(x, y, x[:-1], y)


def test_logmel_stats_are_each_clips_mean_and_std_per_bin(shared_data):
    rec = shared_data / "fsdd" / "recordings"
    clips = [sf.read(rec / f, dtype="float32")[0] for f in ("0_jackson_0.wav", "7_theo_3.wav")]
    clips.append(clips[0][:40])  # 40 samples at 8 kHz, a 10 ms hop: one frame
    spec = FeatureSpec.from_config(AudioConfig(n_mels=16), 8000)
    feats = ClipFeatures(clips, spec)
    out = logmel_stats(feats)
    assert out.shape == (3, 32) and out.dtype == np.float32
    for r in range(3):
        m = feats.clip_logmel(r).numpy()
        assert np.allclose(out[r, :16], m.mean(axis=1), atol=1e-5)
        assert np.allclose(out[r, 16:], m.std(axis=1), atol=1e-5)
    assert int(feats.n_frames[2]) == 1 and not out[2, 16:].any()
    assert np.array_equal(logmel_stats(feats, np.array([1])), out[1:2])
    assert torch.equal(feats.n_frames, torch.tensor([1 + len(c) // 80 for c in clips]))
