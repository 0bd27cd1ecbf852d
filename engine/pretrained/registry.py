"""The imported models' error and the registry of their architectures' builders.

A leaf module (it imports no other ``engine.pretrained`` module), so that an arch module
(:mod:`engine.pretrained.text`, :mod:`engine.pretrained.image`) registers its builder here without
importing :mod:`engine.pretrained.store`, which imports the arch modules (through
:mod:`engine.pretrained.archs`) to load a model: importing the store from them would be an import
cycle (tests/test_import_graph.py). :mod:`engine.pretrained.store` re-exports all three names.
"""

from __future__ import annotations

from typing import Any, Callable

from engine.errors import MasklabError


class PretrainedError(MasklabError):
    """An imported model cannot be imported, found or loaded; the message names the file and the problem."""


# arch -> builder(arch_config) -> nn.Module (in eval mode, random weights). Filled by the arch modules.
PRETRAINED_ARCHS: dict[str, Callable[[dict[str, Any]], Any]] = {}


def register_pretrained_arch(arch: str) -> Callable:
    """Decorator: ``builder(arch_config) -> nn.Module`` for imported models of ``arch``."""

    def deco(fn):
        PRETRAINED_ARCHS[arch] = fn
        return fn

    return deco
