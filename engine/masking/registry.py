"""The masking registry: strategies are pure functions registered by name, with their parameters.

Every strategy is a function with the signature::

    fn(shape, ratio, *, generator, eligible=None, **params, **side_inputs) -> BoolTensor[shape]

- ``shape`` is ``(B, *grid)``: ``(B, L)`` tokens or frames, ``(B, h, w)`` image patches,
  ``(B, F, T)`` time-frequency cells (frequency first, time last), ``(B, T, h, w)`` video tubes.
- ``ratio`` is the fraction of eligible positions to mask (strategies with their own budget, e.g.
  SpecAugment's widths or a fixed region, ignore it: ``uses_ratio=False``).
- ``generator`` is the only source of randomness (no global RNG), so a seed fixes the mask; the mask
  lives on ``generator.device``.
- ``eligible`` (bool, ``shape``) marks the positions that may be masked: False for padding, special
  tokens, silence. Ineligible positions are never masked. A row with no eligible position is all False.
- ``params`` are the strategy's own parameters, validated by its pydantic model
  (:attr:`MaskingStrategy.params`); ``side_inputs`` are per-sample data a semantic strategy needs
  (``word_ids``, ``segments``, ``voiced``, ``sentence_ids``, ``attention``: see :attr:`MaskingStrategy.needs`).
- The result is a bool tensor of ``shape``; True = masked (hidden from the encoder).

A :class:`MaskingStrategy` record carries the function with what the config validator, the
dashboard and the tests need to know about it, so a test parametrized over
:data:`MASKING_REGISTRY` covers a new strategy for free (timm's registry pattern).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from pydantic import BaseModel, ConfigDict

from engine.errors import ConfigError, DatasetError
from engine.modalities import get_modality, modality_names
from engine.modalities.grids import GRID_KINDS, lineage
from engine.registry import validate_params

#: Side inputs a semantic strategy may need, with their shapes.
SIDE_INPUTS = {
    "word_ids": "int64 [B, L]: word index of each token, -1 for tokens outside any word (tokenizer word_ids)",
    "segments": "int64 [B, *grid]: region label of each position, e.g. a SLIC superpixel per patch",
    "voiced": "bool [B, T]: True for voiced time frames (T = the last grid axis)",
    "sentence_ids": "int64 [B, L]: sentence index of each token, -1 at special tokens and padding (tokenizer)",
    "attention": "float [B, *grid]: how much each position is attended (e.g. a teacher's class-token attention); "
                 "higher = more attended",
}


class StrategyParams(BaseModel):
    """Base of every strategy's parameter model: strict (unknown keys are errors), immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoParams(StrategyParams):
    """A strategy without parameters of its own (the mask ratio is its whole budget)."""


@dataclass(frozen=True)
class MaskingStrategy:
    """A registered masking strategy: the pure function plus what callers need to know about it.

    Attributes:
        name: the ``masking.strategy`` value.
        fn: the mask function (see the module docstring for its signature).
        params: pydantic model of the strategy's own parameters (``masking.params``).
        grid_dims: numbers of grid dims the strategy accepts, e.g. ``(1,)`` for ``[B, L]`` only,
            ``(2,)`` for ``[B, h, w]`` / ``[B, F, T]``, ``(3,)`` for ``[B, T, h, w]``.
        grids: the grid kinds it works on (keys of :data:`engine.modalities.grids.GRID_KINDS`; a kind
            that *is a* listed one counts too), or None: any grid of its :attr:`grid_dims`. It is
            offered for a modality whose :attr:`~engine.modalities.Modality.grids` it works on.
        uses_ratio: whether ``masking.ratio`` sets the budget (False: the params do).
        exact: every row with ``n`` eligible positions gets exactly ``round(ratio * n)`` masked.
        needs: side inputs it requires (keys of :data:`SIDE_INPUTS`).
        stochastic: False for rule-based strategies whose mask does not depend on the generator.
        summary: one line for the dashboard, with the paper it comes from.
    """

    name: str
    fn: Callable[..., torch.Tensor]
    params: type[StrategyParams] = NoParams
    grid_dims: tuple[int, ...] = (1, 2, 3)
    grids: tuple[str, ...] | None = None
    uses_ratio: bool = True
    exact: bool = False
    needs: tuple[str, ...] = ()
    stochastic: bool = True
    summary: str = ""

    def works_on(self, kind: str) -> bool:
        """Whether the strategy masks grids of ``kind`` (or of a kind ``kind`` is, :func:`~engine.modalities.grids.lineage`).

        Raises:
            ValueError: unknown kind.
        """
        kinds = lineage(kind)
        if GRID_KINDS[kind].dims not in self.grid_dims:
            return False
        return self.grids is None or bool(kinds & set(self.grids))

    @property
    def modalities(self) -> tuple[str, ...]:
        """The registered modalities it is offered for (derived from the grid kinds), in registration order."""
        return tuple(m for m in modality_names() if any(self.works_on(k) for k in get_modality(m).grids))

    def __call__(self, shape, ratio=0.0, *, generator: torch.Generator, eligible=None, **kwargs) -> torch.Tensor:
        """Call :attr:`fn` (parameters not given take their defaults from :attr:`params`)."""
        return self.fn(shape, ratio, generator=generator, eligible=eligible, **kwargs)

    def parse_params(self, params: dict[str, Any] | None, prefix: str = "masking.params") -> StrategyParams:
        """Validate ``params`` against :attr:`params`.

        Raises:
            ConfigError: unknown key or bad value; the message names ``<prefix>.<field>`` and the value.
        """
        return validate_params(self.params, params, prefix, f"strategy {self.name!r}")

    def check_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """``shape`` as a tuple of ints, checked against :attr:`grid_dims`.

        Raises:
            ValueError: wrong number of dims (the message names the strategy and the accepted grids).
        """
        shape = tuple(int(s) for s in shape)
        if len(shape) - 1 not in self.grid_dims:
            grids = {1: "[B, L]", 2: "[B, H, W] or [B, F, T]", 3: "[B, T, H, W]"}
            ok = " or ".join(grids[d] for d in self.grid_dims)
            raise ValueError(f"masking strategy {self.name!r}: shape {shape} is not a {ok} grid")
        return shape


MASKING_REGISTRY: dict[str, MaskingStrategy] = {}


def register_masking(
    name: str,
    *,
    params: type[StrategyParams] = NoParams,
    grid_dims: tuple[int, ...] = (1, 2, 3),
    grids: tuple[str, ...] | None = None,
    uses_ratio: bool = True,
    exact: bool = False,
    needs: tuple[str, ...] = (),
    stochastic: bool = True,
    summary: str = "",
) -> Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]:
    """Decorator: register a mask function as strategy ``name`` (the value of ``masking.strategy``).

    The function itself is returned unchanged; the registry holds a :class:`MaskingStrategy`.

    Raises:
        ValueError: ``name`` is already registered, or ``grids`` / ``needs`` name something unknown.
    """
    bad = [g for g in grids or () if g not in GRID_KINDS] + [n for n in needs if n not in SIDE_INPUTS]
    if bad:
        raise ValueError(f"register_masking({name!r}): unknown grid kind or side input {bad}")

    def deco(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        if name in MASKING_REGISTRY:
            raise ValueError(f"masking strategy {name!r} is already registered ({MASKING_REGISTRY[name].fn!r})")
        MASKING_REGISTRY[name] = MaskingStrategy(
            name=name, fn=fn, params=params, grid_dims=tuple(grid_dims), grids=None if grids is None else tuple(grids),
            uses_ratio=uses_ratio, exact=exact, needs=tuple(needs), stochastic=stochastic,
            summary=summary or (fn.__doc__ or "").strip().splitlines()[0],
        )
        return fn

    return deco


def get_masking(name: str) -> MaskingStrategy:
    """The strategy registered as ``name``.

    Raises:
        ConfigError: unknown name; the message lists the known strategies.
    """
    try:
        return MASKING_REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(MASKING_REGISTRY)) or "(none)"
        raise ConfigError(f"masking.strategy: unknown strategy {name!r}; known strategies: {known}") from None


def strategies_on(kind: str, grid_dims: int | None = None) -> list[str]:
    """Names of the strategies that work on grid kind ``kind`` (:meth:`MaskingStrategy.works_on`), sorted;
    ``grid_dims``: only if the kind has that many dims.

    Raises:
        ValueError: unknown kind.
    """
    lineage(kind)  # unknown kind: ValueError
    if grid_dims is not None and GRID_KINDS[kind].dims != grid_dims:
        return []
    return sorted(n for n, s in MASKING_REGISTRY.items() if s.works_on(kind))


def strategies_for(modality: str, grid_dims: int | None = None) -> list[str]:
    """Names of the strategies offered for ``modality``: those working on one of its grid kinds
    (:attr:`engine.modalities.Modality.grids`) with ``grid_dims`` dims (None: any), sorted. An
    unknown modality, or one without grids of its own (``paired``), gets none."""
    try:
        kinds = get_modality(modality).grids
    except DatasetError:
        return []
    return sorted({n for k in kinds for n in strategies_on(k, grid_dims)})


def check_ratio(ratio: float, field_name: str = "masking.ratio") -> float:
    """Validate a mask ratio; returns it as a float.

    Raises:
        ConfigError: ``ratio`` is not a number in [0, 1]; the message names the field and the value.
    """
    try:
        r = float(ratio)
    except (TypeError, ValueError):
        raise ConfigError(f"{field_name}: must be a number in [0, 1] (got {ratio!r})") from None
    if not 0.0 <= r <= 1.0:  # also rejects NaN
        raise ConfigError(f"{field_name}: must be in [0, 1] (got {ratio!r})")
    return r


def check_eligible(eligible: torch.Tensor | None, shape: tuple[int, ...], device: torch.device, name: str):
    """``eligible`` as a bool tensor of ``shape`` on ``device`` (None stays None).

    Raises:
        ValueError: ``eligible`` does not have ``shape`` (the message names the strategy).
    """
    if eligible is None:
        return None
    if tuple(eligible.shape) != tuple(shape):
        raise ValueError(f"masking strategy {name!r}: eligible has shape {tuple(eligible.shape)}, expected {tuple(shape)}")
    return eligible.to(device=device, dtype=torch.bool)
