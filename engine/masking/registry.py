"""The masking registry: strategies are pure functions registered by name.

A strategy has the signature of :class:`MaskFn`::

    fn(shape, ratio, *, generator, eligible=None) -> BoolTensor[shape]   # True = masked

so the dashboard's preview, the training loop and the tests call every strategy the same way, and a
test parametrized over :data:`MASKING_REGISTRY` covers a new strategy for free (timm's pattern).
"""

from __future__ import annotations

from typing import Callable, Protocol, TypeVar

import torch

from engine.errors import ConfigError
from engine.registry import registrar


class MaskFn(Protocol):
    """A masking strategy.

    Args:
        shape: ``(B, *grid)``, e.g. ``(B, L)`` for tokens or ``(B, h, w)`` for a patch grid.
        ratio: fraction of (eligible) positions to mask, in [0, 1].
        generator: the only source of randomness (no global RNG), so a seed fixes the mask.
        eligible: optional bool tensor of ``shape``; False positions are never masked.

    Returns:
        Bool tensor of ``shape`` on ``generator.device``; True = masked (hidden from the encoder).
    """

    def __call__(
        self,
        shape: tuple[int, ...],
        ratio: float,
        *,
        generator: torch.Generator,
        eligible: torch.Tensor | None = None,
    ) -> torch.Tensor: ...


MASKING_REGISTRY: dict[str, MaskFn] = {}

_F = TypeVar("_F", bound=Callable[..., torch.Tensor])


def register_masking(name: str) -> Callable[[_F], _F]:
    """Decorator: register a :class:`MaskFn` under ``name`` (the value of ``masking.strategy``).

    Raises:
        ValueError: ``name`` is already registered (two strategies must not silently shadow each other).
    """
    return registrar(MASKING_REGISTRY, "masking strategy", name)


def get_masking(name: str) -> MaskFn:
    """The strategy registered as ``name``.

    Raises:
        ConfigError: unknown name; the message lists the known strategies.
    """
    try:
        return MASKING_REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(MASKING_REGISTRY)) or "(none)"
        raise ConfigError(f"masking.strategy: unknown strategy {name!r}; known strategies: {known}") from None


def check_ratio(ratio: float) -> float:
    """Validate a mask ratio; returns it as a float.

    Raises:
        ConfigError: ``ratio`` is not a number in [0, 1]; the message names ``masking.ratio`` and the value.
    """
    try:
        r = float(ratio)
    except (TypeError, ValueError):
        raise ConfigError(f"masking.ratio: must be a number in [0, 1] (got {ratio!r})") from None
    if not 0.0 <= r <= 1.0:  # also rejects NaN
        raise ConfigError(f"masking.ratio: must be in [0, 1] (got {ratio!r})")
    return r
