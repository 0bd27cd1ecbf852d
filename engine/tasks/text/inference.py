"""Interactive inference of the text tasks' checkpoints: the fill-in box (``text_mlm``) and the
completion view (``text_span``); see :mod:`engine.eval.inference` for how a checkpoint is loaded."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.eval.inference import InferenceError
from engine.messages import describe_error
from engine.tasks.text.common import TOP_K
from engine.text.tokenizer import load_tokenizer


@dataclass(frozen=True)
class FillIn:
    """Predictions of a masked language model at one ``[MASK]``: the ``position`` among the masks
    (0-based, left to right) and the top candidates as ``(token, probability)`` pairs."""

    position: int
    candidates: list[tuple[str, float]]


def tokenizer_of(loaded, workspace=None):
    """The tokenizer a checkpoint's run trained with (its ``task.json``'s ``tokenizer_id``).

    Raises:
        InferenceError: the run names no tokenizer, or it cannot be loaded.
    """
    try:
        return load_tokenizer(loaded.info["tokenizer_id"], workspace)
    except KeyError:
        raise InferenceError(f"run {loaded.run_id}: its task.json names no tokenizer; it cannot be loaded") from None
    except (ValueError, OSError) as e:  # load_tokenizer's ValueError is already in our words
        why = str(e) if isinstance(e, ValueError) else describe_error(e)
        raise InferenceError(f"run {loaded.run_id}: its tokenizer cannot be loaded: {why}") from e


def fill_in(loaded, text: str, k: int = TOP_K, workspace=None) -> list[FillIn]:
    """The ``k`` most probable tokens at every ``[MASK]`` of ``text``, from a ``text_mlm`` checkpoint.

    Args:
        loaded: :func:`engine.eval.inference.load_model` of a ``text_mlm`` run.
        text: a sentence with one or more literal ``[MASK]`` tokens.

    Raises:
        InferenceError: no ``[MASK]`` in the text (or all of them past ``data.tokenizer.max_len``),
            or the run's tokenizer is gone.
    """
    tok = tokenizer_of(loaded, workspace)
    enc = tok.encode_batch([text], max_len=loaded.cfg.data.tokenizer.max_len)
    where = enc.input_ids == tok.mask_id
    if not bool(where.any()):
        raise InferenceError("no [MASK] in the text: type [MASK] where a word is hidden, or pick words to hide"
                             + (" (a [MASK] past the first "
                                f"{loaded.cfg.data.tokenizer.max_len} tokens is cut off)" if "[MASK]" in text else ""))
    with torch.no_grad():
        ids, probs = loaded.model.predict_topk(enc.input_ids, enc.attention_mask, where, k=k,
                                               exclude_ids=tuple(tok.special_ids))
    return [FillIn(i, [(tok.id_to_token(int(t)) or "?", float(p)) for t, p in zip(row_ids, row_p)])
            for i, (row_ids, row_p) in enumerate(zip(ids.tolist(), probs.tolist()))]


def complete_span(loaded, text: str, max_new_tokens: int = 64, workspace=None) -> str:
    """The span a ``text_span`` checkpoint writes in place of the single ``[MASK]`` of ``text``.

    Raises:
        InferenceError: not exactly one ``[MASK]`` in the (truncated) text, or no tokenizer.
    """
    tok = tokenizer_of(loaded, workspace)
    enc = tok.encode_batch([text], max_len=loaded.cfg.data.tokenizer.max_len)
    n = int((enc.input_ids == tok.mask_id).sum())
    if n != 1:
        raise InferenceError(f"the completion view fills one gap: write [MASK] once where the text is missing (found {n})")
    with torch.no_grad():
        gen = loaded.model.generate(enc.input_ids, enc.attention_mask,
                                    max_new_tokens=min(max_new_tokens, loaded.cfg.data.tokenizer.max_len))[0]
    out = []
    for t in gen.tolist():
        if t in (tok.sep_id, tok.pad_id):
            break
        out.append(t)
    return tok.decode(out)
