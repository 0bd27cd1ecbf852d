"""Log-mel spectrograms of audio clips: what every audio task masks, reconstructs and plays back.

Shapes: B batch, F mel bins, T frames (time last, as torchaudio's ``(..., freq, time)``), n samples.

- **Frames** are centred (``torch.stft(center=True)``, reflect padding): frame ``t`` of a clip is
  centred on sample ``t * hop``, so a clip of ``n`` samples has ``1 + n // hop`` frames, and the
  frames of :func:`engine.masking.units.voiced_frames` with the same window and hop line up with them.
- **Log-mel** (:class:`LogMel`): torchaudio's ``MelSpectrogram`` (Hann window of ``window_ms``,
  ``n_fft`` = the window in samples, power 2, HTK mel scale, ``f_min`` to ``f_max``), then
  ``log(mel + 1e-6)`` (natural log; digital silence is ``log(1e-6) = -13.8``).
- **Normalisation** (:class:`ClipFeatures`): per mel bin, ``(x - mean_f) / std_f`` with the mean and
  standard deviation of that bin over every frame of every train clip (padding excluded), so the
  statistics never see a validation clip. The raw frames are computed once per dataset and settings
  and kept in ``<workspace>/features`` (:func:`feature_store`), read through memory maps.
- **Windows**: a model sees ``T`` frames (:func:`window_frames`: ``data.audio.clip_seconds``, rounded
  up to whole patches). A clip with fewer frames is padded **with silence** (the normalised value of
  ``log(1e-6)`` in each bin) and its padding frames are marked not ``real``: masks never hide them and
  losses never score them. A longer clip is cut: training draws a window start uniformly in
  ``0 .. n_frames - T`` (from the run's mask generator), validation and samples take the first
  window, frozen features average every window (:meth:`ClipFeatures.windows`).
- **Inversion** (:meth:`LogMel.invert`): ``exp(x) - 1e-6`` -> torchaudio ``InverseMelScale``
  (least squares with the SVD driver, negative power clipped to 0) -> ``GriffinLim`` (32 iterations, momentum 0.99,
  phase initialised to zero so the result is a pure function of the spectrogram). Griffin-Lim
  alone loses the phase: listen to the inverted *original* next to the inverted reconstruction.

References: Park et al. 2019 (SpecAugment: log-mel input); Huang et al. 2022, "Masked Autoencoders
that Listen" (AudioMAE: log-mel patches, per-dataset normalisation); Griffin & Lim 1984, "Signal
estimation from modified short-time Fourier transform".
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torchaudio
import torchaudio.functional as AF

from engine.errors import ConfigError
from engine.masking.units import voiced_frames
from engine.workspace import atomic_write_json, derived_folder, workspace_root

LOG_EPS = 1e-6
"""Added to the mel power before the log: the floor of the log-mel (digital silence)."""
GRIFFIN_LIM_ITERS = 32


@dataclass(frozen=True)
class FeatureSpec:
    """The resolved feature settings of a run at one sample rate (samples, not milliseconds).

    Attributes:
        sample_rate: Hz; n_mels: F; win: window (= n_fft) in samples; hop: hop in samples;
        f_min, f_max: mel filter range in Hz.
    """

    sample_rate: int
    n_mels: int
    win: int
    hop: int
    f_min: float
    f_max: float

    @classmethod
    def from_config(cls, cfg, sample_rate: int) -> "FeatureSpec":
        """From ``data.audio`` (:class:`engine.config.AudioConfig`) at ``sample_rate`` Hz.

        Raises:
            ConfigError: ``f_max`` above half the sample rate, a window or hop under 2 samples,
                or more mel bins than the FFT can fill (an empty mel filter), naming the field.
        """
        sr = int(sample_rate)
        win, hop = round(cfg.window_ms * sr / 1000), round(cfg.hop_ms * sr / 1000)
        if win < 2 or hop < 1:
            raise ConfigError(f"data.audio.window_ms: {cfg.window_ms:g} ms is {win} samples at {sr} Hz; use a longer window")
        f_max = sr / 2 if cfg.f_max is None else float(cfg.f_max)
        if f_max > sr / 2:
            raise ConfigError(f"data.audio.f_max: {f_max:g} Hz is above half the sample rate ({sr / 2:g} Hz)")
        spec = cls(sr, int(cfg.n_mels), win, hop, float(cfg.f_min), f_max)

        fb = AF.melscale_fbanks(win // 2 + 1, spec.f_min, spec.f_max, spec.n_mels, sr)
        if bool((fb.sum(0) == 0).any()):
            raise ConfigError(f"data.audio.n_mels: {spec.n_mels} mel bins between {spec.f_min:g} and {spec.f_max:g} Hz "
                              f"leave some filters empty with a {win}-sample FFT; use fewer bins or a longer window")
        return spec

    def frames(self, n_samples: int) -> int:
        """Frames of a clip of ``n_samples``: ``1 + n // hop`` (centred frames)."""
        return 1 + int(n_samples) // self.hop


def window_frames(cfg, spec: FeatureSpec, multiple: int = 1) -> int:
    """Frames ``T`` of a model window: ``ceil(clip_seconds * sample_rate / hop)`` rounded up to a
    multiple of ``multiple`` (the patch's time side), at least one multiple."""
    t = math.ceil(cfg.clip_seconds * spec.sample_rate / spec.hop - 1e-9)
    return max(multiple, -(-t // multiple) * multiple)


class LogMel:
    """Log-mel spectrogram and its Griffin-Lim inversion for one :class:`FeatureSpec` (module docstring)."""

    def __init__(self, spec: FeatureSpec):
        self.spec = spec
        self.mel = torchaudio.transforms.MelSpectrogram(
            spec.sample_rate, n_fft=spec.win, win_length=spec.win, hop_length=spec.hop, f_min=spec.f_min,
            f_max=spec.f_max, n_mels=spec.n_mels, power=2.0, center=True)  # fmt: skip
        self._inverse = None

    @torch.no_grad()
    def __call__(self, wave: torch.Tensor) -> torch.Tensor:
        """``wave [..., n]`` float -> log-mel ``[..., F, 1 + n // hop]`` float32.

        Raises:
            ValueError: fewer samples than the reflect padding needs (``n <= win // 2``).
        """
        if wave.shape[-1] <= self.spec.win // 2:
            raise ValueError(f"LogMel: {wave.shape[-1]} samples, need more than {self.spec.win // 2} (half a window)")
        return torch.log(self.mel(wave.float()) + LOG_EPS)

    @torch.no_grad()
    def invert(self, logmel: torch.Tensor, length: int | None = None) -> torch.Tensor:
        """Griffin-Lim waveform of a log-mel spectrogram (module docstring).

        Args:
            logmel: ``[..., F, T]`` natural-log mel power (not normalised).
            length: samples of the result (default ``(T - 1) * hop``).

        Returns:
            ``[..., length]`` float32, peak-limited to [-1, 1].
        """
        s = self.spec
        if self._inverse is None:
            self._inverse = (
                torchaudio.transforms.InverseMelScale(s.win // 2 + 1, s.n_mels, s.sample_rate, s.f_min, s.f_max,
                                                      driver="gelsd"),
                torchaudio.transforms.GriffinLim(n_fft=s.win, n_iter=GRIFFIN_LIM_ITERS, win_length=s.win,
                                                 hop_length=s.hop, power=2.0, rand_init=False),
            )  # fmt: skip
        inv_mel, gl = self._inverse
        power = (logmel.float().exp() - LOG_EPS).clamp_min(0.0)
        gl.length = length if length is not None else (logmel.shape[-1] - 1) * s.hop
        return gl(inv_mel(power)).clamp(-1.0, 1.0)


@dataclass
class Window:
    """A batch of model windows: ``spec [B, F, T]`` normalised log-mel (silence in the padding),
    ``real [B, T]`` bool (True = a frame of the clip, False = padding), ``voiced [B, T]`` bool
    (:func:`engine.masking.units.voiced_frames`, False in the padding), ``rows`` and ``starts``
    (first frame of each window in its clip), int64 ``[B]``."""

    spec: torch.Tensor
    real: torch.Tensor
    voiced: torch.Tensor
    rows: torch.Tensor
    starts: torch.Tensor


class ClipFeatures:
    """Normalised log-mel frames of every clip of a dataset, computed once, cut into windows.

    The raw (not normalised) frames are kept one clip after the other in a float32 ``[total, F]``
    array: in memory, or, with ``store``, in ``.npy`` files of that folder read through memory
    maps, so a process's private memory does not grow with the dataset (the page cache holds what
    is read). Each read (:meth:`window`, :meth:`clip_logmel`) normalises only the frames it returns.
    Both ways give exactly the same values.

    Args:
        clips: ``N`` float32 waveforms (``[n_i]``, at ``spec.sample_rate``): a list, or any sequence
            (``len`` and ``[i]``) that decodes one clip at a time (:class:`DatasetClips`).
        spec: the feature settings.
        stats_rows: the clips whose frames give the per-bin mean and std (the train split; none or
            empty: every clip); ``(mean, std)`` float32 ``[F]`` may be passed instead as ``stats``.
        store: a folder for the frames (:func:`feature_store`). When it holds the frames of ``N``
            clips with this ``spec`` they are mapped and no clip is decoded; else they are computed
            clip by clip into a new folder (:func:`engine.workspace.derived_folder`: published whole,
            a damaged one replaced; one that cannot be written, e.g. on a full disk, leaves the frames
            in memory with a warning).

    Attributes:
        offsets: int64 ``[N + 1]`` frame offsets; ``n_frames`` int64 ``[N]``.
        frames: float32 ``[total, F]`` raw log-mel frames (an array or a read-only memory map).
        voiced_frames: bool ``[total]``: energy voice activity of each frame (threshold -35 dB below
            the clip's loudest frame, window and hop of ``spec``).
        mean, std: float32 ``[F]``, the normalisation (std at least 1e-3): float64 sums over the
            ``stats_rows`` frames, the std with Bessel's correction (``torch.std``'s).
        silence: float32 ``[F]``: the normalised value of digital silence (the padding).
        stored: the folder the frames are mapped from, or None (in memory).
    """

    META = "meta.json"

    def __init__(self, clips, spec: FeatureSpec, stats_rows: np.ndarray | None = None,
                 stats: tuple[np.ndarray, np.ndarray] | None = None, store: Path | None = None):
        self.spec, self.logmel_fn = spec, LogMel(spec)
        arrays = None
        if store is not None:
            store = Path(store)
            arrays = derived_folder(store, self.META, lambda f: _open_store(f, spec, len(clips)),
                                    lambda tmp: self._fill(clips, tmp), "audio features")
        self.stored = store if arrays is not None else None
        if arrays is None:
            arrays = self._compute(clips, None)
        self.frames, self.voiced_frames, n_frames = arrays
        self.n_frames = torch.from_numpy(np.asarray(n_frames, dtype=np.int64).copy())
        self.offsets = torch.zeros(len(self.n_frames) + 1, dtype=torch.int64)
        self.offsets[1:] = self.n_frames.cumsum(0)
        if stats is None:
            mean, std = self._stats(np.arange(len(clips)) if stats_rows is None or len(stats_rows) == 0
                                    else np.asarray(stats_rows))  # fmt: skip
        else:
            mean, std = (torch.as_tensor(np.asarray(a, np.float32)) for a in stats)
        self.mean, self.std = mean.float(), std.float().clamp_min(1e-3)
        self.silence = (math.log(LOG_EPS) - self.mean) / self.std

    def _compute(self, clips, folder: Path | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every clip's raw frames and voicing, one clip at a time, into ``folder``'s files (memory
        maps) or into memory: ``(frames [total, F], voiced [total], n_frames [N])``."""
        spec = self.spec
        n_frames = np.array([spec.frames(len(clips[i])) for i in range(len(clips))], dtype=np.int64)
        total, F = int(n_frames.sum()), spec.n_mels
        if folder is None:
            frames, voiced = np.empty((total, F), np.float32), np.empty(total, bool)
        else:
            frames = np.lib.format.open_memmap(folder / "frames.npy", mode="w+", dtype=np.float32, shape=(total, F))
            voiced = np.lib.format.open_memmap(folder / "voiced.npy", mode="w+", dtype=bool, shape=(total,))
        pad, o = spec.win // 2 + 1, 0
        for i in range(len(clips)):
            w = torch.from_numpy(np.ascontiguousarray(clips[i], dtype=np.float32))
            n = spec.frames(w.shape[0])
            if w.shape[0] < pad:  # shorter than the reflect padding: zero-pad (silence) to compute, keep n's frames
                w = torch.nn.functional.pad(w, (0, pad - w.shape[0]))
            frames[o : o + n] = self.logmel_fn(w)[:, :n].T.numpy()
            voiced[o : o + n] = voiced_frames(w, spec.sample_rate, frame_length=spec.win, hop_length=spec.hop)[0, :n].numpy()
            o += n
        if folder is not None:
            frames.flush()
            voiced.flush()
            np.save(folder / "n_frames.npy", n_frames)
        return frames, voiced, n_frames

    def _fill(self, clips, tmp: Path) -> None:
        """Write a store folder's files into ``tmp``: the frames, then ``meta.json`` (the marker)."""
        self._compute(clips, tmp)
        atomic_write_json(tmp / self.META, _store_meta(self.spec, len(clips)))

    def _stats(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-bin mean and std (Bessel) of the frames of clips ``rows``, float64 sums, clip by clip."""
        F = self.spec.n_mels
        rows = np.sort(np.asarray(rows, dtype=np.int64))
        count, total = 0, np.zeros(F, np.float64)
        for r in rows:
            a = self.frames[int(self.offsets[r]) : int(self.offsets[r + 1])]
            total += a.sum(axis=0, dtype=np.float64)
            count += a.shape[0]
        if count < 2:
            return torch.from_numpy(total / max(count, 1)), torch.ones(F)
        mean, sq = total / count, np.zeros(F, np.float64)
        for r in rows:
            d = self.frames[int(self.offsets[r]) : int(self.offsets[r + 1])].astype(np.float64) - mean
            sq += (d * d).sum(axis=0)
        return torch.from_numpy(mean), torch.from_numpy(np.sqrt(sq / (count - 1)))

    def _normalise(self, raw: np.ndarray) -> torch.Tensor:
        """Raw frames ``[..., F]`` -> normalised ``[..., F]`` float32."""
        raw = np.ascontiguousarray(raw, dtype=np.float32)
        if not raw.flags.writeable:  # a view of the read-only map (a slice): copy what is read
            raw = raw.copy()
        return (torch.from_numpy(raw) - self.mean) / self.std

    def clip_logmel(self, r: int) -> torch.Tensor:
        """The normalised log-mel frames of clip ``r``: ``[F, n_frames[r]]``."""
        return self._normalise(self.frames[int(self.offsets[r]) : int(self.offsets[r + 1])]).T

    def __len__(self) -> int:
        return int(self.n_frames.shape[0])

    def window(self, rows: torch.Tensor, starts: torch.Tensor, T: int) -> Window:
        """Frames ``starts .. starts + T`` of the clips ``rows`` (padding past a clip's end).

        Args:
            rows, starts: int64 ``[B]``; T: window frames.
        """
        rows, starts = rows.long(), starts.long()
        t = starts[:, None] + torch.arange(T)[None, :]  # (B, T) frame index in the clip
        real = t < self.n_frames[rows][:, None]
        idx = (self.offsets[rows][:, None] + t).clamp_max(max(self.frames.shape[0] - 1, 0)).numpy()
        spec = self._normalise(self.frames[idx]).transpose(1, 2)  # (B, F, T): only these frames read
        spec = torch.where(real[:, None, :], spec, self.silence[None, :, None])
        voiced = torch.from_numpy(np.asarray(self.voiced_frames[idx], dtype=bool)) & real
        return Window(spec.contiguous(), real, voiced, rows, starts)

    def random_starts(self, rows: torch.Tensor, T: int, generator: torch.Generator) -> torch.Tensor:
        """A uniform window start in ``0 .. n_frames - T`` per clip (0 for a clip of at most ``T``
        frames): ``B`` uniforms drawn from ``generator``."""
        span = (self.n_frames[rows] - T).clamp_min(0) + 1
        return (torch.rand(len(rows), generator=generator) * span).long().clamp_max(span - 1)

    def windows(self, rows: np.ndarray | torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every window of the clips ``rows`` that holds a frame (starts ``0, T, 2T, ...``):
        ``(row, start)`` int64 ``[W]`` each, in clip order (a clip of at most ``T`` frames: one)."""
        rows = torch.as_tensor(np.asarray(rows), dtype=torch.int64)
        count = (self.n_frames[rows] + T - 1) // T
        row = torch.repeat_interleave(rows, count)
        first = torch.repeat_interleave(torch.cumsum(count, 0) - count, count)
        start = (torch.arange(len(row)) - first) * T
        return row, start

    def denormalize(self, spec: torch.Tensor) -> torch.Tensor:
        """Normalised ``[..., F, T]`` -> natural-log mel power (for display and :meth:`LogMel.invert`)."""
        return spec * self.std[:, None] + self.mean[:, None]

    def wave_window(self, clip: np.ndarray, start: int, T: int) -> np.ndarray:
        """The samples of a window of ``T`` frames from frame ``start`` of ``clip`` (``(T - 1) * hop``
        samples from ``start * hop``, zero-padded past the clip's end): what the window sounds like."""
        n = (T - 1) * self.spec.hop
        out = np.zeros(n, np.float32)
        piece = clip[start * self.spec.hop : start * self.spec.hop + n]
        out[: len(piece)] = piece
        return out


#: Bumped when the stored frames would differ for the same clips and spec (e.g. a new log-mel recipe).
STORE_FORMAT = 1


def _store_meta(spec: FeatureSpec, n_clips: int) -> dict:
    return {"format": STORE_FORMAT, "spec": asdict(spec), "n_clips": int(n_clips)}


def _open_store(store: Path | None, spec: FeatureSpec, n_clips: int):
    """``(frames, voiced, n_frames)`` mapped read-only from a complete ``store`` folder written for
    ``spec`` and ``n_clips`` clips; None when there is none, or it is for something else or damaged
    (it is then computed again in a new folder beside it, see :class:`ClipFeatures`)."""
    if store is None:
        return None
    store = Path(store)
    try:
        meta = json.loads((store / ClipFeatures.META).read_text())
        if meta != json.loads(json.dumps(_store_meta(spec, n_clips))):
            return None
        frames = np.load(store / "frames.npy", mmap_mode="r")
        voiced = np.load(store / "voiced.npy", mmap_mode="r")
        n_frames = np.load(store / "n_frames.npy")
    except (OSError, ValueError):
        return None
    total = int(n_frames.sum()) if len(n_frames) == n_clips else -1
    if frames.shape != (total, spec.n_mels) or voiced.shape != (total,) or frames.dtype != np.float32:
        return None
    return frames, voiced, n_frames


def feature_store(dataset_hash: str, spec: FeatureSpec, n_clips: int, workspace: str | os.PathLike | None = None) -> Path | None:
    """``<workspace>/features/<id>``: where :class:`ClipFeatures` keeps the frames of a dataset's
    clips, ``id`` a hash of the dataset's content hash (``info.source_hash``, which covers the
    clips and their order), the clip count and ``spec``. None for a dataset without a content hash
    (an old one): its frames stay in memory. A folder there is derived data: deleting it only
    costs the next run's start computing it again."""
    if not dataset_hash:
        return None

    key = json.dumps({"dataset": dataset_hash, **_store_meta(spec, n_clips)}, sort_keys=True)
    return workspace_root(workspace) / "features" / hashlib.sha256(key.encode()).hexdigest()[:24]


class DatasetClips:
    """The clips ``rows`` of an audio dataset as a sequence that decodes one clip per ``[i]``
    (float32 ``[n]``, :meth:`engine.data.dataset.AudioDataset.clip`), for :class:`ClipFeatures`."""

    def __init__(self, ds, rows: np.ndarray | None = None):
        self.ds, self.rows = ds, np.arange(len(ds)) if rows is None else np.asarray(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ds.clip(int(self.rows[i]))
