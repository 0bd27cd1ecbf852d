"""What the paired pages call in the engine: the preview of both masks (the run's own masks of its
visualisation pairs) and the retrieval box's helpers (embeddings of the validation pairs and of a
typed caption, nearest neighbours), on real Tux Paint stamps and a real checkpoint."""

from __future__ import annotations

import numpy as np
import pytest

from engine.config import RunConfig
from engine.data import ImportOptions, import_source
from engine.errors import MasklabError
from engine.eval.inference import InferenceError, load_model
from engine.store import get_run, load_samples
from engine.tasks import resolve
from engine.tasks.paired.inference import embed_caption, nearest, retrieval_index
from engine.tasks.paired.preview import preview
from tests.stamps import completed_run, pairs_zip

N_PAIRS = 32
CFG = {"task": "paired", "data": {"dataset": "stamps", "tokenizer": {"vocab_size": 300, "max_len": 24}},
       "model": {"preset": "tiny"}, "masking": {"strategy": "block", "ratio": 0.5},
       "task_params": {"text_strategy": "span", "text_ratio": 0.3},
       "train": {"steps": 2, "batch_size": 8, "eval_interval": 2, "checkpoint_interval": 2, "num_vis": 3,
                 "warmup_steps": 0, "seed": 5}}


@pytest.fixture(scope="module")
def run(tmp_path_factory, shared_data):
    """``(workspace, run_id)``: the first 32 real stamps with their captions (16x16, a quarter in
    val) and a completed 2-step paired run with block image masks and span caption masks."""
    root = tmp_path_factory.mktemp("paired-inference")
    ws = root / "workspace"
    ws.mkdir()
    rep = import_source(pairs_zip(shared_data, root / "stamps.zip", N_PAIRS), "stamps", ImportOptions(val_fraction=0.25),
                        workspace=ws, image_size=16, geometry="pad")
    assert rep.accepted == N_PAIRS
    run_id = completed_run(CFG, ws)
    return ws, run_id


def test_the_preview_draws_the_masks_the_run_drew_for_its_samples(run):
    ws, run_id = run
    s = load_samples(run_id, workspace=ws)
    pv = preview(resolve(RunConfig.from_dict(get_run(run_id, ws).config)), 3, ws)
    assert pv.captions == s.meta["captions"] and np.array_equal(pv.labels, s["labels"])
    assert np.allclose(pv.images, s["images"])
    assert np.array_equal(pv.image_mask, s["mask"]) and np.array_equal(pv.text_mask, s["text_mask"])
    assert np.array_equal(pv.tokens, s["tokens"])
    assert pv.image_mask.shape == (3, 4, 4) and (pv.text_mask <= pv.eligible).all()
    assert pv.text_mask.any(axis=1).all()  # every caption hides one token at least
    other = preview(resolve(RunConfig.from_dict({**get_run(run_id, ws).config, "train": {**CFG["train"], "seed": 6}})), 3, ws)
    assert not np.array_equal(other.image_mask, pv.image_mask)  # the seed fixes the masks


def test_retrieval_helpers_rank_the_validation_pairs(run):
    ws, run_id = run
    loaded = load_model(run_id, workspace=ws)
    index = retrieval_index(loaded, ws)
    n_val = 8  # a quarter of 32 pairs, stratified
    assert len(index.captions) == len(index.labels) == len(index.images) == n_val
    assert index.image_emb.shape == index.text_emb.shape and index.image_emb.shape[0] == n_val
    assert np.allclose(np.linalg.norm(index.image_emb, axis=1), 1, atol=1e-5)
    # a typed caption is embedded as the index embeds the same caption: it finds itself first
    q = embed_caption(loaded, index.captions[3], ws)
    assert np.allclose(q, index.text_emb[3], atol=1e-5)
    hits = nearest(q, index.text_emb, 5)
    assert len(hits) == 5 and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert index.captions[hits[0][0]] == index.captions[3]
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    with pytest.raises(InferenceError, match="no word"):
        embed_caption(loaded, "   ", ws)
    assert issubclass(InferenceError, MasklabError)


def test_nearest_is_exact_with_ties_broken_by_row():
    keys = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.6, 0.8]], np.float32)
    assert nearest(np.array([1.0, 0.0], np.float32), keys, 3) == [(0, 1.0), (2, 1.0), (3, pytest.approx(0.6))]
