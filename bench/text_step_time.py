"""Milliseconds per training step of the text model presets (BertMLM, SpanInfiller) on this machine.

One step = forward, cross-entropy, backward and an AdamW update, at batch 64 x 32 tokens by default.
The token ids are random (a step's cost does not depend on which ids it sees); the masks are the
ones a run uses: 15% of the words (``random`` + BERT's 80/10/10) for the MLM, one ``sentence_span``
segment (20-50% of the words) per row for span infilling.

    python bench/text_step_time.py [--threads 2] [--batch 64] [--length 32] [--vocab 8000] [--steps 20]

Prints the median step time of ``--steps`` timed steps after 3 warm-up steps, and the load average
(the development machine is shared: figures under load are slower and noisier).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from engine.masking import random_mask  # noqa: E402
from engine.masking.mlm import apply_mlm  # noqa: E402
from engine.masking.segment import sentence_span_mask  # noqa: E402
from engine.models import SPAN_PRESETS, TEXT_PRESETS, BertMLM, SpanInfiller, count_parameters, span_corrupt  # noqa: E402
from engine.models.span_infill import shift_right  # noqa: E402

SPECIALS = (0, 1, 2, 3, 4)


def text_batch(B: int, L: int, V: int, g: torch.Generator):
    """``[CLS] words [SEP] [PAD]...`` rows of L/2..L tokens; sentence ids of about 8 words."""
    n = torch.randint(L // 2, L + 1, (B,), generator=g)  # real tokens incl. CLS/SEP
    pos = torch.arange(L)[None, :]
    real = pos < n[:, None]
    ids = torch.where(real, torch.randint(5, V, (B, L), generator=g), torch.zeros(B, L, dtype=torch.long))
    ids[:, 0] = 1
    ids[torch.arange(B), n - 1] = 2
    words = real & (pos >= 1) & (pos < (n - 1)[:, None])
    sentence_ids = torch.where(words, (pos - 1) // 8, torch.full_like(ids, -1))
    return ids, real, words, sentence_ids


def time_steps(step, steps: int) -> float:
    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--length", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    B, L, V = args.batch, args.length, args.vocab
    g = torch.Generator().manual_seed(0)
    ids, real, words, sentence_ids = text_batch(B, L, V, g)
    print(f"torch {torch.__version__}, {args.threads} thread(s), batch {B} x {L} tokens, vocab {V}, "
          f"load average before: {os.getloadavg()[0]:.2f}")

    for name, sizes in TEXT_PRESETS.items():
        torch.manual_seed(0)
        model = BertMLM(V, L, **sizes)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            mask = random_mask((B, L), 0.15, generator=g, eligible=words)
            inputs, labels = apply_mlm(ids, mask, generator=g, mask_token_id=3, vocab_size=V, special_ids=SPECIALS)
            loss = F.cross_entropy(model(inputs, real, mask), labels[mask])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        ms = time_steps(step, args.steps)
        print(f"BertMLM      {name:6s} {count_parameters(model) / 1e6:6.2f}M params  {ms:8.1f} ms/step")

    for name, sizes in SPAN_PRESETS.items():
        torch.manual_seed(0)
        model = SpanInfiller(V, L, **sizes)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            span = sentence_span_mask((B, L), generator=g, sentence_ids=sentence_ids)
            ex = span_corrupt(ids, real, span)
            logits = model(ex.src_ids, ex.src_mask, shift_right(ex.tgt_ids, model.bos_id), ex.tgt_mask)
            loss = F.cross_entropy(logits[ex.tgt_mask], ex.tgt_ids[ex.tgt_mask])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        ms = time_steps(step, args.steps)
        print(f"SpanInfiller {name:6s} {count_parameters(model) / 1e6:6.2f}M params  {ms:8.1f} ms/step")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
