"""What a process uses and how it ends: its CPU threads, its **peak private memory** (as masklab
defines memory figures everywhere), its exit reason, and stderr writes that survive a full disk.

Memory:

On Linux that is the high-water mark of ``RssAnon`` (anonymous resident pages: heap, tensors,
not the shared libraries or mapped files that ``VmHWM`` also counts), sampled by
:class:`PeakMemory` (the kernel keeps no high-water mark of ``RssAnon`` itself); on a CUDA device
it is ``torch.cuda.max_memory_allocated``. Bytes.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback

from engine.runner.queue import max_runs


def private_memory_bytes() -> int | None:
    """The process's current ``RssAnon`` in bytes (``/proc/self/status``), or None off Linux."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"RssAnon:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        return None
    return None


class PeakMemory:
    """The high-water mark of :func:`private_memory_bytes` over :meth:`sample` calls (or CUDA's
    ``max_memory_allocated`` when ``device`` is CUDA). ``peak`` is None until something was read."""

    def __init__(self, device: str = "cpu"):
        self.device = str(device)
        self.peak: int | None = None

    def sample(self) -> int | None:
        """Read the current figure, keep the maximum; returns the peak so far (bytes)."""
        if self.device.startswith("cuda"):
            import torch  # noqa: PLC0415 (the restart supervisor and queued workers import this module without torch)

            now = int(torch.cuda.max_memory_allocated())
        else:
            now = private_memory_bytes()
        if now is not None:
            self.peak = now if self.peak is None else max(self.peak, now)
        return self.peak


def resolve_threads(train_cfg: dict, launch_cfg: dict | None = None) -> int:
    """Torch CPU threads of a run: ``train.num_threads`` if set; else, for a cluster job
    (``launch.backend`` ray or slurm), the ``launch.cpus`` it asked for; else ``cpu_count //
    MASKLAB_MAX_RUNS`` (the runs that may train at once share the cores instead of oversubscribing them)."""
    launch_cfg = launch_cfg or {}
    if not train_cfg.get("num_threads") and launch_cfg.get("backend", "local") != "local" and launch_cfg.get("cpus"):
        return int(launch_cfg["cpus"])
    return int(train_cfg.get("num_threads") or max(1, (os.cpu_count() or 1) // max_runs()))


def exit_reason(rc: int) -> str:
    """``-9`` -> ``"signal SIGKILL"``, ``1`` -> ``"exit code 1"`` (a ``Popen.returncode``)."""
    if rc >= 0:
        return f"exit code {rc}"
    try:
        return f"signal {signal.Signals(-rc).name}"
    except ValueError:
        return f"signal {-rc}"


def say(text: str) -> None:
    """Write to stderr (worker.log), ignoring a full disk."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


def print_exc() -> None:
    try:
        traceback.print_exc()
        sys.stderr.flush()
    except OSError:
        pass
