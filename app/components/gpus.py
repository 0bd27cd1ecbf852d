"""New run's GPU panel: each GPU masklab may hand out, its name and memory (``nvidia-smi``, read at
most every :data:`READ_TTL_S` seconds), the run slots that share it and the running runs that hold
it (:func:`engine.runner.gpus.gpu_overview`); on a machine without one, a line saying that runs
train on the CPU. The dashboard never starts CUDA: everything comes from ``nvidia-smi`` and the
runs' status files.
"""

from __future__ import annotations

import streamlit as st

from app.components.errors import guarded
from app.components.runs import LIST_MAX_AGE_S, short_label
from engine.api import GpuReading, gpu_overview, list_runs, max_runs, nvidia_smi, read_gpus

#: Seconds one ``nvidia-smi`` answer is kept: a rerun within them starts no process.
READ_TTL_S = 5


@st.cache_data(ttl=READ_TTL_S, max_entries=4, show_spinner=False)
def gpu_reading(binary: str | None) -> GpuReading:
    """:func:`engine.runner.gpus.read_gpus` of ``nvidia-smi`` at ``binary`` (None: not installed),
    kept :data:`READ_TTL_S` seconds per path."""
    return read_gpus(binary)


def _gib(mib: int | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.1f}"


def gpu_line(row) -> str:
    """One :class:`engine.runner.gpus.GpuRow` in three short lines (markdown):
    ``**GPU 0** · NVIDIA H100``, ``1.2 of 79.6 GiB used · 78.4 GiB free``, ``slot 0 · held by r1 · 3f2a1c``.
    A run's slot is named beside it where several slots share the GPU."""
    info = row.info
    what = ["not in nvidia-smi's list"] if info is None else [
        info.name, f"{_gib(info.used_mib)} of {_gib(info.total_mib)} GiB used · {_gib(info.free_mib)} GiB free"]
    slots = (f"slot {row.slots[0]}" if len(row.slots) == 1 else f"slots {', '.join(map(str, row.slots))} share it"
             if row.slots else "no slot hands it out")
    shared = len(row.slots) > 1
    held = ", ".join(f"**{short_label(r)}**" + (f" (slot {r.extra['slot']})" if shared and "slot" in (r.extra or {}) else "")
                     for r in row.runs)
    return "  \n".join([f"**GPU {row.gpu}** · {what[0]}", *what[1:], f"{slots} · " + (f"held by {held}" if held else "free")])


def gpu_panel() -> None:
    """Under New run's launch settings: the GPUs here, or one line when there is none."""
    slots = guarded(max_runs)
    if slots is None:
        return
    runs = guarded(list_runs, max_age_s=LIST_MAX_AGE_S) or []
    view = gpu_overview(runs, gpu_reading(nvidia_smi()), slots=slots)
    n_slots = f"{slots} slot{'s' * (slots != 1)}"
    if not view.rows:
        line = f"No GPU: runs train on the CPU ({n_slots} at once, MASKLAB_MAX_RUNS)."
        if view.unused:  # the driver's list was not found, but nvidia-smi sees GPUs
            line = (f"nvidia-smi lists {len(view.unused)} GPU(s), but masklab hands none out: runs see every GPU. "
                    "Set MASKLAB_GPUS (e.g. 0,1) to give each run slot its own.")
        st.caption(line)
        return
    with st.container(border=True):
        st.markdown(f"**GPUs here**: {len(view.rows)} for {n_slots} (MASKLAB_MAX_RUNS)")
        for row in view.rows:
            st.markdown(gpu_line(row))
        if view.unused:
            st.caption("Not handed out (MASKLAB_GPUS / CUDA_VISIBLE_DEVICES): "
                       + ", ".join(f"GPU {g.index}" for g in view.unused) + ".")
        if view.problem:
            st.caption(f"{view.problem}: names and memory unknown." if not any(r.info for r in view.rows)
                       else view.problem + ".")
