"""Name -> implementation registries (masking strategies, model archs, and later objectives)."""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable, TypeVar

from pydantic import BaseModel, ValidationError

from engine.errors import ConfigError
from engine.messages import field_problems

PLUGINS_ENV = "MASKLAB_PLUGINS"
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


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


def registrar_for(registry: dict[str, T], kind: str) -> Callable[..., Callable[[T], T]]:
    """A decorator factory ``register(*names)`` that stores the decorated object under each of
    ``names`` with :func:`registrar` (e.g. one evaluation entry for ``audio_mae`` and ``audio_frames``).

    Raises:
        ValueError: (when decorating) a name is already registered.
    """

    def register(*names: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            for name in names:
                registrar(registry, kind, name)(obj)
            return obj

        return deco

    return register


def validate_params(model: type[M], params: dict[str, Any] | None, prefix: str, owner: str) -> M:
    """Validate a registered entry's own parameters (a strategy's ``masking.params``, a task's
    ``task_params``) against its pydantic ``model``.

    Args:
        model: the parameter model (``extra="forbid"``).
        params: the raw dict (None = all defaults).
        prefix: the config path for messages, e.g. ``"masking.params"``.
        owner: what the parameters belong to, e.g. ``"strategy 'span'"``.

    Raises:
        ConfigError: unknown key or bad value; the message names ``<prefix>.<field>`` and the value.
    """
    try:
        return model.model_validate(params or {})
    except ValidationError as e:
        parts = []
        for loc, text, _ in field_problems(e, prefix):
            if text == "unknown field":
                text = f"unknown parameter of {owner} (its parameters: {', '.join(model.model_fields) or 'none'})"
            parts.append(f"{loc}: {text}" if loc else text)
        raise ConfigError("; ".join(parts)) from None


def load_plugins() -> None:
    """Import the modules listed in ``$MASKLAB_PLUGINS`` (comma-separated module names, importable
    from the repo root or ``PYTHONPATH``): a lab's own tasks and modalities register on import.
    Cheap after the first call (imported modules are cached).

    Raises:
        ConfigError: a module cannot be imported (names it and the variable).
    """
    for mod in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise ConfigError(f"${PLUGINS_ENV}: cannot import plug-in module {mod!r}: {e}") from e
