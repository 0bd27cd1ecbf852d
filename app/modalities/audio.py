"""Audio in the dashboard: clips as log-mel spectrograms with players, masks drawn over real
spectrograms (New run, Mask lab), a run's original / masked / reconstructed spectrograms with
Griffin-Lim audio (Run detail).

A spectrogram is drawn as an image: low frequencies at the bottom, time to the right, a viridis
colour map over the clip's own log-mel range (1st to 99th percentile of its real frames); masked
cells are shown greyed with the mask grid's colour, silence padding past a clip's end is dark.
Every number comes from the engine (:mod:`engine.tasks.audio`, :mod:`engine.audio.features`):
the previews call the functions the run itself calls for its samples.
"""

from __future__ import annotations

import json

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from app.components.charts import counts_chart
from app.components.errors import guarded
from app.components.media import data_url, png_bytes, png_url, show_audio, show_image, wav_bytes
from app.components.urlstate import dig, index_of, number
from app.modalities import ModalityUI, SampleView, config_train, register_ui
from engine.api import (
    AUDIO_SAMPLE_RATES,
    AudioConfig,
    RunConfig,
    counted,
    distance_to_visible,
    load_dataset,
    proposed_rate,
    rates_text,
    workspace_root,
)

N_SAMPLES = 6  # clips with spectrogram and player on the Data page
N_PREVIEW = 8  # representative val clips: a run's fixed sample rows (train.num_vis defaults to 8)
SCALE = 3  # screen pixels per spectrogram cell
#: viridis at 0, 1/4, 1/2, 3/4, 1 (matplotlib's values), linearly interpolated in between
_VIRIDIS = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], np.float32)
MASK_RGB = np.array([235, 235, 235], np.float32)  # masked cells: light grey
PAD_RGB = np.array([25, 25, 25], np.float32)  # padding past the clip's end


# --------------------------------------------------------------------------- drawing



def plural_unit(unit: str) -> str:
    """``"patch"`` -> ``"patches"``, ``"frame"`` -> ``"frames"``: a task's unit (``Task.unit``) in the plural."""
    return f"{unit}es" if unit.endswith(("ch", "sh", "s", "x")) else f"{unit}s"

def colormap(x: np.ndarray) -> np.ndarray:
    """``x`` in [0, 1] (any shape) -> RGB float32 ``[..., 3]`` (viridis from 5 anchors)."""
    pos = np.clip(x, 0, 1) * (len(_VIRIDIS) - 1)
    i = np.minimum(pos.astype(int), len(_VIRIDIS) - 2)
    f = (pos - i)[..., None]
    return _VIRIDIS[i] * (1 - f) + _VIRIDIS[i + 1] * f


def spec_image(spec: np.ndarray, real: np.ndarray | None = None, cells: np.ndarray | None = None,
               lo_hi: tuple[float, float] | None = None, scale: int = SCALE) -> np.ndarray:
    """A log-mel spectrogram ``[F, T]`` as uint8 RGB ``[F*scale, T*scale, 3]``, low bins at the bottom.

    Args:
        spec: log-mel (natural log); real: bool ``[T]`` frames of the clip (False = padding, dark);
        cells: bool ``[F, T]`` masked cells, drawn light grey; lo_hi: the value range of the colour map
            (default: 1st and 99th percentile of the real frames).
    """
    spec = np.asarray(spec, np.float32)
    real = np.ones(spec.shape[1], bool) if real is None else np.asarray(real, bool)
    if lo_hi is None:
        vals = spec[:, real] if real.any() else spec
        lo_hi = (float(np.percentile(vals, 1)), float(np.percentile(vals, 99)))
    lo, hi = lo_hi
    rgb = colormap((spec - lo) / max(hi - lo, 1e-6))
    if cells is not None:
        rgb = np.where(np.asarray(cells, bool)[..., None], 0.25 * rgb + 0.75 * MASK_RGB, rgb)
    rgb = np.where(real[None, :, None], rgb, PAD_RGB)
    img = rgb[::-1].round().astype(np.uint8)
    return img.repeat(scale, axis=0).repeat(scale, axis=1)


def play(wave: np.ndarray, rate: int, label: str | None) -> None:
    """A caption (none when ``label`` is None) and an audio player for ``wave`` (float in [-1, 1] or
    int16 PCM) at ``rate`` Hz."""
    w = np.asarray(wave)
    w = w.astype(np.float32) / 32767.0 if w.dtype == np.int16 else w.astype(np.float32)
    if label is not None:
        st.caption(label)
    show_audio(st, w, int(rate))


def _seconds(n: int, rate: int) -> str:
    return f"{n / rate:.2f} s"


# --------------------------------------------------------------------------- Data page


@st.cache_data(max_entries=6, ttl=900, show_spinner="Loading clips…")
def audio_view(workspace: str, name: str, version: str) -> dict:
    """What the Data page shows of an audio dataset: durations of every clip with its split,
    representative clips (:func:`app.components.datasets.sample_rows`: class by class, half from
    val; waveform, log-mel with the default features, label, split, transcript), class counts.
    ``workspace`` and ``version`` are cache keys only."""
    from app.components.datasets import sample_rows  # noqa: PLC0415 (the modality views and app.components import each other, and these modules load torch: imported where used)
    from engine.audio.features import ClipFeatures, FeatureSpec  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    ds = load_dataset(name)
    rate = ds.rate
    split = np.where(ds.split == 0, "train", "val")
    durations = pd.DataFrame({"seconds": ds.lengths() / rate, "split": split})
    pick = [r for r, _ in sample_rows(ds, N_SAMPLES)]
    clips = [ds.clip(int(i)) for i in pick]
    spec = FeatureSpec.from_config(AudioConfig(), rate)
    feats = ClipFeatures(clips, spec, stats=(np.zeros(spec.n_mels), np.ones(spec.n_mels)))
    mels = [feats.clip_logmel(k).numpy() for k in range(len(pick))]
    samples = [{"wave": c, "mel": m, "label": ds.info.class_names[ds.labels[i]], "split": split[i],
                "transcript": ds.transcript(int(i)), "seconds": len(c) / rate} for i, c, m in zip(pick, clips, mels)]
    return {"durations": durations, "samples": samples, "counts": ds.counts(), "rate": rate}


def data_section(info) -> None:
    """The Data page body for an audio dataset: sizes, durations and sample rates, clips with their
    spectrogram and a player, clips per class."""
    view = guarded(audio_view, str(workspace_root()), info.name, info.created_at)
    if view is None:
        return
    st_ = info.stats
    m = st.columns(5)
    m[0].metric("Train clips", f"{info.n_train:,}")
    m[1].metric("Val clips", f"{info.n_val:,}")
    m[2].metric("Classes", len(info.class_names))
    m[3].metric("Sample rate", f"{view['rate']:,} Hz")
    m[4].metric("Total duration", f"{view['durations'].seconds.sum() / 60:.1f} min")
    d = view["durations"].seconds
    facts = [f"clip length {d.min():.2f} to {d.max():.2f} s (median {d.median():.2f} s)"]
    if st_.get("source_rates"):
        facts.append("recorded at " + ", ".join(f"{int(r):,} Hz ({counted(n, 'clip')})"
                                                for r, n in st_["source_rates"].items()))
    if st_.get("channels"):
        facts.append(", ".join(f"{counted(n, 'clip')} with {counted(int(c), 'channel')}"
                               for c, n in st_["channels"].items()) + " (stored mono)")
    if info.group_names:
        facts.append(f"{counted(len(info.group_names), 'group')} (e.g. speakers), each in one split")
    st.caption(" · ".join(facts))
    st.subheader("Clips")
    cols = st.columns(3)
    for k, s in enumerate(view["samples"]):
        with cols[k % 3]:
            # natural size (3 px a frame and a bin): the widths compare the clips' durations
            show_image(st, spec_image(s["mel"], scale=SCALE), caption=f"{s['label']} · {s['split']} · {s['seconds']:.2f} s"
                     + (f" · “{s['transcript']}”" if s["transcript"] else ""), width="content")
            show_audio(st, s["wave"], view["rate"])
    st.caption("Log-mel spectrograms (64 bins, 25 ms window, 10 ms hop, 3 pixels a frame; low frequencies at the bottom).")
    left, right = st.columns(2)
    with left:
        st.subheader("Duration")
        chart = alt.Chart(view["durations"]).mark_bar().encode(
            x=alt.X("seconds:Q", bin=alt.Bin(maxbins=40), title="seconds per clip"),
            y=alt.Y("count():Q", title="clips"), color=alt.Color("split:N", title="split"),
        ).properties(height=260)  # fmt: skip
        st.altair_chart(chart, width="stretch")
    with right:
        st.subheader("Clips per class and split")
        st.altair_chart(counts_chart(view["counts"], unit="clips"), width="stretch")


# --------------------------------------------------------------------------- New run


#: What New run proposes for each audio task (AudioMAE masks 80% of the patches; wav2vec 2.0's spans).
TASK_MASKING = {"audio_mae": {"strategy": "random", "ratio": 0.8},
                "audio_frames": {"strategy": "span_starts", "params": {"p": 0.065, "length": 5, "min_spans": 1}}}
GRID_DIMS = {"audio_mae": 2, "audio_frames": 1}


MEL_BINS = [32, 40, 48, 64, 80, 96, 128]


def feature_fields(key: str, carried: dict) -> dict:
    """``data.audio``: mel bins, window, hop and the model's window length (defaults from the
    partial run config ``carried``, else :class:`engine.config.AudioConfig`'s)."""
    d = {**AudioConfig().model_dump(), **(dig(carried, "data.audio") or {})}
    a, b = st.columns(2)
    n_mels = a.select_slider("Mel bins", MEL_BINS, d["n_mels"] if d["n_mels"] in MEL_BINS else 64, key=f"{key}_mels")
    clip = b.number_input("Window (seconds)", 0.1, 10.0, number(d["clip_seconds"], AudioConfig().clip_seconds, 0.1, 10.0), 0.1, key=f"{key}_clip",
                          help="what the model sees at once: shorter clips are padded with silence (never masked "
                               "or scored), longer ones cut (a random window each step)")  # fmt: skip
    win = a.number_input("Analysis window (ms)", 5.0, 100.0, number(d["window_ms"], AudioConfig().window_ms, 5.0, 100.0), 5.0, key=f"{key}_win")
    hop = b.number_input("Hop (ms)", 2.5, 50.0, number(d["hop_ms"], AudioConfig().hop_ms, 2.5, 50.0), 2.5, key=f"{key}_hop")
    return {"n_mels": int(n_mels), "window_ms": float(win), "hop_ms": float(hop), "clip_seconds": float(clip),
            "f_min": number(d["f_min"], AudioConfig().f_min, 0.0), "f_max": d["f_max"]}


def grid_fields(task: str, n_mels: int, key: str, carried: dict) -> tuple[int, dict]:
    """The unit grid: patch size (and frames per patch) for AudioMAE, frames per token otherwise
    (defaults from the partial run config ``carried``)."""
    patch0 = dig(carried, "model.patch_size")
    if task == "audio_mae":
        sizes = [p for p in (2, 4, 8, 16, 32) if n_mels % p == 0] or [1]
        a, b = st.columns(2)
        patch = a.selectbox("Patch: mel bins", sizes, index=index_of(sizes, patch0, index_of(sizes, 8, len(sizes) - 1)),
                            key=f"{key}_patch_{n_mels}")
        frames_opts = [2, 4, 8, 16]
        frames = b.selectbox("Patch: frames", frames_opts, key=f"{key}_pframes",
                             index=index_of(frames_opts, dig(carried, "task_params.patch_frames"), 2),
                             help="the patch's time side (AudioMAE: square 16x16)")
        return int(patch), {"patch_frames": int(frames)}
    ks = [1, 2, 4]
    k = st.selectbox("Frames per token", ks, index=index_of(ks, patch0, 1), key=f"{key}_k",
                     help="frames stacked into one token (one hop each)")
    return int(k), {}


def train_defaults(info, task: str) -> dict:
    """The training fields New run proposes for ``task`` on an audio dataset, over the task's
    ``train_defaults``: for audio-text pairs, configs/paired-audio-fsdd.yaml's (the recipe
    bench/paired_quality.py --audio measures); nothing more for the others."""
    return config_train("paired-audio-fsdd") if task == "paired_audio" else {}


def run_fields(info, task: str, key: str, carried: dict) -> dict:
    """New run's audio fields: features, grid, masking, model (and the frame task's target); the
    widgets' defaults are ``carried`` (a partial run config, from the URL), else the task's proposals
    (:data:`TASK_MASKING`). Returns the partial config dict. The ``paired`` task (audio-text pairs:
    each clip's spectrogram with its transcript or class word) takes the paired view's fields
    (:func:`app.modalities.paired.run_fields`)."""
    from app.components.masks import masking_controls  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)
    from engine.api import get_model_spec, get_task  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    if task == "paired_audio":
        from app.modalities import paired  # noqa: PLC0415 (the paired views import this module's views)
        return paired.run_fields(info, task, key, carried)
    arch = get_task(task).archs[0]
    audio = feature_fields(key, carried)
    patch, task_params = grid_fields(task, audio["n_mels"], key, carried)
    with st.container(border=True):
        defaults = carried.get("masking") or TASK_MASKING.get(task, {})
        masking = masking_controls("audio", GRID_DIMS[task], f"{key}_{task}", defaults)
        st.page_link("../pages/mask_lab.py", label="Compare strategies in Mask lab")
    presets = get_model_spec(arch).presets
    names = list(presets)
    preset = st.selectbox("Model preset", names, key=f"{key}_preset_{arch}", index=index_of(names, dig(carried, "model.preset")),
                          format_func=lambda k: f"{k}  (width {presets[k]['embed_dim']}, depth {presets[k]['depth']})")
    losses = ["mse", "l1"]
    loss = st.selectbox("Loss on masked cells", losses, key=f"{key}_loss_{task}",
                        index=index_of(losses, dig(carried, "objective.loss")))
    if task == "audio_frames":
        targets = ["mel", "ema"]
        target = st.selectbox("Target", targets, key=f"{key}_target", index=index_of(targets, dig(carried, "task_params.target")),
                              format_func=lambda t: {"mel": "the masked frames (segment reconstruction)",
                                                     "ema": "an EMA teacher's features (data2vec)"}[t])  # fmt: skip
        task_params["target"] = target
    return {"task": task, "masking": masking, "data": {"audio": audio}, "task_params": task_params,
            "model": {"arch": arch, "preset": preset, "patch_size": patch}, "objective": {"loss": loss}}


@st.cache_data(max_entries=16, ttl=600, show_spinner="Drawing masks on real clips…")
def _preview(cfg_json: str, version: str, n: int):
    from engine.tasks.audio.preview import preview  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    return preview(RunConfig.from_dict(json.loads(cfg_json)), n)


def mask_rows(pv, names: tuple[str, ...], players: bool = True) -> None:
    """Each previewed clip: the spectrogram with its player under it (wide enough for the time and
    progress bar), the same with the run's mask beside it."""
    for i in range(len(pv.spec)):
        label = names[int(pv.labels[i])] if 0 <= int(pv.labels[i]) < len(names) else str(int(pv.labels[i]))
        real = pv.real[i]
        cells = pv.cells[i] & real[None, :]
        a, b = st.columns(2)
        lo_hi = _range(pv.spec[i], real)
        show_image(a, spec_image(pv.spec[i], real, lo_hi=lo_hi),
                   caption=f"{label}" + (f" · “{pv.transcripts[i]}”" if pv.transcripts[i] else ""))
        show_image(b, spec_image(pv.spec[i], real, cells, lo_hi=lo_hi),
                   caption=f"masked: {int(cells.sum())} of {int(real.sum()) * pv.spec.shape[1]} cells "
                           f"({cells.sum() / max(int(real.sum()) * pv.spec.shape[1], 1):.0%} of the clip)")
        if players:
            with a:  # under the spectrogram it plays, whose caption names the clip
                play(pv.waves[i], pv.sample_rate, None)


def _range(spec: np.ndarray, real: np.ndarray) -> tuple[float, float]:
    vals = spec[:, real] if real.any() else spec
    return float(np.percentile(vals, 1)), float(np.percentile(vals, 99))


def spec_widths(cfg, grid, form: str = ": {}") -> str:
    """``form`` around what SpecAugment's F and T come to on ``grid`` (``": F=27 mel bins = 3 rows
    of 8 mel bins; ..."``, :func:`engine.tasks.audio.width_text`); ``""`` for other strategies."""
    from engine.tasks.audio.common import width_text  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    text = width_text(cfg, grid)
    return form.format(text) if text else ""


def mask_preview(cfg, info, warn: bool = True) -> None:
    """The run's fixed validation clips (chosen class by class) with the masks it uses for its
    samples; for the ``paired`` task with their texts (:func:`app.modalities.paired.mask_preview`).
    ``warn``: say when too many of them have nothing masked (:func:`app.components.masks.unmasked_note`;
    Mask lab says it of its larger batch instead)."""
    from app.components.masks import unmasked_note  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    if cfg.task == "paired_audio":
        from app.modalities import paired  # noqa: PLC0415 (the paired views import this module's views)
        paired.mask_preview(cfg, info, warn=warn)
        return
    pv = guarded(_preview, json.dumps(cfg.to_dict(), sort_keys=True), info.created_at, N_PREVIEW)
    if pv is None:
        return
    grid = "x".join(map(str, pv.grid.shape))
    unit = "patches" if pv.grid.dims == 2 else "frame tokens"
    seconds = pv.grid.frames * cfg.data.audio.hop_ms / 1000
    asked = cfg.data.audio.clip_seconds
    rounded = (f" (the {asked:.2f} s asked for, rounded up to whole {pv.grid.pt}-frame {unit.split()[-1]})"
               if f"{seconds:.2f}" != f"{asked:.2f}" else "")
    st.caption(f"The {len(pv.spec)} fixed validation clips of **{info.name}** (chosen class by class; {pv.grid.frames} frames = "
               f"{seconds:.2f} s window{rounded}, {grid} {unit} of "
               f"{pv.grid.pf}x{pv.grid.pt} bins x frames) with the masks this run uses for its samples "
               f"({cfg.masking.strategy}{spec_widths(cfg, pv.grid)}); masked cells light grey, silence padding dark "
               "(never masked).")
    if warn:
        hidden = np.array([(c & r[None, :]).sum() for c, r in zip(pv.cells, pv.real)])
        if (empty := unmasked_note(hidden, "previewed clips", strategy=cfg.masking.strategy)) is not None:
            st.warning(empty)
    mask_rows(pv, info.class_names)


# --------------------------------------------------------------------------- Run detail


@st.cache_data(max_entries=8, ttl=900, show_spinner=False)
def sample_media(run_id: str, step: int, _sample) -> list[dict]:
    """PNG and WAV bytes of every clip of a run's sample at ``step`` (``_sample``, not hashed: the
    sample of a run and step never changes), so the Run detail fragment that redraws every 2 s
    encodes nothing again."""
    spec, pred = _sample["spec"].astype(np.float32), _sample["pred"].astype(np.float32)
    mask, real = _sample["mask"], _sample["real"]
    rate = int(_sample.meta.get("sample_rate", 16000))
    out = []
    for i in range(len(spec)):
        lo_hi = _range(spec[i], real[i])
        pasted = np.where(mask[i], pred[i], spec[i])
        out.append({"hidden": int(mask[i].sum()),
                    "images": [png_bytes(spec_image(spec[i], real[i], lo_hi=lo_hi)),
                               png_bytes(spec_image(spec[i], real[i], mask[i], lo_hi=lo_hi)),
                               png_bytes(spec_image(pasted, real[i], lo_hi=lo_hi))],
                    "sounds": [wav_bytes(_sample[k][i], rate) for k in ("wave", "wave_gl", "wave_recon")]})
    return out


def samples_view(sample, run) -> None:
    """A run's fixed validation clips at one saved evaluation (a slider goes over all of them, as
    the image view's): original, masked and reconstructed spectrograms side by side, players for the
    original, for Griffin-Lim of the original and of the reconstruction."""
    from app.modalities.image import pick_sample  # noqa: PLC0415 (the modality views and app.components import each other, and these modules load torch: imported where used)

    sample = pick_sample(sample, run, "audio_step")
    names = sample.meta.get("class_names", [])
    spec = sample["spec"]
    masking = (run.config.get("masking", {}) if run is not None else {})
    st.caption(f"Step {sample.step} · {len(spec)} fixed validation clips · {masking.get('strategy', '?')} masking on a "
               f"{'x'.join(map(str, sample.meta.get('grid', [])))} grid of {plural_unit(sample.meta.get('unit', 'position'))} · "
               "reconstruction = the prediction at masked cells, the original elsewhere · audio by Griffin-Lim "
               "(32 iterations): compare the reconstruction's sound with Griffin-Lim of the original, not with the "
               "recording")
    media = sample_media(run.run_id if run is not None else "", int(sample.step), sample)
    for i, m in enumerate(media):
        y = int(sample["labels"][i])
        label = names[y] if 0 <= y < len(names) else str(y)
        text = (sample.meta.get("transcripts") or [""] * len(spec))[i]
        st.markdown(f"**Clip {i + 1}** · class {label}" + (f" · “{text}”" if text else ""))
        captions = ["original", f"masked input ({m['hidden']} cells hidden)", "reconstruction"]
        for col, img, cap in zip(st.columns(3), m["images"], captions):
            show_image(col, img, caption=cap)
        players = ["original recording", "Griffin-Lim of the original spectrogram", "Griffin-Lim of the reconstruction"]
        for col, snd, cap in zip(st.columns(3), m["sounds"], players):
            col.caption(cap)
            show_audio(col, snd)


def matrix_cells(sample, rows: int) -> list[dict]:
    """The reconstruction matrix's cells (:mod:`app.components.matrix`) of the first ``rows`` clips:
    the original log-mel spectrogram and the reconstruction (the prediction at masked cells, the
    original elsewhere) on the clip's own colour range, the error map at the masked cells (absolute
    log-mel error over that range, the image view's colours; other cells grey), as PNG data URLs,
    and players for the recording and for Griffin-Lim of the reconstruction."""
    from app.components.images import ERROR_VISIBLE_RGB, error_colors  # noqa: PLC0415 (the modality views and app.components import each other: imported where used)

    spec, pred = sample["spec"].astype(np.float32), sample["pred"].astype(np.float32)
    mask, real = sample["mask"], sample["real"]
    rate = int(sample.meta.get("sample_rate", 16000))
    out = []
    for i in range(min(rows, len(spec))):
        lo, hi = _range(spec[i], real[i])
        pasted = np.where(mask[i], pred[i], spec[i])
        err = error_colors(np.abs(pasted - spec[i]) / max(hi - lo, 1e-6), vmax=0.5)
        err[~np.asarray(mask[i], bool)] = ERROR_VISIBLE_RGB
        err = err[::-1]  # low bins at the bottom, as spec_image; one pixel a cell (the page scales up)
        hidden = np.asarray(mask[i], bool) & np.asarray(real[i], bool)[None, :]
        l1 = float(np.abs(pasted - spec[i])[hidden].mean()) if hidden.any() else float("nan")
        cell = {"original": png_url(spec_image(spec[i], real[i], lo_hi=(lo, hi), scale=1)),
                "recon": png_url(spec_image(pasted, real[i], lo_hi=(lo, hi), scale=1)), "error": png_url(err),
                "note": f"log-mel L1 {l1:.3f}" if np.isfinite(l1) else ""}
        for key, wave in (("audio_original", "wave"), ("audio_recon", "wave_recon")):  # players where the sample has the audio
            if wave in sample.arrays:
                cell[key] = data_url(wav_bytes(sample[wave][i], rate), "audio/wav")
        out.append(cell)
    return out


def interp_in_time(spec: np.ndarray, hidden: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Each hidden cell of ``spec`` (``[N, F, T]``) filled by linear interpolation in time between the
    visible real cells of its mel bin (the task's "interpolation in time" baseline); rows with no
    visible cell get the clip's mean."""
    out = spec.copy()
    t = np.arange(spec.shape[2])
    for i in range(len(spec)):
        for f in range(spec.shape[1]):
            vis = ~hidden[i, f] & real[i]
            if vis.any():
                out[i, f, hidden[i, f]] = np.interp(t[hidden[i, f]], t[vis], spec[i, f, vis])
            else:
                out[i, f, hidden[i, f]] = spec[i][:, real[i]].mean() if real[i].any() else 0.0
    return out


def distance_errors(sample):
    """The distance plot's data (:mod:`app.components.distance`): each hidden cell's distance in
    frames to the nearest visible cell of its mel bin (padding never counts), and the log-mel L1 error
    of the reconstruction and of interpolation in time."""
    spec, pred = sample["spec"].astype(np.float32), sample["pred"].astype(np.float32)
    hidden, real = np.asarray(sample["mask"], bool), np.asarray(sample["real"], bool)
    valid = np.broadcast_to(real[:, None, :], hidden.shape)
    dist = distance_to_visible(hidden, (2,), valid)
    errors = {"this run": np.abs(np.where(hidden, pred, spec) - spec),
              "interpolation in time": np.abs(interp_in_time(spec, hidden, real) - spec)}
    return dist, errors, "frames (within a mel bin)", "log-mel L1 at the hidden cell"


def compare_view(samples: dict, n: int = 4) -> list[tuple[str, np.ndarray]]:
    """The Compare page's grid for audio runs: rows are the first ``n`` fixed validation clips (the
    same clips for runs on the same dataset and window: :func:`engine.data.representative`), columns
    the original log-mel spectrogram, then per run its masked input and its reconstruction (the
    prediction at masked cells, the original elsewhere), at each run's latest samples, on one colour
    range per clip; where the runs' clips differ (other datasets or windows), each run's own
    original, on its own colour range, comes before its two columns. ``samples``: run label ->
    ``Sample`` of kind ``audio_spec``. Returns the ``(caption, uint8 column image)`` pairs drawn (the
    HTML report reuses them)."""
    from app.components.compare import draw_columns, shared_inputs, stack_column  # noqa: PLC0415 (the modality views and app.components import each other, and these modules load torch: imported where used)

    if not samples:
        return []
    first, k, same = shared_inputs(samples, "spec", n)
    ranges = [_range(first["spec"][i].astype(np.float32), first["real"][i]) for i in range(k)]

    def column(s, kind: str) -> np.ndarray:
        spec = s["spec"][:k].astype(np.float32)
        rows = []
        for i in range(k):
            lo_hi = ranges[i] if same else _range(spec[i], s["real"][i])
            x = np.where(s["mask"][i], s["pred"][i].astype(np.float32), spec[i]) if kind == "recon" else spec[i]
            rows.append(spec_image(x, s["real"][i], s["mask"][i] if kind == "masked" else None, lo_hi=lo_hi, scale=2))
        return stack_column(np.stack(rows))

    drawn = [("original", column(first, "original"))] if same else []
    for label, s in samples.items():
        if not same:
            drawn.append((f"{label} · original", column(s, "original")))
        drawn.append((f"{label} · masked (step {s.step})", column(s, "masked")))
        drawn.append((f"{label} · reconstruction (step {s.step})", column(s, "recon")))
    if not same:
        st.caption("These runs' fixed validation clips differ (other datasets or windows): each run's "
                   "columns show its own clips, after its own original.")
    draw_columns(drawn, per_row=5 if same else 6, fewest=5)  # whole runs per row: 3 columns each when not same
    return drawn


# --------------------------------------------------------------------------- Mask lab


def lab_controls(info, carried: dict, key: str) -> dict:
    """Mask lab's audio controls: the task (which grid), features, grid and masking (``carried``: a
    partial run config of defaults, from the URL); for the ``paired`` task the paired view's
    (:func:`app.modalities.paired.lab_controls`: text source, spectrogram and text masks)."""
    from app.components.masks import masking_controls  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)
    from engine.api import tasks_for  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    tasks = tasks_for("audio")
    task = st.selectbox("Task", tasks, key=f"{key}_task", index=index_of(tasks, carried.get("task")))
    if carried.get("task", task) != task:
        carried = {}  # another task than the URL's: its proposals
    if task == "paired_audio":
        from app.modalities import paired  # noqa: PLC0415 (the paired views import this module's views)
        return paired.lab_controls(info, carried, key)
    audio = feature_fields(key, carried)
    patch, task_params = grid_fields(task, audio["n_mels"], key, carried)
    defaults = carried.get("masking") or TASK_MASKING.get(task, {})
    masking = masking_controls("audio", GRID_DIMS[task], f"{key}_{task}", defaults)
    return {"task": task, "masking": masking, "data": {"audio": audio}, "task_params": task_params,
            "model": {"patch_size": patch}}


@st.cache_data(max_entries=16, ttl=900, show_spinner="Drawing masks…")
def lab_stats(cfg_json: str, version: str, n: int):
    """Mask lab's statistics of ``n`` train masks of a config (JSON): ``(MaskStats, masks per second,
    masking_problem)``. ``version``: the dataset's, a cache key only."""
    from engine.masking.stats import mask_stats, masks_per_second  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)
    from engine.tasks.audio.preview import train_masks  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)
    from engine.tasks.checks import masking_problem  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    cfg = RunConfig.from_dict(json.loads(cfg_json))
    mask, eligible = train_masks(cfg, n)
    rate = masks_per_second(lambda: train_masks(cfg, n)[0], min_time=0.2, warmup=False)
    unit = "patches" if mask.dim() == 3 else "frame tokens"
    return mask_stats(mask, eligible), rate, masking_problem(cfg.masking, mask, unit=unit, eligible=eligible)


def lab_results(cfg, info, n: int, url=None) -> None:
    """Mask lab's audio results: the run's masks on real spectrograms, then batch statistics; for the
    ``paired`` task both masks on clips with their texts (:func:`app.modalities.paired.lab_results`)."""
    from app.components.masks import lab_statistics  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    if cfg.task == "paired_audio":
        from app.modalities import paired  # noqa: PLC0415 (the paired views import this module's views)
        paired.lab_results(cfg, info, n)
        return
    st.subheader("Masks on real spectrograms")
    mask_preview(cfg, info, warn=False)
    st.subheader("Statistics")
    res = guarded(lab_stats, json.dumps(cfg.to_dict(), sort_keys=True), info.created_at, int(n))
    lab_statistics(res, lambda stats: f"{stats.batch_size} masks over the first windows of real train clips of "
                   f"**{info.name}** (chosen class by class; the ratio is over the positions that hold frames; "
                   "masks/s includes computing the log-mel and voiced frames).", spectrogram=True,
                   strategy=cfg.masking.strategy)


def import_fields(plan, key: str) -> tuple[dict, dict]:
    """The Data page's options for audio: the sample rate every clip is resampled to (proposed: the
    clips' own, at most 16 kHz) and the member-name encoding."""
    from app.components.importing import name_encoding_field  # noqa: PLC0415 (the modality views and app.components import each other, and these modules load torch: imported where used)

    heard = rates_text(plan.sample_rates)
    proposed = AUDIO_SAMPLE_RATES.index(proposed_rate(plan.sample_rates))
    rate = st.selectbox("Sample rate (Hz)", list(AUDIO_SAMPLE_RATES), index=proposed, key=f"{key}_rate",
                        format_func=lambda r: f"{r:,} Hz",
                        help="every clip is made mono and resampled to this rate (the report says which "
                             "clips were); the default is the clips' own rate, at most 16 kHz "
                             "(AudioMAE's)")  # fmt: skip
    if heard:
        st.caption(f"The clips were {heard}.")
    return {"sample_rate": int(rate), **name_encoding_field(key)}, {}


def describe(info) -> str:
    """The dataset in a few words for the Data page's selector: clips and their sample rate."""
    return f"{counted(info.n_train + info.n_val, 'clip')}, {info.stats.get('sample_rate', 0) / 1000:g} kHz"


register_ui(ModalityUI(
    "audio", data_section=data_section, run_fields=run_fields, mask_preview=mask_preview, lab_controls=lab_controls,
    lab_results=lab_results, describe=describe, train_defaults=train_defaults, import_fields=import_fields,
    item="clip", plan_item="audio file",
    samples=(SampleView("audio_spec", "Spectrograms and audio", samples_view, compare_view, matrix_cells, distance_errors),),
))  # fmt: skip
