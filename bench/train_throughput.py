"""Training throughput: masklab's models against Hugging Face's at equal sizes, on the same batches.

One training step = forward, loss, backward and an AdamW update. For each case the script prints
masklab's and the reference's samples/s, their ratio, a memory figure, the model FLOPs per sample
and the fraction of the machine's own limit reached (achieved model FLOP/s over the FLOP/s of a
large float32 matrix multiply on the same threads, measured in the same run just before the case).

Cases (issue 15):

- ``mae_tiny``: 28x28x1 images, patch 4, encoder 192 x 6 (3 heads, MLP 768), decoder 128 x 2
  (4 heads, MLP 512), batch 128, mask ratio 0.75; against ``ViTMAEForPreTraining``.
- ``mae_small``: 32x32x3, patch 4, encoder 384 x 8 (6 heads, MLP 1536), decoder 256 x 4 (8 heads,
  MLP 1024), batch 64, ratio 0.75; against ``ViTMAEForPreTraining``.
- ``bert_mini``: vocabulary 8,000, 256 x 4 (4 heads, MLP 1024), sequence 128, batch 64, 15% masked
  with BERT's 80/10/10; against ``BertForMaskedLM``.
- ``audio_mae``: masklab's AudioMAE (``audio_mae_vit`` / small: encoder 192 x 6, decoder 128 x 2,
  MLP ratio 4) on a window of 64 mel bins x 64 frames in 8 x 8 patches, batch 64, AudioMAE's mask
  ratio 0.8 (Huang et al. 2022); against ``ViTMAEForPreTraining`` on the same one-channel input, the
  closest reference that exists (Hugging Face's ViTMAE builds its position table for a square grid
  only, hence the square window).
- ``audio_frames``: masklab's frame Transformer (``frame_transformer`` / small, mel target: 64 mel
  bins x 96 frames, 2 frames a token, batch 64, 50% masked) alone: Hugging Face has no model of
  this recipe (wav2vec 2.0's pre-training is contrastive, over quantised targets).
- ``paired_m3ae`` and ``paired_flava``: the paired recipe of ``configs/paired-tuxpaint.yaml`` with
  each paired architecture (``m3ae`` / ``flava``, tiny): 32x32x3 images in 8 x 8 patches, captions
  of 48 token positions (5 to 30 real tokens) over a 2,000-token vocabulary, batch 32, 75% of the
  patches and 15% of the real tokens hidden, pixel MSE + 0.5 x token cross-entropy + 0.5 x InfoNCE
  (the contrastive term runs each modality alone through the encoder once more); alone: Hugging Face
  has neither recipe (its ``FlavaForPreTraining`` is FLAVA's full set of losses at ViT-B size).

Equal work: float32, eager, Hugging Face with ``attn_implementation="sdpa"`` and dropout 0 (masklab's
models have none by default), the same AdamW on both sides (lr 1e-4, betas (0.9, 0.95), weight decay
0.05 on matrices only: :func:`engine.training.loop.param_groups`) in the implementation Hugging Face's Trainer
uses by default with torch >= 2.8 (``adamw_torch_fused``; ``--optimizer`` changes it for both sides).
Both sides get the same images and masks (Hugging Face's ``noise`` argument is set so that its
``random_masking`` keeps exactly masklab's visible patches; checked) or the same corrupted token ids
and labels. Pixels and token ids are random: a step's cost does not depend on their values.

Timing: a warm-up step per side, then ``--repeats`` repeats; in each repeat every side runs
``--steps`` steps (the order of the sides alternates between repeats, so a change in machine load
hits both alike). A ratio is the median over the repeats of (masklab samples/s / reference
samples/s) within the repeat; the samples/s shown are medians too. Memory: on CUDA the peak allocated
during a step; on CPU the tensors kept for backward (one step's activations, storages counted once)
plus the weights, gradients and AdamW's two moments. FLOPs: :func:`engine.training.perf.count_step_flops`
(matmuls of forward and backward, attention included), each side's own.

    pip install -r requirements-bench.txt
    python bench/train_throughput.py [--threads 2] [--repeats 5] [--steps 3] [--only mae_tiny,bert_mini]
                                     [--optimizer fused|foreach|loop] [--device cpu|cuda] [--scale 1.0]

``--scale`` divides the batch sizes (a smoke test: ``--scale 16``). Exit status 0, or 2 if
transformers is missing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from engine.models import FLAVA, FLAVA_PRESETS, FRAME_PRESETS, M3AE, M3AE_PRESETS

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.masking.mlm import apply_mlm  # noqa: E402
from engine.models import BertMLM, FrameTransformer, MaskedAutoencoderViT, count_parameters  # noqa: E402
from engine.objectives import info_nce, masked_cross_entropy, masked_mse  # noqa: E402
from engine.training.loop import param_groups  # noqa: E402
from engine.training.perf import adamw, count_step_flops  # noqa: E402

LR, BETAS, WEIGHT_DECAY = 1e-4, (0.9, 0.95), 0.05
N_BATCHES = 3  # distinct batches, cycled (both sides see the same sequence)
SPECIAL_IDS = (0, 1, 2, 3, 4)  # [PAD] [UNK] [CLS] [SEP] [MASK], masklab's tokenizer layout
CLS_ID, SEP_ID, MASK_ID = 2, 3, 4


def need_hf():
    """Import transformers, or exit 2 with the install hint."""
    try:
        import transformers  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)
    except ImportError as e:
        print(f"bench/train_throughput.py needs the benchmark-only dependencies ({e}); install them with\n"
              f"    pip install -r requirements-bench.txt", file=sys.stderr)
        sys.exit(2)
    transformers.logging.set_verbosity_error()
    return transformers


# ------------------------------------------------------------------------------------------ sides


@dataclass
class Side:
    """One model of a case: ``loss(i)`` runs the forward pass and the loss on batch ``i``."""

    name: str
    model: nn.Module
    loss: Callable[[int], torch.Tensor]
    opt: torch.optim.Optimizer | None = None

    def step(self, i: int) -> torch.Tensor:
        """One training step on batch ``i``; returns the detached loss (no host sync)."""
        loss = self.loss(i)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()


@dataclass
class Case:
    name: str
    batch: int
    sides: list[Side]
    note: str = ""
    batches: list | None = None  # the inputs the sides cycle through (kept for the tests)


def _image_batches(B: int, C: int, H: int, W: int, P: int, ratio: float, g: torch.Generator, device):
    """``N_BATCHES`` of (images [B, C, H, W] in [0, 1], mask [B, L] bool, HF noise [B, L]).

    HF's ``random_masking`` keeps the ``int(L * (1 - ratio))`` patches of smallest noise; the mask is
    made from the same noise, so both sides hide the same patches."""
    L = (H // P) * (W // P)
    keep = int(L * (1 - ratio))
    out = []
    for _ in range(N_BATCHES):
        imgs = torch.rand(B, C, H, W, generator=g)
        noise = torch.rand(B, L, generator=g)
        ids = noise.argsort(dim=1)
        mask = torch.ones(B, L, dtype=torch.bool).scatter_(1, ids[:, :keep], False)
        out.append((imgs.to(device), mask.to(device), noise.to(device)))
    return out


def mae_case(name: str, B: int, C: int, HW: int, P: int, enc: tuple[int, int, int, int],
             dec: tuple[int, int, int, int], ratio: float, g: torch.Generator, device, hf: bool = True) -> Case:
    """An MAE case; ``enc``/``dec`` = (width, depth, heads, MLP width)."""
    D, depth, heads, mlp = enc
    Dd, ddepth, dheads, dmlp = dec
    batches = _image_batches(B, C, HW, HW, P, ratio, g, device)
    ml = MaskedAutoencoderViT((HW, HW), C, P, D, depth, heads, Dd, ddepth, dheads, mlp_ratio=mlp / D).to(device)
    assert ddepth == 0 or dmlp / Dd == mlp / D, "masklab's MAE has one mlp_ratio for encoder and decoder"

    def ml_loss(i):
        imgs, mask, _ = batches[i]
        out = ml(imgs, mask)
        return masked_mse(out["pred"], out["target"], out["mask"])

    sides = [Side("masklab", ml, ml_loss)]
    if hf:
        from transformers import ViTMAEConfig, ViTMAEForPreTraining  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)

        cfg = ViTMAEConfig(image_size=HW, patch_size=P, num_channels=C, hidden_size=D, num_hidden_layers=depth,
                           num_attention_heads=heads, intermediate_size=mlp, decoder_hidden_size=Dd,
                           decoder_num_hidden_layers=ddepth, decoder_num_attention_heads=dheads,
                           decoder_intermediate_size=dmlp, mask_ratio=ratio, norm_pix_loss=False,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-6)
        cfg._attn_implementation = "sdpa"
        ref = ViTMAEForPreTraining(cfg).to(device)
        imgs, mask, noise = batches[0]
        with torch.no_grad():
            assert torch.equal(ref(pixel_values=imgs, noise=noise).mask.bool(), mask), "HF hides other patches"

        def hf_loss(i):
            imgs, _, noise = batches[i]
            return ref(pixel_values=imgs, noise=noise).loss

        sides.append(Side("HF ViTMAEForPreTraining", ref, hf_loss))
    return Case(name, B, sides)


def bert_case(B: int, L: int, V: int, D: int, depth: int, heads: int, mlp: int, ratio: float,
              g: torch.Generator, device) -> Case:
    """BERT-mini MLM: full rows ``[CLS] w1 .. w_{L-2} [SEP]`` (packed pre-training text has no padding),
    ``round(ratio * (L - 2))`` words masked per row, BERT's 80/10/10 (:func:`engine.masking.mlm.apply_mlm`)."""
    from transformers import BertConfig, BertForMaskedLM  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)

    batches = []
    for _ in range(N_BATCHES):
        ids = torch.randint(len(SPECIAL_IDS), V, (B, L), generator=g)
        ids[:, 0], ids[:, -1] = CLS_ID, SEP_ID
        noise = torch.rand(B, L, generator=g)
        noise[:, 0] = noise[:, -1] = 2.0  # never mask [CLS] / [SEP]
        n = round(ratio * (L - 2))
        mask = torch.zeros(B, L, dtype=torch.bool).scatter_(1, noise.argsort(dim=1)[:, :n], True)
        inputs, _ = apply_mlm(ids, mask, generator=g, mask_token_id=MASK_ID, vocab_size=V, special_ids=SPECIAL_IDS)
        labels = ids.masked_fill(~mask, -100)
        attn = torch.ones(B, L, dtype=torch.long)
        batches.append([t.to(device) for t in (inputs, attn, mask, labels, ids[mask])])

    ml = BertMLM(V, L, D, depth, heads, mlp_ratio=mlp / D, pad_id=0).to(device)

    def ml_loss(i):
        inputs, attn, mask, _, masked_labels = batches[i]
        return masked_cross_entropy(ml(inputs, attn, mask), masked_labels)

    cfg = BertConfig(vocab_size=V, hidden_size=D, num_hidden_layers=depth, num_attention_heads=heads,
                     intermediate_size=mlp, max_position_embeddings=L, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, pad_token_id=0)
    cfg._attn_implementation = "sdpa"
    ref = BertForMaskedLM(cfg).to(device)

    def hf_loss(i):
        inputs, attn, _, labels, _ = batches[i]
        return ref(input_ids=inputs, attention_mask=attn, labels=labels).loss

    return Case("bert_mini", B, [Side("masklab", ml, ml_loss), Side("HF BertForMaskedLM", ref, hf_loss)])


def audio_case(B: int, n_mels: int, frames: int, k: int, g: torch.Generator, device, ratio: float = 0.5) -> Case:
    """masklab's frame Transformer (small preset, mel target) alone."""
    L = frames // k
    batches = []
    for _ in range(N_BATCHES):
        spec = torch.randn(B, 1, n_mels, frames, generator=g)
        mask = torch.zeros(B, L, dtype=torch.bool).scatter_(
            1, torch.rand(B, L, generator=g).argsort(dim=1)[:, : round(ratio * L)], True)
        batches.append((spec.to(device), mask.to(device)))
    ml = FrameTransformer(n_mels, frames, k, target="mel", **FRAME_PRESETS["small"]).to(device)

    def ml_loss(i):
        out = ml(*batches[i])
        return masked_mse(out["pred"], out["target"], out["mask"])

    return Case("audio_frames", B, [Side("masklab", ml, ml_loss)], note="no Hugging Face model of this recipe")


def paired_case(arch: str, B: int, g: torch.Generator, device, HW: int = 32, P: int = 8, V: int = 2000,
                L: int = 48, ratio: float = 0.75, text_ratio: float = 0.15) -> Case:
    """The paired recipe (module docstring) with ``arch`` (``m3ae`` / ``flava``, tiny preset) alone.

    Captions: ``[CLS] w1 .. wn [SEP]`` then padding, ``n ~ U{5..30}`` real tokens; at least one real
    token hidden per caption."""
    batches = []
    Li = (HW // P) ** 2
    for _ in range(N_BATCHES):
        imgs = torch.rand(B, 3, HW, HW, generator=g)
        n = torch.randint(5, 31, (B,), generator=g)
        pos = torch.arange(L)
        real = (pos >= 1) & (pos <= n[:, None])
        ids = torch.randint(len(SPECIAL_IDS), V, (B, L), generator=g).masked_fill(~real, 0)
        ids[:, 0] = CLS_ID
        ids[torch.arange(B), n + 1] = SEP_ID
        img_mask = torch.zeros(B, Li, dtype=torch.bool).scatter_(
            1, torch.rand(B, Li, generator=g).argsort(dim=1)[:, : round(ratio * Li)], True)
        score = torch.rand(B, L, generator=g).masked_fill(~real, 2.0)
        k = (text_ratio * n).round().clamp_min(1)
        txt_mask = (score.argsort(dim=1).argsort(dim=1) < k[:, None]) & real
        batches.append([t.to(device) for t in (imgs, ids, real, img_mask, txt_mask)])
    cls, presets = {"m3ae": (M3AE, M3AE_PRESETS), "flava": (FLAVA, FLAVA_PRESETS)}[arch]
    ml = cls(img_size=(HW, HW), in_chans=3, patch_size=P, vocab_size=V, max_len=L, **presets["tiny"]).to(device)

    def ml_loss(i):
        out = ml(*batches[i], contrastive=True)
        return (masked_mse(out["pred"], out["target"], out["mask"])
                + 0.5 * masked_cross_entropy(out["logits"], out["labels"])
                + 0.5 * info_nce(out["emb_a"], out["emb_b"], out["logit_scale"]))

    return Case(f"paired_{arch}", B, [Side("masklab", ml, ml_loss)], note="no Hugging Face model of this recipe",
                batches=batches)


#: Every case, in the order of the table.
CASES = ("mae_tiny", "mae_small", "bert_mini", "audio_mae", "audio_frames", "paired_m3ae", "paired_flava")


def build_cases(names: list[str], scale: float, device) -> list[Case]:
    g = torch.Generator().manual_seed(0)

    def b(n):
        return max(1, int(n / scale))

    makers = {
        "mae_tiny": lambda: mae_case("mae_tiny", b(128), 1, 28, 4, (192, 6, 3, 768), (128, 2, 4, 512), 0.75, g, device),
        "mae_small": lambda: mae_case("mae_small", b(64), 3, 32, 4, (384, 8, 6, 1536), (256, 4, 8, 1024), 0.75, g,
                                      device),
        "bert_mini": lambda: bert_case(b(64), 128, 8000, 256, 4, 4, 1024, 0.15, g, device),
        "audio_mae": lambda: mae_case("audio_mae", b(64), 1, 64, 8, (192, 6, 6, 768), (128, 2, 4, 512), 0.8, g,
                                      device),
        "audio_frames": lambda: audio_case(b(64), 64, 96, 2, g, device),
        "paired_m3ae": lambda: paired_case("m3ae", b(32), g, device),
        "paired_flava": lambda: paired_case("flava", b(32), g, device),
    }
    unknown = [n for n in names if n not in makers]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; known: {', '.join(makers)}")
    return [makers[n]() for n in names]


# ---------------------------------------------------------------------------------------- measures


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_flops(device, n: int = 2048, repeats: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of an ``n x n`` matrix multiply in ``dtype`` on random data (median of ``repeats``
    timings of >= 0.2 s)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    bm = torch.randn(n, n, device=device, dtype=dtype)
    torch.mm(a, bm)
    rates = []
    for _ in range(repeats):
        k, t0 = 0, time.perf_counter()
        while True:
            torch.mm(a, bm)
            k += 1
            sync(device)
            dt = time.perf_counter() - t0
            if dt >= 0.2:
                break
        rates.append(2 * n**3 * k / dt)
    return statistics.median(rates)


def memory_mb(side: Side, device) -> float:
    """MB of one step: CUDA's peak allocated, or on CPU the saved-for-backward tensors (storages
    counted once) plus weights, gradients and AdamW's two moments."""
    params = sum(p.numel() * p.element_size() for p in side.model.parameters() if p.requires_grad)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        side.step(0)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated(device) / 2**20
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = side.loss(0)
    loss.backward()
    side.opt.zero_grad(set_to_none=True)
    weight_ptrs = {p.untyped_storage().data_ptr() for p in side.model.parameters()}
    acts = sum(n for ptr, n in seen.items() if ptr not in weight_ptrs)
    return (acts + 4 * params) / 2**20


def time_steps(side: Side, steps: int, start: int, device) -> float:
    """Seconds for ``steps`` training steps (one device sync at the end)."""
    sync(device)
    t0 = time.perf_counter()
    for i in range(steps):
        side.step((start + i) % N_BATCHES)
    sync(device)
    return time.perf_counter() - t0


def run_case(case: Case, repeats: int, steps: int, optimizer: str, device) -> dict:
    """Measure a case; returns per side ``samples_s``, ``mem_mb``, ``flops`` (per step), ``params``
    and the case's ``ratio`` (median of per-repeat ratios; None for a single side)."""
    for s in case.sides:
        s.opt = adamw(param_groups(s.model, WEIGHT_DECAY), lr=LR, betas=BETAS, impl=optimizer)
        s.model.train()
        s.flops = count_step_flops(lambda s=s: s.loss(0))
        s.opt.zero_grad(set_to_none=True)
        s.mem = memory_mb(s, device)
        s.step(0)  # warm-up (allocations, kernel choice, AdamW state)
    rates: dict[str, list[float]] = {s.name: [] for s in case.sides}
    ratios = []
    for r in range(repeats):
        order = case.sides if r % 2 == 0 else case.sides[::-1]
        got = {}
        for s in order:
            got[s.name] = case.batch * steps / time_steps(s, steps, r, device)
            rates[s.name].append(got[s.name])
        if len(case.sides) == 2:
            ratios.append(got[case.sides[0].name] / got[case.sides[1].name])
    return {
        "sides": [{"name": s.name, "samples_s": statistics.median(rates[s.name]), "mem_mb": s.mem,
                   "flops": s.flops, "params": count_parameters(s.model)} for s in case.sides],
        "ratio": statistics.median(ratios) if ratios else None,
        "ratios": ratios,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="training steps per side per repeat")
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--optimizer", default="fused", choices=["fused", "foreach", "loop", "auto"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--scale", type=float, default=1.0, help="divide every batch size by this (smoke tests)")
    args = ap.parse_args(argv)
    need_hf()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {args.threads} threads, device {device}, optimizer AdamW/{args.optimizer}, "
          f"{args.repeats} repeats x {args.steps} steps, load average {load:.2f}")
    cases = build_cases([n for n in args.only.split(",") if n], args.scale, device)
    print(f"{'case':<13} {'side':<26} {'batch':>5} {'params':>7} {'samples/s':>10} {'mem MB':>8} "
          f"{'GFLOP/sample':>12} {'of matmul':>9}  ratio")
    for case in cases:
        # The limit is measured next to each case (the load of a shared machine changes within a run).
        peak = matmul_flops(device)
        print(f"float32 2048x2048 matmul: {peak / 1e9:.1f} GFLOP/s (the limit the next fractions refer to)")
        res = run_case(case, args.repeats, args.steps, args.optimizer, device)
        for j, s in enumerate(res["sides"]):
            frac = s["samples_s"] * s["flops"] / case.batch / peak
            ratio = ""
            if j == 0 and res["ratio"] is not None:
                ratio = f"{res['ratio']:.2f}x  (repeats: {', '.join(f'{x:.2f}' for x in res['ratios'])})"
            elif j == 0:
                ratio = f"-  ({case.note})"
            print(f"{case.name if j == 0 else '':<13} {s['name']:<26} {case.batch:>5} {s['params'] / 1e6:>6.2f}M "
                  f"{s['samples_s']:>10.1f} {s['mem_mb']:>8.0f} {s['flops'] / case.batch / 1e9:>12.3f} "
                  f"{frac:>8.0%}  {ratio}", flush=True)
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average at the end {load_end:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
