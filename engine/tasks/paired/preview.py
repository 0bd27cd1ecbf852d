"""What New run and Mask lab show of a paired config before a run: the run's visualisation pairs
with the masks the run will draw of both halves (:func:`preview`), and the caption masks of a train
batch for Mask lab's statistics (:func:`caption_train_masks`). Both paired tasks: the image half
comes from the config's task (:class:`~engine.tasks.paired.recipe.PairedBase`'s hooks)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.config import RunConfig
from engine.data import representative
from engine.errors import ConfigError
from engine.tasks.paired.common import EVAL_MAX_ROWS, caption_masking, caption_vis_masks
from engine.tasks.paired.recipe import PairedBase
from engine.tasks.registry import get_task
from engine.tasks.text.common import text_rows, token_strings, tokenizer_for
from engine.tasks.text.preview import train_masks


def task_class(name: str) -> type[PairedBase]:
    """The paired task registered as ``name`` (``paired``, ``paired_audio``).

    Raises:
        ConfigError: an unknown task, or one that is not a paired task (naming the ``task`` field).
    """
    t = get_task(name)
    if not issubclass(t, PairedBase):
        raise ConfigError(f"task: {name!r} is not a paired task")
    return t


def vis_masks(cfg: RunConfig, images: torch.Tensor, rows: dict[str, torch.Tensor], pairs=None,
              pair_rows: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The masks of the run's fixed visualisation pairs: the image's ``[N, *grid]`` bool (the task's
    :meth:`~engine.tasks.paired.recipe.PairedBase.vis_image_masks` from ``train.seed``) and the
    caption's ``[N, L_t]`` bool (:func:`~engine.tasks.paired.common.caption_vis_masks`). The run's
    samples and the New run / Mask lab previews call the same, so the preview shows the run's own masks.

    Args:
        images: ``[N, C, H, W]`` float on the CPU; rows: the captions' ``text_rows``;
        pairs, pair_rows: the task's :meth:`~engine.tasks.paired.recipe.PairedBase.pairs` and the ``N`` pairs' positions.
    """
    return task_class(cfg.task).vis_image_masks(cfg, pairs, pair_rows, images), caption_vis_masks(cfg, rows)


@dataclass(frozen=True)
class PairedPreview:
    """What the dashboard shows of a paired config before a run: its ``N`` visualisation pairs
    (:func:`engine.data.representative` over the first :data:`EVAL_MAX_ROWS` val pairs, as the run
    picks them) with the run's masks of both.

    Attributes:
        images: float32 ``[N, C, H, W]`` in [0, 1]; image_mask: bool ``[N, h, w]``.
        captions: the ``N`` captions; tokens: ``[N, L_t]`` strings (``""`` at padding);
        text_mask, eligible: bool ``[N, L_t]``; labels: int64 ``[N]``.
        real, cells: audio-text pairs only (None otherwise): ``images`` is then the clips'
            normalised log-mel ``[N, 1, F, T]``, ``real`` bool ``[N, T]`` the frames of each clip
            (False = silence padding) and ``cells`` bool ``[N, F, T]`` the mel bins x frames the
            spectrogram mask hides.
        grid: audio-text pairs only: the spectrogram's mask grid (:class:`engine.tasks.audio.common.Grid`).
        vocab_size: the ids of the run's caption tokenizer as trained on the train captions (specials
            included), beside ``data.tokenizer.vocab_size`` (:func:`engine.config.vocab_shortfall`).
    """

    images: np.ndarray
    image_mask: np.ndarray
    captions: list[str]
    tokens: np.ndarray
    text_mask: np.ndarray
    eligible: np.ndarray
    labels: np.ndarray
    real: np.ndarray | None = None
    cells: np.ndarray | None = None
    grid: object | None = None
    vocab_size: int = 0



def preview(cfg: RunConfig, n: int, workspace=None) -> PairedPreview:
    """The run's visualisation pairs and both masks for ``cfg`` (trains or loads the cached tokenizer).

    Raises:
        DatasetError, ConfigError: unknown dataset, a patch size that does not tile the images, a
            strategy that needs what the data cannot give.
    """
    task = task_class(cfg.task)
    ds = task.pairs(cfg, workspace)
    split = "val" if ds.info.n_val else "train"
    pool = ds.indices(split)[:EVAL_MAX_ROWS]  # the task's val rows; only the picked ones are read
    y = ds.labels[pool]
    pick = representative(y, n)
    captions = ds.texts_at(pool[pick])
    tok, _ = tokenizer_for(cfg, ds, workspace)
    rows = text_rows(tok.encode_batch(captions, max_len=cfg.data.tokenizer.max_len), torch.arange(len(pick)))
    images = ds.rows_tensors(pool[pick])[0]
    img, txt = vis_masks(cfg, images, rows, ds, pool[pick])
    return PairedPreview(images.numpy(), img.numpy(), captions, token_strings(tok, rows["ids"]), txt.numpy(),
                         rows["eligible"].numpy(), y[pick].astype(np.int64), **task.preview_extras(ds, pool[pick], img),
                         vocab_size=tok.vocab_size)


def caption_train_masks(cfg: RunConfig, n: int, workspace=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The caption masks of paired config ``cfg`` over ``n`` train captions (or clip texts) for
    Mask lab's statistics: drawn as ``text_mlm`` draws its token masks
    (:func:`engine.tasks.text.preview.train_masks` with ``task_params.text_*`` as the masking), which is how
    the paired task draws them, with the run's caption tokenizer.

    Returns:
        ``(mask [n, L_t] bool, eligible [n, L_t] bool)``.

    Raises:
        DatasetError, ConfigError: as :func:`preview`.
    """
    text_cfg = cfg.model_copy(update={"masking": caption_masking(cfg)})
    return train_masks(text_cfg, n, workspace, ds=task_class(cfg.task).pairs(cfg, workspace))

