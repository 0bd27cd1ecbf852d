"""What New run and Mask lab show of a text config before a run: the run's visualisation texts
with the masks the run will draw (:func:`preview`), and a train batch's masks for Mask lab's
statistics (:func:`train_masks`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.config import RunConfig
from engine.data import load_dataset, representative
from engine.tasks.text.common import EVAL_MAX_ROWS, text_rows, token_strings, tokenizer_for, vis_masks, vis_rows


@dataclass(frozen=True)
class TextPreview:
    """What the dashboard shows of a text config before a run: the run's ``n`` visualisation texts (:func:`vis_rows`),
    their tokens (``[N, L]`` strings, ``""`` at padding) and the run's masks of them (``[N, L]`` bool), and
    ``vocab_size``, the ids the run's tokenizer has as trained on the train texts (specials included;
    beside ``data.tokenizer.vocab_size``: :func:`engine.config.vocab_shortfall`)."""

    texts: list[str]
    tokens: np.ndarray
    mask: np.ndarray
    eligible: np.ndarray
    labels: np.ndarray
    vocab_size: int = 0


def preview(cfg: RunConfig, n: int, workspace=None) -> TextPreview:
    """The run's visualisation rows and masks for ``cfg`` (trains or loads the cached tokenizer).

    Raises:
        DatasetError, ConfigError: unknown dataset, a strategy that needs what text cannot give.
    """
    ds = load_dataset(cfg.data.dataset, workspace)
    split = "val" if ds.info.n_val else "train"
    pool = ds.indices(split)[:EVAL_MAX_ROWS]  # the task's val rows; only the picked ones are decoded
    pick = vis_rows(ds.labels[pool], n)
    texts = ds.texts_at(pool[pick])
    tok, _ = tokenizer_for(cfg, ds, workspace)
    enc = tok.encode_batch(texts, max_len=cfg.data.tokenizer.max_len)
    rows = text_rows(enc, torch.arange(len(enc)))
    mask = vis_masks(cfg, rows)
    return TextPreview(texts, token_strings(tok, rows["ids"]), mask.numpy(), rows["eligible"].numpy(),
                       ds.labels[pool[pick]].astype(np.int64), tok.vocab_size)


def train_masks(cfg: RunConfig, n: int, workspace=None, ds=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Masks of ``cfg`` over ``n`` train texts (:func:`engine.data.representative`), drawn as a training batch is (from
    ``torch.Generator().manual_seed(train.seed)``), for Mask lab's statistics. ``ds``: the texts to
    read (anything with ``indices``, ``labels``, ``texts_at`` and ``info``, e.g. the paired task's
    captions); default ``cfg.data.dataset``.

    Returns:
        ``(mask [n, L] bool, eligible [n, L] bool)``.
    """
    ds = load_dataset(cfg.data.dataset, workspace) if ds is None else ds
    tok, _ = tokenizer_for(cfg, ds, workspace)
    train = ds.indices("train")
    enc = tok.encode_batch(ds.texts_at(train[representative(ds.labels[train], n)]), max_len=cfg.data.tokenizer.max_len)
    rows = text_rows(enc, torch.arange(len(enc)))
    return vis_masks(cfg, rows), rows["eligible"]
