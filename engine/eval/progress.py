"""How far an evaluation has got: its phase, counts and ETA in ``evaluation/job.json``, at least every
:data:`HEARTBEAT_S` seconds, and its cancellation.

The evaluation (:mod:`engine.eval.job`) goes through the phases of :data:`PHASES` in order and calls
:meth:`EvalProgress.enter` at the start of each, :meth:`EvalProgress.tick` as its work advances (a
feature split, an encoder's probe, a fine-tune step) and :meth:`EvalProgress.leave` at its end. Each
of these writes the job file when the phase changes or :data:`WRITE_EVERY_S` has passed, and a
heartbeat thread rewrites it every :data:`HEARTBEAT_S` seconds while a long library call (a probe's
cross-validation, t-SNE) holds the main thread, so a reader always sees a fresh ``updated_at``.

Cancellation is cooperative: every call checks ``should_stop`` (the run's cancel marker for the final
evaluation, ``evaluation/cancel`` for a job started on demand) and raises
:class:`engine.errors.EvaluationCancelled`; the phases finished by then are already stored
(:func:`engine.store.evaluations.save_evaluation` with ``status="partial"``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.errors import EvaluationCancelled
from engine.store.evaluations import PHASES, write_job

#: Seconds between two writes of the job file by :meth:`EvalProgress.tick` (a phase change writes at once).
WRITE_EVERY_S = 1.0
#: Seconds between two writes of the heartbeat thread (the job file is never older than this while alive).
HEARTBEAT_S = 2.0


class EvalProgress:
    """The running evaluation's state, written to ``<run>/evaluation/job.json``.

    Args:
        run_dir: the run folder.
        step: the checkpoint step evaluated.
        should_stop: returns True once the evaluation must stop (checked at every call).
        started_at: unix seconds the job started (kept in the job file).
        clock: seconds, monotonic (tests may pass their own).
        quiet: keep the state in memory only (an evaluation computed outside a job writes no job file).

    The job file holds ``status`` ``running``, ``step``, ``phase`` (a key of :data:`PHASES`),
    ``phase_title``, ``done`` / ``total`` (counts within the phase, ``total`` None when unknown),
    ``eta_s`` (seconds left in the phase when it can be told), ``phases_done`` (name -> seconds),
    ``budget_s`` (:meth:`set_budget`), ``pid``, ``started_at`` and ``updated_at``.
    """

    def __init__(self, run_dir: Path, step: int | None, *, should_stop: Callable[[], bool] | None = None,
                 started_at: float | None = None, pid: int | None = None,
                 clock: Callable[[], float] = time.monotonic, quiet: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.should_stop = should_stop or (lambda: False)
        self.clock = clock
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {"status": "running", "step": step, "pid": pid,
                                       "started_at": started_at or time.time(), "phase": None, "phase_title": None,
                                       "done": 0, "total": None, "eta_s": None, "phases_done": {}}
        self._phase_t0 = clock()
        self._written = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.quiet = quiet

    # --- the evaluation's calls -------------------------------------------------------------------

    @property
    def phases_done(self) -> dict[str, float]:
        """Finished phases -> their seconds, in order."""
        return dict(self._state["phases_done"])

    @property
    def phase(self) -> str | None:
        """The phase under way (None before the first)."""
        return self._state["phase"]

    def set_step(self, step: int) -> None:
        """The checkpoint step being evaluated, once known."""
        with self._lock:
            self._state["step"] = step

    def set_budget(self, budget_s: float | None) -> None:
        """The evaluation's budget (s, :mod:`engine.eval.budget`; None: no limit), kept in the job file
        as ``budget_s`` so that the pages can say when it ends."""
        with self._lock:
            self._state["budget_s"] = None if budget_s is None else round(float(budget_s), 1)

    def enter(self, phase: str, total: int | None = None) -> None:
        """Start ``phase`` (a key of :data:`PHASES`) with ``total`` units of work (None: unknown).

        Raises:
            EvaluationCancelled: ``should_stop()`` is true.
            KeyError: unknown phase.
        """
        with self._lock:
            self._state.update(phase=phase, phase_title=PHASES[phase], done=0, total=total, eta_s=None)
            self._phase_t0 = self.clock()
        self._check()
        self._write(force=True)

    def tick(self, done: int, total: int | None = None) -> None:
        """``done`` units of the phase are finished (of ``total``, when it changed); the ETA is the
        phase's mean time per unit so far times the units left.

        Raises:
            EvaluationCancelled: ``should_stop()`` is true.
        """
        self._check()
        with self._lock:
            if total is not None:
                self._state["total"] = total
            self._state["done"] = done
            total = self._state["total"]
            spent = self.clock() - self._phase_t0
            self._state["eta_s"] = (round(spent / done * (total - done), 1)
                                    if total and 0 < done <= total else None)
        self._write()

    def leave(self) -> None:
        """The phase under way is finished (its seconds are kept in ``phases_done``)."""
        with self._lock:
            phase = self._state["phase"]
            if phase is not None:
                self._state["phases_done"][phase] = round(self.clock() - self._phase_t0, 3)
                self._state.update(done=self._state["total"] or self._state["done"], eta_s=0.0)
        self._write(force=True)

    def state(self) -> dict[str, Any]:
        """A copy of what the job file says now."""
        with self._lock:
            return {**self._state, "phases_done": dict(self._state["phases_done"])}

    # --- the heartbeat --------------------------------------------------------------------------

    def __enter__(self) -> EvalProgress:
        if self.quiet:
            return self
        self._thread = threading.Thread(target=self._beat, name="eval-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._write(force=True)
            except Exception:  # noqa: BLE001 - a full disk must not kill the heartbeat; the next write says it
                pass

    # --- internals ------------------------------------------------------------------------------

    def _check(self) -> None:
        if self.should_stop():
            raise EvaluationCancelled(f"the evaluation of run {self.run_dir.name} was cancelled during "
                                      f"{PHASES.get(self._state['phase'] or '', 'its start')}")

    def _write(self, force: bool = False) -> None:
        now = self.clock()
        with self._lock:
            if self.quiet or not force and now - self._written < WRITE_EVERY_S:
                return
            self._written = now
            state = {**self._state, "phases_done": dict(self._state["phases_done"]),
                     "phase_elapsed_s": round(now - self._phase_t0, 1)}
            write_job(self.run_dir, **state)
