"""Audio-text pairs for the ``paired_audio`` task: an audio dataset seen as spectrogram-text pairs.

The ``paired`` task trains M3AE on image-caption pairs; ``paired_audio`` trains the same recipe on an
audio dataset through :class:`AudioTextPairs`, which reads like a :class:`~engine.data.dataset.PairedDataset` (rows,
splits, labels, ``rows_tensors``, ``texts``) whose "image" is the clip's log-mel spectrogram.

- **Text** (``task_params.text_source``): ``text`` = the clip's transcript (an import with
  ``--text-column``); ``label`` = the clip's class name as it is; ``digit_word`` = the class name,
  with a single digit ``0``-``9`` written as its English word (``7`` -> ``seven``: FSDD's labels are
  the spoken digit, so the word is the transcript; see ../shared/data/fsdd/README.md). A clip whose
  text is empty (no transcript) takes no part; the rows are the clips with a text, in stored order.
- **Spectrogram**: the audio tasks' features (:mod:`engine.audio.features`, ``data.audio``: sample
  rate of the import, mel bins, window, hop, ``clip_seconds``), per-bin normalisation from the
  train clips, the **first** window of each clip (the transcript belongs to the clip's start; set
  ``clip_seconds`` to cover the clips), ``[1, F, T]`` with ``T`` rounded up to whole patches, cut by
  M3AE into ``P x P`` patches (``model.patch_size``) on the audio task's :class:`~engine.tasks.audio.common.Grid`.
- **Padding**: a clip shorter than the window is padded with silence; as in ``audio_mae``, the
  masks never hide a patch whose first frame is padding (:func:`engine.tasks.audio.common.draw_masks` with
  the grid's ``eligible``) and the spectrogram figures score only the clip's frames
  (:func:`engine.tasks.audio.common.spec_sse`). The masking strategies are the 2-D audio ones (random,
  SpecAugment bands, voiced columns...).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import Literal

import numpy as np
import torch

from engine.audio.features import ClipFeatures, DatasetClips, Window, feature_store
from engine.config import AudioConfig, RunConfig
from engine.data.audio import UNLABELED  # the class of clips imported without a label: not a word of the clip
from engine.errors import ConfigError
from engine.tasks.audio.common import draw_masks, first_windows, spec_and_grid

TextSource = Literal["text", "label", "digit_word"]
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def label_text(name: str, source: TextSource) -> str:
    """The text of a clip of class ``name`` under ``source`` ``label`` (the name) or ``digit_word``
    (a single digit spelt in English, any other name as it is); ``""`` (no text) for the class of
    clips imported without a label (:data:`UNLABELED`)."""
    s = name.strip()
    if s == UNLABELED:
        return ""
    return DIGIT_WORDS[int(s)] if source == "digit_word" and len(s) == 1 and s.isdigit() else s


def text_sources(ds) -> dict[str, int]:
    """The ``task_params.text_source`` values that give a text to at least one train clip of the
    audio dataset ``ds``, each with that number of train clips, in the order New run proposes them:
    ``text`` (transcripts) when the dataset has some, ``digit_word`` when a class name is a single
    digit, ``label`` when a class name is not :data:`UNLABELED`. Empty: no source gives a text."""
    train = np.asarray(ds.split) == 0
    out = {}
    for source in ("text", "digit_word", "label"):
        if source == "text" and ds.text_bytes is None:
            continue
        if source == "digit_word" and not any(len(n.strip()) == 1 and n.strip().isdigit() for n in ds.info.class_names):
            continue
        n = sum(1 for t, tr in zip(clip_texts(ds, source), train) if t and tr)
        if n:
            out[source] = n
    return out


def clip_texts(ds, source: TextSource) -> list[str]:
    """The text of every clip of an audio dataset ``ds`` under ``source`` (module docstring); ``""``
    for a clip without one.

    Raises:
        ConfigError: ``source`` is ``text`` and the dataset has no transcripts, naming the dataset.
    """
    if source == "text":
        if ds.text_bytes is None:
            raise ConfigError(
                f"data.dataset: {ds.info.name!r} is an audio dataset without transcripts; the paired_audio task needs a "
                "text for each clip: import it again with a transcript column (--text-column), or set "
                "task_params.text_source to 'label' (or 'digit_word') when the class name is the spoken word")
        return [ds.transcript(i).strip() for i in range(len(ds))]
    names = [label_text(n, source) for n in ds.info.class_names]
    return [names[int(y)] for y in ds.labels]


class AudioTextPairs:
    """An audio dataset as the ``paired_audio`` task reads it: like a paired dataset (module docstring).

    Args:
        ds: an :class:`~engine.data.dataset.AudioDataset`.
        audio: ``data.audio`` (None: the defaults); patch: ``model.patch_size`` ``P``.
        source: ``task_params.text_source``.
        workspace: where the clips' log-mel frames are kept (:func:`~engine.audio.features.feature_store`).

    Attributes:
        info: the dataset's info with ``image_shape = (1, F, T)``, ``n_train`` / ``n_val`` the clips
            with a text and, for a text from the labels, a ``source_hash`` of its own (so the cached
            caption tokenizer is the one of these texts).
        rows: int64 ``[N]`` the dataset rows of the pairs; labels int64 ``[N]``; split uint8 ``[N]``.
        spec, grid: the features and the mask grid; feats: :class:`ClipFeatures` of the ``N`` clips
            (computed on first use).
        audio_ds: the audio dataset.

    Raises:
        ConfigError: no transcripts (:func:`clip_texts`), no train clip with a text, a patch size that
            does not divide the mel bins, features that do not fit the sample rate.
    """

    def __init__(self, ds, audio: AudioConfig | None, patch: int, source: TextSource, workspace=None):
        texts = clip_texts(ds, source)
        self.workspace = workspace
        keep = np.flatnonzero(np.array([bool(t) for t in texts], bool))
        if not (ds.split[keep] == 0).any():
            what = "a transcript" if source == "text" else "a class name"
            raise ConfigError(f"data.dataset: no train clip of {ds.info.name!r} has {what}; the paired_audio task needs "
                              "texts to pair with the clips")
        self.audio_ds = ds
        self.rows, self.labels, self.split = keep, ds.labels[keep].astype(np.int64), ds.split[keep]
        self._texts = [texts[i] for i in keep]
        self.spec, self.grid = spec_and_grid(audio or AudioConfig(), ds.rate, patch, patch, 2)
        h = ds.info.source_hash if source == "text" or not ds.info.source_hash else \
            hashlib.sha256(f"{ds.info.source_hash}:{source}".encode()).hexdigest()  # fmt: skip
        self.info = dataclasses.replace(ds.info, image_shape=(1, self.grid.n_mels, self.grid.frames),
                                        n_train=int((self.split == 0).sum()), n_val=int((self.split == 1).sum()),
                                        source_hash=h)  # fmt: skip

    @functools.cached_property
    def feats(self) -> ClipFeatures:
        h = self.audio_ds.info.source_hash  # the clips' content, and which of them are pairs (rows)
        h = h and hashlib.sha256(h.encode() + np.ascontiguousarray(self.rows, np.int64).tobytes()).hexdigest()
        store = feature_store(h, self.spec, len(self), self.workspace)
        return ClipFeatures(DatasetClips(self.audio_ds, self.rows), self.spec, stats_rows=self.indices("train"), store=store)

    def probe_window(self, n: int) -> Window:
        """The first windows of the first ``n`` train pairs, not normalised (the masks depend on the
        frames' positions and voicing only): a cheap probe for the pre-flight check."""
        return first_windows(self, self.indices("train")[:n], self.spec, self.grid)[1]

    def __len__(self) -> int:
        return len(self.rows)

    def indices(self, split: str) -> np.ndarray:
        """Pair positions (int64 ``[n]``) of the ``"train"`` or ``"val"`` split, in stored order."""
        return np.flatnonzero(self.split == ("train", "val").index(split))

    def window(self, rows) -> Window:
        """The first window of pairs ``rows`` (positions, int ``[B]``): normalised log-mel, real frames, voicing."""
        rows = torch.as_tensor(np.asarray(rows), dtype=torch.int64)
        return self.feats.window(rows, torch.zeros(len(rows), dtype=torch.int64), self.grid.frames)

    def rows_tensors(self, rows) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x float32 [n, 1, F, T] normalised log-mel, y int64 [n])`` of pairs ``rows``."""
        return self.window(rows).spec[:, None], torch.from_numpy(self.labels[np.asarray(rows, np.int64)])

    def tensors(self, split: str, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``limit`` pairs of ``split`` as :meth:`rows_tensors`."""
        return self.rows_tensors(self.indices(split)[:limit])

    def texts_at(self, rows) -> list[str]:
        """The texts of pairs ``rows``."""
        return [self._texts[int(i)] for i in np.asarray(rows, np.int64)]

    def texts(self, split: str | None = None, limit: int | None = None) -> list[str]:
        """The texts of ``split`` (every pair when None), the first ``limit`` when given."""
        rows = np.arange(len(self)) if split is None else self.indices(split)
        return self.texts_at(rows[:limit])

    def clip(self, row: int) -> np.ndarray:
        """The waveform of pair ``row`` (float32 ``[n]``)."""
        return self.audio_ds.clip(int(self.rows[int(row)]))

    def masks(self, cfg: RunConfig, rows, generator: torch.Generator, ratio: float | None = None) -> torch.Tensor:
        """The run's spectrogram masks of pairs ``rows``: ``[B, L_i]`` bool (:func:`draw_masks`, padding never hidden)."""
        return draw_masks(cfg, self.grid, self.window(rows), generator, ratio).flatten(1)

    def eligible(self, rows) -> torch.Tensor:
        """``[B, L_i]`` bool: the patches that hold frames of the clip (the ones a mask may hide)."""
        return self.grid.eligible(self.window(rows)).flatten(1)

