"""Evaluation: baselines a trained model is compared against, and linear probes on frozen features.

Public API:
    TokenBaselines — unigram / position / bidirectional-bigram predictors for masked tokens and spans
    BASELINE_KINDS — ("unigram", "position", "bigram")
    linear_probe(x_train, y_train, x_val, y_val, groups=None) -> ProbeResult — logistic-regression probe
    logmel_stats(feats, rows) — per-clip log-mel mean and std, the audio probe baseline
"""

from engine.eval.audio_baselines import logmel_stats
from engine.eval.probe import ProbeResult, linear_probe
from engine.eval.text_baselines import BASELINE_KINDS, TokenBaselines

__all__ = ["BASELINE_KINDS", "ProbeResult", "TokenBaselines", "linear_probe", "logmel_stats"]
