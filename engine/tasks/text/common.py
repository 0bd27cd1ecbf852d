"""What the text tasks, their previews and the paired task's captions share: the constants, the
run's tokenizer, the rows of an encoded split, the masks of the visualisation rows."""

from __future__ import annotations

import numpy as np
import torch

from engine.config import RunConfig
from engine.data import representative
from engine.errors import ConfigError
from engine.masking import attention_inputs, draw_mask
from engine.pretrained.runs import check_init, pretrained_tokenizer
from engine.text.stored import StoredEncoded
from engine.text.tokenizer import TokenizerSettings, get_tokenizer, load_tokenizer, text_chunks

EVAL_MAX_ROWS = 2048  # val metrics use at most this many fixed val texts
#: The count baselines (engine.eval.text_baselines) are fitted on at most this many train texts (the
#: first ones: imports store rows shuffled), so their memory does not grow with a large split.
BASELINE_MAX_ROWS = 100_000
GEN_MAX_ROWS = 512  # greedy generation (span task) on at most this many of them
EVAL_CHUNK = 256
PROBE_ROWS = 256
TOP_K = 3  # predictions shown per masked token


def draw_text_mask(masking, b: dict[str, torch.Tensor], generator: torch.Generator,
                   ratio: float | None = None) -> torch.Tensor:
    """``masking`` (a ``masking`` config) drawn on token rows ``b`` (:func:`text_rows`: ``ids``,
    ``eligible``, ``word_ids``, ``sentence_ids``): ``[B, L]`` bool, special tokens and padding never
    masked. The tokenizer's side inputs go to the strategies that need them; ``attention`` gets
    uniform random scores from ``generator`` (no model gives a text run attention:
    :func:`engine.masking.attention_inputs`). ``ratio``: None = ``masking.ratio``."""
    shape = tuple(b["ids"].shape)
    return draw_mask(masking, shape, generator, eligible=b["eligible"], ratio=ratio, word_ids=b["word_ids"],
                     sentence_ids=b["sentence_ids"], **attention_inputs(masking, shape, generator))


def ensure_one_masked(mask: torch.Tensor, eligible: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Give every row that has an eligible position but no masked one a single masked position,
    uniformly among its eligible ones, so that no sequence has nothing to predict.

    Args:
        mask, eligible: ``[B, L]`` bool on the generator's device.
        generator: consumed only when some row needs a position (one uniform per cell of the batch).

    Returns:
        ``[B, L]`` bool (a new tensor when changed).
    """
    need = eligible.any(dim=1) & ~mask.any(dim=1)
    if not bool(need.any()):
        return mask
    u = torch.rand(mask.shape, generator=generator, device=mask.device).masked_fill(~eligible, -1.0)
    pick = torch.zeros_like(mask).scatter_(1, u.argmax(dim=1, keepdim=True), True)
    return mask | (pick & need[:, None])


def whole_words(mask: torch.Tensor, word_ids: torch.Tensor) -> torch.Tensor:
    """Grow a mask to whole words: every token of a word with a masked token is masked.

    A contiguous span stays contiguous (it can only grow at its two ends), so span completion
    hides whole words and never asks for the rest of a half-hidden word.

    Args:
        mask: ``[B, L]`` bool; word_ids: ``[B, L]`` int64, ``-1`` outside words (never masked here).

    Returns:
        ``[B, L]`` bool.
    """
    w = word_ids.clamp_min(-1) + 1  # 0 = no word
    hit = torch.zeros(mask.shape[0], int(w.max()) + 1 if w.numel() else 1, dtype=torch.bool, device=mask.device)
    hit.scatter_reduce_(1, w, mask, reduce="amax")
    hit[:, 0] = False
    return mask | hit.gather(1, w)


def vis_masks(cfg: RunConfig, rows: dict[str, torch.Tensor]) -> torch.Tensor:
    """The masks of the run's fixed visualisation rows (``[N, L]`` bool): the masking strategy at
    ``masking.ratio`` from ``torch.Generator().manual_seed(train.seed)``, every row with a maskable
    token getting at least one. The run's samples and the New run / Mask lab previews call this
    with the same rows, so the preview shows the run's own masks (as
    :func:`engine.masking.preview_masks` does for images)."""
    g = torch.Generator().manual_seed(cfg.train.seed)
    mask = draw_text_mask(cfg.masking, rows, g, ratio=cfg.masking.ratio)
    if cfg.task == "text_span":
        return whole_words(mask, rows["word_ids"])
    return ensure_one_masked(mask, rows["eligible"], g)



def vis_rows(val_labels: np.ndarray, n: int) -> np.ndarray:
    """Positions (int64 ``[min(n, N)]``) of the run's visualisation rows among its first
    :data:`EVAL_MAX_ROWS` validation texts (labels ``val_labels``): :func:`engine.data.representative`,
    so the preview and the run's samples show the same class-stratified texts."""
    return representative(np.asarray(val_labels)[:EVAL_MAX_ROWS], n)


def token_strings(tok, ids: torch.Tensor) -> np.ndarray:
    """Token strings of ``ids [N, L]`` (any integer shape) as a unicode array (``""`` at padding)."""
    flat = [("" if t == tok.pad_id else (tok.id_to_token(t) or "")) for t in ids.reshape(-1).tolist()]
    return np.array(flat, dtype=str).reshape(tuple(ids.shape)) if flat else np.zeros(tuple(ids.shape), dtype=str)


def baseline_rows(enc) -> tuple:
    """``(input_ids, attention_mask)`` of the first :data:`BASELINE_MAX_ROWS` rows of an encoded
    split (in memory or stored), for ``TokenBaselines.fit``."""
    return enc.input_ids[:BASELINE_MAX_ROWS], enc.attention_mask[:BASELINE_MAX_ROWS]


def tokenizer_for(cfg: RunConfig, ds, workspace=None):
    """``(tokenizer, tokenizer_id)`` of the run: trained on the train split of ``ds`` once, then cached;
    with ``model.init_from``, its source's: an imported model's own
    (:func:`engine.pretrained.runs.pretrained_tokenizer`), a parent run's (a fork reads the same ids); for a
    run being evaluated or resumed (:func:`engine.pretrained.runs.recorded_init`), the one it recorded.

    Raises:
        ConfigError: ``model.init_from`` names no text model or run (:func:`engine.pretrained.runs.check_init`),
            or the parent run's tokenizer cannot be loaded.
    """
    if cfg.model.init_from:
        src = check_init(cfg, None, workspace)  # the task's own check fits the config to the source
        if src.kind == "model" and src.weights is not None:
            return pretrained_tokenizer(src.info, workspace)
        try:
            return load_tokenizer(src.tokenizer_id, workspace), src.tokenizer_id
        except (ValueError, TypeError) as e:
            raise ConfigError(f"model.init_from: the tokenizer of {src.name} cannot be loaded ({e})") from None
    settings = TokenizerSettings(**cfg.data.tokenizer.model_dump())
    return get_tokenizer(ds.info.name, ds.info.source_hash, lambda: ds.texts("train"), settings, workspace,
                         train_chunks=lambda: text_chunks(ds, "train"))


def text_rows(enc, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """The rows ``idx`` of an encoded split (an in-memory ``Encoded`` or a
    :class:`~engine.text.stored.StoredEncoded`), cut to their longest row: ``ids``, ``attention``,
    ``eligible`` (real, non-special tokens), ``word_ids``, ``sentence_ids``, each ``[B, L_b]``."""
    if isinstance(enc, StoredEncoded):
        return enc.rows(idx)
    att = enc.attention_mask[idx]
    L = max(1, int(att.sum(dim=1).max())) if len(idx) else 1
    att = att[:, :L]
    return {"ids": enc.input_ids[idx, :L], "attention": att, "eligible": att & ~enc.special_mask[idx, :L],
            "word_ids": enc.word_ids[idx, :L], "sentence_ids": enc.sentence_ids[idx, :L]}
