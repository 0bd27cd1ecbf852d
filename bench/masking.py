"""Masks per second of every masking strategy at batch 256, next to Hugging Face transformers' maskers.

One process, one set of input tensors. Each job is timed on its own: a warm-up, then
``--repeats`` repeats of at least ``--min-time`` seconds each; the figure is the median of the
repeats in rows per second (masks/s = rows of the batch masked per second). Within a repeat,
masklab and its references take turns every ``min_time / 10`` s, so a change in machine load
(the machine is shared) hits both sides alike.

Jobs with a Hugging Face reference do the same job on both sides, from the same tensors:

- random / bernoulli + BERT 80/10/10: the same ``input_ids [256, 512]`` in, masked ``input_ids``
  and ``labels`` (-100 where not masked) out. HF: ``DataCollatorForLanguageModeling.torch_mask_tokens``
  (the masking part of its ``__call__``; batching/padding excluded), given the special-tokens mask so
  that it does not recompute it; and its public ``__call__`` on 256 example dicts (collation +
  masking, what a training loop pays). masklab: a strategy mask + ``engine.masking.mlm.apply_mlm``.
- whole word: the same ``input_ids`` in, masked ``input_ids`` and ``labels`` out. HF (transformers 5,
  which folded ``DataCollatorForWholeWordMask`` into ``DataCollatorForLanguageModeling(whole_word_mask=True)``):
  ``torch_mask_tokens`` with the tokenizer's ``offset_mapping``; it derives word starts from the
  offsets inside the call (its design) and replaces with [MASK] only. masklab takes the tokenizer's
  ``word_ids``, computed once with the tokenization, outside the timed region.
- span: shape (256, 500), mask_prob 0.65, span length 10 -> a bool mask. HF:
  ``transformers.models.wav2vec2.modeling_wav2vec2._compute_mask_indices`` (numpy); masklab:
  ``span`` with fixed lengths.

Text is real: AG News (../shared/data/ag-news, licensed for tests and benchmarks only; read from
there, never copied) tokenized by a WordPiece tokenizer trained here in-process (BERT normalizer and
pre-tokenizer, vocab 8000; nothing downloaded); consecutive articles are packed into 256 rows of
exactly 512 tokens, ``[CLS] ... [SEP]``. Every other registered strategy is timed at its natural
shape (tokens 256x512, patches 256x14x14, spectrogram 256x128x100, video 256x8x14x14) with its
default parameters; side inputs are prepared outside timing from real data (MNIST superpixels,
FSDD voiced frames).

    pip install -r requirements-bench.txt
    python bench/masking.py [--threads 2] [--min-time 1.0] [--repeats 5] [--quick] [--only NAME]
                            [--shape 256x128x100] [--vs-random]

``--vs-random`` adds ``random`` at the same shape, ratio and eligibility as a reference to every other
registry job, timed in turns with it (issue 15: block and hierarchical within 1.5x of random).

Exit status 0, or 1 if a job raised (its row says why), or 2 if transformers / tokenizers are missing.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import soundfile as sf
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from bench.fsdd import manifest_rows
from engine.masking.mlm import apply_mlm as _apply
from engine.masking.units import superpixel_segments

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED_DATA = Path(os.environ.get("MASKLAB_SHARED", REPO.parent / "shared")) / "data"  # as tests/conftest.py

from engine.masking import MASKING_REGISTRY, get_masking  # noqa: E402

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
B, L = 256, 512
SHAPES = {  # natural benchmark grid of each (grid_dims, modality)
    (1, "text"): (B, L),
    (2, "image"): (B, 14, 14),
    (2, "audio"): (B, 128, 100),
    (3, "video"): (B, 8, 14, 14),
}
# Mask ratio per grid: BERT 0.15 (Devlin et al. 2019), MAE 0.75 (He et al. 2022),
# Audio-MAE 0.8 (Huang et al. 2022), VideoMAE 0.9 (Tong et al. 2022).
RATIOS = {(1, "text"): 0.15, (2, "image"): 0.75, (2, "audio"): 0.8, (3, "video"): 0.9}


def need_hf():
    """Import transformers and tokenizers, or exit 2 with the install hint."""
    try:
        import tokenizers  # noqa: F401, PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)
        import transformers  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)
    except ImportError as e:
        print(f"bench/masking.py needs the benchmark-only dependencies ({e}); install them with\n"
              f"    pip install -r requirements-bench.txt", file=sys.stderr)
        sys.exit(2)
    return transformers


# ----------------------------------------------------------------------------------------- inputs


@dataclass
class Text:
    """The packed token batch and everything derived from it once, outside timing."""

    input_ids: torch.Tensor  # int64 [B, L]
    word_ids: torch.Tensor  # int64 [B, L], -1 for [CLS] / [SEP]
    offsets: torch.Tensor  # int64 [B, L, 2], character offsets within each article, (0, 0) for specials
    special: torch.Tensor  # int64 [B, L], 1 for special tokens (HF's special_tokens_mask)
    hf_tokenizer: Any
    vocab_size: int
    mask_id: int
    special_ids: list[int]
    n_articles: int


def ag_news_texts() -> list[str]:
    path = SHARED_DATA / "ag-news" / "test_part_a.csv"
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    # Upstream artefacts (see its README): "\" stood for a line break, "#36;" for "$".
    return [(r["title"] + ". " + r["description"]).replace("\\", " ").replace("#36;", "$") for r in rows]


def make_text(vocab_size: int = 8000) -> Text:
    """Train a WordPiece tokenizer on AG News and pack articles into ``[B, L]`` rows."""
    from transformers import BertTokenizerFast  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)

    texts = ag_news_texts()
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                                             show_progress=False))
    hf = BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                           sep_token="[SEP]", mask_token="[MASK]")
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    ids = np.empty((B, L), dtype=np.int64)
    wids = np.full((B, L), -1, dtype=np.int64)
    offs = np.zeros((B, L, 2), dtype=np.int64)
    ids[:, 0], ids[:, -1] = cls, sep
    n = L - 2
    row, col, words, used = 0, 0, 0, 0  # words: next free word index in the current row
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        used += 1
        a_ids, a_wids, a_offs = enc.ids, enc.word_ids, enc.offsets
        k = 0
        while k < len(a_ids) and row < B:
            take = min(n - col, len(a_ids) - k)  # >= 1
            ids[row, 1 + col:1 + col + take] = a_ids[k:k + take]
            # word_ids restart at 0 in each article: shift them past the row's earlier words
            w = np.asarray(a_wids[k:k + take], dtype=np.int64)
            w = w - w[0] + words
            wids[row, 1 + col:1 + col + take] = w
            offs[row, 1 + col:1 + col + take] = a_offs[k:k + take]
            words = int(w[-1]) + 1
            k, col = k + take, col + take
            if col == n:
                row, col, words = row + 1, 0, 0
        if row == B:
            break
    if row < B:
        raise RuntimeError(f"AG News gave only {row} rows of {L} tokens")
    special_ids = [tok.token_to_id(s) for s in SPECIALS]
    special = torch.from_numpy(np.isin(ids, special_ids).astype(np.int64))
    return Text(torch.from_numpy(ids), torch.from_numpy(wids), torch.from_numpy(offs), special, hf,
                tok.get_vocab_size(), tok.token_to_id("[MASK]"), special_ids, used)


def text_eligible(text: Text) -> torch.Tensor:
    """Bool ``[B, L]``: tokens that may be masked (not special), from the engine's helper when it exists."""
    try:
        from engine.masking.mlm import special_tokens_eligible  # noqa: PLC0415 (the engine helper may be absent in the version being compared; the fallback covers it)
    except ImportError:
        return text.special == 0
    return special_tokens_eligible(text.input_ids, text.special_ids)


def mnist_images(n: int) -> torch.Tensor:
    """``[n, 1, 28, 28]`` float in [0, 1]: the first ``n`` MNIST t10k digits (../shared/data/mnist-t10k)."""
    with gzip.open(SHARED_DATA / "mnist-t10k" / "images-idx3-ubyte.gz") as f:
        raw = f.read()
    x = np.frombuffer(raw, dtype=np.uint8, offset=16)[: n * 784].reshape(n, 1, 28, 28)
    return torch.from_numpy(x.astype(np.float32) / 255.0)


def fsdd_waves(n: int) -> list[np.ndarray]:
    """The first ``n`` FSDD recordings (../shared/data/fsdd), float32 mono at 8 kHz."""
    root = SHARED_DATA / "fsdd"
    rows = manifest_rows(root)
    rows = rows[:: max(1, len(rows) // n)][:n]  # spread over digits and speakers (the manifest is sorted)
    return [sf.read(root / r["path"], dtype="float32")[0] for r in rows]


def voiced_for(n_frames: int, waves: list[np.ndarray], sr: int = 8000) -> tuple[torch.Tensor, str]:
    """Bool ``[B, n_frames]``: voiced frames of real recordings, a 1 s window of ``n_frames`` frames.

    Each clip is cropped or zero-padded (padding is unvoiced) to ``(n_frames - 1) * hop`` samples with
    ``hop = sr // (n_frames - 1)`` (10 ms for 100 frames), so ``engine.masking.units.voiced_frames``
    (centred frames) gives exactly ``n_frames`` frames. If that helper fails, a documented fallback:
    a frame is voiced when its RMS is above 10% of the clip's loudest frame.
    """
    hop = max(1, sr // max(1, n_frames - 1))
    N = (n_frames - 1) * hop
    batch = torch.zeros(len(waves), N)
    for i, w in enumerate(waves):
        batch[i, : min(N, len(w))] = torch.from_numpy(w[:N])
    try:
        from engine.masking.units import voiced_frames  # noqa: PLC0415 (the engine helper may be absent in the version being compared; the fallback covers it)

        v = voiced_frames(batch, sr, hop_length=hop)[:, :n_frames]
        if tuple(v.shape) == (len(waves), n_frames):
            return v.bool(), f"units.voiced_frames on FSDD (hop {hop} samples at {sr} Hz, 1 s window)"
        problem = f"voiced_frames gave shape {tuple(v.shape)}"
    except Exception as e:  # noqa: BLE001  helper missing or changed: use the fallback below
        problem = f"{type(e).__name__}: {e}"
    pad = torch.zeros(len(waves), n_frames * hop)
    pad[:, :N] = batch
    rms = pad.reshape(len(waves), n_frames, hop).pow(2).mean(-1).sqrt()
    return rms > 0.1 * rms.amax(dim=1, keepdim=True).clamp_min(1e-10), \
        f"FSDD frame RMS > 10% of clip max (fallback; voiced_frames: {problem})"


# ----------------------------------------------------------------------------------------- timing


def rates(fns: list[Callable[[], Any]], rows: int, min_time: float, repeats: int,
          called: int = 0, slices: int = 10) -> list[tuple[float, Any]]:
    """Median rows/s of each of ``fns`` (and its last output) over ``repeats``, the functions interleaved.

    Each function is warmed up (a call, then ``0.2 * min_time`` s: allocator, lazy imports). A repeat
    runs every function for at least ``min_time`` s in all, in ``slices`` turns of
    ``min_time / slices`` s each (at least one call per turn), taking turns, so that a change in
    machine load hits masklab and its reference alike. The first ``called`` functions were just
    called once by the caller (the warm-up's first call is skipped for them).
    """
    outs: list[Any] = []
    for i, fn in enumerate(fns):
        out = fn() if i >= called else None
        t_end = time.perf_counter() + 0.2 * min_time
        while time.perf_counter() < t_end:
            out = fn()
        outs.append(out)
    samples: list[list[float]] = [[] for _ in fns]
    turn = min_time / slices
    for _ in range(repeats):
        calls, secs = [0] * len(fns), [0.0] * len(fns)
        for _ in range(slices):
            for i, fn in enumerate(fns):
                t0 = time.perf_counter()
                while True:
                    outs[i] = fn()
                    calls[i] += 1
                    dt = time.perf_counter() - t0
                    if dt >= turn:
                        break
                secs[i] += dt
        for i in range(len(fns)):
            samples[i].append(rows * calls[i] / secs[i])
    return [(statistics.median(r), o) for r, o in zip(samples, outs)]


@dataclass
class Ref:
    """A reference implementation of a job: ``fn()`` does the same job as the masklab side."""

    name: str
    fn: Callable[[], Any]
    frac: Callable[[Any], float]
    target: float | None = None  # acceptance: masklab / reference >= target


@dataclass
class Job:
    name: str
    shape: tuple[int, ...]
    ours: Callable[[], Any] | None
    ours_frac: Callable[[Any], float]
    refs: list[Ref] = field(default_factory=list)
    note: str = ""
    ratio: float | None = None  # the mask ratio of a registry job (for --vs-random)
    eligible: torch.Tensor | None = None


def frac_labels(eligible: torch.Tensor) -> Callable[[Any], float]:
    n = eligible.sum().item()
    return lambda out: (out[1] != -100).sum().item() / n


def frac_mask(eligible: torch.Tensor | None) -> Callable[[Any], float]:
    if eligible is None:
        return lambda m: torch.as_tensor(m).float().mean().item()
    n = eligible.sum().item()
    return lambda m: (torch.as_tensor(m) & eligible).sum().item() / n


def mae_argsort_mask(shape: tuple[int, ...], ratio: float, g: torch.Generator) -> torch.Tensor:
    """MAE's reference random masking (models_mae.random_masking): argsort of noise, twice, and a gather."""
    Bn, n = shape[0], int(np.prod(shape[1:]))
    noise = torch.rand(Bn, n, generator=g)
    ids_restore = torch.argsort(torch.argsort(noise, dim=1), dim=1)
    keep = int(n * (1 - ratio))
    mask = torch.ones(Bn, n)
    mask[:, :keep] = 0
    return torch.gather(mask, 1, ids_restore).bool().reshape(shape)


# ------------------------------------------------------------------------------------------- jobs


def build_jobs(text: Text, transformers) -> tuple[list[Job], list[str]]:
    from transformers import DataCollatorForLanguageModeling  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)
    from transformers.models.wav2vec2.modeling_wav2vec2 import _compute_mask_indices  # noqa: PLC0415 (an optional extra (requirements-bench.txt / the OIDC test provider): imported by the case that uses it)

    notes: list[str] = []
    g = torch.Generator().manual_seed(0)
    np.random.seed(0)  # _compute_mask_indices draws from numpy's global RNG
    ids, tok = text.input_ids, text.hf_tokenizer
    eligible = text_eligible(text)
    mlm_kw = dict(mask_token_id=text.mask_id, vocab_size=text.vocab_size, special_ids=text.special_ids)
    jobs: list[Job] = []

    def apply_mlm(mask, **shares):
        return _apply(ids, mask, generator=g, **mlm_kw, **shares)

    # seed= makes HF draw from its own torch.Generator too (create_rng is what its __call__ does first)
    hf_mlm = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, seed=0)
    hf_mlm.create_rng("pt")
    # What a dataset hands the collator: per-example lists (with the special-tokens mask, HF's advice).
    mlm_examples = [{"input_ids": r, "special_tokens_mask": m} for r, m in zip(ids.tolist(), text.special.tolist())]
    mlm_refs = [
        Ref("HF MLM torch_mask_tokens", lambda: hf_mlm.torch_mask_tokens(ids.clone(), special_tokens_mask=text.special),
            frac_labels(eligible), 10.0),
        Ref("HF MLM __call__(examples)", lambda: (lambda o: (o["input_ids"], o["labels"]))(hf_mlm(mlm_examples)),
            frac_labels(eligible), 10.0),
    ]
    for name in ("bernoulli", "random"):
        strat = get_masking(name)
        jobs.append(Job(
            f"{name} + 80/10/10", (B, L),
            lambda s=strat: apply_mlm(s((B, L), 0.15, generator=g, eligible=eligible)), frac_labels(eligible),
            mlm_refs))

    if "whole_word_mask" not in DataCollatorForLanguageModeling.__dataclass_fields__:
        raise SystemExit(f"transformers {transformers.__version__} has no whole_word_mask option; "
                         f"install requirements-bench.txt")

    with warnings.catch_warnings():  # "Setting mask_replace_prob to 1": its documented whole-word behaviour
        warnings.simplefilter("ignore")
        hf_wwm = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, whole_word_mask=True, seed=0)
    hf_wwm.create_rng("pt")
    wwm = get_masking("whole_word") if "whole_word" in MASKING_REGISTRY else None
    wwm_examples = [{"input_ids": r, "special_tokens_mask": m, "offset_mapping": o}
                    for r, m, o in zip(ids.tolist(), text.special.tolist(), text.offsets.tolist())]
    jobs.append(Job(
        "whole_word + [MASK]", (B, L),  # HF's whole-word job replaces with [MASK] only: so does this one
        (lambda: apply_mlm(wwm((B, L), 0.15, generator=g, eligible=eligible, word_ids=text.word_ids),
                           mask_share=1.0, random_share=0.0))
        if wwm else None, frac_labels(eligible),
        [Ref("HF WWM torch_mask_tokens",
             lambda: hf_wwm.torch_mask_tokens(ids.clone(), special_tokens_mask=text.special,
                                              offset_mapping=text.offsets), frac_labels(eligible), 10.0),
         Ref("HF WWM __call__(examples)", lambda: (lambda o: (o["input_ids"], o["labels"]))(hf_wwm(wwm_examples)),
             frac_labels(eligible), 10.0)]))

    jobs.append(Job(
        "whole_word + 80/10/10", (B, L),
        (lambda: apply_mlm(wwm((B, L), 0.15, generator=g, eligible=eligible, word_ids=text.word_ids)))
        if wwm else None, frac_labels(eligible), note="BERT's replacement; no HF counterpart in transformers 5"))

    span = get_masking("span") if "span" in MASKING_REGISTRY else None
    jobs.append(Job(
        "span fixed 10 @ 0.65", (B, 500),
        (lambda: span((B, 500), 0.65, generator=g, lengths="fixed", max_len=10)) if span else None,
        frac_mask(None),
        [Ref("HF wav2vec2 spans", lambda: _compute_mask_indices((B, 500), mask_prob=0.65, mask_length=10, min_masks=2),
             frac_mask(None), 5.0)]))

    # Every registered strategy, mask only, at each natural shape it accepts, default params.
    side_cache: dict[tuple[str, tuple[int, ...]], tuple[torch.Tensor | None, str]] = {}
    waves: list[np.ndarray] = []

    def side_input(strat, need: str, shape: tuple[int, ...]):
        key = (need, shape)
        if key in side_cache:
            return side_cache[key][0]
        val, how = None, ""
        if need == "word_ids" and shape == (B, L):
            val, how = text.word_ids, "tokenizer word_ids"
        elif need == "segments" and len(shape) == 3:
            P = 2  # MNIST 28x28 with 2x2 patches -> a 14x14 grid
            if shape[1:] == (14, 14):
                kw = {k: v for k, v in strat.params().model_dump().items() if k in ("n_segments", "compactness")}
                val = superpixel_segments(mnist_images(B), P, **kw)
                how = "superpixel_segments on MNIST t10k"
        elif need == "voiced":
            if not waves:
                waves.extend(fsdd_waves(B))
            val, how = voiced_for(shape[-1], waves)
            how += f"; {val.float().mean().item():.0%} of frames voiced"
        side_cache[key] = (val, how)
        if val is not None:
            notes.append(f"side input {need} {tuple(val.shape)}: {how} (outside timing)")
        return val

    for name, strat in MASKING_REGISTRY.items():
        n_jobs = len(jobs)
        for (dims, modality), shape in SHAPES.items():
            if dims not in strat.grid_dims:
                continue
            if dims == 2 and modality not in strat.modalities:
                continue
            ratio = RATIOS[(dims, modality)]
            elig = eligible if shape == (B, L) and "text" in strat.modalities else None
            job = Job(name, shape, None, frac_mask(elig), ratio=ratio, eligible=elig)
            if name == "span":
                job.note = "default params: SpanBERT geometric p=0.2, max 10"
            try:
                side = {n: side_input(strat, n, shape) for n in strat.needs}
                missing = [n for n, v in side.items() if v is None]
                if missing:
                    job.note = f"skipped: no {', '.join(missing)} for this shape"
                else:
                    job.ours = (lambda s=strat, sh=shape, r=ratio, e=elig, kw=side:
                                s(sh, r, generator=g, eligible=e, **kw))
            except Exception as e:  # noqa: BLE001  a side input failed: show it in the row
                job.note = f"error preparing side inputs: {type(e).__name__}: {e}"
            if name == "random" and shape == (B, 14, 14):
                job.refs = [Ref("argsort of noise (MAE)", lambda: mae_argsort_mask((B, 14, 14), 0.75, g),
                                frac_mask(None))]
            jobs.append(job)
        if len(jobs) == n_jobs:
            jobs.append(Job(name, (B,), None, frac_mask(None), note=f"skipped: no benchmark shape for grid_dims "
                            f"{strat.grid_dims}, modalities {strat.modalities}"))
    return jobs, notes


# ------------------------------------------------------------------------------------------- main


VS_RANDOM = 1.5  # issue 15: block and hierarchical within 1.5x of random's masks/s on the same grid


def random_ref(job: Job) -> Ref:
    """``random`` at the job's shape, ratio and eligibility, as a reference timed in turns with the job."""
    rnd, g = get_masking("random"), torch.Generator().manual_seed(0)
    return Ref("random, same grid", lambda: rnd(job.shape, job.ratio, generator=g, eligible=job.eligible),
               job.ours_frac, 1.0 / VS_RANDOM)


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x" if r < 1.0 else f"{r:.1f}x"


def fmt_rate(r: float | None) -> str:
    return "-" if r is None else f"{r:,.0f}"


def fmt_frac(f: float | None) -> str:
    return "-" if f is None else f"{f:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds per timed repeat (default 1.0)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per job; the median is shown (default 5)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 0.05 s x 1 repeat per job")
    ap.add_argument("--only", default="", help="run only jobs whose name contains this (comma-separated)")
    ap.add_argument("--shape", default="",
                    help="run only jobs at these shapes, e.g. 256x128x100 (comma-separated; see SHAPES)")
    ap.add_argument("--vs-random", action="store_true",
                    help="time `random` at the same shape and ratio as each other strategy, interleaved with it "
                         f"(target: random at most {VS_RANDOM:g}x as fast)")
    args = ap.parse_args()
    if args.quick:
        args.min_time, args.repeats = 0.05, 1
    if args.repeats < 1 or not args.min_time > 0:
        ap.error("--repeats must be >= 1 and --min-time > 0")
    transformers = need_hf()
    torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    text = make_text()
    jobs, notes = build_jobs(text, transformers)
    setup_s = time.perf_counter() - t0
    if args.only:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        jobs = [j for j in jobs if any(k in j.name for k in keys)]
    if args.shape:
        try:
            shapes = {tuple(int(v) for v in t.strip().split("x")) for t in args.shape.split(",") if t.strip()}
        except ValueError:
            ap.error(f"--shape: expected sizes like 256x128x100, got {args.shape!r}")
        jobs = [j for j in jobs if j.shape in shapes]
    if args.vs_random:
        for j in jobs:
            if j.ratio is not None and j.name != "random" and j.ours is not None:
                j.refs.append(random_ref(j))

    print(f"masklab masking benchmark: torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads, batch {B}, median of {args.repeats} x >= {args.min_time:g} s "
          f"(masklab and its references take turns every {args.min_time / 10:g} s)")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} before timing "
          "(other processes distort the figures: run it on a quiet machine)")
    print(f"text: AG News ({text.n_articles} articles packed) -> WordPiece vocab {text.vocab_size} trained "
          f"in-process, {B} rows x {L} tokens [CLS] ... [SEP]; the same input_ids go to HF and masklab")
    print("outside timing (done once, like tokenization): word_ids, offset_mapping, special-token masks "
          f"(setup {setup_s:.1f} s)")
    print("HF MLM torch_mask_tokens: DataCollatorForLanguageModeling.torch_mask_tokens(input_ids.clone(), "
          "special_tokens_mask), the masking part of its __call__ (no collation; special tokens not recomputed)")
    print("HF MLM __call__(examples): the public call on 256 dicts of lists (input_ids, special_tokens_mask), "
          "as a DataLoader hands them: collation + the masking above")
    print("HF WWM: DataCollatorForLanguageModeling(whole_word_mask=True) (transformers 5 folded "
          "DataCollatorForWholeWordMask into it), given offset_mapping; it recomputes word starts from the "
          "offsets inside the call (its design: a word is a run of tokens with no character gap, so 'talks.' is one "
          "word; masklab's word_ids come from the BERT pre-tokenizer, punctuation apart) and replaces with [MASK] "
          "only (it forces mask_replace_prob=1)")
    print("HF wav2vec2: _compute_mask_indices((256, 500), 0.65, 10, min_masks=2) -> numpy bool mask; its "
          "mask_prob is an upper bound (spans overlap), masklab's span masks exactly round(0.65 * 500)")
    for n in notes:
        print(n)
    print("ratio: tokens 0.15 (BERT), patches 0.75 (MAE), spectrogram 0.8 (Audio-MAE), video 0.9 (VideoMAE); "
          "text strategies get eligible = non-special tokens (engine.masking.mlm.special_tokens_eligible)")
    print("masked = mean fraction of eligible positions masked (labels != -100 for MLM jobs); "
          "ratio = masklab masks/s / reference masks/s")
    print()
    hdr = (f"{'job':<22} {'shape':<12} {'masklab/s':>10} {'masked':>6}   {'reference':<26} {'ref/s':>9} "
           f"{'masked':>6} {'ratio':>7}  target")
    print(hdr)
    print("-" * len(hdr))
    failed, verdicts = 0, []
    for j in jobs:
        err = j.note
        fns = [ref.fn for ref in j.refs]
        if j.ours is not None:
            try:
                j.ours()  # fail fast, before timing the references
                fns.insert(0, j.ours)
            except Exception as e:  # noqa: BLE001  keep benchmarking the others; the row says why
                err, failed = f"error: {type(e).__name__}: {e}", failed + 1
        elif not err:
            err = "not registered yet"
        timed = rates(fns, B, args.min_time, args.repeats, called=len(fns) - len(j.refs))
        ours = of = None
        if len(fns) > len(j.refs):
            (ours, out), timed = timed[0], timed[1:]
            of = j.ours_frac(out)
        left = f"{j.name:<22} {'x'.join(map(str, j.shape)):<12} {fmt_rate(ours):>10} {fmt_frac(of):>6}"
        if not j.refs:
            print(left + (f"   [{err}]" if err else ""), flush=True)
        for i, (ref, (r, out)) in enumerate(zip(j.refs, timed)):
            ratio = ours / r if ours else None
            tgt = ""
            if ref.target is not None:
                ok = ratio is not None and ratio >= ref.target
                tgt = f">= {ref.target:.3g}x {'ok' if ok else 'MISSED'}"
                inv = f", i.e. {ref.name} / {j.name} = {1 / ratio:.2f}x" if ratio and ref.target < 1 else ""
                verdicts.append(f"{j.name} vs {ref.name}: {fmt_ratio(ratio)}{inv} "
                                f"(target >= {ref.target:.3g}x): {'ok' if ok else 'MISSED'}")
            print((left if i == 0 else " " * len(left))
                  + f"   {ref.name:<26} {fmt_rate(r):>9} {fmt_frac(ref.frac(out)):>6} "
                  + f"{fmt_ratio(ratio):>7}  {tgt}"
                  + (f"  [{err}]" if err and i == 0 else ""), flush=True)
    print(f"load average after timing: {os.getloadavg()[0]:.2f}")
    if verdicts:
        print()
        print("acceptance:")
        for v in verdicts:
            print("  " + v)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
