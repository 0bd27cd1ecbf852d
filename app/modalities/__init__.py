"""Per-modality UI, chosen by the dataset's modality or the sample's kind, never by if-chains in pages.

Each modality module provides the same functions:

- ``data_section(info)``: the Data page body (samples, sizes, class counts);
- ``run_fields(info, task, key, carried) -> dict``: New run's modality fields as a partial run
  config (task, masking, model, data, objective, task_params);
- ``mask_preview(cfg, info)``: the run's own masks on real samples (New run);
- ``lab_controls(info, handoff, key) -> dict`` and ``lab_results(cfg, info, n)``: Mask lab;
- optionally ``describe(info) -> str``: the dataset in a few words for the Data page's selector;
- optionally ``train_defaults(info, task) -> dict``: New run's training defaults for that dataset
  and task (:func:`train_defaults` merges them over the task's :data:`TRAIN_DEFAULTS`).

:data:`SAMPLE_VIEWS` maps a sample kind (:class:`engine.store.Sample`) to its view
``(sample, run) -> None`` and :data:`INTERACTIVE` a task to its interactive box ``(run, sample)``.
A new modality is one module here and its entries below.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from app.modalities import audio, image, paired, text

UIS: dict[str, ModuleType] = {"image": image, "text": text, "audio": audio, "paired": paired}
SAMPLE_VIEWS = {"image": image.samples_view, "text_mlm": text.mlm_samples_view, "text_span": text.span_samples_view,
                "audio_spec": audio.samples_view, "paired": paired.samples_view}
TASK_KIND = {"image_mim": "image", "text_mlm": "text_mlm", "text_span": "text_span",
             "audio_mae": "audio_spec", "audio_frames": "audio_spec", "paired": "paired",
             "paired_audio": "paired"}  # task -> its sample kind
SAMPLE_TITLES = {"image": "Reconstructions", "text_mlm": "Predictions on validation texts",
                 "text_span": "Completions of validation texts", "audio_spec": "Spectrograms and audio",
                 "paired": "Joint reconstructions of validation pairs"}
#: sample kind -> the Compare page's view of several runs' samples ``(samples: {label: Sample}) -> [(caption, image)]``.
COMPARE_VIEWS = {"image": image.compare_view, "text_mlm": text.compare_view, "text_span": text.compare_view,
                 "audio_spec": audio.compare_view, "paired": paired.compare_view}
INTERACTIVE = {"text_mlm": text.fill_in_box, "text_span": text.completion_box, "image_mim": image.masking_box,
               "paired": paired.retrieval_box, "paired_audio": paired.retrieval_box}
#: What New run proposes for a task's training, over ``TrainConfig``'s defaults (measured recipes:
#: see bench/README.md).
TRAIN_DEFAULTS: dict[str, dict] = {
    "text_mlm": {"steps": 2000, "batch_size": 64, "lr": 1e-3, "warmup_steps": 100, "eval_interval": 200},
    "text_span": {"steps": 2000, "batch_size": 64, "lr": 1e-3, "warmup_steps": 100, "eval_interval": 200},
    "audio_mae": {"steps": 1000, "batch_size": 32, "lr": 1.5e-3, "warmup_steps": 50, "eval_interval": 100},
    "audio_frames": {"steps": 1000, "batch_size": 32, "lr": 1.5e-3, "warmup_steps": 50, "eval_interval": 100},
}


def example_config(name: str) -> dict:
    """``configs/<name>.yaml``, an example config a bench measures, as a dict (New run's proposals
    are read from it, not copied)."""
    import yaml

    return yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / f"{name}.yaml").read_text())


def config_train(name: str) -> dict:
    """The proposal fields (steps, batch, lr, warm-up, eval and checkpoint intervals) of the ``train``
    section of ``configs/<name>.yaml`` (:func:`example_config`)."""
    train = example_config(name)["train"]
    keys = ("steps", "batch_size", "lr", "warmup_steps", "eval_interval", "checkpoint_interval")
    return {k: train[k] for k in keys if k in train}


TRAIN_DEFAULTS["paired"] = config_train("paired-tuxpaint")  # image-text; audio-text: audio.train_defaults
#: What New run proposes for a task's own parameters where the modality's fields do not fix them,
#: read once from the example config its bench measures (span: bench/README.md, "Text quality").
TASK_PARAMS_DEFAULTS: dict[str, dict] = {"text_span": example_config("mlm-span-fortunes")["task_params"]}


def train_defaults(task: str, info) -> dict:
    """What New run proposes for a run's training fields on dataset ``info``, over ``TrainConfig``'s
    defaults: the task's :data:`TRAIN_DEFAULTS`, then the modality's per-dataset recipe (the
    modality module's ``train_defaults(info, task)``, when it has one: images by image size,
    audio-text pairs by the FSDD recipe)."""
    ui = UIS.get(info.modality)
    per_dataset = ui.train_defaults(info, task) if ui is not None and hasattr(ui, "train_defaults") else {}
    return {**TRAIN_DEFAULTS.get(task, {}), **per_dataset}


def ui_for(modality: str) -> ModuleType | None:
    """The UI module of ``modality``, or None when the dashboard has none (the page says so)."""
    return UIS.get(modality)
