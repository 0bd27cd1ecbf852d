"""A GPU set per run: the launcher's slots pick which GPUs a run's processes see.

A machine with several GPUs runs up to ``$MASKLAB_MAX_RUNS`` runs at once, one per slot
(:mod:`engine.runner.queue`). The GPUs (:func:`gpu_pool`) are cut into that many equal groups, slot K
owning group K; a CUDA run that holds slot K gets the first ``launch.nproc_per_node`` GPUs of its
group as ``CUDA_VISIBLE_DEVICES`` (set by the worker before it imports torch, inherited by torchrun
and its ranks), so concurrent runs never share a GPU. With fewer GPUs than slots, slots share
GPUs round-robin (slot K gets GPU ``K % n``). A machine without GPUs, or a run with
``train.device=cpu``, gets nothing set: its processes run as before. Nothing here imports torch.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.errors import ConfigError

#: Comma-separated GPU ids masklab may hand out (e.g. ``0,1,2,3``); default: ``$CUDA_VISIBLE_DEVICES``
#: where it is set, else every GPU the NVIDIA driver lists (``/proc/driver/nvidia/gpus``).
GPUS_ENV = "MASKLAB_GPUS"
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def gpu_pool(env: dict[str, str] | None = None, nvidia: Path = NVIDIA_GPUS) -> list[str]:
    """The GPU ids runs may use, as ``CUDA_VISIBLE_DEVICES`` names them: ``$MASKLAB_GPUS``, else
    ``$CUDA_VISIBLE_DEVICES``, else ``0..n-1`` for the ``n`` GPUs the NVIDIA driver lists; ``[]``
    on a machine without one (read without starting CUDA)."""
    env = os.environ if env is None else env
    for name in (GPUS_ENV, "CUDA_VISIBLE_DEVICES"):
        if env.get(name, "").strip():
            return [g.strip() for g in env[name].split(",") if g.strip()]
    try:
        return [str(i) for i in range(sum(1 for _ in nvidia.iterdir()))]
    except OSError:
        return []


def slot_group(slot: int, slots: int, pool: list[str]) -> list[str]:
    """The GPUs slot ``slot`` (of ``slots``) owns: the K-th of ``slots`` equal groups of ``pool``,
    or with fewer GPUs than slots the one GPU ``slot % len(pool)`` (shared with other slots);
    ``[]`` when ``pool`` is empty. A run of the slot gets the first of them (:func:`slot_devices`)."""
    if not pool:
        return []
    if len(pool) < slots:  # more slots than GPUs: share them round-robin
        return [pool[slot % len(pool)]]
    size = len(pool) // slots
    return pool[slot * size:(slot + 1) * size]


def slot_devices(slot: int, slots: int, wanted: int, pool: list[str]) -> list[str]:
    """The GPUs of slot ``slot`` (of ``slots``) for a run of ``wanted`` processes on this node.

    Args:
        slot: the slot the run holds (0-based). slots: ``$MASKLAB_MAX_RUNS``. wanted:
        ``launch.nproc_per_node`` (one GPU per process). pool: :func:`gpu_pool`.

    Returns:
        ``wanted`` GPU ids; ``[]`` when ``pool`` is empty.

    Raises:
        ConfigError: the slot's group has fewer than ``wanted`` GPUs (the message says how to fit).
    """
    group = slot_group(slot, slots, pool)
    if not group:
        return []
    if wanted > len(group):
        raise ConfigError(f"launch.nproc_per_node: {wanted} processes need {wanted} GPUs, but each of the "
                          f"{slots} run slots (MASKLAB_MAX_RUNS) has {len(group)} of the {len(pool)} GPUs "
                          f"({GPUS_ENV} / CUDA_VISIBLE_DEVICES); lower launch.nproc_per_node or MASKLAB_MAX_RUNS")
    return group[:wanted]


def run_gpus(slot: int, slots: int, train: dict, launch: dict, env: dict[str, str] | None = None) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` ids of a run holding ``slot``: :func:`slot_devices` for a run
    whose ``train.device`` is ``auto`` or ``cuda``; ``[]`` for a CPU run or without GPUs.
    ``train``, ``launch``: the run's config sections (plain dicts, as the queued worker reads them).

    Raises:
        ConfigError: from :func:`slot_devices`.
    """
    if train.get("device", "auto") == "cpu":
        return []
    return slot_devices(slot, slots, int(launch.get("nproc_per_node", 1)), gpu_pool(env))
