"""Evaluation results of a run: one record per evaluated checkpoint step, and the state of its
evaluation job.

Files (written only by the holder of the run lock: the worker at the end of a run, or the
evaluation job ``python -m engine.evaljob``, which takes the lock):

- ``evaluation/step-NNNNNNN.json``: an :class:`Evaluation` (figures by encoder, reconstruction
  figures, the rows used, timings), written atomically;
- ``evaluation/partial-step-NNNNNNN.json``: the same while the evaluation runs (rewritten after each
  phase, so probes show before the fine-tune ends), and after a cancel (what it finished);
- ``evaluation/step-NNNNNNN.npz``: the 2-D maps of the trained encoder's val features (``pca``,
  optional ``tsne``, float32 ``[N, 2]``) and their ``labels`` int64 ``[N]``;
- ``evaluation/job.json``: the last job's state (``queued``, ``running``, ``completed``,
  ``cancelled``, ``failed``, with ``step``, ``error``, times; while running, its phase, counts and
  ETA: :mod:`engine.eval.progress`). A ``queued``/``running`` job whose run lock is free
  and whose launch is older than :data:`engine.store.runs.LAUNCH_GRACE_S` is read as
  ``interrupted`` (the process is gone), as runs are.

Readers never raise for a damaged file: :func:`read_evaluations` skips it and says which in
``warnings``.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import MasklabError
from engine.messages import describe_error
from engine.store.lock import run_alive
from engine.store.paths import run_dir
from engine.store.runs import LAUNCH_GRACE_S
from engine.workspace import atomic_write_bytes, atomic_write_json, read_json, workspace_root

EVAL_DIR = "evaluation"
JOB_FILE = "job.json"
#: The phases of an evaluation (:mod:`engine.eval.progress`), in order, with the words a page shows for each.
PHASES = {
    "setup": "loading the run",
    "features": "encoding the rows",
    "reconstruction": "reconstruction figures",
    "probe": "linear probes",
    "knn": "kNN",
    "clustering": "k-means",
    "map": "2-D maps",
    "finetune": "fine-tuning",
}
#: The cancel marker of an evaluation job started on demand (:func:`request_cancel`).
CANCEL_FILE = "cancel"
#: File-name prefix of an unfinished evaluation (``partial-step-NNNNNNN.json``).
PARTIAL_PREFIX = "partial-"
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
        skipped: phase (:data:`PHASES`: ``probe``, ``knn``, ``clustering``, ``finetune``) or encoder
            (``raw_input``) -> why it could not be computed on this run's data (an unlabelled set,
            one class, no validation rows: :func:`engine.eval.representation.labels_problem`); the
            rest of the evaluation is complete without it. Empty when everything was computed.
        status: ``complete``; ``partial`` while the evaluation still runs (the phases of ``phases``
            are in, the others not yet); ``cancelled`` when it stopped before its end (what it
            finished is kept). Evaluations of older masklabs read as ``complete``.
        phases: finished phases (:data:`engine.eval.progress.PHASES`) -> seconds each took.
        budget: what the evaluation was allowed to spend and how it planned its fine-tune
            (:meth:`engine.eval.budget.EvalBudget.figures`); empty for older evaluations.
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
    skipped: dict[str, str] = field(default_factory=dict)
    status: str = "complete"
    phases: dict[str, float] = field(default_factory=dict)
    budget: dict[str, Any] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """True once every phase ran (not a partial or cancelled record)."""
        return self.status == "complete"


def _eval_dir(d: Path) -> Path:
    return Path(d) / EVAL_DIR


def _partial_path(folder: Path, step: int) -> Path:
    return folder / f"{PARTIAL_PREFIX}step-{step:07d}.json"


def save_evaluation(d: Path, ev: Evaluation, maps: dict[str, np.ndarray] | None = None,
                    labels: np.ndarray | None = None) -> Path:
    """Write ``ev`` (and the 2-D ``maps`` with their ``labels``) into run folder ``d``; returns the JSON path.

    A complete evaluation goes to ``step-NNNNNNN.json`` (and the partial record of the same step is
    removed); a ``partial`` or ``cancelled`` one to ``partial-step-NNNNNNN.json``, so that an earlier
    complete evaluation of the step is never overwritten by an unfinished one.

    Raises:
        StorageError: a file cannot be written (nothing half-written is left).
    """
    folder = _eval_dir(d)
    if maps:
        buf = io.BytesIO()
        np.savez(buf, labels=np.asarray(labels, np.int64), **{k: np.asarray(v, np.float32) for k, v in maps.items()})
        atomic_write_bytes(folder / f"step-{ev.step:07d}.npz", buf.getvalue(), what=f"the maps of step {ev.step}")
    if not ev.complete:
        path = _partial_path(folder, ev.step)
        atomic_write_json(path, asdict(ev), what=f"the unfinished evaluation of step {ev.step}")
        return path
    path = folder / f"step-{ev.step:07d}.json"
    atomic_write_json(path, asdict(ev), what=f"the evaluation of step {ev.step}")
    _partial_path(folder, ev.step).unlink(missing_ok=True)
    return path


def read_evaluations(run_id: str, workspace=None) -> tuple[list[Evaluation], list[str]]:
    """Every stored evaluation of a run, by step ascending, and warnings for files that could not be read.

    For each step, the complete evaluation when there is one, else the unfinished one (``status``
    ``partial`` while it runs, ``cancelled`` after a cancel).

    Raises:
        RunNotFoundError: unknown run.
    """
    folder = _eval_dir(run_dir(run_id, workspace))
    files: dict[int, Path] = {}
    for p in sorted(folder.glob("*step-*.json")) if folder.is_dir() else []:
        name = p.name.removeprefix(PARTIAL_PREFIX)
        try:
            step = int(name.removeprefix("step-").removesuffix(".json"))
        except ValueError:
            continue
        if p.name == name or step not in files:  # the complete one wins (sorted: partial-* come first)
            files[step] = p
    out, warnings = [], []
    for _, p in sorted(files.items()):
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


def has_job(d: Path) -> bool:
    """Whether run folder ``d`` (a record's ``path``) ever had an evaluation job: one ``stat``, so a
    page can skip :func:`read_job` for the runs that never had one (most, at thousands of runs)."""
    return (_eval_dir(Path(d)) / JOB_FILE).exists()


def read_job(run_id: str, workspace=None) -> dict[str, Any] | None:
    """The last evaluation job of a run (``status`` one of queued, running, completed, cancelled,
    failed, interrupted; ``step``; ``error``; progress fields while running), or None when it never
    had one."""
    d = run_dir(run_id, workspace)
    try:
        job = json.loads((_eval_dir(d) / JOB_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if job.get("status") in ("queued", "running") and not run_alive(d):
        if time.time() - float(job.get("updated_at") or 0) >= LAUNCH_GRACE_S or job.get("pid"):
            job = {**job, "status": "interrupted", "error": "the evaluation process is gone; start it again"}
    return job


def request_cancel(d: Path) -> None:
    """Ask the evaluation job of run folder ``d`` to stop (it polls :func:`cancel_requested`).

    Raises:
        StorageError: the marker cannot be written.
    """
    atomic_write_bytes(_eval_dir(d) / CANCEL_FILE, b"", what=f"the cancel marker of run {Path(d).name}'s evaluation")


def cancel_requested(d: Path) -> bool:
    """True once :func:`request_cancel` was called for the job now running in ``d``."""
    return (_eval_dir(d) / CANCEL_FILE).exists()


def clear_cancel(d: Path) -> None:
    """Remove the cancel marker (a new job starts without it)."""
    (_eval_dir(d) / CANCEL_FILE).unlink(missing_ok=True)


def job_active(run_id: str, workspace=None) -> bool:
    """True while an evaluation job of the run is queued or running."""
    job = read_job(run_id, workspace)
    return bool(job) and job["status"] in ("queued", "running")


#: Folder of the workspace's cache of representation figures (:func:`cached_figures`).
FIGURE_CACHE_DIR = "cache/eval-figures"
#: Bumped whenever the recipe of a cached figure changes (engine.eval.representation, engine.eval.probe).
FIGURE_RECIPE = "2"  # 2: BLAS on one thread (engine.eval.job.encoder_figures), sparse TF-IDF, warm-started probe


def figure_key(kind: str, seed: int, *arrays: np.ndarray) -> str:
    """The content address of figures of ``kind`` (e.g. ``probe``) computed from ``arrays`` with
    ``seed``: a SHA-256 of the recipe version, the kind, the seed, and each array's dtype, shape and bytes."""
    h = hashlib.sha256(f"{FIGURE_RECIPE}|{kind}|{seed}".encode())
    for a in arrays:
        if hasattr(a, "tocsr"):  # a SciPy sparse matrix: its CSR parts
            a = a.tocsr()
            h.update(f"|csr{a.shape}|".encode())
            parts = [a.data, a.indices, a.indptr]
        else:
            parts = [a]
        for part in parts:
            part = np.ascontiguousarray(part)
            h.update(f"|{part.dtype.str}{part.shape}|".encode())
            h.update(part.tobytes())
    return h.hexdigest()


def cached_figures(workspace, key: str, compute: Callable[[], dict[str, float]]) -> dict[str, float]:
    """The figures stored under ``key`` in the workspace's figure cache, else ``compute()`` (then stored).

    Representation figures are a pure function of the features, the labels and the seed, and the
    raw-input features (and the random-init features of runs that share an architecture and a seed)
    are the same for every run on a dataset: each is computed once per workspace. A damaged or
    unwritable cache entry is computed again (a cache never fails an evaluation).
    """
    path = workspace_root(workspace) / FIGURE_CACHE_DIR / f"{key}.json"
    try:
        return {k: float(v) for k, v in read_json(path).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    figures = compute()
    try:
        atomic_write_json(path, figures, what="a cached evaluation figure")
    except MasklabError:
        pass
    return figures
