"""Name -> implementation registries (masking strategies, model archs, and later objectives)."""

from __future__ import annotations

from typing import Callable, TypeVar

T = TypeVar("T")


def registrar(registry: dict[str, T], kind: str, name: str) -> Callable[[T], T]:
    """Decorator that stores the decorated object in ``registry[name]`` and returns it unchanged.

    Args:
        registry: the dict to add to.
        kind: what is registered, for the error message (e.g. "masking strategy").
        name: the key (the config value that selects it).

    Raises:
        ValueError: ``name`` is already registered (two entries must not silently shadow each other).
    """

    def deco(obj: T) -> T:
        if name in registry:
            raise ValueError(f"{kind} {name!r} is already registered ({registry[name]!r})")
        registry[name] = obj
        return obj

    return deco
