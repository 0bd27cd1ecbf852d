"""Audio features: log-mel spectrograms of the clips, their windows and normalisation, voiced frames,
Griffin-Lim inversion (see :mod:`engine.audio.features`)."""

from engine.audio.features import ClipFeatures, FeatureSpec, LogMel, window_frames

__all__ = ["ClipFeatures", "FeatureSpec", "LogMel", "window_frames"]
