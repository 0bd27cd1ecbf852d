"""Hand-made audio features a learned representation must beat in a probe.

- :func:`logmel_stats`: each clip's mean and standard deviation of every log-mel bin over its frames
  (``[N, 2F]``), the classic utterance-level feature (SUPERB's FBANK baseline, mean-pooled).

References: Yang et al. 2021, "SUPERB: Speech processing Universal PERformance Benchmark" (FBANK
baseline).
"""

from __future__ import annotations

import numpy as np
import torch


def logmel_stats(feats, rows: np.ndarray | None = None) -> np.ndarray:
    """Mean and standard deviation over time of each mel bin of the clips ``rows`` (all when None).

    Args:
        feats: :class:`engine.audio.features.ClipFeatures` (normalised log-mel frames).
        rows: clip indices.

    Returns:
        float32 ``[len(rows), 2F]``: the ``F`` means, then the ``F`` standard deviations (0 for a
        one-frame clip).
    """
    rows = np.arange(len(feats)) if rows is None else np.asarray(rows)
    out = np.zeros((len(rows), 2 * feats.spec.n_mels), np.float32)
    for k, r in enumerate(rows):
        m = feats.clip_logmel(int(r))  # (F, n)
        std = m.std(dim=1, unbiased=False) if m.shape[1] > 1 else torch.zeros(m.shape[0])
        out[k] = torch.cat([m.mean(dim=1), std]).numpy()
    return out
