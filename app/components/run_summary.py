"""Run detail's summary: status badge, figures each with its step, device and size, speed, curves, the
run's samples, the checkpoint download. Every value shown says the step it belongs to."""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from app.components.charts import render_loss_panels, render_metrics_chart, show_read_warnings
from app.components.errors import guarded
from app.components.names import metric_label
from app.components.quality import headline_of, loss_groups
from app.components.runs import (
    format_duration,
    grid_label,
    metric_name,
    placement_label,
    run_label,
    run_vocab,
    status_badge,
    vocab_warning,
)
from app.components.speed import run_speed, speed_labels
from app.modalities import sample_view
from engine.api import (
    EXPORTS,
    MasklabError,
    RunNotFoundError,
    checkpoint_weights,
    cluster_job,
    export_zip,
    get_pretrained,
    get_run,
    load_samples,
    read_metrics,
    read_provenance,
    read_task_info,
)


def device_text(rec: Any) -> str:
    """Where the run trains: the device the worker recorded at the end, else the one training
    resolved at its start (``task.json``), else the configured one (``auto``: CUDA when present,
    else CPU; a run that has not started)."""
    recorded = (rec.extra or {}).get("device")
    if not recorded and getattr(rec, "path", None) is not None:
        try:
            recorded = read_task_info(rec.path).get("device")
        except (OSError, ValueError):  # not written yet, or being replaced: the configured device below
            recorded = None
    return str(recorded) if recorded else str(((rec.config or {}).get("train") or {}).get("device", "auto"))


def param_text(rec: Any, weights) -> str:
    """Parameter count: recorded by the worker at the end, else read from the newest checkpoint."""
    n = (rec.extra or {}).get("n_params") or (weights.n_params if weights is not None else None)
    if not n:
        return "–"
    return f"{n / 1e6:.2f} M" if n >= 1e5 else f"{n:,}"


def summary(rec: Any, points: dict, metrics: Any = None) -> None:
    """Badge, name, task, dataset and tokenizer (with the vocabulary it really has, and a warning when
    that is far below the request: :func:`app.components.runs.vocab_warning`), then the figures: step,
    latest loss and headline (each with its step from ``points``,
    :func:`app.components.runs.latest_points`), duration, device, parameters; under them the speed (:func:`speed_row`)
    from ``metrics`` (:func:`run_metrics`)."""
    metric, _ = headline_of(rec.config)
    reached = run_vocab(rec)  # its vocabulary as trained, beside the size asked when they differ
    tokenizer = grid_label({"data": rec.config.get("data"), "model": {"init_from": (rec.config.get("model") or {}).get(
        "init_from")}}, reached)
    st.markdown(f"{status_badge(rec.status)} **{run_label(rec)}** · task `{rec.config.get('task', 'image_mim')}` "
                f"· dataset `{(rec.config.get('data') or {}).get('dataset', '')}`"
                + (f" · tokenizer `{tokenizer}`" if tokenizer else ""))
    if warning := vocab_warning(rec, reached):
        st.warning(warning)
    weights = guarded(checkpoint_weights, rec.run_id)
    m = st.columns([0.8, 1, 1.6, 0.9, 0.8, 0.9])  # the headline card gets room for "caption accuracy @ step N"
    m[0].metric(f"Step of {rec.total_steps}", f"{rec.step}")
    for col, key in ((m[1], "loss"), (m[2], metric)):
        step, value = points.get((rec.run_id, key), (None, None))
        name, pct = metric_name(key)
        shown = "–" if value is None else (f"{value:.1%}" if pct else f"{value:.4f}")
        col.metric(name + (f" @ step {step}" if step is not None else ""), shown,
                   help="the last logged value and the step it was logged at")
    m[3].metric("Duration", format_duration(rec.duration_s) or "–")
    m[4].metric("Device", device_text(rec), help="train.device; auto takes CUDA when present, else the CPU. The "
                "device used is recorded when the run ends.")
    m[5].metric("Parameters", param_text(rec, weights))
    speed_row(rec, metrics)
    st.caption(f"Runs on: {placement_label(rec, full=True, job=cluster_job(rec.path))}")
    if came := read_provenance(rec.path):
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(came.get("exported_at") or 0))
        src = came.get("exported_from") or {}
        st.caption(f"Imported from `{came.get('archive')}`: exported {when} from {src.get('host', '?')}:"
                   f"`{src.get('workspace', '?')}` with {came.get('checkpoints', '?')} checkpoint(s).")
    if origin := origin_text(rec):
        st.info(origin)
        parent = ((rec.config or {}).get("model") or {}).get("init_from")
        if guarded(_is_run, parent) and parent != rec.run_id:
            c = st.columns(2)
            c[0].page_link("../pages/run_detail.py", label="Open the parent run", query_params={"run": parent})
            c[1].page_link("../pages/compare.py", label="Compare with the parent",
                           query_params={"runs": f"{rec.run_id},{parent}"})


def speed_row(rec: Any, metrics: Any) -> None:
    """The run's speed (:mod:`app.components.speed`) from ``metrics`` (:func:`run_metrics`): median
    samples/s, median MFU with the peak it is measured against (``—, CPU run`` on the CPU), peak
    memory with what it measures."""
    s = run_speed(rec, metrics)
    names = speed_labels()
    c = st.columns([1.5, 2.3, 1.9, 0.3])  # room for "MFU, median · bf16 peak 989 TFLOP/s"
    c[0].metric(f"{names['throughput']}, median", s.samples_text, help="the median of the samples/s logged each step")
    c[1].metric(f"{names['mfu']}, median" + (f" · {s.mfu_note}" if s.mfu is not None else ""), s.mfu_text,
                help="model FLOPs utilisation: a step's counted matrix-product FLOPs over its time, over the GPU's "
                     "datasheet peak for the step's dtype; logged on a GPU of known peak only")
    c[2].metric(f"{names['peak_mem_bytes']} · {s.memory_kind}", s.memory_text,
                help="on a GPU: torch.cuda.max_memory_allocated; on the CPU: the worker's private memory "
                     "(RssAnon high-water)")


def _is_run(run_id: str) -> bool:
    try:
        get_run(run_id)
    except RunNotFoundError:
        return False
    return True


def origin_text(rec: Any) -> str:
    """Where a run with ``model.init_from`` started (``task.json``'s ``init`` and the imported
    model's record): an imported model and the file it came from, or the parent run and its
    checkpoint step, what was loaded and initialised fresh, whether it trained at all, and how the
    dataset's images were fitted to an imported model's input; ``""`` for any other run."""
    source = ((rec.config or {}).get("model") or {}).get("init_from")
    if not source:
        return ""
    try:
        info = read_task_info(rec.path) if getattr(rec, "path", None) is not None else {}
    except (OSError, ValueError):  # not started yet
        info = {}
    init = info.get("init") or {}
    steps = ((rec.config or {}).get("train") or {}).get("steps")
    trained = ("not trained here (0 steps): what is shown is the source itself" if steps == 0
               else f"then trained {steps} steps on this dataset")
    if init.get("kind") == "run" or (not init and not _imported(source)):
        at = f" at its step {init['step']} checkpoint" if init.get("step") is not None else ""
        parts = [f"Fork of run **{source}**{at}"]
        if init:
            parts.append(f"{init.get('loaded', 0)} tensors loaded"
                         + (f"; initialised fresh: {', '.join(init['fresh'])}" if init.get("fresh") else ""))
        parts.append(trained)
    else:
        src = (((info.get("model_dims") or {}).get("pretrained") or {}).get("source")) or {}
        parts = [f"Pretrained: starts from the imported model **{source}**"
                 + (f", imported from `{src.get('path')}` ({src.get('format')})" if src.get("path") else ""), trained]
    if info.get("input_fit"):
        parts.append(info["input_fit"])
    return " · ".join(parts) + "."


def _imported(name: str) -> bool:
    try:
        get_pretrained(name)
    except MasklabError:
        return False
    return True


def run_metrics(run_id: str, config: dict) -> Any:
    """One read of what Run detail's live summary draws (every 2 s while the run trains): the
    curves' keys and the speed's (``throughput``, ``mfu``), 500 points a key; None when unreadable."""
    metric, _ = headline_of(config)
    keys = ["loss", "val_loss", "lr", "mask_ratio", "throughput", "mfu"] + ([metric] if metric != "val_loss" else [])
    return guarded(read_metrics, [run_id], keys, max_points=500)


def curves(run_id: str, config: dict, legend: dict, x: str, log_y: bool, df: Any) -> None:
    """Loss / val loss (with the task's headline when it is another metric), learning rate and
    mask ratio of one run, from ``df`` (:func:`run_metrics`)."""
    metric, _ = headline_of(config)
    if df is None:
        return
    show_read_warnings(df)
    opts = {"run_labels": legend, "x": x}
    left, mid, right = st.columns([2, 1, 1])
    with left:
        render_loss_panels(df[df["key"].isin(["loss", "val_loss"])], loss_groups([run_id], {run_id: config}),
                           smoothing=0.6, height=220, log_y=log_y, **opts)  # fmt: skip
    with mid:
        render_metrics_chart(df[df["key"] == "lr"], y_title="learning rate", height=220, log_y=log_y, **opts)
    with right:
        render_metrics_chart(df[df["key"] == "mask_ratio"], y_title="mask ratio", height=220, y_domain=(0, 1), **opts)
    if metric != "val_loss":  # its own panel: an accuracy or another unit than the loss
        render_metrics_chart(df[df["key"] == metric], y_title=metric_label(metric, config),
                             raw_keys=(metric,), height=180, **opts)  # fmt: skip


def show_samples(run_id: str) -> None:
    """The run's latest samples, drawn by the view of their kind (``app.modalities.sample_view``:
    reconstructions, predictions, spectrograms), or a plain note when it has none yet or the
    dashboard has no view for them. Run detail and Presentation."""
    sample = guarded(load_samples, run_id)
    run = guarded(get_run, run_id)
    if sample is None:
        if run is not None and not run.is_active:
            st.info(f"This run ended ({run.status}) before saving any sample.")
        else:
            every = run.config.get("train", {}).get("eval_interval", "?") if run else "?"
            st.info(f"No reconstructions yet: they are saved when training starts (step 0), then every {every} steps.")
        return
    view = sample_view(sample.kind)
    if view is None:
        st.info(f"The dashboard has no view for {sample.kind!r} samples.")
        return
    view.view(sample, run)


def checkpoint_download(rec: Any) -> None:
    """A download button for the newest complete checkpoint's weights (safetensors), read on click."""
    w = guarded(checkpoint_weights, rec.run_id)
    if w is None:
        st.caption("No complete checkpoint yet: one is written every "
                   f"{(rec.config.get('train') or {}).get('checkpoint_interval', '?')} steps and at the end.")
        return
    st.download_button(f"Download checkpoint (step {w.step}, {w.n_bytes / 2**20:.1f} MB, safetensors)", w.read,
                       file_name=f"{rec.run_id}-step{w.step}.safetensors", mime="application/octet-stream",
                       key=f"rd_ckpt_{rec.run_id}", on_click="ignore")  # fmt: skip
    st.caption("The model's weights only (no optimizer state); load them with `safetensors.torch.load_file`.")
    arch = (rec.config.get("model") or {}).get("arch") or "mae_vit"
    if arch in EXPORTS:
        cls = "ViTMAEForPreTraining" if arch == "mae_vit" else "BertForMaskedLM"
        st.download_button(f"Download for transformers (step {w.step}, .zip)",
                           lambda: guarded(export_zip, rec.run_id, "hf", w.step) or b"",
                           file_name=f"{rec.run_id}-step{w.step}-hf.zip", mime="application/zip",
                           key=f"rd_export_{rec.run_id}", on_click="ignore")  # fmt: skip
        st.caption(f"A folder `{cls}.from_pretrained` loads (unzip it first), with its "
                   + ("image processor" if arch == "mae_vit" else "tokenizer") + "; `python -m engine models export "
                   f"{rec.run_id} OUT_DIR` writes the same" + (", `--format mae` the MAE repository's .pth."
                                                               if arch == "mae_vit" else "."))
