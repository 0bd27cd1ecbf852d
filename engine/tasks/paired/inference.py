"""The retrieval box of a paired run (Run detail): a checkpoint's contrastive embeddings of the
run's validation pairs, a typed caption's embedding, and the nearest pairs. Both paired tasks; see
:mod:`engine.eval.inference` for how a checkpoint is loaded."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.eval.inference import InferenceError
from engine.tasks.paired.common import EVAL_CHUNK, EVAL_MAX_ROWS
from engine.tasks.paired.preview import task_class
from engine.tasks.text.common import text_rows
from engine.tasks.text.inference import tokenizer_of


@dataclass(frozen=True)
class RetrievalIndex:
    """A checkpoint's contrastive embeddings of the run's validation pairs (the pairs its
    ``val_t2i_r*`` / ``val_i2t_r*`` figures rank), for the retrieval box.

    Attributes:
        images: float32 ``[N, C, H, W]`` in [0, 1]; for audio-text pairs ``[N, 1, F, T]`` the clips'
            log-mel (natural log, not normalised); captions: the ``N`` captions; labels: int64 ``[N]``.
        image_emb, text_emb: float32 ``[N, E]``, each row of unit length (rank by dot product).
        real: audio-text pairs: bool ``[N, T]`` the frames of each clip (False = padding); None for images.
    """

    images: np.ndarray
    captions: list[str]
    labels: np.ndarray
    image_emb: np.ndarray
    text_emb: np.ndarray
    real: np.ndarray | None = None


def _unit(x: torch.Tensor) -> np.ndarray:
    return torch.nn.functional.normalize(x.float(), dim=-1).numpy()


@torch.no_grad()
def retrieval_index(loaded, workspace=None) -> RetrievalIndex:
    """Embed the run's validation pairs (the first :data:`EVAL_MAX_ROWS`; train when the dataset has
    no val split) with a ``paired`` or ``paired_audio`` checkpoint, each modality encoded alone.

    Args:
        loaded: :func:`engine.eval.inference.load_model` of a ``paired`` or ``paired_audio`` run.

    Raises:
        InferenceError: the run's tokenizer is gone, or its dataset changed since the run (other
            pairs than it ranked).
        DatasetError: the dataset is gone.
    """
    task = task_class(loaded.cfg.task)
    ds = task.pairs(loaded.cfg, workspace)
    if loaded.info.get("dataset_hash") not in (None, ds.info.source_hash):
        raise InferenceError(f"run {loaded.run_id}: dataset {ds.info.name!r} was re-imported since the run; its "
                             "validation pairs are not the ones the run ranked")
    split = "val" if ds.info.n_val else "train"
    x, y = ds.tensors(split, limit=EVAL_MAX_ROWS)
    y = y.numpy().astype(np.int64)
    captions = ds.texts(split, limit=EVAL_MAX_ROWS)
    tok = tokenizer_of(loaded, workspace)
    enc = tok.encode_batch(captions, max_len=loaded.cfg.data.tokenizer.max_len)
    img, txt = [], []
    for i in range(0, len(x), EVAL_CHUNK):
        b = text_rows(enc, torch.arange(i, min(i + EVAL_CHUNK, len(x))))
        img.append(loaded.model.embed_image(x[i : i + EVAL_CHUNK]))
        txt.append(loaded.model.embed_text(b["ids"], b["eligible"]))
    images, real = task.retrieval_images(ds, split, x)
    return RetrievalIndex(images, captions, y, _unit(torch.cat(img)), _unit(torch.cat(txt)), real=real)


@torch.no_grad()
def embed_caption(loaded, text: str, workspace=None) -> np.ndarray:
    """A ``paired`` checkpoint's contrastive embedding of one typed caption, float32 ``[E]`` of unit length.

    Raises:
        InferenceError: the text has no token the run's tokenizer keeps, or the tokenizer is gone.
    """
    tok = tokenizer_of(loaded, workspace)
    b = text_rows(tok.encode_batch([text], max_len=loaded.cfg.data.tokenizer.max_len), torch.arange(1))
    if not bool(b["eligible"].any()):
        raise InferenceError("type a caption: the text has no word to embed")
    return _unit(loaded.model.embed_text(b["ids"], b["eligible"]))[0]


def nearest(query: np.ndarray, keys: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The ``k`` rows of ``keys [N, E]`` most similar to ``query [E]`` (unit vectors: cosine
    similarity), best first, as ``(row, similarity)``; ties broken by row."""
    sim = keys @ query
    order = np.argsort(-sim, kind="stable")[:k]
    return [(int(i), float(sim[i])) for i in order]

