"""Joint audio-text masked modeling (``task: paired_audio``): the paired recipe
(:class:`~engine.tasks.paired.recipe.PairedBase`, M3AE / FLAVA-style) on an audio dataset, each clip's
first log-mel window as the "image" and its transcript or class name as the caption
(:class:`~engine.tasks.paired_audio.pairs.AudioTextPairs`, ``task_params.text_source``).

What differs from image-caption pairs: the spectrogram half uses the audio tasks' pieces
(:mod:`engine.tasks.audio.common`): the 2-D audio strategies on the patch grid, masks that never hide
a clip's silence padding (nor does a whole-image completion), spectrogram figures scored on the
clip's frames only (normalised log-mel, the ``audio_mae`` units) next to ``mean_spec`` and
``interp_spec`` (``baseline/<name>/mse``), samples with spectrograms and Griffin-Lim audio, and
TF-IDF / CCA baselines that count one-character words (a clip's text may be "7").

Runs stored before this task existed were ``task: paired`` on an audio dataset; the workspace
migration to version 3 (:mod:`engine.workspace`) renamed them.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field

from engine.config import RunConfig
from engine.data import load_dataset
from engine.errors import ConfigError
from engine.store.samples import Sample
from engine.tasks.audio.common import SPEC_BASELINES, check_masks, check_strategy, spec_baseline_sse, spec_sse, spectrogram_arrays
from engine.tasks.paired.common import EVAL_MAX_ROWS, PROBE_ROWS, PairedParams
from engine.tasks.paired.recipe import PairedBase
from engine.tasks.paired_audio.pairs import AudioTextPairs
from engine.tasks.registry import register_task


class AudioTextParams(PairedParams):
    """The paired parameters, plus where each clip's text comes from (:mod:`engine.tasks.paired_audio.pairs`)."""

    text_source: Literal["text", "label", "digit_word"] = Field(
        "text", description="the text of a clip: its transcript (text), its class name (label), or the class name "
                            "with a digit spelt as its English word (digit_word)")


@register_task
class AudioTextTask(PairedBase):
    """Joint audio-text masked modeling on an audio dataset's clips and their texts (module docstring)."""

    name = "paired_audio"
    modality = "audio"
    params = AudioTextParams
    data_sections = ("tokenizer", "audio")
    summary = ("joint audio-text masked modeling: a clip's spectrogram and its transcript, with cross-modal completion "
               "and InfoNCE (M3AE, Geng et al. 2022; or FLAVA-style encoders, Singh et al. 2022)")
    image_baselines = SPEC_BASELINES
    one_char_words = True

    @classmethod
    def pairs(cls, cfg: RunConfig, workspace=None) -> AudioTextPairs:
        """The audio dataset as :class:`AudioTextPairs`.

        Raises:
            ConfigError: not an audio dataset; no texts (naming the dataset), as :class:`AudioTextPairs`.
        """
        ds = load_dataset(cfg.data.dataset, workspace)
        if ds.info.modality != "audio":
            raise ConfigError(f"data.dataset: {ds.info.name!r} is a {ds.info.modality} dataset; task 'paired_audio' "
                              "trains on audio datasets whose clips have a text")
        return AudioTextPairs(ds, cfg.data.audio, cfg.model.patch_size, cfg.task_params.get("text_source", "text"),
                              workspace)

    @classmethod
    def check_images(cls, cfg: RunConfig, info, ds: AudioTextPairs, workspace=None) -> None:
        """As ``audio_mae`` checks its spectrograms: a 2-D audio strategy, probe masks over real clips."""
        check_strategy(cfg, ds.grid, cls.name)
        check_masks(cfg, ds.grid, ds.probe_window(PROBE_ROWS), "patches")

    @classmethod
    def vis_image_masks(cls, cfg: RunConfig, ds: AudioTextPairs, rows: np.ndarray, images: torch.Tensor) -> torch.Tensor:
        """:func:`engine.tasks.audio.common.draw_masks` over the clips' first windows from ``train.seed``
        (padding never hidden), ``[N, F/P, T/P]``."""
        return ds.masks(cfg, rows, torch.Generator().manual_seed(cfg.train.seed)).view(-1, *ds.grid.shape)

    @classmethod
    def preview_extras(cls, ds: AudioTextPairs, rows: np.ndarray, img_mask: torch.Tensor) -> dict:
        """``real`` (the clips' frames), ``cells`` (the hidden mel bins x frames) and the ``grid``."""
        return {"real": ds.window(rows).real.numpy(), "cells": ds.grid.cells(img_mask).numpy(), "grid": ds.grid}

    @classmethod
    def retrieval_images(cls, ds: AudioTextPairs, split: str, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Spectrograms, log-mel before the normalisation ``[N, 1, F, T]``, and the clips' frames ``[N, T]``."""
        w = ds.window(ds.indices(split)[:EVAL_MAX_ROWS])
        return ds.feats.denormalize(w.spec)[:, None].numpy(), w.real.numpy()

    def _run_info_extra(self) -> dict:
        return {"stream": "audio", "sample_rate": self._ds.spec.sample_rate, "n_mels": self._ds.grid.n_mels,
                "frames": self._ds.grid.frames}

    def _image_masks(self, rows, xb, g, ratio):
        return self._ds.masks(self.cfg, rows, g, ratio)

    def _whole_images(self, rows, img_mask):
        """The patches that hold frames of the clip: a completion never hides a spectrogram's padding."""
        return self._ds.eligible(rows)

    def _pixel_sse(self, pred, target, img_mask, rows):
        """The normalised log-mel cells of the clip, padding left out (:func:`~engine.tasks.audio.common.spec_sse`,
        as ``audio_mae``'s ``val_spec_mse``)."""
        w = self._ds.window(rows)
        return spec_sse(self.model.unpatchify(pred.float().cpu())[:, 0], w.spec, self._ds.grid.cells(img_mask), w.real)

    def _image_baseline_sse(self, idx, img_mask, x_ref):
        """The audio tasks' predictors, on the clip's cells only."""
        w = self._ds.window(self.val_rows[idx.numpy()])
        return spec_baseline_sse(w.spec, self._ds.grid.cells(img_mask), w.real)

    def _image_sample(self, step, xb, rows, img_mask, out, text, meta):
        """The audio tasks' sample arrays (spectrograms, hidden cells, Griffin-Lim audio) next to the texts'."""
        ds = self._ds
        pred = self.model.unpatchify(out["pred"].float().cpu())[:, 0]
        arrays = spectrogram_arrays(ds.feats, ds.grid, ds.window(rows), img_mask.view(-1, *self.grid), pred,
                                    [ds.clip(int(r)) for r in rows])  # fmt: skip
        return Sample(step=step, kind="paired", arrays={**arrays, **text}, meta={
            **meta, "stream": "audio", "sample_rate": ds.spec.sample_rate, "hop": ds.spec.hop,
            "grid": list(self.grid), "patch": [ds.grid.pf, ds.grid.pt], "unit": "patch", "transcripts": meta["captions"]})
