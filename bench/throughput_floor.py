"""How fast could a training step be with PyTorch's own kernels? The floor under a step's time.

For each case of ``bench/train_throughput.py`` the script records every ATen operation of one
training step of each side (forward, backward and AdamW, through ``TorchDispatchMode``), then runs
again, alone and on fresh random inputs of the same shapes, strides, dtypes and device, the operations no
implementation of the same model can leave out:

- ``matmul``: ``mm``, ``addmm``, ``bmm``, ``baddbmm`` (the model's FLOPs);
- ``attention``: the fused SDPA kernels forward and backward (or the math path's softmax);
- ``gelu``, ``layer_norm``: forward and backward;
- ``adamw``: the optimiser update (``_fused_adamw_`` over every parameter).

Each category runs on its own, its calls in the step's order on inputs made once and reused by
every repeat: no other work evicts them, so the time is optimistic, hence a *low* floor. Everything else (copies, fills, concatenations, residual sums, bias-gradient sums,
gathers, the loss, autograd's own work) is what an implementation can hope to remove, and is
left out of the floor. The printed ``best ratio`` = the reference's measured step time / masklab's
floor is then the most masklab could lead by at equal work if all of that cost nothing: when it is
under a target, the target cannot be met with PyTorch's kernels in that mode, whatever is removed.
``warm floor`` is the same floor with each matmul timed alone, several times in a row on the same
inputs (every operand already in the cache, which no real step has): the most favourable bound.

    pip install -r requirements-bench.txt
    python bench/throughput_floor.py [--threads 2] [--only mae_tiny,mae_small,audio_mae] [--repeats 5]

Exit status 0, or 2 if transformers is missing (see ``train_throughput.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import train_throughput as tt  # noqa: E402

from engine.training.loop import param_groups  # noqa: E402
from engine.training.perf import adamw  # noqa: E402

aten = torch.ops.aten
#: The operations every implementation of the same model runs, by category (overload packets).
FLOOR_OPS: dict[str, tuple] = {
    "matmul": (aten.mm, aten.addmm, aten.bmm, aten.baddbmm),
    "attention": (aten._scaled_dot_product_flash_attention_for_cpu,
                  aten._scaled_dot_product_flash_attention_for_cpu_backward,
                  aten._softmax, aten._softmax_backward_data,
                  # CUDA's fused kernels (bench/gpu_speed.py records a step on the GPU)
                  aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_flash_attention_backward,
                  aten._scaled_dot_product_efficient_attention,
                  aten._scaled_dot_product_efficient_attention_backward,
                  aten._scaled_dot_product_cudnn_attention, aten._scaled_dot_product_cudnn_attention_backward),
    "gelu": (aten.gelu, aten.gelu_backward),
    "layer_norm": (aten.native_layer_norm, aten.native_layer_norm_backward),
    "adamw": (aten._fused_adamw_,),
}
CATEGORY = {packet: cat for cat, packets in FLOOR_OPS.items() for packet in packets}


class Spec:
    """A tensor argument as its shape, strides, dtype and device (no data)."""

    def __init__(self, t: torch.Tensor):
        self.shape, self.stride, self.dtype, self.device = tuple(t.shape), tuple(t.stride()), t.dtype, t.device

    @property
    def nbytes(self) -> int:
        """Bytes of the storage :meth:`make` allocates (broadcast dimensions counted once)."""
        n = 1 + sum((s - 1) * st for s, st in zip(self.shape, self.stride)) if all(self.shape) else 0
        return n * self.dtype.itemsize

    def make(self) -> torch.Tensor:
        """A fresh tensor of this layout on its device: floats uniform in [0.1, 1) (positive, so
        variances, step counts and second moments stay valid), ints zero, bools False."""
        # Filled through its storage: a broadcast operand (stride 0, e.g. an attention bias) shares elements.
        t = torch.empty(self.nbytes // self.dtype.itemsize, dtype=self.dtype, device=self.device)
        t = t.uniform_(0.1, 1.0) if t.is_floating_point() else t.zero_()
        return t.as_strided(self.shape, self.stride)


class Recorder(TorchDispatchMode):
    """Records ``(category, op, args, kwargs)`` of every floor operation that runs under it."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, object, tuple, dict]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        cat = CATEGORY.get(func.overloadpacket)
        if cat is not None:
            self.calls.append((cat, func, describe(args), describe(kwargs)))
        return func(*args, **kwargs)


def describe(tree):
    """``tree`` (an operation's arguments) with every tensor replaced by its :class:`Spec`."""
    return tree_map(lambda x: Spec(x) if isinstance(x, torch.Tensor) else x, tree)


def materialise(tree):
    """``tree`` (recorded arguments) with every :class:`Spec` replaced by a fresh tensor of its layout."""
    return tree_map(lambda x: x.make() if isinstance(x, Spec) else x, tree)


def record_step(side: tt.Side) -> list[tuple[str, object, tuple, dict]]:
    """The floor operations of one training step of ``side`` (its optimiser already built)."""
    with Recorder() as rec:
        side.step(0)
    return rec.calls


def replay_seconds(calls, repeats: int, max_bytes: int | None = None) -> dict[str, float]:
    """Per category, the median over ``repeats`` of the seconds its calls take, run one after the
    other in the step's order on inputs made once and reused by every repeat. With ``max_bytes``
    (a GPU step's inputs can outgrow its memory) the calls run in consecutive groups whose inputs
    stay under it, one group's inputs at a time, and the groups' medians are summed."""
    out = {}
    by_cat = defaultdict(list)
    for cat, func, args, kwargs in calls:
        by_cat[cat].append((func, args, kwargs))
    for cat, specs in by_cat.items():
        out[cat] = sum(_replay_group(group, repeats) for group in _groups(specs, max_bytes))
    return out


def _groups(specs: list, max_bytes: int | None):
    """``specs`` cut into consecutive runs whose input bytes stay under ``max_bytes`` (one run if None)."""
    group, size = [], 0
    for item in specs:
        n = sum(x.nbytes for x in tree_flatten(item[1:])[0] if isinstance(x, Spec))
        if group and max_bytes is not None and size + n > max_bytes:
            yield group
            group, size = [], 0
        group.append(item)
        size += n
    if group:
        yield group


def _replay_group(specs: list, repeats: int) -> float:
    """Median seconds of the calls ``specs`` in order, on inputs made once (after a warm-up pass)."""
    items = [(func, materialise(args), materialise(kwargs)) for func, args, kwargs in specs]
    for func, a, k in items:  # warm-up (kernel choice, first-touch of the outputs)
        func(*a, **k)
    times = []
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        for func, a, k in items:
            func(*a, **k)
        _sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _sync() -> None:
    """Wait for the GPU's queued work (replayed calls run there when the step was recorded there)."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def warm_matmul_seconds(calls, repeats: int) -> float:
    """The matmuls again, each timed alone ``repeats`` times in a row on the same inputs (the median
    of each, summed): every operand already in the cache, the most favourable case there is."""
    total = 0.0
    for cat, func, args, kwargs in calls:
        if cat != "matmul":
            continue
        a, k = materialise(args), materialise(kwargs)
        func(*a, **k)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            func(*a, **k)
            times.append(time.perf_counter() - t0)
        total += statistics.median(times)
    return total


def step_seconds(side: tt.Side, repeats: int, device: torch.device, steps: int = 3) -> float:
    """Median seconds of one real training step of ``side`` (``train_throughput.time_steps``)."""
    tt.time_steps(side, 2, 0, device)  # warm-up
    return statistics.median(tt.time_steps(side, steps, r, device) / steps for r in range(repeats))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="mae_tiny,mae_small,audio_mae")
    ap.add_argument("--target", type=float, default=1.3, help="the ratio to test the floor against")
    ap.add_argument("--scale", type=float, default=1.0, help="divide every batch size by this (smoke tests)")
    args = ap.parse_args(argv)
    tt.need_hf()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device("cpu")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {args.threads} threads, {args.repeats} repeats, load average {load:.2f}")
    cats = list(FLOOR_OPS)
    print(f"{'case':<11} {'side':<24} {'step ms':>8} " + " ".join(f"{c:>10}" for c in cats)
          + f" {'floor ms':>9} {'rest ms':>8} {'warm floor':>9}")
    for case in tt.build_cases([n for n in args.only.split(",") if n], args.scale, device):
        rows = {}
        for s in case.sides:
            s.opt = adamw(param_groups(s.model, tt.WEIGHT_DECAY), lr=tt.LR, betas=tt.BETAS, impl="fused")
            s.model.train()
            calls = record_step(s)
            parts = replay_seconds(calls, args.repeats)
            step = step_seconds(s, args.repeats, device)
            floor = sum(parts.values())
            warm = floor - parts["matmul"] + warm_matmul_seconds(calls, args.repeats)
            rows[s.name] = (step, floor, warm)
            print(f"{case.name if s is case.sides[0] else '':<11} {s.name:<24} {step * 1e3:>8.1f} "
                  + " ".join(f"{parts.get(c, 0.0) * 1e3:>10.1f}" for c in cats)
                  + f" {floor * 1e3:>9.1f} {(step - floor) * 1e3:>8.1f} {warm * 1e3:>9.1f}", flush=True)
        if len(case.sides) == 2:
            (ml_step, ml_floor, ml_warm), (ref_step, _, _) = rows[case.sides[0].name], rows[case.sides[1].name]
            best, best_warm = ref_step / ml_floor, ref_step / ml_warm
            print(f"{'':<11} measured ratio {ref_step / ml_step:.2f}x; best ratio if everything outside the floor "
                  f"cost nothing: {best:.2f}x ({'above' if best >= args.target else 'BELOW'} the {args.target}x "
                  f"target); with every matmul warm: {best_warm:.2f}x "
                  f"({'above' if best_warm >= args.target else 'BELOW'})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
