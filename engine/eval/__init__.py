"""Evaluation: baselines a trained model is compared against (more evaluation joins here later).

Public API:
    TokenBaselines — unigram / position / bidirectional-bigram predictors for masked tokens and spans
    BASELINE_KINDS — ("unigram", "position", "bigram")
"""

from engine.eval.text_baselines import BASELINE_KINDS, TokenBaselines

__all__ = ["BASELINE_KINDS", "TokenBaselines"]
