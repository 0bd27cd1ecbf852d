"""Text in the dashboard: dataset previews, token masks on real sentences, MLM predictions,
span completions, the fill-in box.

Tokens come as string arrays from the engine (WordPiece pieces start with ``##``); a sentence is
drawn as HTML spans, pieces of one word joined, masked tokens highlighted. Every string shown is
HTML-escaped.
"""

from __future__ import annotations

import html
import json

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from app.components.charts import counts_chart
from app.components.errors import guarded
from app.components.urlstate import dig, index_of, number
from app.modalities import ModalityUI, SampleView, register_ui, task_params_defaults
from engine.api import (
    RunConfig,
    TokenizerConfig,
    counted,
    distance_to_visible,
    load_dataset,
    vocab_shortfall,
    vocab_text,
    workspace_root,
)

N_SAMPLES = 12  # texts in the Data page's sample table
N_PREVIEW = 8  # the run's fixed visualisation rows (train.num_vis defaults to 8)
HIGHLIGHT = "background:#ffd54f;font-weight:600"
CORRECT, WRONG = "#2e7d32", "#c62828"


# --------------------------------------------------------------------------- dataset view


@st.cache_data(max_entries=6, ttl=900, show_spinner="Loading texts…")

def candidate(token: str, prob: float) -> str:
    """A predicted token and its probability for a table cell: ``“.” · 6%`` (quoted, so a token such
    as ``-`` or ``.`` cannot read as part of the number)."""
    return f"“{token}” · {prob:.0%}"

def text_view(workspace: str, name: str, version: str) -> dict:
    """What the Data page shows of a text dataset: representative texts with label and split
    (:func:`app.components.datasets.sample_rows`, class by class), character and word lengths of
    every text, class counts. ``workspace`` and ``version`` are cache keys only."""
    from app.components.datasets import sample_rows  # noqa: PLC0415 (the modality views and app.components import each other, and these modules load torch: imported where used)

    ds = load_dataset(name)
    picks = sample_rows(ds, N_SAMPLES)
    sample = pd.DataFrame({"text": ds.texts_at([i for i, _ in picks]),
                           "label": [ds.info.class_names[ds.labels[i]] for i, _ in picks],
                           "split": [s for _, s in picks]})
    return {"sample": sample, "lengths": sampled_lengths(ds), "counts": ds.counts()}


def data_section(info) -> None:
    """The Data page body for a text dataset."""
    view = guarded(text_view, str(workspace_root()), info.name, info.created_at)
    if view is None:
        return
    m = st.columns(4)
    m[0].metric("Train texts", f"{info.n_train:,}")
    m[1].metric("Val texts", f"{info.n_val:,}")
    m[2].metric("Classes", len(info.class_names))
    m[3].metric("Mean length", f"{view['lengths'].characters.mean():.0f} chars")
    st.subheader("Samples")
    st.dataframe(view["sample"], hide_index=True, width="stretch",
                 column_config={"text": st.column_config.TextColumn("text", width="large")})
    left, right = st.columns(2)
    with left:
        length_panel(view["lengths"], info.name, "text")
    with right:
        st.subheader("Texts per class and split")
        st.altair_chart(counts_chart(view["counts"], unit="texts"), width="stretch")


def length_panel(lengths: pd.DataFrame, name: str, item: str) -> None:
    """A "Length" histogram of texts (``lengths``: ``words``, ``characters``, ``split`` per text),
    in words or characters (a radio), coloured by split; ``item`` names what a text is (``text``,
    ``caption``). ``lengths`` holds at most :data:`LENGTH_ROWS` rows (:func:`sampled_lengths`); a
    caption says so when the dataset has more."""
    st.subheader("Length")
    if len(lengths) >= LENGTH_ROWS:
        st.caption(f"{len(lengths):,} {item}s, a random sample (the first in the stored, shuffled order)")
    unit = st.radio("Unit", ["words", "characters"], horizontal=True, key=f"data_len_{name}")
    chart = alt.Chart(lengths).mark_bar().encode(
        x=alt.X(f"{unit}:Q", bin=alt.Bin(maxbins=40), title=f"{unit} per {item}"),
        y=alt.Y("count():Q", title=f"{item}s"), color=alt.Color("split:N", title="split"),
    ).properties(height=260)
    st.altair_chart(chart, width="stretch")


#: Texts whose lengths the Data page's histogram counts: the first this many rows in stored order
#: (imports store rows in a seeded shuffled order, so a random sample); a larger dataset is never
#: decoded whole for a chart.
LENGTH_ROWS = 20_000


def sampled_lengths(ds) -> pd.DataFrame:
    """:func:`text_lengths` of the first :data:`LENGTH_ROWS` texts (captions) of ``ds``, a
    :class:`~engine.data.TextDataset` or :class:`~engine.data.PairedDataset`; only those are decoded."""
    rows = np.arange(min(len(ds), LENGTH_ROWS))
    return text_lengths(ds.texts_at(rows), ["train" if s == 0 else "val" for s in ds.split[rows]])


def text_lengths(texts: list[str], split: list[str]) -> pd.DataFrame:
    """Characters and words of every text next to its split (``train`` / ``val``)."""
    return pd.DataFrame({"characters": [len(t) for t in texts], "words": [len(t.split()) for t in texts],
                         "split": split})


# --------------------------------------------------------------------------- token rendering


def sentence_html(tokens, mask=None, marks: dict[int, str] | None = None) -> str:
    """One tokenised text as HTML: specials and padding left out, ``##`` pieces glued to their
    word, masked tokens highlighted, and ``marks[j]`` (a colour) underlining token ``j``.

    Args:
        tokens: ``[L]`` token strings (``""`` at padding).
        mask: ``[L]`` bool, True = highlighted.
        marks: token index -> CSS colour of its underline (e.g. correct / wrong prediction).
    """
    out = []
    for j, t in enumerate(tokens):
        if not t or t in ("[CLS]", "[SEP]", "[PAD]"):
            continue
        piece = t[2:] if t.startswith("##") else t
        style = HIGHLIGHT if mask is not None and mask[j] else ""
        if marks and j in marks:
            style += f";border-bottom:3px solid {marks[j]}"
        text = html.escape(piece)
        span = f"<span style='{style}'>{text}</span>" if style else text
        out.append(span if t.startswith("##") or not out else " " + span)
    return "".join(out)


def masked_sentences(tokens: np.ndarray, mask: np.ndarray, captions: list[str] | None = None) -> None:
    """Rows of sentences with their masked tokens highlighted, with a count per row."""
    st.html(masked_sentences_html(tokens, mask, captions))


def masked_sentences_html(tokens: np.ndarray, mask: np.ndarray, captions: list[str] | None = None) -> str:
    """The HTML of :func:`masked_sentences`: tokens and captions (class names, which an upload
    names) escaped."""
    rows = []
    for i in range(len(tokens)):
        n = int(mask[i].sum())
        cap = f" <span style='color:#888'>({html.escape(str(captions[i]))})</span>" if captions else ""
        rows.append(f"<div style='margin:0.3em 0;line-height:1.9'>{sentence_html(tokens[i], mask[i])}"
                    f" <span style='color:#888;font-size:0.85em'>· {n} masked</span>{cap}</div>")
    return "".join(rows)


def _words(tokens) -> list[str]:
    return [t for t in tokens if t and t not in ("[CLS]", "[SEP]", "[PAD]")]


# --------------------------------------------------------------------------- previews


@st.cache_data(max_entries=16, ttl=600, show_spinner="Tokenising…")
def _preview(cfg_json: str, version: str, n: int):
    from engine.tasks.text.preview import preview  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    return preview(RunConfig.from_dict(json.loads(cfg_json)), n)


def mask_preview(cfg, info, n: int = N_PREVIEW) -> None:
    """The run's ``n`` fixed validation texts with the masks the run will use for its samples."""
    pv = guarded(_preview, json.dumps(cfg.to_dict(), sort_keys=True), info.created_at, n)
    if pv is None:
        return
    eligible = pv.eligible.sum()
    st.caption(f"The {len(pv.texts)} fixed validation texts of **{info.name}** (chosen class by class) tokenised "
               "with this run's tokenizer, "
               f"with the masks the run uses for its samples ({cfg.masking.strategy}): "
               f"{int(pv.mask.sum())} of {int(eligible)} maskable tokens masked.")
    vocab_note(cfg, info, pv.vocab_size)
    masked_sentences(pv.tokens, pv.mask, [info.class_names[int(y)] for y in pv.labels])


def vocab_note(cfg, info, reached: int) -> None:
    """Under a New run or Mask lab preview: the tokenizer with the vocabulary it has once trained on
    ``info``'s train texts (``reached`` ids, :func:`engine.config.vocab_text`), and a warning when
    that is far below ``data.tokenizer.vocab_size`` (:func:`engine.config.vocab_shortfall`). Nothing
    for a run from an imported model or a parent run (it reads with its source's tokenizer)."""
    if cfg.model.init_from or not reached or cfg.data.tokenizer is None:
        return
    tok = cfg.data.tokenizer.model_dump()
    st.caption(f"Tokenizer: {vocab_text(tok, reached)}, trained on the train texts of **{info.name}** "
               "(ids, the five special tokens included).")
    if warning := vocab_shortfall(tok, reached, info.name):
        st.warning(warning)


# --------------------------------------------------------------------------- run samples


def _step_caption(sample, what: str) -> None:
    st.caption(f"Step {sample.step} · {len(sample['tokens'])} fixed validation texts · {what}")


def mlm_samples_view(sample, run) -> None:
    """MLM samples: the numbered sentences with their masked tokens highlighted (underline green
    when the model's top-1 is right, red when wrong), then one table of the top-3 predictions with
    their probabilities at every masked token, the correct one marked."""
    tokens, mask = sample["tokens"], sample["mask"]
    top, probs = sample["top_tokens"], sample["top_probs"]
    _step_caption(sample, "masked tokens highlighted; underline green = top-1 correct, red = wrong")
    names = sample.meta.get("class_names", [])
    lines, rows = [], []
    for i in range(len(tokens)):
        pos = np.flatnonzero(mask[i])
        marks = {int(j): CORRECT if top[i, j, 0] == tokens[i, j] else WRONG for j in pos}
        y = int(sample["labels"][i])
        tag = f" <span style='color:#888'>({html.escape(names[y])})</span>" if names and 0 <= y < len(names) else ""
        lines.append(f"<li style='line-height:1.9;font-size:1.05em'>{sentence_html(tokens[i], mask[i], marks)}{tag}</li>")
        for j in pos:
            cands = [f"{'✓ ' if top[i, j, k] == tokens[i, j] else ''}{candidate(top[i, j, k], probs[i, j, k])}"
                     for k in range(top.shape[2]) if top[i, j, k]]
            rows.append({"text": i + 1, "hidden token": tokens[i, j],
                         **{f"top-{k + 1}": cands[k] if k < len(cands) else "" for k in range(top.shape[2])}})
    st.html(f"<ol style='padding-left:1.5em;margin:0'>{''.join(lines)}</ol>")
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def span_samples_view(sample, run) -> None:
    """Span completion samples: the text with its hidden span, the true span and the model's."""
    tokens, mask = sample["tokens"], sample["mask"]
    _step_caption(sample, "the highlighted span is hidden; the model writes it from the rest")
    rows = []
    for i in range(len(tokens)):
        truth, gen = detok(sample["target"][i]), detok(sample["generated"][i])
        st.html(f"<div style='line-height:1.9'>{sentence_html(tokens[i], mask[i])}</div>")
        rows.append({"hidden span": truth, "model's span": gen, "exact": "✓" if truth == gen else ""})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def _masked_text(tokens, mask) -> str:
    """A sample's text with every word that has a masked piece written as ``[MASK]``."""
    words: list[list] = []
    for t, m in zip(tokens, mask):
        if not t or t in ("[CLS]", "[SEP]", "[PAD]"):
            continue
        if t.startswith("##") and words:
            words[-1][0] += t[2:]
            words[-1][1] |= bool(m)
        else:
            words.append([t, bool(m)])
    return " ".join("[MASK]" if m else w for w, m in words)


def detok(tokens) -> str:
    """Token strings -> text: specials and padding dropped, ``##`` pieces glued to the word before."""
    out = ""
    for t in _words(tokens):
        out += t[2:] if t.startswith("##") else (" " if out else "") + t
    return out


# --------------------------------------------------------------------------- interactive


@st.cache_resource(max_entries=4, show_spinner="Loading the checkpoint…")
def cached_model(run_id: str, step: int, mtime: float):
    """One cached model per checkpoint (``mtime`` invalidates a rewritten one); at most 4 kept
    (see engine.eval.inference for the memory bound)."""
    from engine.eval.inference import load_model  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    return load_model(run_id, step)


def checkpoint_picker(run, key: str, url=None):
    """A checkpoint select for ``run`` (widget ``key``; its step kept in ``url``'s ``ckpt``, an
    :class:`app.components.urlstate.Scope`, when given) and the chosen step's model, cached
    (:func:`cached_model`); None (with a note) while the run has kept no checkpoint."""
    from engine.eval.inference import checkpoint_path, checkpoint_steps  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    steps = guarded(checkpoint_steps, run.run_id) or []
    if not steps:
        st.info("No checkpoint kept yet: the box answers once the run has written one "
                f"(every {run.config.get('train', {}).get('checkpoint_interval', '?')} steps and at the end).")
        return None
    if url is None:
        step = st.selectbox("Checkpoint", steps, index=len(steps) - 1, key=key, format_func=lambda s: f"step {s}")
    else:
        step = url.widget(st.selectbox, "Checkpoint", "ckpt", default=steps[-1], cast=int, options=steps, key=key,
                          format_func=lambda s: f"step {s}")
    path = checkpoint_path(run.run_id, step)
    return guarded(cached_model, run.run_id, int(step), (path / "model.safetensors").stat().st_mtime)


def fill_in_box(run, sample, url) -> None:
    """Type a sentence with ``[MASK]`` (or pick words to hide) and see any kept checkpoint's
    top-3 predictions at each mask. The checkpoint, the sentence and the words hidden are kept in
    ``url`` (an :class:`app.components.urlstate.Scope`: ``ckpt``, ``sentence``, ``hide``)."""
    from engine.tasks.text.inference import fill_in  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    st.subheader("Fill in the blanks")
    loaded = checkpoint_picker(run, f"fill_ckpt_{run.run_id}", url)
    if loaded is None:
        return
    default = _masked_text(sample["tokens"][0], sample["mask"][0]) if sample is not None else ""
    text = url.widget(st.text_input, "Sentence", "sentence", default=default, cast=str, key=f"fill_text_{run.run_id}",
                      help="write [MASK] where a word is hidden, or pick words below")
    words = text.split()
    if words:
        hide = url.widget(st.pills, "Words to hide", "hide", default=[], options=list(range(len(words))),
                          selection_mode="multi", key=f"fill_hide_{run.run_id}",
                          format_func=lambda i: words[i] if i < len(words) else "")
    else:
        hide = []
        url.put("hide", None)
    query = " ".join("[MASK]" if i in (hide or []) else w for i, w in enumerate(words))
    if "[MASK]" not in query:
        st.caption("Pick a word to hide, or type [MASK] in the sentence.")
        return
    st.html(f"<div style='line-height:1.9'>Model input: {html.escape(query)}</div>")
    preds = guarded(fill_in, loaded, query)
    if preds:
        st.dataframe(pd.DataFrame([{"[MASK] #": p.position + 1,
                                    **{f"top-{k + 1}": candidate(t, pr) for k, (t, pr) in enumerate(p.candidates)}}
                                   for p in preds]), hide_index=True, width="stretch")
        st.caption(f"Checkpoint of step {loaded.step}; a hidden word is one [MASK], so the model proposes one token "
                   "(a WordPiece piece starts with ##).")


def completion_box(run, sample, url) -> None:
    """Write a text with one ``[MASK]`` where a passage is missing and see the span the model writes.
    The checkpoint and the text are kept in ``url`` (an :class:`app.components.urlstate.Scope`:
    ``ckpt``, ``text``)."""
    from engine.tasks.text.inference import complete_span  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    st.subheader("Complete a passage")
    loaded = checkpoint_picker(run, f"span_ckpt_{run.run_id}", url)
    if loaded is None:
        return
    default = ""
    if sample is not None:
        toks, m = sample["tokens"][0], sample["mask"][0]
        kept = [("[MASK]" if m[j] and (j == 0 or not m[j - 1]) else t) for j, t in enumerate(toks) if not m[j] or
                (j == 0 or not m[j - 1])]
        default = detok(kept)
    text = url.widget(st.text_input, "Text with one [MASK]", "text", default=default, cast=str,
                      key=f"span_text_{run.run_id}")
    out = guarded(complete_span, loaded, text)
    if out is not None:
        filled = html.escape(text).replace("[MASK]", f"<span style='{HIGHLIGHT}'>{html.escape(out) or '∅'}</span>")
        st.html(f"<div style='line-height:1.9'>{filled}</div>")
        st.caption(f"Greedy decoding from the checkpoint of step {loaded.step}.")


# --------------------------------------------------------------------------- New run and Mask lab


#: One-segment strategies: what span completion can train with (one sentinel per text).
SPAN_STRATEGIES = ["sentence_span"]
#: What New run proposes for each text task (BERT masks 15% of tokens; span completion 20-50%).
TASK_MASKING = {"text_mlm": {"strategy": "random", "ratio": 0.15}, "text_span": {"strategy": "sentence_span"}}


def tokenizer_fields(key: str, carried: dict) -> dict:
    """Tokenizer settings (``data.tokenizer``; defaults from the partial config ``carried``)."""
    d = {**TokenizerConfig().model_dump(), **(dig(carried, "data.tokenizer") or {})}
    a, b = st.columns(2)
    kind = a.selectbox("Tokenizer", ["wordpiece", "char"], index=index_of(["wordpiece", "char"], d["kind"]),
                       key=f"{key}_tok_kind", help="WordPiece trained on the train split, or one token per character")
    vocab = b.number_input("Vocabulary size", min_value=16, max_value=200_000, value=number(d["vocab_size"], TokenizerConfig().vocab_size, 16, 200_000, int), step=500,
                           key=f"{key}_tok_vocab", disabled=kind == "char", help="WordPiece target size, specials included")
    max_len = a.number_input("Max tokens", min_value=8, max_value=1024, value=number(d["max_len"], TokenizerConfig().max_len, 8, 1024, int), step=16,
                             key=f"{key}_tok_len", help="per text, [CLS] and [SEP] included; longer texts are cut")
    return {"kind": kind, "vocab_size": int(vocab), "max_len": int(max_len), "lowercase": bool(d["lowercase"]),
            "min_frequency": number(d["min_frequency"], TokenizerConfig().min_frequency, 1, None, int)}


def masking_fields(task: str, key: str, carried: dict) -> dict | None:
    """The masking controls for a text task (span completion offers its one-segment strategies)."""
    from app.components.masks import masking_controls  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    defaults = carried.get("masking") or TASK_MASKING.get(task, {})
    return masking_controls("text", 1, f"{key}_{task}", defaults, names=SPAN_STRATEGIES if task == "text_span" else None)


def run_fields(info, task: str, key: str, carried: dict) -> dict:
    """New run's text fields: tokenizer, masking, model preset (and BERT's replacement shares)."""
    from engine.api import get_model_spec, get_task  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    arch = get_task(task).archs[0]
    tokenizer = tokenizer_fields(key, carried)
    with st.container(border=True):
        masking = masking_fields(task, key, carried)
        st.page_link("../pages/mask_lab.py", label="Compare strategies in Mask lab")
    presets = get_model_spec(arch).presets
    names = list(presets)
    preset = st.selectbox("Model preset", names, index=index_of(names, dig(carried, "model.preset"), index_of(names, "mini")),
                          key=f"{key}_preset_{arch}",
                          format_func=lambda k: f"{k}  (width {presets[k]['embed_dim']}, "
                                                f"depth {presets[k].get('depth', presets[k].get('enc_depth'))})")
    out = {"task": task, "masking": masking, "data": {"tokenizer": tokenizer}, "model": {"arch": arch, "preset": preset}}
    if task == "text_mlm":
        out.update(_method_fields(task, key, carried, out, presets[preset].get("depth", 2)))
    elif task == "text_span":
        proposed = task_params_defaults("text_span")["decoder_input_mask"]
        hide = st.slider("Decoder input hidden, up to", 0.0, 1.0,
                         number(dig(carried, "task_params.decoder_input_mask"), proposed, 0.0, 1.0), 0.05,
                         key=f"{key}_decoder_input_mask",
                         help="task_params.decoder_input_mask: in training each text hides a share of the decoder's "
                              "input (the true span, shifted right), drawn up to this value, so that the model "
                              "also learns each span position from the text alone (val_span_acc_pos); 0 = plain "
                              "teacher forcing")
        out["task_params"] = {"decoder_input_mask": hide}
    return out


def _method_fields(task: str, key: str, carried: dict, form: dict, depth: int) -> dict:
    """The method (BERT's MLM with its [MASK] share, token denoising, or data2vec's latent target with a
    readout) and the contrastive term's weight: the ``task_params`` and ``objective`` they set
    (:mod:`app.components.method_form`)."""
    from app.components.method_form import contrastive_weight, method_base, method_select, with_contrastive  # noqa: PLC0415 (this module stays light for pages that only show text)

    method = method_select(task, key, carried)
    if method == "denoise-text":
        st.caption("Every selected token is replaced by a random token (never [MASK]) and the model predicts the "
                   "original: BERT's replacement at 100% (task_params.mask_share 0, random_share 1).")
    else:
        share = st.slider("Shown as [MASK]", 0.0, 1.0, number(dig(carried, "task_params.mask_share"), 0.8, 0.0, 1.0), 0.05,
                          key=f"{key}_mask_share",
                          help="BERT's 80/10/10: the rest is split evenly between a random token and the original")
        form = {**form, "task_params": {"mask_share": share, "random_share": round((1 - share) / 2, 6)}}
    base = method_base(task, method, form, carried)
    tp = dict(base.get("task_params") or {})
    recon = "cross_entropy"
    if tp.get("target") == "latent":
        recon = "mse"
        a, b = st.columns(2)
        with a:
            tp["top_k"] = int(st.number_input("Teacher blocks averaged (top_k)", 1, depth, min(int(tp["top_k"]), depth),
                                              key=f"{key}_top_k", help="data2vec's K: the target averages the teacher's "
                                              "last K blocks, each instance-normalised over the text's tokens"))
        with b:
            tp["ema_decay"] = float(st.number_input("Teacher decay at the start", 0.9, 0.99999,
                                                    float(tp["ema_decay"]), step=0.0005, format="%g",
                                                    key=f"{key}_ema", help="tau: teacher <- tau * teacher + (1 - tau) "
                                                    "* student; annealed to task_params.ema_decay_end"))
        tp["ema_decay_end"] = max(tp["ema_decay"], float(tp.get("ema_decay_end", 0.9999)))
        st.caption("The student regresses the teacher's features at the masked tokens (MSE); an MLM readout on its "
                   "detached features keeps the token accuracy and the fill-in box.")
    weight = contrastive_weight(key, carried)
    return {"task_params": tp, "objective": with_contrastive({}, recon, weight)}


def lab_controls(info, carried: dict, key: str) -> dict:
    """Mask lab's text controls: the task (which strategies apply), tokenizer and masking
    (``carried``: a partial run config of defaults)."""
    from engine.api import tasks_for  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    tasks = tasks_for("text")
    task = st.selectbox("Task", tasks, key=f"{key}_task", index=index_of(tasks, carried.get("task")))
    tokenizer = tokenizer_fields(key, carried)
    return {"task": task, "masking": masking_fields(task, key, carried), "data": {"tokenizer": tokenizer}}


@st.cache_data(max_entries=16, ttl=900, show_spinner="Drawing masks…")
def lab_stats(cfg_json: str, version: str, n: int):
    """Mask lab's statistics of ``n`` train masks of a config (JSON): ``(MaskStats, masks per second,
    masking_problem)``. ``version``: the dataset's, a cache key only."""
    from engine.masking.stats import mask_stats, masks_per_second  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)
    from engine.tasks.checks import masking_problem  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)
    from engine.tasks.text.preview import train_masks  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    cfg = RunConfig.from_dict(json.loads(cfg_json))
    masking, draw = cfg.masking, lambda: train_masks(cfg, n)
    if cfg.task in ("paired", "paired_audio"):  # its caption masks (task_params.text_*), over its captions or clip texts
        from engine.tasks.paired.common import caption_masking  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)
        from engine.tasks.paired.preview import caption_train_masks  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

        masking, draw = caption_masking(cfg), lambda: caption_train_masks(cfg, n)
    mask, eligible = draw()
    rate = masks_per_second(lambda: draw()[0], min_time=0.2, warmup=False)
    return mask_stats(mask, eligible), rate, masking_problem(masking, mask, unit="tokens", eligible=eligible)


def lab_results(cfg, info, n: int, url=None) -> None:
    """Mask lab's text results: the run's masks on real sentences, then batch statistics."""
    from app.components.masks import lab_statistics  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    st.subheader("Masks on real sentences")
    mask_preview(cfg, info)
    st.subheader("Statistics")
    res = guarded(lab_stats, json.dumps(cfg.to_dict(), sort_keys=True), info.created_at, int(n))
    lab_statistics(res, lambda stats: f"{stats.batch_size} masks over real train texts of **{info.name}** (ratio "
                   "over the maskable tokens; masks/s includes tokenising the batch).")


def compare_rows(samples: dict, n: int = 8) -> tuple[pd.DataFrame, bool]:
    """The rows of :func:`compare_view` and whether the runs saw the same texts: with the same
    texts, ``text`` (the first run's masked text) and ``hidden`` columns, then one prediction column
    per run; with different texts (other datasets or tokenizers), each run's own ``· text`` and
    ``· hidden`` columns before its prediction. ``samples``: run label -> ``Sample``."""
    from app.components.compare import shared_inputs  # noqa: PLC0415 (the modality views and app.components import each other, and these modules load torch: imported where used)

    first, k, same = shared_inputs(samples, "tokens", n)

    def hidden(s, i: int) -> str:
        return detok(s["target"][i]) if "target" in s.arrays else " ".join(str(t) for t in s["tokens"][i][s["mask"][i]])

    rows = []
    for i in range(k):
        row = {"text": _masked_text(first["tokens"][i], first["mask"][i]), "hidden": hidden(first, i)} if same else {}
        for label, s in samples.items():
            if not same:
                row[f"{label} · text"] = _masked_text(s["tokens"][i], s["mask"][i])
                row[f"{label} · hidden"] = hidden(s, i)
            if "generated" in s.arrays:
                row[f"{label} (step {s.step})"] = detok(s["generated"][i])
            else:
                row[f"{label} (step {s.step})"] = " ".join(str(t) for t in s["top_tokens"][i][s["mask"][i], 0])
        rows.append(row)
    return pd.DataFrame(rows), same


def matrix_cells(sample, rows: int) -> list[dict]:
    """The reconstruction matrix's cells (:mod:`app.components.matrix`) of the first ``rows``
    texts, as escaped HTML: the text with its hidden tokens marked (original); the model's top-1
    token written in at each (MLM) or the generated span after the visible text (span completion)
    (reconstruction); and the same with each prediction green where it is the hidden token and red
    where not (error map), with the share right."""
    from app.components.matrix import token_html  # noqa: PLC0415 (the modality views and app.components import each other: imported where used)

    out = []
    for i in range(min(rows, len(sample["tokens"]))):
        tokens, mask = [str(t) for t in sample["tokens"][i]], np.asarray(sample["mask"][i], bool)
        original = token_html(tokens, mask)
        if "generated" in sample.arrays:  # span completion: the span the decoder wrote, beside the hidden one
            gen, target = detok(sample["generated"][i]), detok(sample["target"][i])
            visible = token_html(tokens, mask, fill=["…"] * len(tokens))
            right = gen.strip() == target.strip()
            recon = f"{visible} → <mark>{html.escape(gen)}</mark>"
            error = f"{visible} → <mark class='{'ok' if right else 'bad'}'>{html.escape(gen)}</mark>"
            note = "span exact" if right else f"hidden: {target[:60]}"
        else:
            top = [str(t) for t in sample["top_tokens"][i][:, 0]]
            right = [t == p for t, p in zip(tokens, top)]
            recon = token_html(tokens, mask, fill=top)
            error = token_html(tokens, mask, fill=top, right=right)
            n = int(mask.sum())
            note = f"{sum(r for r, m in zip(right, mask) if m)}/{n} right" if n else "nothing hidden"
        out.append({"html_original": original, "html_recon": recon, "html_error": error, "note": note})
    return out


SPECIALS = ("", "[CLS]", "[SEP]", "[PAD]", "<pad>", "</s>")


def distance_errors(sample):
    """The distance plot's data (:mod:`app.components.distance`) of an MLM sample: each hidden
    token's distance (in tokens) to the nearest visible word piece, and its error (1 where the
    model's top-1 token is not the hidden one, else 0), beside the nearest visible token copied in.
    None for span completion (the generated span has no token-by-token alignment)."""
    if "top_tokens" not in sample.arrays:
        return None
    tokens, hidden = np.asarray(sample["tokens"]).astype(str), np.asarray(sample["mask"], bool)
    valid = ~np.isin(tokens, SPECIALS)
    dist = distance_to_visible(hidden, (1,), valid)
    top = np.asarray(sample["top_tokens"]).astype(str)[..., 0]
    copy = np.full_like(tokens, "")
    for i in range(len(tokens)):  # the nearest visible token, the left one on a tie
        vis = np.flatnonzero(valid[i] & ~hidden[i])
        if len(vis):
            pos = np.arange(tokens.shape[1])
            copy[i] = tokens[i, vis[np.abs(pos[:, None] - vis[None]).argmin(axis=1)]]
    errors = {"this run": (top != tokens).astype(float), "nearest visible token copied": (copy != tokens).astype(float)}
    return dist, errors, "tokens", "error rate (top-1 wrong)"


def compare_view(samples: dict, n: int = 8) -> list:
    """The Compare page's view of text samples (:func:`compare_rows`): rows are the first ``n``
    fixed validation texts (masked words shown as [MASK]), columns are runs: each run's top-1 words
    at its masked tokens (MLM) or its generated span (span completion), at its latest samples.
    ``samples``: run label -> ``Sample``. Returns ``[]`` (no images for the HTML report)."""
    if not samples:
        return []
    rows, same = compare_rows(samples, n)
    st.dataframe(rows, hide_index=True, width="stretch")
    if not same:
        st.caption("These runs' fixed validation texts differ (other datasets or tokenizers): each run's columns "
                   "show its own texts.")
    st.caption("Each run's masks come from its own masking config and seed: runs with the same seed and masking "
               "hide the same tokens.")
    return []


def import_fields(plan, key: str) -> tuple[dict, dict]:
    """The Data page's options for a text source: drop texts shorter or longer than a length."""
    c, d = st.columns(2)
    lo = c.number_input("Drop texts shorter than (characters)", 0, 1_000_000, 0, key=f"{key}_min")
    hi = d.number_input("Drop texts longer than (characters, 0 = no limit)", 0, 10_000_000, 0, key=f"{key}_max")
    return {"min_chars": int(lo) or None, "max_chars": int(hi) or None}, {}


def describe(info) -> str:
    """The dataset in a few words for the Data page's selector: how many texts."""
    return counted(info.n_train + info.n_val, "text")


register_ui(ModalityUI(
    "text", data_section=data_section, run_fields=run_fields, mask_preview=mask_preview, lab_controls=lab_controls,
    lab_results=lab_results, describe=describe, import_fields=import_fields, item="text",
    samples=(SampleView("text_mlm", "Predictions on validation texts", mlm_samples_view, compare_view, matrix_cells,
                        distance_errors),
             SampleView("text_span", "Completions of validation texts", span_samples_view, compare_view, matrix_cells)),
    boxes={"fill_in": fill_in_box, "completion": completion_box},
))  # fmt: skip
