"""The run table, run labels, status badges and the cancel control (from ``engine.store.RunRecord``
value objects).

Every figure says its step: the latest value of a run's headline metric comes with the step it was
logged at (:func:`latest_points` reads it from the run's metrics, not from ``status.json``, which
keeps values only), so a cancelled run's "val loss" reads "0.0741 @ step 0" when its last evaluation
was the untrained model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

import pandas as pd
import streamlit as st

from app.components.errors import guarded
from app.components.names import is_percent, metric_label
from engine.api import (
    EVAL_PHASES,
    MasklabError,
    evaluation_job,
    format_bytes,
    has_evaluation_job,
    list_pretrained,
    list_runs,
    masking_uses_ratio,
    read_task_info,
    vocab_shortfall,
    vocab_text,
)
from engine.api import latest_points as store_latest_points

#: Status -> the colour of its badge (Streamlit's named colours: text on a tinted pill, no icon font).
STATUS_COLOURS = {
    "queued": "gray", "running": "blue", "completed": "green", "cancelled": "gray", "failed": "red",
    "diverged": "violet", "interrupted": "orange",
}  # fmt: skip

#: How old (seconds) a run list or a run's latest figures shown by a page may be: the store keeps them
#: in a per-process index refreshed in the background (:mod:`engine.store.index`), so a list of
#: thousands of runs costs a lookup; this session's own writes show at once.
LIST_MAX_AGE_S = 1.0

def metric_name(key: str) -> tuple[str, bool]:
    """``(name, percent?)`` of a logged metric, from the one table of names
    (:func:`app.components.names.metric_label`: ``val_first`` -> ``("val first", False)``)."""
    return metric_label(key), is_percent(key)


def status_label(status: str) -> str:
    """The word shown for a status: the status itself (no emoji: it renders as a box without an
    emoji font)."""
    return status


def status_badge(status: str) -> str:
    """Markdown of a coloured badge for ``status``, e.g. ``:green-badge[completed]``."""
    return f":{STATUS_COLOURS.get(status, 'gray')}-badge[{status}]"


EVALUATING = "evaluating the final checkpoint (linear probe, kNN, k-means, fine-tune)"

#: How often a live panel (a fragment that re-reads the store) refreshes while :func:`is_live`.
REFRESH = "2s"
#: Evaluation job states in which its figures can still change (:func:`engine.api.evaluation_job`).
JOB_LIVE = ("queued", "running")


def is_live(rec: Any) -> bool:
    """True while something a page shows of run ``rec`` can still change, so its live panels refresh
    (every :data:`REFRESH`): the run is queued or running (its final evaluation, status ``phase``
    evaluating, included), or an evaluation job of it is queued or running. False for None and for
    an ended run with no job under way: its panels are drawn once and then stay still, so they
    never rerun under a user's click. Reads the run's evaluation job file (one small read)."""
    if rec is None:
        return False
    if rec.is_active:
        return True
    if getattr(rec, "path", None) is not None and not has_evaluation_job(rec.path):
        return False  # never evaluated after its end: one stat, not a read (thousands of runs on Runs)
    try:
        job = evaluation_job(rec.run_id)
    except MasklabError:  # an unreadable job file changes nothing on screen: the panel that reads it says why
        return False
    return bool(job) and job.get("status") in JOB_LIVE


def seconds_text(s: float | None) -> str:
    """``"45 s"``, ``"3 min 5 s"``; ``"?"`` for None."""
    if s is None or pd.isna(s):
        return "?"
    s = max(0, round(float(s)))
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def job_progress(job: dict | None) -> tuple[float, str] | None:
    """``(fraction done, text)`` of a queued or running evaluation job (``evaluation/job.json``,
    :mod:`engine.eval.progress`), e.g. ``(0.81, "Evaluating step 300: fine-tuning, step 12 of 40 ·
    about 18 s left in this phase · its budget ends in about 40 s · done: loading the run, …")``; None for
    any other state.
    The fraction counts whole phases (:data:`engine.api.EVAL_PHASES`) and the share of the current one."""
    job = job or {}
    at = f"step {job['step']}" if job.get("step") is not None else "the latest checkpoint"
    if job.get("status") == "queued":
        return 0.0, f"Evaluation of {at} queued: it waits for a run slot."
    if job.get("status") != "running":
        return None
    phases = list(EVAL_PHASES)
    phase = job.get("phase")
    i = phases.index(phase) if phase in phases else 0
    done, total = job.get("done") or 0, job.get("total")
    share = min(1.0, done / total) if total else 0.0
    text = f"Evaluating {at}: {EVAL_PHASES.get(phase, 'starting')}"
    if total:
        text += f", {'step' if phase == 'finetune' else 'part'} {done} of {total}"
    if job.get("eta_s") and phase != "setup":
        text += f" · about {seconds_text(job['eta_s'])} left in this phase"
    if job.get("budget_s") and job.get("started_at"):  # the fine-tune fills what the budget leaves
        left = float(job["started_at"]) + float(job["budget_s"]) - time.time()
        if left >= 1:
            text += f" · its budget ends in about {seconds_text(left)}"
    finished = [title for p, title in EVAL_PHASES.items() if p in (job.get("phases_done") or {})]
    if finished:
        text += " · done: " + ", ".join(finished)
    return (i + share) / len(phases), text


def activity(rec: Any) -> str:
    """What a run is doing, for its progress line: ``running · step 10 / 50 · about 2 min 5 s left in
    training`` (the steps left at its pace so far, start-up included), or, after its last step
    while the worker evaluates the final checkpoint (status ``phase`` evaluating), ``training done ·``
    and the evaluation's progress (:func:`job_progress`)."""
    if rec.status == "running" and (rec.extra or {}).get("phase") == "evaluating":
        prog = job_progress(guarded(evaluation_job, rec.run_id))
        return f"training done at step {rec.step} / {rec.total_steps} · {prog[1] if prog else EVALUATING}"
    line = f"{rec.status} · step {rec.step} / {rec.total_steps}"
    step, total, took = rec.step or 0, rec.total_steps or 0, rec.duration_s or 0.0
    if rec.status == "running" and 0 < step < total and took > 0:  # at its pace so far, start-up included
        line += f" · about {seconds_text(took / step * (total - step))} left in training"
    return line


def status_message(rec: Any, checkpoint_step: int | None) -> None:
    """The box under a run's status: why it failed, diverged or was interrupted, and what is kept.

    ``checkpoint_step``: step of its newest complete checkpoint (where a resume would start).
    """
    kept = (f" Its latest complete checkpoint is step {checkpoint_step}." if checkpoint_step is not None
            else " It has no complete checkpoint.")
    if rec.status == "failed":
        st.error(f"Run failed: {rec.error or 'no reason recorded'}")
    elif rec.status == "diverged":
        st.error(f"Run diverged: {rec.error or 'the loss became NaN or infinite'}.{kept}")
    elif rec.status == "interrupted":
        st.warning(f"Run interrupted: {rec.error}.{kept}")
    elif rec.status == "running" and (rec.extra or {}).get("phase") == "evaluating":
        st.info(f"Training is done; the worker is {EVALUATING}. The run reads completed when that ends.")
    for w in getattr(rec, "warnings", ()):
        st.warning(w)


def runs_or_stop() -> list:
    """All runs, newest first. With none, show a hint and a link to New run, then stop the page."""
    runs = guarded(list_runs, max_age_s=LIST_MAX_AGE_S)
    if not runs:
        if runs is not None:
            st.info("No runs yet.")
        st.page_link("../pages/new_run.py", label="Start a run")
        st.stop()
    return runs


def same_task_first(records: list, n: int) -> list[str]:
    """Ids of up to ``n`` runs for a default selection: the first run and the next ones of its task
    (``records`` newest first). Runs of another task log losses of other units (an image MSE near
    0.05, a text cross-entropy near 5), which one y-axis cannot show together."""
    if not records:
        return []
    task = (records[0].config or {}).get("task")
    return [r.run_id for r in records if (r.config or {}).get("task") == task][:n]


def short_label(rec: Any) -> str:
    """``name · <last 6 characters of the id>``: short enough for a chart legend, still unique."""
    name = getattr(rec, "name", "") or ""
    suffix = str(rec.run_id)[-6:]
    return f"{name} · {suffix}" if name and name != rec.run_id else str(rec.run_id)


def run_label(rec: Any) -> str:
    """``name · run_id`` (just the id for an unnamed run, whose name the store sets to the id)."""
    name = getattr(rec, "name", "") or ""
    return f"{name} · {rec.run_id}" if name and name != rec.run_id else str(rec.run_id)


def format_duration(seconds: float | None) -> str:
    """``None`` -> "", 75 -> "1m 15s", 3700 -> "1h 1m"."""
    if seconds is None:
        return ""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {(s % 3600) // 60:02d}m"


def masking_label(config: dict | None) -> str:
    """A run's masking in a few words: ``random 0.75``, ``block 0.5→0.9 cosine``, ``region`` (a
    strategy with its own budget shows no ratio)."""
    m = (config or {}).get("masking") or {}
    name = m.get("strategy", "random")
    try:
        uses_ratio = masking_uses_ratio(name)  # a built-in strategy: no torch
    except KeyError:
        from engine.api import MASKING_REGISTRY  # noqa: PLC0415 (a plug-in's strategy: its registry loads torch)

        strategy = MASKING_REGISTRY.get(name)
        uses_ratio = strategy is None or strategy.uses_ratio
    if not uses_ratio:
        return name
    ratio = f"{m.get('ratio', '')}"
    if m.get("schedule", "constant") != "constant":
        ratio = f"{m.get('ratio')}→{m.get('final_ratio')} {m.get('schedule')}"
    return f"{name} {ratio}".strip()


def grid_label(config: dict | None, reached: int | None = None) -> str:
    """What a run's units are: ``patch 2`` for images; the tokenizer for text, with the vocabulary
    it really has when ``reached`` (:func:`run_vocab`) is known (:func:`engine.config.vocab_text`:
    ``wordpiece 8000``, ``wordpiece 13 (8000 asked: far below)`` when under half the request,
    ``char 57``); both for pairs (``patch 4 · wordpiece 300``). A run with ``model.init_from``
    reads with its source's tokenizer."""
    cfg = config or {}
    patch = (cfg.get("model") or {}).get("patch_size")
    tok = (cfg.get("data") or {}).get("tokenizer") or {}
    parts = [f"patch {patch}"] if patch else []
    if tok and (cfg.get("model") or {}).get("init_from"):  # the source's tokenizer, not these settings
        parts.append("its source's tokenizer" + (f" ({reached})" if reached else ""))
    elif tok:
        text = vocab_text(tok, reached)  # far below ends "(8000 asked)": the warning goes inside
        parts.append(text[:-1] + ": far below)" if vocab_shortfall(tok, reached) else text)
    return " · ".join(parts)


def run_vocab(rec: Any) -> int | None:
    """The ids of a text run's tokenizer as training recorded them (``task.json``'s ``vocab_size``);
    None for a run without a tokenizer or one that has not started training."""
    cfg = getattr(rec, "config", None) or {}
    if not (cfg.get("data") or {}).get("tokenizer") or getattr(rec, "path", None) is None:
        return None
    try:
        n = read_task_info(rec.path).get("vocab_size")
    except (OSError, ValueError, AttributeError):  # not started yet, or being replaced
        return None
    return int(n) if isinstance(n, int) and n > 0 else None


def vocab_warning(rec: Any, reached: int | None = None) -> str | None:
    """:func:`engine.config.vocab_shortfall` of a run (its config's request against ``reached``, default
    :func:`run_vocab`), or None; a run from an imported model or a parent run reads with its source's
    tokenizer: None."""
    cfg = getattr(rec, "config", None) or {}
    if (cfg.get("model") or {}).get("init_from"):
        return None
    return vocab_shortfall((cfg.get("data") or {}).get("tokenizer"), reached or run_vocab(rec),
                           (cfg.get("data") or {}).get("dataset"))


def headline_key(config: dict | None) -> str:
    """The run's headline metric (``val_loss`` when its task is unknown)."""
    from app.components.quality import headline_of  # noqa: PLC0415 (the modality views and app.components import each other, and these modules load torch: imported where used)

    return headline_of(config or {})[0]


def latest_points(records: Sequence[Any]) -> dict[tuple[str, str], tuple[int, float]]:
    """``(run_id, key) -> (step, value)`` of the last logged ``loss``, ``val_loss`` and headline
    point of each run, from its metrics (:func:`engine.store.latest_points`: kept per process, at
    most :data:`LIST_MAX_AGE_S` old; damaged files are skipped)."""
    if not records:
        return {}
    keys = {"loss", "val_loss"} | {headline_key(r.config) for r in records}
    points = guarded(store_latest_points, [r.run_id for r in records], max_age_s=LIST_MAX_AGE_S) or {}
    return {k: p for k, p in points.items() if k[1] in keys}


def format_metric(key: str, value: float | None, step: int | None = None) -> str:
    """``0.0741 val loss @ step 300`` / ``41.2% top-1 @ step 2000`` / ``–``."""
    if value is None:
        return "–"
    name, pct = metric_name(key)
    text = f"{value:.1%} {name}" if pct else f"{value:.4f} {name}"
    return text + (f" @ step {step}" if step is not None else "")


def placement_label(rec: Any, full: bool = False, job: dict | None = None) -> str:
    """Where a run trains, from what its worker recorded (``placement``: back-end, hosts, processes,
    GPUs), else from its ``launch`` config: ``2 processes · GPU 0,1``, ``2 nodes x 1 process``.
    Short form (the run table): "" for one local process without a GPU set, the back-end first for a
    cluster run (``ray · 2 processes``). ``full`` (Run detail):
    always, with the back-end, its cluster job (``job``: :func:`engine.runner.backends.read_job`) and the
    hosts: ``local · host vm · 1 process``, ``ray job masklab-...-1 · host n3 · 1 process``."""
    placed = (rec.extra or {}).get("placement") or {}
    launch = (rec.config or {}).get("launch") or {}
    nproc, nnodes = int(launch.get("nproc_per_node", 1)), int(launch.get("nnodes", 1))
    procs = int(placed.get("processes") or nproc * nnodes)
    if nnodes > 1:
        count = f"{nnodes} nodes x {nproc} process{'es' if nproc > 1 else ''}"
    else:
        count = f"{procs} process{'es' if procs > 1 else ''}" if procs > 1 or full else ""
    gpus = "GPU " + ",".join(placed["devices"]) if placed.get("devices") else ""
    backend = placed.get("backend") or launch.get("backend", "local")
    if not full:
        return " · ".join(p for p in (backend if backend != "local" else "", count, gpus) if p)
    hosts = placed.get("hosts") or []
    where = f"host{'s' if len(hosts) > 1 else ''} {', '.join(hosts)}" if hosts else ""
    if job:
        backend = f"{backend} job {job['job_id']}"
    return " · ".join(p for p in (backend, where, count, gpus) if p)


def runs_frame(records: Sequence[Any], points: dict | None = None, sizes: dict[str, int] | None = None,
               sources: dict[str, str] | None = None, vocabs: dict[str, int | None] | None = None) -> pd.DataFrame:
    """One row per run with the columns of the run table (newest first, as given): who, status,
    progress, the key hyperparameters (task, patch or tokenizer, preset, masking, lr, steps), the
    latest loss and headline figure each with its step, dataset, duration, tags and disk space.

    Args:
        records: run records.
        points: :func:`latest_points` (default: the values of ``status.json``, without steps).
        sizes: run id -> bytes on disk (:func:`engine.store.disk_usage`); None: no ``disk`` column.
        sources: imported model name -> its source file (:func:`pretrained_sources`): a run that
            starts from one (``model.init_from``) shows ``pretrained NAME (file)`` for its preset.
        vocabs: run id -> its tokenizer's ids (:func:`run_vocab`; default: read for each run).
    """
    rows = []
    for r in records:
        cfg = r.config or {}
        latest = r.latest or {}
        key = headline_key(cfg)
        loss_step, loss = (points or {}).get((r.run_id, "loss"), (None, latest.get("loss")))
        head_step, head = (points or {}).get((r.run_id, key), (None, latest.get(key)))
        rows.append(
            {
                "run": short_label(r),
                "status": status_label(r.status),
                "step": f"{r.step} / {r.total_steps}",
                "dataset": (cfg.get("data") or {}).get("dataset", ""),
                "task": cfg.get("task", "?"),
                "units": grid_label(cfg, (vocabs or {}).get(r.run_id) if vocabs is not None else run_vocab(r)),
                "preset": model_label(cfg, sources),
                "masking": masking_label(cfg),
                "lr": (cfg.get("train") or {}).get("lr"),
                "loss": "–" if loss is None else f"{loss:.4f}" + (f" @ {loss_step}" if loss_step not in (None, r.step) else ""),
                "validation": format_metric(key, head, None if head_step == r.step else head_step).replace(" @ step ", " @ "),
                "time": format_duration(r.duration_s),
                "where": placement_label(r),
                "tags": ", ".join(getattr(r, "tags", ())),
                "run id": r.run_id,
            }
        )
        if sizes is not None:
            rows[-1]["disk"] = format_bytes(sizes.get(r.run_id, 0))
        row = rows[-1]
        lr = f"lr {row['lr']:g}" if isinstance(row["lr"], (int, float)) else ""
        # the key hyperparameters first: a narrow window cuts the end of the cell, where the task is
        row["recipe"] = " · ".join(str(v) for v in (lr, row["units"], row["preset"], row["masking"], row["task"]) if v)
    return pd.DataFrame(rows)


def model_label(cfg: dict, sources: dict[str, str] | None = None) -> str:
    """The run table's model cell: the preset; ``pretrained NAME (file)`` for a run that starts from
    an imported model (the file's name from ``sources``; ``uploaded`` for an upload); ``from SOURCE``
    for a fork of a run (or a model deleted since)."""
    model = cfg.get("model") or {}
    if not model.get("init_from"):
        return model.get("preset", "")
    if model["init_from"] not in (sources or {}):  # a fork of a run, or a model deleted since
        return f"from {model['init_from']}"
    src = sources[model["init_from"]]
    file = "uploaded" if src.startswith("upload: ") else PurePath(src).name
    return f"pretrained {model['init_from']}" + (f" ({file})" if file else "")


def pretrained_sources() -> dict[str, str]:
    """Imported model name -> the path it was imported from (for :func:`model_label`); ``{}`` when
    the models cannot be listed."""
    try:
        return {m.name: str((m.source or {}).get("path") or "") for m in list_pretrained()}
    except MasklabError:
        return {}


#: Column widths (pixels) of the run table: together about the width of the page's main column.
TABLE_COLUMNS = {"run": 165, "status": 88, "step": 80, "dataset": 84, "recipe": 328, "loss": 55, "validation": 140}
#: Columns shown when they have something: their width comes out of the recipe column.
EXTRA_COLUMNS = {"where": 110, "tags": 90, "disk": 60}


def run_table(records: Sequence[Any], sizes: dict[str, int] | None = None) -> None:
    """``st.dataframe`` of :func:`runs_frame` that fits the page: the key hyperparameters in one
    ``recipe`` column (lr · patch or tokenizer · preset · masking · task), each figure with its step
    when that is not the run's (``0.0741 val loss @ 200`` after a cancel at step 204), the tags when
    a run has some and the disk space when ``sizes`` (run id -> bytes) is given; the other columns
    (the recipe's parts, the duration, the run id) are hidden. The recipe column gives up the width
    the extra columns take."""
    sources = pretrained_sources() if any(((r.config or {}).get("model") or {}).get("init_from") for r in records) else {}
    vocabs = {r.run_id: run_vocab(r) for r in records}
    frame = runs_frame(records, latest_points(records), sizes, sources, vocabs)
    widths = dict(TABLE_COLUMNS)
    extra = {c: w for c, w in EXTRA_COLUMNS.items() if c in frame.columns and frame[c].astype(bool).any()}
    widths["recipe"] -= sum(extra.values())
    widths.update(extra)
    helps = {"recipe": "learning rate · patch size and/or tokenizer (the vocabulary it really has, the size asked "
                       "beside it when they differ) · model preset (or the imported model it starts from) · masking · task",
             "loss": "latest training loss (@ its step when not the run's step)",
             "validation": "the task's headline validation figure @ the step it was measured",
             "disk": "space the run's folder takes (metrics, checkpoints, samples, log)",
             "where": "processes, nodes and GPUs of runs that do not train in one process (launch section)"}
    config = {c: (st.column_config.TextColumn(c, width=widths[c], help=helps.get(c)) if c in widths else None)
              for c in frame.columns}  # fmt: skip
    st.dataframe(frame[list(widths) + [c for c in frame.columns if c not in widths]],
                 hide_index=True, width="stretch", column_config=config)
    far = [f"{short_label(r)} ({vocabs[r.run_id]:,} of {(((r.config or {}).get('data') or {}).get('tokenizer') or {}).get('vocab_size', 0):,})"
           for r in records if vocab_warning(r, vocabs[r.run_id])]
    if far:  # the recipe cell may be cut: said in full here, Run detail says what to do
        st.warning(f"Tokenizer far below the vocabulary asked (ids it has, of those asked): {', '.join(far)}. "
                   "Its Run detail says what to do.")


def progress_with_cancel(rec: Any, cancel_fn, key: str, text: str) -> None:
    """An active run's progress bar with a Cancel button that asks first. The first click replaces
    the line by what cancelling does and a "Yes, cancel" / "Keep running" pair (the question is kept
    in ``st.session_state`` by the buttons' callbacks, so a self-refreshing fragment does not lose
    it); only the confirmation calls ``cancel_fn(run_id)``. With ``cancel_fn`` None (a session that
    may not cancel) only the progress bar is shown."""
    ask = f"{key}_ask_{rec.run_id}"
    evaluating = (rec.extra or {}).get("phase") == "evaluating"
    what = ("its final evaluation stops; the run stays completed (its training ended) and can be evaluated "
            "again from Compare" if evaluating else "it stops after the current step")
    if cancel_fn is None:
        st.progress(rec.progress, text=text)
        return

    def answer(value: bool) -> None:
        st.session_state[ask] = value

    def confirm() -> None:
        st.session_state[ask] = False
        done = guarded(cancel_fn, rec.run_id)
        if done:
            st.toast(f"Cancelling {rec.run_id}: {what}.")
        elif done is False:  # it ended between the table's refresh and the click
            st.toast(f"{rec.run_id} had already ended before the cancel reached it: nothing was cancelled. Its "
                     "status is in the table.")

    if not st.session_state.get(ask):
        bar, button = st.columns([5, 1], vertical_alignment="bottom")
        bar.progress(rec.progress, text=text)
        button.button("Cancel", key=f"{key}_{rec.run_id}", help=f"{rec.run_id}: {what}",
                      on_click=answer, args=(True,))  # fmt: skip
        return
    with st.container(border=True):
        st.markdown(f"Cancel **{run_label(rec)}**? " + (
            "Its training is done; the evaluation of its final checkpoint stops, and the run stays completed "
            "(it can be evaluated again from Compare)." if evaluating else
            f"It stops after its current step (now {rec.step} of {rec.total_steps}); a cancelled run keeps its "
            "checkpoints and can be resumed."))
        yes, no, _ = st.columns([1, 1, 3])
        yes.button("Yes, cancel", key=f"{key}_yes_{rec.run_id}", type="primary", on_click=confirm)
        no.button("Keep running", key=f"{key}_no_{rec.run_id}", on_click=answer, args=(False,))
