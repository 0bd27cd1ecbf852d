"""Memory figures, as masklab defines them everywhere: the **peak private memory** of the process.

On Linux that is the high-water mark of ``RssAnon`` (anonymous resident pages: heap, tensors,
not the shared libraries or mapped files that ``VmHWM`` also counts), sampled by
:class:`PeakMemory` (the kernel keeps no high-water mark of ``RssAnon`` itself); on a CUDA device
it is ``torch.cuda.max_memory_allocated``. Bytes.
"""

from __future__ import annotations


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
            import torch

            now = int(torch.cuda.max_memory_allocated())
        else:
            now = private_memory_bytes()
        if now is not None:
            self.peak = now if self.peak is None else max(self.peak, now)
        return self.peak
