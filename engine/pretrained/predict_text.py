"""``python -m engine predict SOURCE --text "... [MASK] ..."``: a masked language model's top-k at
every ``[MASK]``, from an imported BERT or a ``text_mlm`` run's checkpoint, tokenised as that
model's tokenizer does (the one imported with it, or the one the run trained).

References: Devlin et al. 2019, BERT (sec. 3.1, masked LM).
"""

from __future__ import annotations

from typing import Any

import torch

from engine.errors import RunNotFoundError
from engine.eval.inference import InferenceError, load_model
from engine.models.bert import BertMLM
from engine.models.bert_hf import HFBertMLM
from engine.pretrained.store import MODEL_FILE, PretrainedError, load_pretrained, models_root
from engine.pretrained.text import load_text_tokenizer
from engine.tasks.text.inference import tokenizer_of


def load_text_source(source: str, step: int | None = None, workspace=None):
    """``(model, tokenizer, max_len)`` of an imported text model's name or a ``text_mlm`` run id.

    An imported model's name is looked up first (``models/<source>/``), then a run.

    Raises:
        PretrainedError: neither a model nor a run, ``step`` given for an imported model, or not a
            text model.
        InferenceError: the run keeps no checkpoint (at ``step``), or is not a masked language model.
    """
    if (models_root(workspace) / source / MODEL_FILE).is_file():
        if step is not None:
            raise PretrainedError(f"{source} is an imported model: it has no checkpoint steps (--step is for runs)")
        model, info = load_pretrained(source, workspace)
        if info.modality != "text":
            raise PretrainedError(f"imported model {source!r} is an {info.modality} model; --text needs a text model")
        return model, load_text_tokenizer(info), int(info.preprocessing["max_len"])
    try:
        loaded = load_model(source, step, workspace)
    except RunNotFoundError:
        raise PretrainedError(f"{source!r} is neither an imported model (python -m engine models list) nor a run id"
                              ) from None
    if not isinstance(loaded.model, (BertMLM, HFBertMLM)):
        raise InferenceError(f"run {source} trains {loaded.cfg.model.arch}, not a masked language model; --text "
                             "predicts with a text_mlm run or an imported BERT")
    return loaded.model, tokenizer_of(loaded, workspace), int(loaded.cfg.data.tokenizer.max_len)


def predict_text(source: str, text: str, top_k: int = 5, step: int | None = None,
                 workspace=None) -> list[dict[str, Any]]:
    """The ``top_k`` most probable tokens at every ``[MASK]`` of ``text``, left to right.

    ``text`` is tokenised by the source's tokenizer (``[CLS] tokens [SEP]``, truncated to its
    ``max_len``); ``[MASK]`` written in it is the mask token.

    Args:
        source: an imported model's name or a ``text_mlm`` run id.
        top_k: candidates per mask (clamped to the vocabulary ``V``), special tokens included.
        step: a run's checkpoint step (the latest when None).

    Returns:
        One ``{"position": int, "tokens": [str] * k, "probs": [float] * k}`` per ``[MASK]``:
        ``position`` in the tokenised input (``[CLS]`` is 0), ``tokens`` as the tokenizer writes
        them (``id_to_token``), ``probs`` the softmax over the whole vocabulary, most probable first.

    Raises:
        PretrainedError: no ``[MASK]`` in the (truncated) text, ``top_k < 1``, an unknown source.
        InferenceError: see :func:`load_text_source`.
    """
    if top_k < 1:
        raise PretrainedError(f"--top-k must be at least 1 (got {top_k})")
    model, tok, max_len = load_text_source(source, step, workspace)
    enc = tok.encode_batch([text], max_len=max_len)
    where = enc.input_ids == tok.mask_id  # (1, L)
    if not bool(where.any()):
        cut = f" (a [MASK] past the first {max_len} tokens is cut off)" if "[MASK]" in text else ""
        raise PretrainedError(f"no [MASK] in the text: write [MASK] where a word is hidden{cut}")
    with torch.no_grad():
        probs = model(enc.input_ids, enc.attention_mask, where).float().softmax(dim=-1)  # (M, V)
    top = probs.topk(min(int(top_k), probs.shape[1]), dim=-1)
    positions = where[0].nonzero()[:, 0].tolist()
    return [{"position": int(pos), "tokens": [tok.id_to_token(i) or f"<id {i}>" for i in ids],
             "probs": [float(p) for p in ps]}
            for pos, ids, ps in zip(positions, top.indices.tolist(), top.values.tolist())]
