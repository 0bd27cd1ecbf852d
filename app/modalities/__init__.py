"""Per-modality UI, found through the modality registry, never by if-chains in pages.

A modality's dashboard views live in the module its :class:`engine.modalities.Modality` names as
``ui`` (``"app.modalities.image"``; a plug-in's may live anywhere, e.g. ``tests/plugins/timeseries_ui.py``).
That module registers one :class:`ModalityUI` (:func:`register_ui`) when imported; the dashboard
imports it on demand (:func:`ui_for`), so a modality is one registration on each side:

- its page functions (each optional: a page without one says so): the Data page body, New run's
  fields and mask preview, Mask lab's controls and results, the import options, a short description;
- its sample views (:class:`SampleView`): per sample kind, Run detail's view, heading and Compare's view;
- its interactive boxes by name (what a task's ``interactive`` names).

What a page used to look up by task name is a class attribute of the task
(:class:`engine.tasks.Task`: ``sample_kind``, ``interactive``, ``train_defaults``,
``task_params_defaults``); :func:`sample_title`, :func:`interactive_box`, :func:`train_defaults`
and :func:`task_params_defaults` read them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine.api import DatasetError, MasklabError, get_modality, modality_names


@dataclass(frozen=True)
class SampleView:
    """How the dashboard draws one kind of :class:`engine.store.Sample` (a task's ``sample_kind``).

    Attributes:
        kind: the sample kind, e.g. ``"image"``.
        title: Run detail's and Presentation's heading over the samples ("Reconstructions").
        view: ``(sample, run) -> None``: Run detail's view of a run's latest samples.
        compare: ``(samples: {label: Sample}) -> [(caption, uint8 image)]``: Compare's view of several
            runs' samples side by side (the images are those it drew, for the HTML report); None: none.
        cells: ``(sample, rows) -> [cell]``: the reconstruction matrix's cells of the first ``rows``
            inputs (:mod:`app.components.matrix`), each a dict of data URLs ``original``, ``recon``,
            ``error`` (optional ``audio_original``, ``audio_recon``, ``note``), or for text the escaped
            HTML ``html_original``, ``html_recon``, ``html_error``; None: no matrix for this kind.
        distance: ``sample -> (dist, errors, unit, metric)`` or None: each unit's distance to the nearest
            visible one (:func:`engine.eval.distance.distance_to_visible`), the error at each unit of the
            model and of trivial baselines (name -> ``[N, *grid]``), what a unit is and what the error
            measures; :mod:`app.components.distance` plots it. None: no such plot for this kind.
    """

    kind: str
    title: str
    view: Callable[[Any, Any], None]
    compare: Callable[[dict], list] | None = None
    cells: Callable[[Any, int], list] | None = None
    distance: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class ModalityUI:
    """A modality's dashboard views (every function optional).

    Attributes:
        modality: the :class:`engine.modalities.Modality` name.
        data_section: ``(info) -> None``: the Data page body (samples, sizes, class counts).
        run_fields: ``(info, task, key, carried) -> dict``: New run's modality fields as a partial run
            config (task, masking, model, data, objective, task_params).
        mask_preview: ``(cfg, info) -> None``: the run's own masks on real samples (New run).
        lab_controls: ``(info, handoff, key) -> dict`` and lab_results ``(cfg, info, n, url) -> None``: Mask lab;
            ``url`` (:class:`app.components.urlstate.Scope`) keeps the results' own inputs in the page's URL
            (the image view's "Attention from").
        describe: ``(info) -> str``: the dataset in a few words for the Data page's selector.
        train_defaults: ``(info, task) -> dict``: New run's training proposal for that dataset, over
            the task's ``train_defaults`` (:func:`train_defaults`).
        import_fields: ``(plan, key) -> (options, keywords)``: the Data page's import widgets for a
            source of this modality: :class:`~engine.data.tabular.ImportOptions` fields and
            ``import_source`` keywords.
        item: what one item is called in import reports ("clip"); plan_item: in the plan, before the
            import decodes them ("audio file"; ``""``: as ``item``).
        samples: its sample views, one per sample kind.
        boxes: interactive boxes ``(run, sample, url) -> None`` by name (a task's ``interactive``);
            ``url`` (:class:`app.components.urlstate.Scope`) keeps the box's inputs in the page's URL.
    """

    modality: str
    data_section: Callable | None = None
    run_fields: Callable | None = None
    mask_preview: Callable | None = None
    lab_controls: Callable | None = None
    lab_results: Callable | None = None
    describe: Callable | None = None
    train_defaults: Callable | None = None
    import_fields: Callable | None = None
    item: str = "item"
    plan_item: str = ""
    samples: tuple[SampleView, ...] = ()
    boxes: Mapping[str, Callable] = field(default_factory=dict)


UI_REGISTRY: dict[str, ModalityUI] = {}


def register_ui(ui: ModalityUI) -> ModalityUI:
    """Register ``ui`` under its modality (a module imported again replaces its own registration).

    Raises:
        ValueError: one of its sample kinds is another modality's, or declared twice.
    """
    kinds = [s.kind for s in ui.samples]
    taken = {s.kind: m for m, u in UI_REGISTRY.items() if m != ui.modality for s in u.samples}
    clash = [f"{k!r} (modality {taken[k]!r})" for k in kinds if k in taken]
    if clash or len(set(kinds)) != len(kinds):
        raise ValueError(f"UI of modality {ui.modality!r}: sample kind(s) declared twice: {clash or kinds}")
    UI_REGISTRY[ui.modality] = ui
    return ui


def ui_for(modality: str) -> ModalityUI | None:
    """The UI of ``modality``: its Modality's ``ui`` module, imported on first use; None when the
    modality is unknown here or declares no UI (the page says so).

    Raises:
        ImportError: the ``ui`` module cannot be imported, or registered no UI for ``modality``.
    """
    if modality not in UI_REGISTRY:
        try:
            name = get_modality(modality).ui
        except DatasetError:
            return None
        if not name:
            return None
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ImportError(f"modality {modality!r}: its ui module {name!r} cannot be imported: {e}") from e
        if modality not in UI_REGISTRY:
            raise ImportError(f"modality {modality!r}: its ui module {name!r} registered no ModalityUI "
                              f"for it (app.modalities.register_ui)")
    return UI_REGISTRY[modality]


def all_uis() -> list[ModalityUI]:
    """The UI of every registered modality that has one (plug-ins included)."""
    return [ui for ui in map(ui_for, modality_names()) if ui is not None]


def sample_view(kind: str) -> SampleView | None:
    """The view of samples of ``kind`` (whichever modality's UI declares it), or None."""
    return next((s for ui in all_uis() for s in ui.samples if s.kind == kind), None)


def task_of(config: dict) -> Any:
    """The task class of a stored run config, or None when its task is not registered here (a
    plug-in this dashboard does not load)."""
    from engine.api import get_task  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    try:
        return get_task((config or {}).get("task"))
    except MasklabError:
        return None


def sample_title(config: dict) -> str:
    """The heading over a run's samples: its task's sample view's title, else "Samples"."""
    task = task_of(config)
    view = sample_view(task.sample_kind) if task is not None and task.sample_kind else None
    return view.title if view is not None else "Samples"


def interactive_box(config: dict) -> Callable | None:
    """The interactive box ``(run, sample, url)`` of a run's task (its ``interactive``), declared by its
    modality's UI or, as sample views are, by any UI (the audio-text task's retrieval box is the
    paired UI's), or None."""
    task = task_of(config)
    if task is None or not task.interactive:
        return None
    own = ui_for(task.modality)
    uis = ([own] if own is not None else []) + all_uis()
    return next((ui.boxes[task.interactive] for ui in uis if task.interactive in ui.boxes), None)


def example_config(name: str) -> dict:
    """``configs/<name>.yaml``, an example config a bench measures, as a dict (New run's proposals
    are read from it, not copied)."""
    return yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / f"{name}.yaml").read_text())


def config_train(name: str) -> dict:
    """The proposal fields (steps, batch, lr, warm-up, eval and checkpoint intervals) of the ``train``
    section of ``configs/<name>.yaml`` (:func:`example_config`)."""
    train = example_config(name)["train"]
    keys = ("steps", "batch_size", "lr", "warmup_steps", "eval_interval", "checkpoint_interval")
    return {k: train[k] for k in keys if k in train}


def task_train_defaults(task: str) -> dict:
    """What New run proposes for ``task``'s training whatever the dataset: its ``train_defaults`` (a
    dict, or an example config's train section, :func:`config_train`).

    Raises:
        ConfigError: unknown task.
    """
    from engine.api import get_task  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    own = get_task(task).train_defaults
    return config_train(own) if isinstance(own, str) else dict(own)


def task_params_defaults(task: str) -> dict:
    """What New run proposes for ``task``'s ``task_params`` where its fields leave them open: its
    ``task_params_defaults`` (a dict, or an example config's ``task_params``).

    Raises:
        ConfigError: unknown task.
    """
    from engine.api import get_task  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    own = get_task(task).task_params_defaults
    return dict(example_config(own)["task_params"]) if isinstance(own, str) else dict(own)


def train_defaults(task: str, info) -> dict:
    """What New run proposes for a run's training fields on dataset ``info``, over ``TrainConfig``'s
    defaults: the task's (:func:`task_train_defaults`), then the modality UI's per-dataset recipe
    (``ModalityUI.train_defaults``: images by image size, audio-text pairs by the FSDD recipe)."""
    ui = ui_for(info.modality)
    per_dataset = ui.train_defaults(info, task) if ui is not None and ui.train_defaults is not None else {}
    return {**task_train_defaults(task), **per_dataset}
