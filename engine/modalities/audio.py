"""The audio modality: clips (:class:`~engine.data.dataset.AudioDataset`), imported from one clip or
a zip or folder of clips (with a manifest table, or sub-folders = labels); masked on time-frequency
cells or frames."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.data import audio
from engine.data.audio import EXTENSIONS as AUDIO_EXTENSIONS
from engine.data.audio import UNSUPPORTED
from engine.data.dataset import AudioDataset
from engine.data.ingest import SourcePlan, check_options
from engine.modalities import Importer, Modality, register_modality
from engine.modalities.text import IMAGE_ONLY


def _dataset_type() -> type:
    return AudioDataset


def inspect_audio(path: Path, options, label: str):
    """:func:`engine.data.audio.inspect_audio` as a :class:`~engine.data.ingest.SourcePlan`."""
    check_options(options, label, "audio", "audio")
    return SourcePlan(label, "audio", **audio.inspect_audio(path, options, label))


def import_audio(path: Path, name: str | None, options, **kw: Any):
    """:func:`engine.data.audio.import_audio` (the image-only keywords dropped)."""
    check_options(options, kw.get("source_label") or str(path), "audio", "audio")
    for k in IMAGE_ONLY:
        kw.pop(k, None)
    return audio.import_audio(path, name, options, **kw)


AUDIO = register_modality(Modality(
    "audio", _dataset_type, ui="app.modalities.audio", grids=("frames-1d", "spec-2d"),
    summary="audio: clips as log-mel spectrograms, masked in time-frequency patches or frames",
    importers=(Importer("audio", inspect_audio, import_audio, files=(*AUDIO_EXTENSIONS, *UNSUPPORTED),
                        tree=tuple(AUDIO_EXTENSIONS), options=("sample_rate",),
                        preload=("soundfile", "torch", "torchaudio"), order=40),),  # decode; resampling
))  # fmt: skip
