"""What this machine's GPUs hold, for New run's GPU panel: each GPU masklab may hand out
(:func:`engine.runner.devices.gpu_pool`), its name and memory as ``nvidia-smi`` reports them, the
run slots whose group has it (:func:`engine.runner.devices.slot_group`) and the running runs that
hold it (the ``gpus`` their worker recorded in ``status.json``).

Read without CUDA: ``nvidia-smi`` is a separate process, so the dashboard never starts a CUDA
context (which would hold GPU memory of its own). GPUs are matched by ``nvidia-smi``'s index, which
is how ``CUDA_VISIBLE_DEVICES`` numbers them on a machine of one GPU model. Nothing here imports torch.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.runner import devices

#: The one query: index, name, memory total and used (MiB), as CSV without header or units.
QUERY = ("--query-gpu=index,name,memory.total,memory.used", "--format=csv,noheader,nounits")
#: Seconds ``nvidia-smi`` gets to answer (a wedged driver can make it hang).
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as ``nvidia-smi`` lists it: ``index`` (its number), ``name``, memory total and used
    (MiB; None where it says ``[N/A]``)."""

    index: str
    name: str
    total_mib: int | None
    used_mib: int | None

    @property
    def free_mib(self) -> int | None:
        """Total minus used (MiB), None when either is unknown."""
        return None if self.total_mib is None or self.used_mib is None else self.total_mib - self.used_mib


@dataclass(frozen=True)
class GpuReading:
    """What one ``nvidia-smi`` call gave: the GPUs it listed, and ``problem``: why the list is empty
    or short, in words (``""`` when every line was read)."""

    gpus: tuple[GpuInfo, ...] = ()
    problem: str = ""


def nvidia_smi() -> str | None:
    """The path of ``nvidia-smi`` on ``$PATH``, None when it is not there."""
    return shutil.which("nvidia-smi")


def _mib(field: str) -> int | None:
    """``"81559"`` -> 81559; ``"[N/A]"`` -> None. Raises ValueError for anything else."""
    return None if field.strip("[] ").upper() == "N/A" else int(field)


def parse_gpus(text: str) -> GpuReading:
    """``nvidia-smi``'s CSV answer (:data:`QUERY`: ``index, name, total, used`` per line) as GPUs.

    A line that is not four fields with a whole-number index and memory (or ``[N/A]``) is left
    out and named in ``problem``; a name with commas in it is kept whole. Never raises.
    """
    gpus, bad = [], []
    for line in (raw.strip() for raw in text.splitlines()):
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        try:
            if len(fields) < 4:
                raise ValueError(line)
            index, name, total, used = fields[0], ", ".join(fields[1:-2]), _mib(fields[-2]), _mib(fields[-1])
            int(index)
        except ValueError:
            bad.append(line)
            continue
        gpus.append(GpuInfo(index, name, total, used))
    problem = (f"nvidia-smi: {len(bad)} line{'s' * (len(bad) > 1)} not understood, e.g. {bad[0][:80]!r}"
               if bad else "")
    return GpuReading(tuple(gpus), problem)


def read_gpus(binary: str | None, timeout_s: float = TIMEOUT_S) -> GpuReading:
    """Run ``binary`` (``nvidia-smi``'s path, :func:`nvidia_smi`) with :data:`QUERY` and parse its
    answer (:func:`parse_gpus`). Never raises: a missing binary, a failure or no answer within
    ``timeout_s`` seconds gives no GPU and a ``problem`` saying which."""
    if binary is None:
        return GpuReading(problem="nvidia-smi is not installed here (not on PATH)")
    try:
        out = subprocess.run([binary, *QUERY], capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return GpuReading(problem=f"nvidia-smi did not answer within {timeout_s:g} s")
    except OSError as e:
        return GpuReading(problem=f"nvidia-smi could not be started: {e.strerror or e}")
    if out.returncode != 0:
        said = next((s.strip() for s in (out.stderr + "\n" + out.stdout).splitlines() if s.strip()), "")
        return GpuReading(problem=f"nvidia-smi failed (exit code {out.returncode})" + (f": {said[:160]}" if said else ""))
    reading = parse_gpus(out.stdout)
    if not reading.gpus and not reading.problem:
        return GpuReading(problem="nvidia-smi lists no GPU")
    return reading


@dataclass(frozen=True)
class GpuRow:
    """One GPU masklab may hand out: its ``CUDA_VISIBLE_DEVICES`` id, what ``nvidia-smi`` says of it
    (None when it is not in its list), the slots whose group has it, and the running runs
    (records) that hold it."""

    gpu: str
    info: GpuInfo | None
    slots: tuple[int, ...]
    runs: tuple[Any, ...]


@dataclass(frozen=True)
class GpuOverview:
    """New run's GPU panel: one row per GPU of the pool (none on a machine without GPUs),
    ``slots`` (``$MASKLAB_MAX_RUNS``), the GPUs ``nvidia-smi`` lists that no slot hands out
    (``unused``: the pool leaves them out), and ``nvidia-smi``'s ``problem`` ("" when it answered)."""

    rows: tuple[GpuRow, ...]
    slots: int
    unused: tuple[GpuInfo, ...]
    problem: str


def held_gpus(rec: Any) -> list[str]:
    """The GPU ids a run's worker was given (``gpus`` in its status); for a local run recorded before
    that field, its placement's ``devices`` (``"0,1"`` split). ``[]`` for a CPU or cluster run."""
    extra = getattr(rec, "extra", None) or {}
    if "gpus" in extra:
        return [str(g) for g in extra["gpus"] or []]
    placed = extra.get("placement") or {}
    if placed.get("backend", "local") != "local":
        return []
    return [g.strip() for d in placed.get("devices") or [] for g in str(d).split(",") if g.strip()]


def gpu_overview(records: Sequence[Any], reading: GpuReading, *, slots: int,
                 env: Mapping[str, str] | None = None) -> GpuOverview:
    """Which GPU each slot hands out and which running run holds it.

    Args:
        records: run records (:func:`engine.store.list_runs`); those whose status is ``running`` count.
        reading: what ``nvidia-smi`` said (:func:`read_gpus`).
        slots: ``$MASKLAB_MAX_RUNS`` (:func:`engine.runner.queue.max_runs`).
        env: the environment the pool is read from (default ``os.environ``: ``$MASKLAB_GPUS``...).
    """
    pool = devices.gpu_pool(None if env is None else dict(env), devices.NVIDIA_GPUS)
    by_index = {g.index: g for g in reading.gpus}
    groups = {k: devices.slot_group(k, slots, pool) for k in range(slots)}
    running = [r for r in records if getattr(r, "status", "") == "running"]
    rows = tuple(GpuRow(g, by_index.get(g), tuple(k for k, grp in groups.items() if g in grp),
                        tuple(r for r in running if g in held_gpus(r))) for g in pool)
    unused = tuple(g for g in reading.gpus if g.index not in pool) if pool else reading.gpus
    return GpuOverview(rows, slots, unused, reading.problem)
