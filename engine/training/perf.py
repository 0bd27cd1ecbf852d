"""Speed plumbing of a training step: the optimiser choice, host-to-device copies, model FLOPs and MFU.

Pure helpers; the training loop (:mod:`engine.training.loop`) and ``bench/train_throughput.py`` call them.

- :func:`adamw` builds AdamW with the fastest implementation the parameters allow: ``fused``
  (one kernel for all parameters; CPU and CUDA since torch 2.4), else ``foreach``, else the
  per-tensor loop. The arithmetic is AdamW's in each (the results agree to float rounding).
- :func:`to_device` copies a host batch to the device: on CUDA from pinned memory with
  ``non_blocking=True`` (the copy overlaps the previous step's kernels); elsewhere unchanged.
- :func:`count_step_flops` counts the matmul FLOPs of one training step (forward + backward)
  with ``torch.utils.flop_counter``, attention included (it runs under the math SDPA kernel,
  whose matmuls the counter sees).
- :func:`mfu` = model FLOPs per second / the device's peak (:func:`peak_flops`).

References: Chowdhery et al. 2022, "PaLM" (appendix B: model FLOPs utilisation, 6N FLOPs per token
plus attention); Kaplan et al. 2020 (6N training FLOPs per token); PyTorch's ``torch.optim.AdamW``
(``fused`` / ``foreach`` implementations).
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["GPU_PEAK_FLOPS", "adamw", "count_rows_flops", "count_step_flops", "mfu", "mfu_basis", "peak_flops", "pin", "to_device"]

#: Dense peak FLOP/s from the datasheets, per (device-name fragment, dtype); the first fragment found
#: in ``torch.cuda.get_device_name()`` wins (H100/H200 SXM: 989 TFLOP/s bf16, 67 TFLOP/s fp32 non-tensor).
GPU_PEAK_FLOPS: dict[str, dict[torch.dtype, float]] = {
    "H200": {torch.bfloat16: 989e12, torch.float32: 67e12},
    "H100": {torch.bfloat16: 989e12, torch.float32: 67e12},
    "A100": {torch.bfloat16: 312e12, torch.float32: 19.5e12},
    "L4": {torch.bfloat16: 121e12, torch.float32: 30.3e12},
}


def adamw(params: Iterable | list[dict], lr: float, betas: tuple[float, float] = (0.9, 0.95),
          impl: str = "auto", **kw) -> torch.optim.AdamW:
    """``torch.optim.AdamW(params, lr, betas, **kw)`` with the implementation ``impl``.

    Args:
        params: parameters or parameter groups (e.g. :func:`engine.training.loop.param_groups`).
        impl: ``"fused"``, ``"foreach"``, ``"loop"`` (PyTorch's per-tensor for-loop), or ``"auto"``:
            fused when every parameter is a float tensor on CPU or CUDA, else foreach.

    Raises:
        ValueError: an unknown ``impl``.
    """
    groups = list(params)
    if impl not in ("auto", "fused", "foreach", "loop"):
        raise ValueError(f"adamw: impl must be auto, fused, foreach or loop (got {impl!r})")
    if impl == "auto":
        tensors = [p for g in groups for p in (g["params"] if isinstance(g, dict) else [g])]
        ok = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in tensors)
        impl = "fused" if ok else "foreach"
    flags = {"fused": {"fused": True}, "foreach": {"foreach": True}, "loop": {"foreach": False}}[impl]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, **flags, **kw)


def pin(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` in pinned (page-locked) host memory when ``device`` is CUDA (so :func:`to_device` copies
    asynchronously); ``t`` itself otherwise. Pin a dataset's tensors once, not every batch."""
    if device.type == "cuda" and t.device.type == "cpu" and not t.is_pinned():
        return t.pin_memory()
    return t


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``; a copy from host to CUDA is ``non_blocking`` (asynchronous from pinned memory)."""
    return t.to(device, non_blocking=device.type == "cuda" and t.device.type == "cpu")


def count_step_flops(step: Callable[[], torch.Tensor]) -> int:
    """Matmul FLOPs of one training step: runs ``step()`` (forward, returning the loss) and its
    ``backward()`` under ``torch.utils.flop_counter.FlopCounterMode``.

    Counted: every ``mm`` / ``addmm`` / ``bmm`` / convolution, forward and backward (a multiply-add is
    2 FLOPs). The attention runs under the math SDPA kernel for the count, so its two matmuls are
    counted too (the fused CPU kernel is invisible to the counter). Element-wise work (norms,
    activations, softmax) is left out, as in MFU's definition. The step's gradients are left in
    the parameters' ``.grad``: zero them before the next real step.
    """
    counter = FlopCounterMode(display=False)
    with counter, sdpa_kernel(SDPBackend.MATH):
        step().backward()
    return int(counter.get_total_flops())


def count_rows_flops(step_for: Callable[[int], Callable[[], torch.Tensor]], n: int,
                     on_oom: Callable[[], None] = lambda: None) -> tuple[int, int]:
    """Matmul FLOPs of a step over ``n`` rows (:func:`count_step_flops` of ``step_for(n)``); when that
    runs out of device memory (the count's math attention holds every ``[L, L]`` score matrix), counted
    on ``n // 2``, ``n // 4``... rows and scaled by ``n / rows`` (exact when every row costs the same,
    as with a fixed mask ratio). ``on_oom()`` frees memory between tries.

    Returns:
        ``(flops, rows)``: the step's FLOPs and the rows they were counted on.
    Raises:
        torch.OutOfMemoryError: even one row does not fit.
    """
    rows = n
    while True:
        try:
            return round(count_step_flops(step_for(rows)) * n / rows), rows
        except torch.OutOfMemoryError:
            if rows <= 1:
                raise
        on_oom()  # outside the handler: the failed step's tensors, held by its traceback, are released
        rows //= 2


def peak_flops(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> float | None:
    """The datasheet's dense peak FLOP/s of ``device`` for ``dtype`` (:data:`GPU_PEAK_FLOPS`), or
    None when unknown (a CPU, or a GPU not in the table)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, peaks in GPU_PEAK_FLOPS.items():
        if key in name:
            return peaks.get(dtype)
    return None


def mfu_basis(device: torch.device, amp: bool) -> dict:
    """What a run's ``mfu`` is measured against, for its ``task.json``: on CUDA ``gpu_name`` and,
    for a GPU of :data:`GPU_PEAK_FLOPS`, ``mfu_dtype`` (``bf16`` with ``amp``, else ``fp32``) and
    ``mfu_peak_flops`` (FLOP/s of one device, :func:`peak_flops`); ``{}`` on a CPU."""
    if device.type != "cuda":
        return {}
    dtype = torch.bfloat16 if amp else torch.float32
    peak = peak_flops(device, dtype)
    return {"gpu_name": torch.cuda.get_device_name(device),
            **({"mfu_dtype": "bf16" if amp else "fp32", "mfu_peak_flops": peak} if peak else {})}


def mfu(flops_per_step: float, step_time_s: float, peak: float) -> float:
    """Model FLOPs utilisation: ``flops_per_step / step_time_s / peak`` (a fraction, 0..1)."""
    return flops_per_step / max(step_time_s, 1e-12) / peak
