"""A run's speed as Run detail and Compare show it: the median of its logged samples/s, its model
FLOPs utilisation (the median of the logged ``mfu``, with the peak it is measured against, from
``task.json``: :func:`engine.training.perf.mfu_basis`) and its peak memory, said which (CUDA's max
allocated on a GPU, the worker's private memory on the CPU: :class:`engine.runner.resources.PeakMemory`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from app.components.names import metric_label
from engine.api import read_task_info

#: What the peak memory is, by where the run trained.
MEMORY_KIND = {True: "CUDA max allocated", False: "private memory (CPU)"}


@dataclass(frozen=True)
class Speed:
    """One run's speed figures: ``samples_s`` (median samples/s), ``mfu`` (median, a fraction),
    ``mfu_note`` (the peak it is measured against, or why there is none), ``peak_bytes`` and
    ``on_gpu`` (it trained on CUDA: its memory is CUDA's max allocated). None: not known."""

    samples_s: float | None
    mfu: float | None
    mfu_note: str
    peak_bytes: int | None
    on_gpu: bool

    @property
    def samples_text(self) -> str:
        """``1,234`` / ``3.21``; ``–`` when nothing was logged."""
        if self.samples_s is None:
            return "–"
        return f"{self.samples_s:,.0f}" if self.samples_s >= 100 else f"{self.samples_s:.3g}"

    @property
    def mfu_text(self) -> str:
        """``41.2%`` (with the note beside: :attr:`mfu_note`), or ``—, CPU run`` / ``—, not logged``."""
        return f"{self.mfu:.1%}" if self.mfu is not None else f"—, {self.mfu_note}"

    @property
    def memory_kind(self) -> str:
        return MEMORY_KIND[self.on_gpu]

    @property
    def memory_text(self) -> str:
        """``812 MiB`` / ``2.10 GiB``; ``–`` when not recorded."""
        if not self.peak_bytes:
            return "–"
        mib = self.peak_bytes / 2**20
        return f"{mib / 1024:.2f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def task_info(rec: Any) -> dict:
    """The run's ``task.json`` (device, GPU name, the peak its ``mfu`` is measured against), ``{}``
    before training has written it (or while it is being replaced)."""
    try:
        return read_task_info(rec.path) if getattr(rec, "path", None) is not None else {}
    except (OSError, ValueError):
        return {}


def peak_text(info: dict, processes: int = 1) -> str:
    """``bf16 peak 989 TFLOP/s`` (``x 2 GPUs`` after it for a run of several processes); ``""``
    when ``info`` (:func:`task_info`) has no peak."""
    peak = info.get("mfu_peak_flops")
    if not peak:
        return ""
    return f"{info.get('mfu_dtype', '?')} peak {peak / 1e12:.0f} TFLOP/s" + (f" x {processes} GPUs" if processes > 1 else "")


def _median(metrics: pd.DataFrame | None, run_id: str, key: str) -> float | None:
    if metrics is None or metrics.empty:
        return None
    v = metrics.loc[(metrics["run_id"] == run_id) & (metrics["key"] == key), "value"].median()
    return None if pd.isna(v) or not math.isfinite(v) else float(v)


def run_speed(rec: Any, metrics: pd.DataFrame | None, info: dict | None = None) -> Speed:
    """:class:`Speed` of run ``rec`` from ``metrics`` (the long frame of :func:`engine.api.read_metrics`
    with ``throughput`` and ``mfu``) and ``info`` (:func:`task_info`; read when None). Where it
    trained: the device the worker recorded at the end, else the one in ``task.json``."""
    info = task_info(rec) if info is None else info
    extra = rec.extra or {}
    device = str(extra.get("device") or info.get("device") or "")
    on_gpu = device.startswith("cuda")
    mfu = _median(metrics, rec.run_id, "mfu")
    processes = int((extra.get("placement") or {}).get("processes") or 1)
    if mfu is not None:
        note = peak_text(info, processes) or "peak not recorded"
    elif not on_gpu:
        note = "CPU run" if device else "not started"
    else:
        note = "not logged" + ("" if info.get("mfu_peak_flops") else f" ({info.get('gpu_name', 'this GPU')} "
                                                                      "has no peak in the table)")
    return Speed(_median(metrics, rec.run_id, "throughput"), mfu, note, extra.get("peak_mem_bytes") or None, on_gpu)


def speed_labels() -> dict[str, str]:
    """The figures' names (:mod:`app.components.names`): samples/s, MFU, peak memory."""
    return {k: metric_label(k) for k in ("throughput", "mfu", "peak_mem_bytes")}
