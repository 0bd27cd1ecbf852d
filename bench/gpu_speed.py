"""Speed on the GPU against Hugging Face (issue 39, points 3 and 4): the second device run, at most
6 minutes with its imports and compilation.

    python bench/gpu_speed.py                                     # a GPU: the issue's sizes
    nice -n 10 .venv/bin/python bench/gpu_speed.py --out /tmp/gs  # no GPU: tiny sizes, float32, "on the CPU"

On the device (the wheels it lacks travel in ``.whl/``, made by ``bash bench/gpu_wheels.sh``; ``carry: [".whl"]``):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && PYTHONUNBUFFERED=1 python3 bench/gpu_speed.py --out $OUT

Cases (``train_throughput.mae_case`` / ``bert_case``: from configs, SDPA, dropout 0, the same
synthetic inputs both sides, HF's ``noise`` set to keep masklab's visible patches): ``mae_vitb``, MAE
ViT-B/16 at 224x224x3, encoder 768 x 12 (12 heads, MLP 3072), decoder 512 x 8 (16 heads, MLP 2048),
mask ratio 0.75 (He et al. 2022), against ``ViTMAEForPreTraining``; ``bert_base``, BERT-base MLM,
vocabulary 30,522, 768 x 12, sequence 128, 15% masked, 80/10/10 (Devlin et al. 2019), against
``BertForMaskedLM``. Hugging Face as its Trainer runs with ``bf16=True``: eager, SDPA, bf16
autocast, fused AdamW. masklab: the same plus ``torch.compile`` of each Transformer block
(``--compile-scope blocks``: one compilation per shape, the step's host reads of counts and its
boolean gathers stay eager) or of the model (``model``, as ``train.compile``); a failed compile
falls back to eager, said and recorded. No CUDA graphs by default: the step reads counts on the host.

Per case: the batch (the largest of a list at which an eager step of each side peaks under
``--mem-frac`` of the GPU's memory), the FLOPs of one masklab step (``count_step_flops``: the count
for both sides), the floor (the larger of FLOPs / the measured bf16 matmul rate and
``throughput_floor``'s replay of one recorded step's matmuls and attention kernels alone), the
compilation (timed apart), ``--repeats`` x ``--steps`` steps a side taking turns, and for
``mae_vitb`` the data feeding of an image run (point 4, :func:`data_feeding`). MFU = FLOPs / step
time / 790 TFLOP/s (the issue's measured bf16 rate; on the CPU the measured float32 rate). Targets:
ratio >= 1.5x (both), MFU >= 45% and data < 5% (MAE). ``--out`` (default bench/results/) gets
``gpu_speed.log`` and ``gpu_speed.json`` as it goes; the table comes last. ``--budget-s`` bounds the
run from ``main`` on (imports of torch and the engine come first), shared out between the cases.
Imports: torch, numpy, transformers and the engine (``engine.training.loop`` and
``engine.tasks.image`` bring pydantic, pandas, pyarrow, duckdb and soundfile).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import throughput_floor as tf  # noqa: E402
import train_throughput as tt  # noqa: E402

from engine.config import MaskingConfig  # noqa: E402
from engine.data.dataset import DatasetInfo, ImageDataset  # noqa: E402
from engine.models.layers import Block  # noqa: E402
from engine.objectives import masked_mse  # noqa: E402
from engine.tasks.image.recipe import ImageMIMTask  # noqa: E402
from engine.training.feed import ImageFeed  # noqa: E402
from engine.training.loop import param_groups  # noqa: E402
from engine.training.perf import adamw, count_step_flops  # noqa: E402
from engine.training.state import epoch_order  # noqa: E402

PEAK_BF16 = 790e12  # FLOP/s: the issue's measured bf16 matmul rate of the H200 / H100
TARGET_RATIO, TARGET_MFU, TARGET_DATA = 1.5, 0.45, 0.05
NA = "not applicable on the CPU"
#: (image side, patch, encoder, decoder) and (sequence, vocabulary, encoder); widths as (D, depth, heads, MLP).
SIZES = {"mae_vitb": {"full": (224, 16, (768, 12, 12, 3072), (512, 8, 16, 2048)),
                      "tiny": (32, 8, (64, 2, 2, 256), (32, 1, 2, 128))},
         "bert_base": {"full": (128, 30522, (768, 12, 12, 3072)), "tiny": (32, 1000, (64, 2, 2, 256))}}
BATCHES = {"full": {"mae_vitb": (1024, 768, 512, 384, 256, 192, 128, 64), "bert_base": (1024, 512, 256, 128)},
           "tiny": {"mae_vitb": (16, 8), "bert_base": (16, 8)}}
COMPILE_MIN_S = 100  # on a GPU, compile only with this much of the case's budget left


@dataclass
class Env:
    """Device, precision and the current case's deadline (``time.perf_counter`` seconds)."""

    dev: torch.device
    bf16: bool
    deadline: float

    def amp(self) -> torch.autocast:
        return torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=self.bf16)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def sync(self) -> None:
        tt.sync(self.dev)

    def free(self) -> None:
        gc.collect()
        if self.dev.type == "cuda":
            torch.cuda.empty_cache()


class Out:
    """Prints and logs lines (``gpu_speed.log``) and keeps the JSON (``gpu_speed.json``), rewritten by :meth:`save`."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.log, self.json, self.res = (folder / "gpu_speed.log").open("w"), folder / "gpu_speed.json", {}

    def say(self, msg: str = "") -> None:
        print(msg, flush=True)
        self.log.write(msg + "\n")
        self.log.flush()

    def save(self) -> None:
        self.json.write_text(json.dumps(self.res, indent=1, default=str))


def build_case(name: str, B: int, size: str, dev: torch.device) -> tt.Case:
    """Both sides of case ``name`` at batch ``B`` (``size``: ``full`` or ``tiny``) on ``dev``."""
    g = torch.Generator().manual_seed(0)
    if name == "mae_vitb":
        HW, P, enc, dec = SIZES[name][size]
        return tt.mae_case(name, B, 3, HW, P, enc, dec, 0.75, g, dev)
    L, V, (D, depth, heads, mlp) = SIZES[name][size]
    case = tt.bert_case(B, L, V, D, depth, heads, mlp, 0.15, g, dev)
    case.name = name
    return case


def step(side: tt.Side, i: int, env: Env) -> torch.Tensor:
    """One training step on batch ``i``: forward and loss under autocast, backward, AdamW (no host sync)."""
    with env.amp():
        loss = side.loss(i)
    side.opt.zero_grad(set_to_none=True)
    loss.backward()
    side.opt.step()
    return loss.detach()


def timed(side: tt.Side, steps: int, start: int, env: Env) -> float:
    """Seconds of ``steps`` steps, synchronised before and after."""
    env.sync()
    t0 = time.perf_counter()
    for k in range(steps):
        step(side, (start + k) % tt.N_BATCHES, env)
    env.sync()
    return time.perf_counter() - t0


def peak_mb(side: tt.Side, env: Env) -> float | None:
    """CUDA's peak allocated MB over one step (everything resident counted); None on the CPU."""
    cuda = env.dev.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(env.dev)
    step(side, 0, env)
    env.sync()
    return torch.cuda.max_memory_allocated(env.dev) / 2**20 if cuda else None


def try_batch(case: tt.Case, env: Env, mem_frac: float, fused: bool) -> list[float | None]:
    """Builds each side's AdamW and runs one step of each: their peak MB. Raises
    ``torch.OutOfMemoryError`` when a step runs out of memory or peaks above ``mem_frac`` of the GPU."""
    peaks = []
    for s in case.sides:
        s.opt = adamw(param_groups(s.model, tt.WEIGHT_DECAY), lr=tt.LR, betas=tt.BETAS, impl="fused" if fused else "foreach")
        s.model.train()
        peaks.append(peak_mb(s, env))
        if peaks[-1] is not None and peaks[-1] > mem_frac * torch.cuda.get_device_properties(env.dev).total_memory / 2**20:
            raise torch.OutOfMemoryError(f"{s.name} peaked at {peaks[-1]:.0f} MB, over {mem_frac:.0%} of the GPU")
    return peaks


def out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` is CUDA running out of memory (cuBLAS says it its own way)."""
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e) or "ALLOC_FAILED" in str(e)


def search_batch(name: str, batches, size: str, env: Env, args, out: Out) -> tuple[tt.Case, list[dict]]:
    """The case at the largest batch of ``batches`` that fits (:func:`try_batch`), and every try.
    Raises RuntimeError when none fits."""
    tries = []
    for B in batches:
        case, err = None, None
        try:
            case = build_case(name, B, size, env.dev)
            peaks = try_batch(case, env, args.mem_frac, args.fused)
        except RuntimeError as e:
            if not out_of_memory(e):
                raise
            err = str(e).splitlines()[0][:200]
        if err is None:
            tries.append({"batch": B, "fits": True, "peak_mb": peaks})
            out.say(f"  batch {B}: fits" + (f" (peak MB masklab {peaks[0]:.0f}, HF {peaks[1]:.0f})" if peaks[0] else ""))
            return case, tries
        tries.append({"batch": B, "fits": False, "error": err})
        out.say(f"  batch {B}: does not fit ({err})")
        case = None
        env.free()
    raise RuntimeError(f"{name}: no batch of {list(batches)} fits")


def count_flops(case: tt.Case, name: str, smallest: int, size: str, env: Env, fallbacks: list) -> int:
    """FLOPs of one masklab step at the case's batch (count_step_flops: the math attention kernel);
    out of memory there, counted at batch ``smallest`` and scaled (a step's work is linear in the batch)."""
    ml = case.sides[0]
    try:
        with env.amp():
            return count_step_flops(lambda: ml.loss(0))
    except RuntimeError as e:
        if not out_of_memory(e):
            raise
    finally:
        ml.opt.zero_grad(set_to_none=True)
    env.free()
    small = build_case(name, smallest, size, env.dev).sides[0]
    with env.amp():
        flops = count_step_flops(lambda: small.loss(0)) * case.batch // smallest
    fallbacks.append(f"FLOPs counted at batch {smallest} and scaled to {case.batch} (out of memory at full batch)")
    return flops


def floor(case: tt.Case, env: Env, flops: int, rate: float, peak: float, record: bool, fallbacks: list) -> dict:
    """The floor under masklab's step: the larger of FLOPs / the measured matmul rate and the matmul +
    attention kernels of one recorded eager step replayed alone (``throughput_floor``; off or failed: the former)."""
    res = {"rate_floor_s": flops / rate}
    if record:
        try:
            with env.amp():
                calls = tf.record_step(case.sides[0])
            env.free()  # replayed in groups of inputs that fit in 40% of the free memory (all of a step's do not)
            cap = int(0.4 * torch.cuda.mem_get_info(env.dev)[0]) if env.dev.type == "cuda" else None
            parts = tf.replay_seconds(calls, repeats=3, max_bytes=cap)
            res.update(parts_s=parts, recorded_floor_s=parts.get("matmul", 0.0) + parts.get("attention", 0.0))
        except Exception as e:  # out of memory, an operation the replay cannot rebuild: the simpler floor
            res["recorded_error"] = f"{type(e).__name__}: {e}"[:300]
            fallbacks.append(f"floor from FLOPs / matmul rate ({res['recorded_error']})")
        env.free()
    # Both are lower bounds: the larger one is the floor (a replay faster than the matmul rate is noise).
    rec = res.get("recorded_floor_s", 0.0)
    res["kind"] = "recorded matmul + attention" if rec > res["rate_floor_s"] else "FLOPs / measured matmul rate"
    res["floor_s"] = max(rec, res["rate_floor_s"])
    res["best_mfu"] = flops / res["floor_s"] / peak
    return res


def compile_masklab(ml: tt.Side, args, env: Env, fallbacks: list, out: Out) -> dict:
    """``nn.Module.compile`` (in place, as ``train.compile``; static shapes) of masklab's model or of
    each :class:`~engine.models.layers.Block`, and its first step (the compilation) timed. A compiler
    error leaves the model eager, said and recorded; so does a budget too short for it."""
    comp = {"scope": args.compile_scope, "mode": args.compile_mode, "status": "off"}
    if not args.compile:
        return comp
    if env.left() < (COMPILE_MIN_S if env.dev.type == "cuda" else 0):
        comp["status"] = f"skipped: {env.left():.0f} s of the budget left"
        fallbacks.append("compile skipped (budget)")
    else:
        mods = [ml.model] if args.compile_scope == "model" else [m for m in ml.model.modules() if isinstance(m, Block)]
        for m in mods:
            m.compile(mode=None if args.compile_mode == "default" else args.compile_mode, dynamic=False)
        try:
            comp["first_step_s"] = timed(ml, 1, 0, env)
            comp.update(status="on", graph_breaks=graph_breaks())
        except Exception as e:  # a compiler error must not lose the run: eager instead
            for m in mods:
                m._compiled_call_impl = None  # the slot nn.Module.compile fills
            torch.compiler.reset()
            comp["status"] = f"failed, eager instead: {type(e).__name__}: {str(e)[:300]}"
            fallbacks.append(f"compile failed ({type(e).__name__}), masklab ran eager")
        env.free()
    out.say(f"  compile ({args.compile_scope}, {args.compile_mode}): {comp['status']}"
            + (f", first step {comp['first_step_s']:.1f} s, graph breaks {comp['graph_breaks'].get('count')}"
               if comp["status"] == "on" else ""))
    return comp


def time_sides(case: tt.Case, env: Env, args, fallbacks: list) -> tuple[dict[str, list[float]], list[float]]:
    """Warm-up and peak memory (``side.mem``) per side, then ``args.repeats`` repeats of
    ``args.steps`` steps a side, the sides taking turns: samples/s per side and masklab / HF ratios
    per repeat. Stops early (after one repeat at least) when the case's budget runs out."""
    for s in case.sides:
        timed(s, args.warmup, 0, env)
        s.mem = peak_mb(s, env)
    rates, ratios, last = {s.name: [] for s in case.sides}, [], 0.0
    for r in range(args.repeats):
        if r and env.left() < 1.5 * last:
            fallbacks.append(f"{r} of {args.repeats} repeats (budget)")
            break
        t0, got = time.perf_counter(), {}
        for s in case.sides if r % 2 == 0 else case.sides[::-1]:
            got[s.name] = case.batch * args.steps / timed(s, args.steps, r, env)
            rates[s.name].append(got[s.name])
        ratios.append(got[case.sides[0].name] / got[case.sides[1].name])
        last = time.perf_counter() - t0
    return rates, ratios


def graph_breaks() -> dict:
    """Dynamo's graph breaks since the last call: count and commonest reasons ({} if unreadable)."""
    try:
        c = torch._dynamo.utils.counters["graph_break"]
        got = {"count": sum(c.values()), "reasons": [r[:160] for r, _ in c.most_common(3)]}
        c.clear()  # the next case counts its own
        return got
    except Exception:  # private counters: a diagnostic only
        return {}


def data_feeding(case: tt.Case, env: Env, size: str, n: int, out: Out) -> dict:
    """Point 4 at the case's batch, medians over ``n`` batches: the data path of an image run
    (:meth:`ImageMIMTask.train_batch` + ``_draw``, the real methods on an in-memory uint8
    ``ImageDataset`` in the loop's order) alone, synchronised (``data_s``); a step of ``fit``'s shape
    (its per-step loss read) on a pre-placed batch (``step_s``) and fed by that path (``fed_step_s``:
    the difference is the exposed data time); and, for comparison, the path before
    :class:`engine.training.feed.ImageFeed` (float32 made on the host, unpinned copy: ``data_host_s``).
    ``share = data_s / step_s`` (target < 5%)."""
    HW, P = SIZES["mae_vitb"][size][:2]
    B = case.batch
    N = 3 * B
    images = np.random.default_rng(0).integers(0, 256, (N, HW, HW, 3), dtype=np.uint8)
    info = DatasetInfo(name="speed", modality="image", source="synthetic", image_shape=(3, HW, HW), class_names=("x",),
                       n_train=N, n_val=0, created_at="", description="")
    ds = ImageDataset(info=info, images=images, labels=np.zeros(N, np.int64), split=np.zeros(N, np.uint8))
    cfg = SimpleNamespace(masking=MaskingConfig(strategy="random", ratio=0.75), model=SimpleNamespace(patch_size=P))
    task = SimpleNamespace(_ds=ds, train_rows=ds.indices("train"), device=env.dev, cfg=cfg, grid=(HW // P, HW // P),
                           attention=None, needs_images=False,  # the attributes train_batch and _draw read
                           _feed=ImageFeed(ds.images, ds.indices("train"), env.dev))
    order, g_mask = epoch_order(N, B, torch.Generator().manual_seed(1)), torch.Generator().manual_seed(2)

    def fetch(k):  # the loop's next_batch, then the task's train_batch and _draw
        idx = order[(k % 3) * B:][:B].long()
        xb = ImageMIMTask.train_batch(task, idx)
        return xb, ImageMIMTask._draw(task, xb, g_mask, 0.75)

    def fetch_host(k):  # the path before ImageFeed
        idx = order[(k % 3) * B:][:B].long()
        xb = ds.rows_tensors(task.train_rows[idx.numpy()])[0].to(env.dev, non_blocking=True)
        return xb, ImageMIMTask._draw(task, xb, g_mask, 0.75)

    ml = case.sides[0]

    def train_on(xb, mask):  # a step of fit's shape
        with env.amp():
            o = ml.model(xb, mask)
            loss = masked_mse(o["pred"], o["target"], o["mask"])
        ml.opt.zero_grad(set_to_none=True)
        loss.backward()
        ml.opt.step()
        float(loss.detach())  # fit's per-step read: the GPU idles while the next batch is made

    def median_s(fn):
        times = []
        for k in range(n):
            env.sync()
            t0 = time.perf_counter()
            fn(k)
            env.sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    fixed = fetch(0)
    train_on(*fixed)  # warm-up
    res = {"data_s": median_s(fetch), "data_host_s": median_s(fetch_host),
           "step_s": median_s(lambda k: train_on(*fixed)), "fed_step_s": median_s(lambda k: train_on(*fetch(k))),
           "batches": n, "path": "ImageMIMTask.train_batch (ImageFeed: uint8 " + ("kept on the device" if task._feed.resident is not None
                                                                   else "pinned, copied") + ") + _draw"}
    res["exposed_s"] = res["fed_step_s"] - res["step_s"]
    res["share"] = res["data_s"] / res["step_s"]
    res["exposed_share"] = max(res["exposed_s"], 0.0) / res["step_s"]
    res["host_share"] = res["data_host_s"] / res["step_s"]
    out.say(f"  data: {res['data_s'] * 1e3:.1f} ms a batch alone ({res['share']:.1%} of the {res['step_s'] * 1e3:.1f} ms "
            f"step); loop step {res['fed_step_s'] * 1e3:.1f} ms fed vs {res['step_s'] * 1e3:.1f} ms pre-placed "
            f"(exposed {res['exposed_share']:.1%}); the path before (float32 on the host): "
            f"{res['data_host_s'] * 1e3:.1f} ms ({res['host_share']:.1%})")
    return res


def run_case(name: str, env: Env, args, size: str, rate: float, peak: float, out: Out, res: dict) -> None:
    """Every measure of one case, written into ``res`` as it goes (see the module docstring)."""
    cuda, fallbacks = env.dev.type == "cuda", res.setdefault("fallbacks", [])
    batches = BATCHES[size][name] if not args.batches else tuple(int(b) for b in args.batches.split(","))
    case, res["batch_tries"] = search_batch(name, batches, size, env, args, out)
    B, (ml, hf) = case.batch, case.sides
    res["batch"] = B
    flops = res["flops_per_step"] = count_flops(case, name, min(batches), size, env, fallbacks)
    fl = res["floor"] = floor(case, env, flops, rate, peak, args.floor_record, fallbacks)
    parts = ", ".join(f"{k} {v * 1e3:.2f}" for k, v in fl.get("parts_s", {}).items())
    out.say(f"  FLOPs a step {flops / 1e9:,.1f} GFLOP ({flops / B / 1e9:.3f} a sample); floor ({fl['kind']}) "
            f"{fl['floor_s'] * 1e3:.2f} ms (FLOPs / matmul rate {fl['rate_floor_s'] * 1e3:.2f} ms; replayed ms: "
            f"{parts or fl.get('recorded_error', 'off')}); best MFU {fl['best_mfu']:.1%}"
            + (f" (45% {'reachable' if fl['best_mfu'] >= TARGET_MFU else 'OUT OF REACH'})" if cuda else ""))
    res["compile"] = compile_masklab(ml, args, env, fallbacks, out)
    rates, ratios = time_sides(case, env, args, fallbacks)
    res["ratio"], res["ratios"] = statistics.median(ratios), ratios
    res["sides"] = {}
    for key, s in (("masklab", ml), ("hf", hf)):
        sps = statistics.median(rates[s.name])
        res["sides"][key] = {"name": s.name, "samples_s": sps, "step_s": B / sps, "mfu": flops * sps / B / peak,
                             "peak_mem_mb": s.mem}
        out.say(f"  {s.name:<24} {sps:>9.1f} samples/s  step {B / sps * 1e3:8.2f} ms  MFU {flops * sps / B / peak:6.1%}"
                f"  peak {'-' if s.mem is None else f'{s.mem:.0f} MB'}")
    hf_s = res["sides"]["hf"]
    reach = res["reach"] = {"best_ratio": hf_s["step_s"] / fl["floor_s"], "needed_mfu": TARGET_RATIO * hf_s["mfu"]}
    reach.update(ratio_reachable=reach["best_ratio"] >= TARGET_RATIO, mfu_reachable=fl["best_mfu"] >= TARGET_MFU)
    word = {True: "reachable", False: "OUT OF REACH"}
    out.say(f"  ratio {res['ratio']:.2f}x (repeats {', '.join(f'{x:.2f}' for x in ratios)}); at the floor masklab "
            f"would lead by {reach['best_ratio']:.2f}x: 1.5x HF needs {reach['needed_mfu']:.1%} MFU, the floor allows "
            f"{fl['best_mfu']:.1%} ({word[reach['ratio_reachable']] if cuda else NA})")
    if name == "mae_vitb" and args.data and env.left() > (20 if cuda else 0):
        res["data"] = data_feeding(case, env, size, args.data_batches, out)
    elif name == "mae_vitb":
        fallbacks.append(f"data feeding not measured ({'off' if not args.data else 'budget'})")


def verdicts(name: str, res: dict, cuda: bool) -> dict:
    """PASS / MISSED / not applicable per target ("-" where a case has no such target)."""
    def judge(ok):
        return NA if not cuda else ("PASS" if ok else "MISSED")
    v = {"ratio": judge(res["ratio"] >= TARGET_RATIO) if "ratio" in res else "-", "mfu": "-", "data": "-"}
    if name == "mae_vitb":
        v["mfu"] = judge(res["sides"]["masklab"]["mfu"] >= TARGET_MFU) if "sides" in res else "-"
        v["data"] = judge(res["data"]["share"] < TARGET_DATA) if "data" in res else "-"
    return v


def table(cases: dict, cuda: bool, out: Out) -> None:
    """The summary, printed last."""
    out.say(f"{'case':<10} {'batch':>5} {'HF/s':>8} {'masklab/s':>9} {'ratio':>6} {'MFU HF':>7} {'MFU ml':>7} "
            f"{'floor ms':>8} {'best MFU':>8} {'data':>6} | {'ratio>=1.5x':<11} {'MFU>=45%':<9} {'data<5%':<8}")
    for name, r in cases.items():
        v = r.get("targets", {})
        if "sides" not in r:
            out.say(f"{name:<10} failed: {r.get('error', 'not run')[:100]}")
            continue
        h, m = r["sides"]["hf"], r["sides"]["masklab"]
        data = f"{r['data']['share']:.1%}" if "data" in r else "-"
        short = {NA: "n/a"}
        out.say(f"{name:<10} {r['batch']:>5} {h['samples_s']:>8.1f} {m['samples_s']:>9.1f} {r['ratio']:>5.2f}x "
                f"{h['mfu']:>7.1%} {m['mfu']:>7.1%} {r['floor']['floor_s'] * 1e3:>8.2f} {r['floor']['best_mfu']:>8.1%} "
                f"{data:>6} | {short.get(v['ratio'], v['ratio']):<11} {short.get(v['mfu'], v['mfu']):<9} "
                f"{short.get(v['data'], v['data']):<8}")
    if not cuda:
        out.say(f"n/a: {NA} (no CUDA device: tiny cases in float32; MFU against the measured float32 matmul rate)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--only", default="mae_vitb,bert_base")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (automatic without CUDA)")
    ap.add_argument("--batches", default="", help="comma-separated batch sizes to try (default: per case)")
    ap.add_argument("--mem-frac", type=float, default=0.8, help="a batch fits when a step peaks under this share")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="default: on with CUDA")
    ap.add_argument("--compile-scope", default="blocks", choices=["blocks", "model"])
    ap.add_argument("--compile-mode", default="default",
                    choices=["default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune"])
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None, help="default: on with CUDA")
    ap.add_argument("--fused", action=argparse.BooleanOptionalAction, default=True, help="fused AdamW (else foreach)")
    ap.add_argument("--floor-record", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--data", action=argparse.BooleanOptionalAction, default=True, help="point 4 (mae_vitb)")
    ap.add_argument("--data-batches", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5, help="steps a side a repeat")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (default: torch's with CUDA, 1 without)")
    ap.add_argument("--budget-s", type=float, default=330.0)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = dev.type == "cuda"
    args.compile = cuda if args.compile is None else args.compile
    args.bf16 = cuda if args.bf16 is None else args.bf16
    size = "tiny" if args.tiny or not cuda else "full"
    if args.threads or not cuda:  # one thread on a shared CPU: two spin-wait on each other under load
        torch.set_num_threads(args.threads or 1)
    transformers = tt.need_hf()
    torch.manual_seed(0)
    out = Out(args.out)
    name_dev = torch.cuda.get_device_name(dev) if cuda else platform.processor() or "CPU"
    res = out.res = {"device": name_dev, "cuda": cuda, "torch": torch.__version__, "cuda_version": torch.version.cuda,
                     "transformers": transformers.__version__, "python": platform.python_version(),
                     "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "size": size,
                     "gpu_memory_mb": torch.cuda.get_device_properties(dev).total_memory / 2**20 if cuda else None,
                     "args": {k: str(v) for k, v in vars(args).items()}, "cases": {}}
    if not cuda:
        out.say(f"CPU run: no CUDA device; tiny cases in float32, no compile by default; the targets are {NA}")
    out.say(f"device {name_dev}, torch {torch.__version__}, transformers {transformers.__version__}, {size} sizes, "
            f"bf16 {args.bf16}, compile {args.compile} ({args.compile_scope}, {args.compile_mode}), AdamW "
            f"{'fused' if args.fused else 'foreach'}, budget {args.budget_s:.0f} s")
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    n = 8192 if cuda else 512
    rate = res["matmul_flops"] = tt.matmul_flops(dev, n=n, repeats=5 if cuda else 3, dtype=dtype)
    peak = res["mfu_peak_flops"] = PEAK_BF16 if cuda else rate
    out.say(f"{str(dtype)[6:]} {n}^3 matmul: {rate / 1e9:,.0f} GFLOP/s measured; MFU against "
            + (f"{PEAK_BF16 / 1e12:.0f} TFLOP/s (the issue's rate)" if cuda else "the measured rate"))
    out.save()
    names = [c for c in args.only.split(",") if c]
    for i, name in enumerate(names):
        share = (args.budget_s - (time.perf_counter() - t_start)) / (len(names) - i)  # the rest, shared out
        env = Env(dev, args.bf16, time.perf_counter() + share)
        r = res["cases"][name] = {}
        out.say(f"\n{name} ({env.left():.0f} s of the budget)")
        try:
            run_case(name, env, args, size, rate, peak, out, r)
        except Exception as e:  # one case's failure must not lose the other's figures
            r["error"] = f"{type(e).__name__}: {e}"[:500]
            out.say(f"  FAILED: {traceback.format_exc()[-1500:]}")
        torch.compiler.reset()
        env.free()
        r["targets"] = verdicts(name, r, cuda)
        out.save()
    res["elapsed_s"] = time.perf_counter() - t_start
    fallbacks = res["fallbacks"] = [f"{n}: {f}" for n, r in res["cases"].items() for f in r.get("fallbacks", [])]
    out.say(f"\nfell back: {'; '.join(fallbacks) if fallbacks else 'nothing'}; {res['elapsed_s']:.0f} s in all"
            + (f"; CPU run: the targets are {NA}" if not cuda else ""))
    out.save()
    table(res["cases"], cuda, out)
    out.log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
