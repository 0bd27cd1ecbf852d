"""Image-caption pairs in the dashboard (issue 11): the Data page's pairs (each image with its
caption beneath), the run's two masks on real pairs (New run, Mask lab), a run's joint
reconstruction (masked patches and masked tokens next to the model's reconstruction of both, and
the caption predicted from the image alone), the retrieval box and the Compare view.

Audio-text runs (the paired task on an audio dataset, :mod:`engine.tasks.paired_audio`; a sample
with ``meta["stream"] == "audio"``) are drawn with :mod:`app.modalities.audio`'s spectrograms and
players next to the same caption lines; their dataset is an audio dataset, shown by the audio views.

The image half is drawn as :mod:`app.modalities.image` draws images (grey masked patches), the
caption half as :mod:`app.modalities.text` draws sentences (masked tokens highlighted); every
string shown is HTML-escaped there. Conventions: images float ``(N, C, H, W)`` in [0, 1], image
masks bool ``(N, h, w)``, caption tokens ``(N, L)`` strings (``""`` at padding), caption masks
bool ``(N, L)``; True = masked.
"""

from __future__ import annotations

import html
import json

import numpy as np
import pandas as pd
import streamlit as st

from app.components.charts import counts_chart
from app.components.compare import shared_inputs
from app.components.datasets import sample_rows
from app.components.errors import guarded
from app.components.images import chw_to_hwc_uint8, image_grid, mask_overlay, upscale
from app.components.masks import lab_statistics, masking_controls, patch_label, patch_sizes, unmasked_note
from app.components.media import show_audio, show_image
from app.components.urlstate import dig, index_of, number
from app.modalities import ModalityUI, SampleView, register_ui
from app.modalities import image as image_ui
from app.modalities.audio import compare_view as spectrograms
from app.modalities.audio import distance_errors as audio_distance
from app.modalities.audio import feature_fields, sample_media, spec_image, spec_widths
from app.modalities.audio import lab_stats as audio_lab_stats
from app.modalities.audio import matrix_cells as audio_cells
from app.modalities.text import (
    CORRECT,
    WRONG,
    cached_model,
    checkpoint_picker,
    detok,
    length_panel,
    sampled_lengths,
    sentence_html,
    tokenizer_fields,
    vocab_note,
)
from app.modalities.text import (
    lab_stats as text_lab_stats,
)
from engine.api import RunConfig, counted, get_masking, get_model_spec, get_task, load_dataset, workspace_root
from engine.eval.inference import checkpoint_path
from engine.tasks.paired.common import DEFAULT_PATCH, DEFAULT_TERMS, DEFAULT_TOKENIZER, PairedParams
from engine.tasks.paired.inference import embed_caption, nearest, retrieval_index
from engine.tasks.paired.preview import preview
from engine.tasks.paired_audio.pairs import text_sources

N_SAMPLES = 12  # pairs in the Data page's sample grid (half train, half val when both exist)
SAMPLE_COLUMNS = 6
N_PREVIEW = 8  # the run's fixed visualisation pairs (train.num_vis defaults to 8)
PAIR_COLUMNS = 4  # pairs per row in the previews (New run, Mask lab)
SAMPLE_PAIR_COLUMNS = 2  # pairs per row in a run's samples (three images each)
PAIR_PX = 160  # upscaling target of a pair's images (32x32 -> 160 px)
TOP_K = 5  # answers of the retrieval box


@st.cache_data(max_entries=6, ttl=900, show_spinner="Loading pairs…")
def pairs_view(workspace: str, name: str, version: str) -> dict:
    """What the Data page shows of a paired dataset: representative pairs (class by class, half
    val: :func:`app.components.datasets.sample_rows`) as uint8 ``(S, H, W, C)`` images with their
    captions, label and split; caption lengths (:func:`app.modalities.text.sampled_lengths`); class counts. ``workspace`` and
    ``version`` are cache keys only."""
    ds = load_dataset(name)
    picks = sample_rows(ds, N_SAMPLES)
    rows = [i for i, _ in picks]
    return {"images": np.asarray(ds.images[rows]), "captions": ds.texts_at(rows),
            "tags": [f"{ds.info.class_names[ds.labels[i]]} · {s}" for i, s in picks],
            "lengths": sampled_lengths(ds),
            "counts": ds.counts()}


def pair_captions(captions: list[str], tags: list[str] | None = None) -> list[str]:
    """One caption per image for :func:`app.components.images.image_grid`: the pair's caption in
    quotes, then its tag (``class · split``) when given."""
    return [f"“{c}”" + (f" · {tags[i]}" if tags else "") for i, c in enumerate(captions)]


def describe(info) -> str:
    """The dataset in a few words for the Data page's selector: ``785 pairs, 32x32 px``."""
    return f"{counted(info.n_train + info.n_val, 'pair')}, {'x'.join(map(str, info.image_shape[1:]))} px"


def data_section(info) -> None:
    """The Data page body for a paired dataset: sizes, pairs (image with its caption beneath),
    caption lengths, pairs per class and split."""
    view = guarded(pairs_view, str(workspace_root()), info.name, info.created_at)
    if view is None:
        return
    m = st.columns(5)
    m[0].metric("Train pairs", f"{info.n_train:,}")
    m[1].metric("Val pairs", f"{info.n_val:,}")
    m[2].metric("Classes", len(info.class_names))
    m[3].metric("Image size", f"{info.image_shape[1]}x{info.image_shape[2]}")
    m[4].metric("Mean caption", f"{view['lengths'].words.mean():.1f} words")
    st.subheader("Pairs")
    st.caption("Each image with its caption beneath, then its class and split; chosen class by class.")
    image_grid(view["images"], pair_captions(view["captions"], view["tags"]), columns=SAMPLE_COLUMNS)
    left, right = st.columns(2)
    with left:
        length_panel(view["lengths"], info.name, "caption")
    with right:
        st.subheader("Pairs per class and split")
        st.altair_chart(counts_chart(view["counts"], unit="pairs"), width="stretch")


# --------------------------------------------------------------------------- pair cards


def _caption_line(label: str, body: str) -> str:
    return (f"<div style='line-height:1.7;margin:0.15em 0'><span style='color:#888;font-size:0.8em'>{label}</span>"
            + (f"<br>{body}</div>" if body else "</div>"))


def pair_cards(images: list[tuple[str, np.ndarray]], lines: list[list[tuple[str, str]]],
               columns: int = PAIR_COLUMNS, stacked: bool = False) -> None:
    """Pairs as cards, ``columns`` a row: each card shows its images (``images``: ``(label, uint8
    (N, H, W, 3))`` per kind; side by side, the labels named once above, or ``stacked`` one above
    the other, each with its label, where a card is narrow) above its text lines (``lines[i]``:
    ``(label, html)`` of pair ``i``, the HTML already escaped)."""
    n = len(lines)
    head = _caption_line(" · ".join(label for label, _ in images), "")
    for start in range(0, n, columns):
        cols = st.columns(columns, gap="medium")
        for j in range(min(columns, n - start)):
            i = start + j
            with cols[j].container(border=True):
                if stacked:
                    for label, imgs in images:
                        show_image(st, upscale(imgs[i], PAIR_PX), caption=label)
                else:
                    st.html(head)
                    for c, (_, imgs) in zip(st.columns(len(images), gap="small"), images):
                        show_image(c, upscale(imgs[i], PAIR_PX))
                st.html("".join(_caption_line(label, body) for label, body in lines[i]))


def _class_names(names, labels) -> list[str]:
    """The class name of each label (the label's number when ``names`` lacks it)."""
    return [names[int(y)] if 0 <= int(y) < len(names) else str(int(y)) for y in labels]


# --------------------------------------------------------------------------- New run and Mask lab

#: What New run proposes (M3AE: 75% of the patches, 15% of the tokens, random).
DEFAULT_MASKING = {"strategy": "random", "ratio": 0.75}
#: Patches a side that New run proposes: the measured recipe's grid (configs/paired-tuxpaint.yaml,
#: bench/paired_quality.py: 32x32 images at 8 px); the task's default patch when that does not tile.
PROPOSED_GRID = 4


#: Spectrogram patch sides New run offers for audio-text pairs (square: mel bins x frames), the proposal first.
AUDIO_PATCHES = (8, 4, 16, 2)
#: Tokenizer proposed for a class word (one or two tokens): configs/paired-audio-fsdd.yaml's.
WORD_TOKENIZER = {"vocab_size": 200, "max_len": 8}
#: How New run names an audio dataset's text sources (``task_params.text_source``).
TEXT_SOURCES = {"text": "the clip's transcript", "digit_word": "the class as a word (a digit spelt: 7 -> seven)",
                "label": "the class name as it is"}


def _image_half(info, key: str, carried: dict) -> tuple[dict | None, int, dict, dict]:
    """The image patches' box: ``(masking, patch size, data fields, task params)``."""
    c, h, w = info.image_shape
    with st.container(border=True):
        st.markdown("**Image patches**")
        masking = masking_controls("image", 2, f"{key}_img", carried.get("masking") or DEFAULT_MASKING)
        sizes = patch_sizes(h, w)
        proposed = h // PROPOSED_GRID if h // PROPOSED_GRID in sizes else DEFAULT_PATCH
        patch = st.selectbox("Patch size", sizes, key=f"{key}_patch_{h}x{w}",
                             index=index_of(sizes, dig(carried, "model.patch_size", proposed)),
                             format_func=lambda p: patch_label(p, h, w))
    return masking, int(patch), {}, {}


@st.cache_data(max_entries=16, ttl=600, show_spinner=False)
def _text_sources(name: str, version: str) -> dict[str, int]:
    """:func:`engine.tasks.paired_audio.text_sources` of audio dataset ``name`` (``version``: cache key)."""
    return text_sources(load_dataset(name))


def _audio_half(info, key: str, carried: dict) -> tuple[dict | None, int, dict, dict]:
    """An audio dataset's text source and spectrogram patches' box (features as the audio tasks'
    :func:`app.modalities.audio.feature_fields`, square patches, a 2-D audio strategy):
    ``(masking, patch size, data fields, task params)``; masking None when no source gives a text
    (said in words)."""
    sources = guarded(_text_sources, info.name, info.created_at)
    if sources is None:
        return None, 0, {}, {}
    if not sources:
        st.error(f"**{info.name}** has no text to pair with its clips: no transcripts and no class name that is a "
                 "word. Import it again with a transcript column (`--text-column`, or the Data page's text column) "
                 "or with labels that are the spoken words, then pair it here.")
        return None, 0, {}, {}
    names = list(sources)
    source = st.selectbox("Text of each clip", names, key=f"{key}_source",
                          index=index_of(names, dig(carried, "task_params.text_source")),
                          format_func=lambda s: f"{TEXT_SOURCES.get(s, s)}  ({sources.get(s, 0):,} train clips)",
                          help="task_params.text_source: what each clip is paired with; clips without one take no part")
    with st.container(border=True):
        st.markdown("**Spectrogram patches**")
        audio = feature_fields(key, carried)
        sizes = [p for p in AUDIO_PATCHES if audio["n_mels"] % p == 0] or [1]
        patch = st.selectbox("Patch: mel bins x frames", sizes, key=f"{key}_spatch_{audio['n_mels']}",
                             index=index_of(sizes, dig(carried, "model.patch_size")),
                             format_func=lambda p: f"{p}x{p}")
        masking = masking_controls("audio", 2, f"{key}_spec", carried.get("masking") or DEFAULT_MASKING)
    return masking, int(patch), {"audio": audio}, {"text_source": source}


def masking_fields(info, key: str, carried: dict) -> dict | None:
    """The two masks (image or spectrogram patches: ``masking``; caption tokens:
    ``task_params.text_*``), the patch size, the cross-modal completion shares and the caption
    tokenizer, as a partial run config (masking None when no strategy is registered or, for an
    audio dataset, no text source gives a text). ``info`` is a paired dataset's, or an audio
    dataset's (audio-text pairs: :func:`_audio_half`, with ``data.audio`` and
    ``task_params.text_source``). ``carried``: a partial run config of defaults."""
    audio = info.modality == "audio"
    masking, patch, data, first_params = (_audio_half if audio else _image_half)(info, key, carried)
    if audio and not first_params:  # no text to pair with (said above)
        return None
    prm = {**PairedParams().model_dump(), **(carried.get("task_params") or {})}
    words = audio and first_params.get("text_source") != "text"
    with st.container(border=True):
        st.markdown("**Text tokens**" if audio else "**Caption tokens**")
        text = masking_controls("text", 1, f"{key}_txt", {"strategy": prm["text_strategy"], "ratio": prm["text_ratio"],
                                                          "params": prm["text_params"]})
        tokenizer = tokenizer_fields(key, {"data": {"tokenizer": {**(WORD_TOKENIZER if words else DEFAULT_TOKENIZER),
                                                                  **(dig(carried, "data.tokenizer") or {})}}})
    other = "audio" if audio else "image"
    with st.container(border=True):
        st.markdown("**Cross-modal completion** (shares of the training pairs)")
        a, b = st.columns(2)
        text_word = "text" if audio else "caption"
        cap = a.slider(f"Whole {text_word} hidden", 0.0, 1.0, float(prm["caption_completion"]), 0.05, key=f"{key}_capc",
                       help=f"predicted from the {other} alone (M3AE's caption completion)")
        img = b.slider(f"Whole {'spectrogram' if audio else 'image'} hidden", 0.0, 1.0, float(prm["image_completion"]),
                       0.05, key=f"{key}_imgc", help=f"reconstructed from the {text_word} alone")
    if masking is None or text is None:
        return None
    task_params = {**first_params, "text_strategy": text["strategy"], "text_ratio": text["ratio"],
                   "text_params": text["params"], "caption_completion": cap, "image_completion": img}
    return {"task": "paired_audio" if audio else "paired", "masking": masking, "model": {"patch_size": patch},
            "data": {"tokenizer": tokenizer, **data}, "task_params": task_params}


#: How New run names the paired task's architectures (:attr:`engine.tasks.paired.PairedTask.archs`).
ARCHS = {"m3ae": "M3AE (one encoder over both modalities + light decoder)",
         "flava": "FLAVA-style (image and text encoders + fusion encoder + light decoder)"}


def preset_label(name: str, dims: dict) -> str:
    """A preset as New run lists it: ``tiny  (width 128, depth 4)``; FLAVA's three encoders as
    ``depth 2 image + 2 text + 1 fusion``."""
    if "fusion_depth" in dims:
        depth = f"{dims['image_depth']} image + {dims['text_depth']} text + {dims['fusion_depth']} fusion"
    else:
        depth = dims.get("depth")
    return f"{name}  (width {dims.get('embed_dim')}, depth {depth})"


def run_fields(info, task: str, key: str, carried: dict) -> dict:
    """New run's paired fields: both masks, patch size, tokenizer, completion shares, the model
    (:data:`ARCHS`) and its preset, and the weights of the objective's terms (pixel MSE + token
    cross-entropy + InfoNCE)."""
    out = masking_fields(info, key, carried) or {"task": task, "masking": None, "model": {}}
    st.page_link("../pages/mask_lab.py", label="Try both masks in Mask lab")
    archs = list(get_task(task).archs)  # the first is the task's default
    arch = st.selectbox("Model", archs, key=f"{key}_arch", index=index_of(archs, dig(carried, "model.arch"), 0),
                        format_func=lambda a: ARCHS.get(a, a))
    presets = get_model_spec(arch).presets
    names = list(presets)
    preset = st.selectbox("Model preset", names, index=index_of(names, dig(carried, "model.preset"), index_of(names, "tiny")),
                          key=f"{key}_preset_{arch}", format_func=lambda k: preset_label(k, presets[k]))
    out["model"] = {"arch": arch, "preset": preset, **out["model"]}
    out["objective"] = objective_fields(key, carried, info.modality == "audio")
    return out


#: New run's objective weights: (term, label, help).
OBJECTIVE_WIDGETS = (
    ("mse", "Pixel MSE", "mean squared error on the hidden image patches (pixels in [0, 1])"),
    ("cross_entropy", "Token CE", "cross-entropy on the hidden caption tokens"),
    ("contrastive", "InfoNCE", "CLIP-style contrastive loss between pooled image and caption features, "
                               "learned temperature; alone it trains a retrieval model"),
)


def objective_fields(key: str, carried: dict, audio: bool = False) -> dict:
    """The weights of the paired objective's three terms (:data:`engine.tasks.paired.DEFAULT_TERMS`
    unless the carried config has ``objective.terms``); a weight of 0 leaves its term out. Returns
    the ``objective`` config section, ``{"terms": [{"loss", "weight"}, ...]}``; with every weight at
    0 it keeps them all at 0, which the config refuses in words (Launch stays disabled). ``audio``:
    audio-text pairs (the first term is then the spectrogram's MSE)."""
    given = dig(carried, "objective.terms")
    given = {t.get("loss"): t.get("weight", 1.0) for t in given if isinstance(t, dict)} if isinstance(given, list) else {}
    weights = given or dict(DEFAULT_TERMS)
    with st.container(border=True):
        st.markdown("**Objective weights** (0 leaves a term out; each term is logged as loss/*name*)")
        cols = st.columns(len(OBJECTIVE_WIDGETS))
    terms = []
    for col, (name, label, hlp) in zip(cols, OBJECTIVE_WIDGETS):
        if audio and name == "mse":
            label, hlp = "Spectrogram MSE", "mean squared error on the hidden spectrogram patches (normalised log-mel)"
        w = col.number_input(label, min_value=0.0, max_value=100.0, step=0.05, format="%g", help=hlp,
                             value=number(weights.get(name), 0.0, 0.0, 100.0), key=f"{key}_w_{name}")
        if w > 0:
            terms.append({"loss": name, "weight": float(w)})
    if not terms:
        st.error("Every objective weight is 0: give at least one term a weight above 0.")
        terms = [{"loss": name, "weight": 0.0} for name, _, _ in OBJECTIVE_WIDGETS]
    return {"terms": terms}


@st.cache_data(max_entries=16, ttl=600, show_spinner="Drawing masks on pairs…")
def _preview(cfg_json: str, version: str, n: int):
    return preview(RunConfig.from_dict(json.loads(cfg_json)), n)


def mask_preview(cfg, info, n: int = N_PREVIEW, warn: bool = True) -> None:
    """The run's ``n`` fixed validation pairs with both masks the run uses for its samples
    (:func:`engine.tasks.paired.preview`, which calls what the run calls). ``warn``: say when too
    many clips have nothing masked (Mask lab says it of its larger batch instead)."""
    pv = guarded(_preview, json.dumps(cfg.to_dict(), sort_keys=True), info.created_at, n)
    if pv is None:
        return
    prm = cfg.task_params
    audio = pv.real is not None
    widths = spec_widths(cfg, pv.grid, " ({})") if audio else ""
    at = f" at {cfg.masking.ratio:g}" if get_masking(cfg.masking.strategy).uses_ratio else ""  # else its params' budget
    first = (f"spectrogram {cfg.masking.strategy}{widths}{at} ({int(pv.image_mask[0].sum())} of "
             f"{pv.image_mask[0].size} patches of {cfg.model.patch_size}x{cfg.model.patch_size} mel bins x frames in "
             "the first clip, greyed; silence padding dark, never hidden)") if audio else \
        (f"image {cfg.masking.strategy}{at} ({int(pv.image_mask[0].sum())} of "
         f"{pv.image_mask[0].size} patches in the first image)")  # fmt: skip
    st.caption(f"The {len(pv.captions)} fixed validation {'clips' if audio else 'pairs'} of **{info.name}** (chosen "
               f"class by class) with the masks this run uses for its samples: {first}, "
               f"{'text' if audio else 'caption'} {prm.get('text_strategy')} at {prm.get('text_ratio', 0):g} "
               f"({int(pv.text_mask[0].sum())} of {int(pv.eligible[0].sum())} tokens in the first "
               f"{'text' if audio else 'caption'}, highlighted; every one hides one at least).")
    vocab_note(cfg, info, pv.vocab_size)
    classes = _class_names(info.class_names, pv.labels)
    if audio:
        hidden = np.array([(c & r[None]).sum() for c, r in zip(pv.cells, pv.real)])
        if warn and (empty := unmasked_note(hidden, "previewed clips", "their spectrograms train nothing (their "
                                            "texts still do)", cfg.masking.strategy)) is not None:  # fmt: skip
            st.warning(empty)
        spec = pv.images[:, 0]
        views = [("spectrogram", np.stack([spec_image(spec[i], pv.real[i], scale=2) for i in range(len(spec))])),
                 ("masked", np.stack([spec_image(spec[i], pv.real[i], pv.cells[i] & pv.real[i][None], scale=2)
                                      for i in range(len(spec))]))]
    else:
        views = [("original", chw_to_hwc_uint8(pv.images)), ("masked", mask_overlay(pv.images, pv.image_mask))]
    pair_cards(views, [[(f"{'text' if audio else 'caption'} · " + html.escape(classes[i]),
                         sentence_html(pv.tokens[i], pv.text_mask[i]))] for i in range(len(pv.captions))], stacked=True)


def lab_controls(info, carried: dict, key: str) -> dict:
    """Mask lab's paired controls: both masks, the patch size, the tokenizer (``carried``: a partial
    run config of defaults); returns the partial config."""
    return masking_fields(info, key, carried) or {"task": "paired_audio" if info.modality == "audio" else "paired",
                                                  "masking": None}


def lab_results(cfg, info, n: int, url=None) -> None:
    """Mask lab's paired results: both masks on real pairs, then the image masks' batch statistics
    (as image datasets show them; audio-text pairs: the spectrogram masks' as audio datasets show
    them, :func:`spectrogram_stats_section`), then the caption masks'."""
    audio = info.modality == "audio"
    st.subheader("Masks on real clips and their texts" if audio else "Masks on real pairs")
    mask_preview(cfg, info, warn=False)
    if audio:
        st.subheader("Statistics of the spectrogram masks")
        spectrogram_stats_section(cfg, info, n)
    else:
        st.subheader("Statistics of the image masks")
        image_ui.mask_stats_section(cfg, info, n)
    st.subheader(f"Statistics of the {'text' if audio else 'caption'} masks")
    caption_stats_section(cfg, info, n)


def spectrogram_stats_section(cfg, info, n: int) -> None:
    """Statistics of the spectrogram masks of audio-text pairs over ``n`` real train clips of
    ``info``: the paired task draws them as ``audio_mae`` draws its own on a grid of square patches
    (:func:`engine.tasks.audio.draw_masks` over each clip's first window, from ``train.seed``), so
    the audio lab's statistics (:func:`app.modalities.audio.lab_stats`) run on that ``audio_mae``
    config with ``patch_frames`` = ``model.patch_size``."""
    p = cfg.model.patch_size
    audio = {"audio": cfg.data.audio.model_dump()} if cfg.data.audio is not None else {}
    spec_cfg = {"task": "audio_mae", "data": {"dataset": cfg.data.dataset, **audio},
                "masking": cfg.masking.model_dump(mode="json"), "model": {"patch_size": p},
                "task_params": {"patch_frames": p}, "train": {"seed": cfg.train.seed}}
    res = guarded(audio_lab_stats, json.dumps(spec_cfg, sort_keys=True), info.created_at, int(n))
    lab_statistics(res, lambda stats: f"{stats.batch_size} spectrogram masks over the first windows of real train "
                   f"clips of **{info.name}** (chosen class by class; the ratio is over the patches that hold frames; "
                   "masks/s includes computing the log-mel and voiced frames).", spectrogram=True,
                   strategy=cfg.masking.strategy)


def caption_stats_section(cfg, info, n: int) -> None:
    """Statistics of the caption masks over ``n`` real train captions (or clip texts) of ``info``,
    drawn as Mask lab draws a text run's: the paired task draws its caption masks exactly as
    ``text_mlm`` draws its token masks (``task_params.text_*`` in place of ``masking``, from
    ``train.seed``, one hidden token at least: :func:`engine.tasks.paired.caption_train_masks`), so
    the text lab's statistics (:func:`app.modalities.text.lab_stats`) run on the paired config."""
    res = guarded(text_lab_stats, json.dumps(cfg.to_dict(), sort_keys=True), info.created_at, int(n))
    if res is not None and res[2]:  # the caption's fields, as New run names them
        res = (*res[:2], res[2].replace("masking.ratio", "task_params.text_ratio").replace("masking.params", "task_params.text_params"))
    what = "clip texts" if info.modality == "audio" else "captions"
    lab_statistics(res, lambda stats: f"{stats.batch_size} caption masks over real train {what} of **{info.name}** "
                   "(ratio over the maskable tokens; masks/s includes tokenising the batch).")


# --------------------------------------------------------------------------- run samples


def _filled(tokens, mask, pred) -> tuple[np.ndarray, dict[int, str]]:
    """The caption with each hidden token replaced by the model's, and the underline colour of each
    (green: the true token, red: another)."""
    out = np.where(mask, pred, tokens)
    return out, {int(j): CORRECT if pred[j] == tokens[j] else WRONG for j in np.flatnonzero(mask)}


def _caption_lines(sample, source: str) -> tuple[list[list[tuple[str, str]]], str]:
    """Each sample pair's caption lines (masked caption, the model's tokens, the caption from
    ``source`` alone: "image" or "audio") and a summary of the hidden tokens that are right."""
    tmask, tokens, pred, from_img = sample["text_mask"], sample["tokens"], sample["pred_tokens"], sample["caption_from_image"]
    classes = _class_names(sample.meta.get("class_names", []), sample["labels"])
    hidden = int(tmask.sum())
    right = int((pred[tmask] == tokens[tmask]).sum())
    real = (tokens != "") & ~np.isin(tokens, ["[CLS]", "[SEP]"])
    cap_right = int(((from_img == tokens) & real).sum())
    lines = []
    for i in range(len(tokens)):
        filled, marks = _filled(tokens[i], tmask[i], pred[i])
        alone = {int(j): CORRECT if from_img[i][j] == tokens[i][j] else WRONG for j in np.flatnonzero(real[i])}
        lines.append([("masked caption · " + html.escape(classes[i]), sentence_html(tokens[i], tmask[i])),
                      ("model's tokens", sentence_html(filled, tmask[i], marks)),
                      (f"caption from the {source} alone", sentence_html(from_img[i], None, alone) or "∅")])
    return lines, (f"{right} of {hidden} hidden tokens right · captions from the {source} alone: {cap_right} of "
                   f"{int(real.sum())} tokens right. Highlighted: hidden tokens; underline green = the model's token "
                   "is right, red = wrong.")


def samples_view(sample, run) -> None:
    """A paired run's samples at one saved evaluation (a slider goes over all of them): each fixed
    validation pair with its masked patches and masked tokens, next to the model's reconstruction
    of both, and the caption the model writes from the image alone (the whole caption hidden).
    Audio-text runs: :func:`audio_samples_view`."""
    sample = image_ui.pick_sample(sample, run, "pair_step")
    if sample.meta.get("stream") == "audio":
        audio_samples_view(sample, run)
        return
    images, mask = sample["images"], sample["mask"]
    lines, summary = _caption_lines(sample, "image")
    st.caption(f"Step {sample.step} · {len(images)} fixed validation pairs · patch {sample.meta.get('patch_size')} px · "
               f"{int(mask[0].sum())} of {mask[0].size} patches hidden in the first image · {summary}")
    pair_cards([("masked", mask_overlay(images, mask)), ("reconstruction", chw_to_hwc_uint8(sample["pasted"])),
                ("original", chw_to_hwc_uint8(images))], lines, columns=SAMPLE_PAIR_COLUMNS)


def audio_samples_view(sample, run) -> None:
    """An audio-text run's samples: each fixed validation clip's spectrogram (original, with its
    hidden patches, reconstruction) and players (:func:`app.modalities.audio.sample_media`, as
    audio runs show them), above its caption lines (masked caption, the model's tokens, the caption
    predicted from the audio alone)."""
    lines, summary = _caption_lines(sample, "audio")
    p = sample.meta.get("patch_size")
    st.caption(f"Step {sample.step} · {len(lines)} fixed validation clips with their texts · "
               f"{'x'.join(map(str, sample.meta.get('grid', [])))} spectrogram patches of {p}x{p} mel bins x frames "
               f"(silence padding dark, never hidden) · {summary} Audio by Griffin-Lim (32 iterations) of the "
               "reconstruction next to the recording.")
    media = sample_media(run.run_id if run is not None else "", int(sample.step), sample)
    for start in range(0, len(media), SAMPLE_PAIR_COLUMNS):
        picks = range(start, min(start + SAMPLE_PAIR_COLUMNS, len(media)))
        for col, i in zip(st.columns(SAMPLE_PAIR_COLUMNS, gap="medium"), picks):
            with col.container(border=True):
                m = media[i]
                for c, img, cap in zip(st.columns(3, gap="small"), m["images"],
                                       ["original", f"masked ({m['hidden']} cells)", "reconstruction"]):
                    show_image(c, img, caption=cap)
                for c, snd, cap in zip(st.columns(2, gap="small"), m["sounds"][::2],
                                       ["recording", "reconstruction (Griffin-Lim)"]):
                    c.caption(cap)
                    show_audio(c, snd)
                st.html("".join(_caption_line(label, body) for label, body in lines[i]))


# --------------------------------------------------------------------------- retrieval box


@st.cache_resource(max_entries=4, show_spinner="Embedding the validation pairs…")
def _index(run_id: str, step: int, mtime: float):
    """The checkpoint's embeddings of the run's validation pairs (:func:`engine.tasks.paired.retrieval_index`),
    one per checkpoint (``mtime`` invalidates a rewritten one), at most 4 kept; the model comes from
    the interactive boxes' one model cache."""
    return retrieval_index(cached_model(run_id, step, mtime))


def _shown(index, rows: list[int]) -> np.ndarray:
    """uint8 ``(n, H, W, 3)`` of the index's items ``rows``: the images, or the clips' log-mel
    spectrograms (:func:`app.modalities.audio.spec_image`, padding dark) for audio-text pairs."""
    if index.real is None:
        return chw_to_hwc_uint8(index.images[rows])

    return np.stack([spec_image(index.images[i, 0], index.real[i], scale=1) for i in rows])


def retrieval_box(run, sample, url) -> None:
    """Run detail's retrieval box: type a text and see the nearest validation images, or pick a
    validation image and see the nearest captions, by a kept checkpoint's contrastive embeddings
    (in the dashboard process: :mod:`engine.eval.inference`, the model and the index cached). The
    checkpoint, the caption typed and the image picked are kept in ``url`` (an
    :class:`app.components.urlstate.Scope`: ``ckpt``, ``caption``, ``image``)."""
    st.subheader("Retrieval")
    with st.container(key=f"retrieval_box_{run.run_id}"):
        loaded = checkpoint_picker(run, f"ret_ckpt_{run.run_id}", url)
        if loaded is None:
            return
        mtime = (checkpoint_path(run.run_id, loaded.step) / "model.safetensors").stat().st_mtime
        index = guarded(_index, run.run_id, loaded.step, mtime)
        if index is None:
            return
        classes = _class_names(sample.meta.get("class_names", []) if sample is not None else [], index.labels)
        st.caption(f"Among the {len(index.captions)} validation pairs, by cosine similarity of the checkpoint's "
                   f"(step {loaded.step}) image and caption embeddings, each encoded alone. ✓: the caption is the "
                   "query's own (as the Recall@K figures count a hit).")
        to_images, to_captions = st.tabs(["Text → images", "Image → captions"])
        with to_images:
            default = sample.meta.get("captions", [""])[0] if sample is not None else ""
            text = url.widget(st.text_input, "Caption", "caption", default=default, cast=str, key=f"ret_text_{run.run_id}")
            q = guarded(embed_caption, loaded, text) if text.strip() else None
            if q is not None:
                hits = nearest(q, index.image_emb, TOP_K)
                imgs = _shown(index, [i for i, _ in hits])
                image_grid(imgs, [f"{k + 1}. {'✓ ' if index.captions[i] == text.strip() else ''}“{index.captions[i]}” · "
                                  f"{s:.2f}" for k, (i, s) in enumerate(hits)], columns=TOP_K, target_px=PAIR_PX)
        with to_captions:
            n = len(index.captions)
            i = url.widget(st.selectbox, "Validation image", "image", default=0, cast=int, options=list(range(n)),
                           key=f"ret_img_{run.run_id}",
                           format_func=lambda k: f"{k + 1} · {classes[k]} · “{index.captions[k]}”")
            left, right = st.columns([1, 3])
            show_image(left, upscale(_shown(index, [i])[0], PAIR_PX))
            ranked = nearest(index.image_emb[i], index.text_emb, n)
            own = next(k for k, (j, _) in enumerate(ranked) if index.captions[j] == index.captions[i])
            hits = ranked[:TOP_K]
            right.dataframe(pd.DataFrame([{"rank": k + 1, "caption": index.captions[j],
                                           "own": "✓" if index.captions[j] == index.captions[i] else "",
                                           "similarity": round(s, 3)} for k, (j, s) in enumerate(hits)]),
                            hide_index=True, width="stretch")
            right.caption(f"Its own caption ranks {own + 1} of {n} (chance: {(n + 1) / 2:.0f} on average).")


# --------------------------------------------------------------------------- Compare


def compare_view(samples: dict, n: int = 6) -> list:
    """The Compare page's view of paired samples: the image half as image runs are compared
    (:func:`app.modalities.image.compare_view`: original, then per run its masked input and
    reconstruction), then a table of the captions each run writes from the image alone. ``samples``:
    run label -> ``Sample`` of kind ``paired``. Returns the image columns drawn (for the HTML report)."""
    if not samples:
        return []
    audio = next(iter(samples.values())).meta.get("stream") == "audio"
    if audio and any(s.meta.get("stream") != "audio" for s in samples.values()):
        st.info("These runs pair different things (images with captions, clips with texts): compare them one kind at a time.")
        return []
    if audio:
        drawn = spectrograms(samples, n)
    else:
        drawn = image_ui.compare_view(samples, n)
    st.dataframe(caption_rows(samples, n), hide_index=True, width="stretch")
    return drawn


def matrix_cells(sample, rows: int) -> list[dict]:
    """The reconstruction matrix's cells (:mod:`app.components.matrix`) of the first ``rows`` pairs:
    the image (or clip) half's cells as image (audio) runs draw them, each noted with its caption
    and the caption the run writes from the image (clip) alone."""
    audio = sample.meta.get("stream") == "audio"
    cells = (audio_cells if audio else image_ui.matrix_cells)(sample, rows)
    for i, c in enumerate(cells):
        if "tokens" in sample.arrays and "caption_from_image" in sample.arrays:
            said = f"“{detok(sample['tokens'][i])}” → “{detok(sample['caption_from_image'][i])}”"
            c["note"] = f"{c.get('note', '')} · {said}" if c.get("note") else said
    return cells


def distance_errors(sample):
    """The distance plot's data of the image (or clip) half, as image (audio) runs compute it."""
    return (audio_distance if sample.meta.get("stream") == "audio" else image_ui.distance_errors)(sample)


def caption_rows(samples: dict, n: int = 6) -> pd.DataFrame:
    """Compare's caption table for paired runs: the first ``n`` fixed validation captions, then per
    run the caption it writes from the image (or clip) alone; where the runs' captions differ (other
    datasets or tokenizers), each run's own ``· caption`` column before its own. ``samples``: run
    label -> ``Sample`` of kind ``paired``."""
    first, k, same = shared_inputs(samples, "tokens", n)
    source = "audio" if first.meta.get("stream") == "audio" else "image"
    rows = []
    for i in range(k):
        row = {"caption": detok(first["tokens"][i])} if same else {}
        for label, s in samples.items():
            if not same:
                row[f"{label} · caption"] = detok(s["tokens"][i])
            row[f"{label} from the {source} (step {s.step})"] = detok(s["caption_from_image"][i])
        rows.append(row)
    return pd.DataFrame(rows)


register_ui(ModalityUI(
    "paired", data_section=data_section, run_fields=run_fields, mask_preview=mask_preview, lab_controls=lab_controls,
    lab_results=lab_results, describe=describe, import_fields=image_ui.import_fields, item="pair",
    samples=(SampleView("paired", "Joint reconstructions of validation pairs", samples_view, compare_view, matrix_cells,
                      distance_errors),),
    boxes={"retrieval": retrieval_box},
))  # fmt: skip
