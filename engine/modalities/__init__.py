"""Modalities: one registration per kind of data, from which every per-modality table is derived.

A :class:`Modality` declares its dataset class (how its rows are stored), its importers and the
sources each claims (file suffixes, the shape of a zip or folder, or a look at the file), and the
masking grid kinds its units form (:data:`engine.modalities.grids.GRID_KINDS`: a strategy is offered for a
modality when it works on one of those kinds). What needs a model (probe features, fine-tuning
inputs, reconstruction figures and their baselines) is a :class:`engine.tasks.Task` hook
(:meth:`~engine.tasks.Task.features`, :meth:`~engine.tasks.Task.finetune_inputs`,
:meth:`~engine.tasks.Task.reconstruction_quality`), since a task owns the model and its view of the data.

    >>> get_modality("text").grids
    ('tokens-1d',)
    >>> [i.name for i in importers()]          # the order detection tries them in
    ['idx', 'paired', 'image', 'audio', 'text']

Built-in modalities register on import (:mod:`engine.modalities.image`, ``text``, ``audio``,
``paired``); a lab's own modality registers from a module listed in ``$MASKLAB_PLUGINS`` (loaded
with the tasks, in every process: :func:`engine.registry.load_plugins`), so a new modality is new
files plus one :func:`register_modality`.

This module and the built-in declarations import nothing heavy: importers and dataset readers are
reached through functions that import their modules when called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.errors import DatasetError
from engine.modalities.grids import GRID_KINDS
from engine.registry import load_plugins, registrar


@dataclass(frozen=True)
class Importer:
    """One way of importing a source as a dataset of a modality.

    Attributes:
        name: the source kind (:func:`engine.data.ingest.detect_source`'s answer), e.g. ``"idx"``.
        modality: the modality of the datasets it writes (set by :func:`register_modality`).
        inspect: ``(path, options, label) -> SourcePlan``, nothing written.
        run: ``(path, name, options, **kw) -> report`` (``kw``: :func:`engine.data.import_source`'s
            keywords); the report has ``summary()``, ``dataset``, ``accepted``, ``rejected``, ``skipped``.
        files: lower-case suffixes of a single file it reads (``".csv"``).
        tree: suffixes of the files of a zip or folder that make it this importer's.
        claims_file: a further look at a single file with one of :attr:`files` (e.g. a CSV of numbers
            only); None claims every such file.
        claims_tree: ``(names in the zip or folder) -> bool``: a shape that claims a tree whatever
            its suffixes (MNIST's IDX pair, image-caption pairs); tried before any :attr:`tree` suffix.
        lone_file: the message when a single file has one of :attr:`tree` suffixes but no importer
            reads it alone ("a single image; put the images in a .zip").
        options: :class:`~engine.data.tabular.ImportOptions` fields that only it reads (others refuse them).
        columns: whether it reads the table column options (``*_column``); False refuses them.
        preload: modules the background import loads before its memory cap (:mod:`engine.data.jobs`).
        order: detection tries importers by increasing order (ties: registration order). Built-in:
            idx 10, paired 20, image 30, audio 40, text 50 (a zip's images before its audio before
            its ``.txt`` files, so a README.txt beside the clips does not make a text corpus).
    """

    name: str
    inspect: Callable[..., Any]
    run: Callable[..., Any]
    modality: str = ""
    files: tuple[str, ...] = ()
    tree: tuple[str, ...] = ()
    claims_file: Callable[[Path], bool] | None = None
    claims_tree: Callable[[list[str]], bool] | None = None
    lone_file: str = ""
    options: tuple[str, ...] = ()
    columns: bool = True
    preload: tuple[str, ...] = ()
    order: int = 100


@dataclass(frozen=True)
class Modality:
    """A kind of data masklab trains on.

    Attributes:
        name: the ``DatasetInfo.modality`` value, e.g. ``"image"``.
        dataset_type: ``() -> type``: the dataset class (a :class:`~engine.data.dataset.LabelledRows`)
            its rows are stored and read as (a function, so that listing modalities stays cheap).
        importers: how sources become datasets of it (:class:`Importer`).
        grids: masking grid kinds its units form (keys of :data:`engine.modalities.grids.GRID_KINDS`, e.g.
            ``("patch-2d",)``); ``()``: no grid of its own (strategies are chosen per part by its tasks).
        summary: one line for the dashboard.
        ui: the dotted name of the module holding its dashboard views (``"app.modalities.image"``):
            the dashboard imports it on demand and it registers an ``app.modalities.ModalityUI``;
            ``""``: the dashboard has no views for it. A string, so the engine imports no UI code.
        extras: declarations for other layers, by key (e.g. the dashboard's views); not read by the engine.
    """

    name: str
    dataset_type: Callable[[], type]
    importers: tuple[Importer, ...] = ()
    grids: tuple[str, ...] = ()
    summary: str = ""
    ui: str = ""
    extras: dict[str, Any] = field(default_factory=dict, compare=False)


MODALITY_REGISTRY: dict[str, Modality] = {}
#: The built-in modalities, registered by their modules: imported by name on the first lookup
#: (:func:`load_modalities`), as plug-ins are, so the registry imports none of them (they import it).
BUILTIN_MODULES = ("engine.modalities.image", "engine.modalities.text", "engine.modalities.audio",
                   "engine.modalities.paired")


def load_modalities() -> None:
    """Register the built-in modalities, then the plug-ins of ``$MASKLAB_PLUGINS``. Cheap after the
    first call. Raises :class:`~engine.errors.ConfigError` for a plug-in that cannot be imported."""
    for mod in BUILTIN_MODULES:
        importlib.import_module(mod)
    load_plugins()


def register_modality(modality: Modality) -> Modality:
    """Register ``modality`` under its name (its importers get ``modality=`` its name).

    Raises:
        ValueError: the name, or the name of one of its importers, is taken; a grid kind is unknown.
    """
    bad = [g for g in modality.grids if g not in GRID_KINDS]
    if bad:
        raise ValueError(f"modality {modality.name!r}: unknown grid kind(s) {bad}; known: {', '.join(GRID_KINDS)} "
                         f"(engine.modalities.grids.register_grid_kind adds one)")
    taken = {i.name for m in MODALITY_REGISTRY.values() for i in m.importers}
    clash = [i.name for i in modality.importers if i.name in taken]
    if clash:
        raise ValueError(f"modality {modality.name!r}: importer name(s) {clash} already registered")
    imps = tuple(replace(i, modality=modality.name) for i in modality.importers)
    obj = replace(modality, importers=imps, grids=tuple(modality.grids))
    return registrar(MODALITY_REGISTRY, "modality", modality.name)(obj)


def get_modality(name: str) -> Modality:
    """The modality registered as ``name`` (plug-ins from ``$MASKLAB_PLUGINS`` are imported first).

    Raises:
        DatasetError: unknown modality (lists the known ones).
    """
    if name not in MODALITY_REGISTRY:
        load_modalities()
    try:
        return MODALITY_REGISTRY[name]
    except KeyError:
        raise DatasetError(f"unknown modality {name!r}; known modalities: {', '.join(MODALITY_REGISTRY)}") from None


def modality_names() -> tuple[str, ...]:
    """Names of the registered modalities (plug-ins included), in registration order."""
    load_modalities()
    return tuple(MODALITY_REGISTRY)


def importers() -> list[Importer]:
    """Every registered importer (plug-ins included), in the order detection tries them (:attr:`Importer.order`)."""
    load_modalities()
    imps = [i for m in MODALITY_REGISTRY.values() for i in m.importers]
    return sorted(imps, key=lambda i: i.order)


def get_importer(name: str) -> Importer:
    """The importer of source kind ``name``.

    Raises:
        DatasetError: no importer has that name.
    """
    for imp in importers():
        if imp.name == name:
            return imp
    raise DatasetError(f"unknown source kind {name!r}; known: {', '.join(i.name for i in importers())}")


def reads_option(modality: str, option: str) -> bool:
    """Whether an importer of ``modality`` reads the :class:`~engine.data.tabular.ImportOptions` field
    ``option`` (e.g. ``sample_rate``: the CLI proposes a rate for audio sources)."""
    return any(option in i.options for i in get_modality(modality).importers)



__all__ = ["MODALITY_REGISTRY", "Importer", "Modality", "get_importer", "get_modality", "importers",
           "modality_names", "reads_option", "register_modality"]
