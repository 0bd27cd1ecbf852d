"""Evaluation results of a run: one record per evaluated checkpoint step, and the state of its
evaluation job.

Files (written only by the holder of the run lock: the worker at the end of a run, or the
evaluation job ``python -m engine.evaljob``, which takes the lock):

- ``evaluation/step-NNNNNNN.json``: an :class:`Evaluation` (figures by encoder, reconstruction
  figures, the rows used, timings), written atomically;
- ``evaluation/step-NNNNNNN.npz``: the 2-D maps of the trained encoder's val features (``pca``,
  optional ``tsne``, float32 ``[N, 2]``) and their ``labels`` int64 ``[N]``;
- ``evaluation/job.json``: the last job's state (``queued``, ``running``, ``completed``,
  ``failed``, with ``step``, ``error``, times). A ``queued``/``running`` job whose run lock is free
  and whose launch is older than :data:`engine.store.runs.LAUNCH_GRACE_S` is read as
  ``interrupted`` (the process is gone), as runs are.

Readers never raise for a damaged file: :func:`read_evaluations` skips it and says which in
``warnings``.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.messages import describe_error
from engine.store.lock import run_alive
from engine.store.paths import run_dir
from engine.store.runs import LAUNCH_GRACE_S
from engine.workspace import atomic_write_bytes, atomic_write_json, read_json

EVAL_DIR = "evaluation"
JOB_FILE = "job.json"
#: Encoders every evaluation scores, in display order: the run's checkpoint, the same architecture
#: at its initial weights (the run's own step 0: ``train.seed``), and the raw input.
ENCODERS = ("trained", "random_init", "raw_input")


@dataclass
class Evaluation:
    """One evaluated checkpoint.

    Attributes:
        step: the checkpoint's optimiser step.
        representation: encoder (:data:`ENCODERS`) -> figure -> value (``probe_acc``, ``knn_acc``,
            ``kmeans_nmi``, ``kmeans_ari``: fractions, see :mod:`engine.eval.representation`), plus
            ``chance`` -> ``{"probe_acc": majority-class share of val, "knn_acc": the same}``.
        reconstruction: the task's validation figures at this checkpoint (``val_loss``, and
            ``val_mse`` / ``val_psnr`` for images, ``val_top1`` for text).
        rows: ``{"train": N, "val": N, "dim": D}`` features used (trained encoder's width).
        seconds: wall time of the evaluation (s).
        created_at: unix seconds.
        downstream: encoder (``trained``, ``random_init``) -> the fine-tune's figures
            (:meth:`engine.eval.finetune.FinetuneResult.figures`: ``finetune_acc`` val top-1 fraction,
            ``finetune_train_acc``, ``finetune_steps``, ``finetune_epochs``, ``finetune_seconds``);
            empty when not fine-tuned (``evaluation.finetune_epochs: 0``, or a task without an entry).
        quality: predictor (``trained``, then the task's baselines by name) -> reconstruction figure
            (:mod:`engine.eval.reconstruction`: images ``ssim``, ``ssim_full``; audio ``spec_l1``,
            ``spec_mse``, ``lsd_db``, ``spectral_convergence``); empty when none apply.
        cost: the FLOPs of one training step (:func:`engine.eval.flops.train_step_flops`:
            ``flops_per_step``, ``flops_per_sample``, ``forward_flops_per_step``, ``batch_size``,
            ``mask_ratio``).
        notes: what was left out and why (e.g. a task with no fine-tune entry).
    """

    step: int
    representation: dict[str, dict[str, float]]
    reconstruction: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    created_at: float = 0.0
    downstream: dict[str, dict[str, float]] = field(default_factory=dict)
    quality: dict[str, dict[str, float]] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _eval_dir(d: Path) -> Path:
    return Path(d) / EVAL_DIR


def save_evaluation(d: Path, ev: Evaluation, maps: dict[str, np.ndarray] | None = None,
                    labels: np.ndarray | None = None) -> Path:
    """Write ``ev`` (and the 2-D ``maps`` with their ``labels``) into run folder ``d``; returns the JSON path.

    Raises:
        StorageError: a file cannot be written (nothing half-written is left).
    """
    folder = _eval_dir(d)
    if maps:
        buf = io.BytesIO()
        np.savez(buf, labels=np.asarray(labels, np.int64), **{k: np.asarray(v, np.float32) for k, v in maps.items()})
        atomic_write_bytes(folder / f"step-{ev.step:07d}.npz", buf.getvalue(), what=f"the maps of step {ev.step}")
    path = folder / f"step-{ev.step:07d}.json"
    atomic_write_json(path, asdict(ev), what=f"the evaluation of step {ev.step}")
    return path


def read_evaluations(run_id: str, workspace=None) -> tuple[list[Evaluation], list[str]]:
    """Every stored evaluation of a run, by step ascending, and warnings for files that could not be read.

    Raises:
        RunNotFoundError: unknown run.
    """
    folder = _eval_dir(run_dir(run_id, workspace))
    out, warnings = [], []
    for p in sorted(folder.glob("step-*.json")) if folder.is_dir() else []:
        try:
            raw = read_json(p)
            out.append(Evaluation(**{k: raw[k] for k in Evaluation.__dataclass_fields__ if k in raw}))
        except (OSError, ValueError, TypeError, KeyError) as e:
            warnings.append(f"{run_id}/{EVAL_DIR}/{p.name}: unreadable ({describe_error(e)})")
    return out, warnings


def latest_evaluation(run_id: str, workspace=None) -> Evaluation | None:
    """The evaluation of the highest step, or None when the run has none."""
    evs, _ = read_evaluations(run_id, workspace)
    return evs[-1] if evs else None


def load_maps(run_id: str, step: int, workspace=None) -> dict[str, np.ndarray]:
    """The 2-D maps of an evaluation (``pca``, ``tsne`` float32 ``[N, 2]``, ``labels`` int64 ``[N]``); ``{}`` if none."""
    p = _eval_dir(run_dir(run_id, workspace)) / f"step-{step:07d}.npz"
    try:
        with np.load(p, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError):
        return {}


def write_job(d: Path, **state: Any) -> None:
    """Record the evaluation job's state (``status``, ``step``, ``error``...) with ``updated_at``."""
    atomic_write_json(_eval_dir(d) / JOB_FILE, {**state, "updated_at": time.time()},
                      what=f"the evaluation job of run {Path(d).name}")


def read_job(run_id: str, workspace=None) -> dict[str, Any] | None:
    """The last evaluation job of a run (``status`` one of queued, running, completed, failed,
    interrupted; ``step``; ``error``), or None when it never had one."""
    d = run_dir(run_id, workspace)
    try:
        job = json.loads((_eval_dir(d) / JOB_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if job.get("status") in ("queued", "running") and not run_alive(d):
        if time.time() - float(job.get("updated_at") or 0) >= LAUNCH_GRACE_S or job.get("pid"):
            job = {**job, "status": "interrupted", "error": "the evaluation process is gone; start it again"}
    return job


def job_active(run_id: str, workspace=None) -> bool:
    """True while an evaluation job of the run is queued or running."""
    job = read_job(run_id, workspace)
    return bool(job) and job["status"] in ("queued", "running")
