"""Inference on a run's kept checkpoints, for the interactive views (the fill-in box; later the
interactive masking and retrieval boxes).

Where it runs, and why: in the dashboard process, on the CPU, with no gradient. The models masklab
trains for interactive use are small (the text presets are 1-10 M parameters, a few to 40 MB of
float32 weights), a forward pass on one sentence or image takes milliseconds, and a separate
engine process would cost a torch import (2-3 s) and an IPC protocol for each idle restart. The
memory is bounded instead: the dashboard keeps at most ``MAX_CACHED_MODELS`` loaded models (an
``st.cache_resource`` keyed by run, step and the checkpoint's modification time, least recently
used evicted), and refuses a checkpoint whose weights exceed :data:`MAX_WEIGHT_BYTES` with a
message, so the extra memory stays under about ``MAX_CACHED_MODELS x MAX_WEIGHT_BYTES`` (4 x 1.5 GB);
the limit admits a published MAE ViT-L/16 with its decoder (1.3 GB), shown on a dataset by a run
of 0 steps (:mod:`engine.pretrained.runs`).
Inference threads: torch's default pool of the dashboard process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.config import RunConfig
from engine.errors import MasklabError
from engine.messages import describe_error
from engine.models import build_model
from engine.store import get_run
from engine.store.checkpoints import checkpoint_complete, list_checkpoints, load_weights

MAX_WEIGHT_BYTES = 1536 * 1024**2
MAX_CACHED_MODELS = 4


class InferenceError(MasklabError):
    """A checkpoint cannot be used for interactive inference (none kept, too large, unreadable)."""


@dataclass
class LoadedModel:
    """A run's model at one kept checkpoint, in eval mode on the CPU.

    Attributes:
        run_id, step: which checkpoint.
        cfg: the run's resolved config.
        info: the run's ``task.json`` (dataset hash, tokenizer id, vocabulary size, image shape...).
        model: the ``nn.Module`` with the checkpoint's weights.
    """

    run_id: str
    step: int
    cfg: RunConfig
    info: dict[str, Any]
    model: torch.nn.Module


def checkpoint_steps(run_id: str, workspace=None) -> list[int]:
    """Steps of the run's complete checkpoints, ascending (``[]`` when none is kept)."""
    return [int(p.name.split("-")[1]) for p in list_checkpoints(get_run(run_id, workspace).path)
            if checkpoint_complete(p)]


def checkpoint_path(run_id: str, step: int | None = None, workspace=None) -> Path:
    """Folder of the checkpoint at ``step`` (the latest when None).

    Raises:
        InferenceError: the run keeps no checkpoint (at that step).
    """
    ckpts = [p for p in list_checkpoints(get_run(run_id, workspace).path) if checkpoint_complete(p)]
    if step is not None:
        ckpts = [p for p in ckpts if int(p.name.split("-")[1]) == step]
    if not ckpts:
        at = "" if step is None else f" at step {step}"
        raise InferenceError(f"run {run_id} has no kept checkpoint{at} yet: checkpoints are written every "
                             f"train.checkpoint_interval steps and at the end")
    return ckpts[-1]


def load_model(run_id: str, step: int | None = None, workspace=None) -> LoadedModel:
    """Build the run's model and load the checkpoint at ``step`` (latest when None).

    Raises:
        InferenceError: no checkpoint, weights larger than :data:`MAX_WEIGHT_BYTES`, the run's
            ``task.json`` is missing (a run from before it existed), or weights that do not fit.
        RunNotFoundError: unknown run.
    """
    rec = get_run(run_id, workspace)
    folder = checkpoint_path(run_id, step, workspace)
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    if size > MAX_WEIGHT_BYTES:
        raise InferenceError(f"the checkpoint of run {run_id} has {size / 1024**2:.0f} MB of weights; interactive "
                             f"inference in the dashboard is limited to {MAX_WEIGHT_BYTES // 1024**2} MB per model")
    try:
        info = json.loads((rec.path / "task.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InferenceError(f"run {run_id} has no readable task.json ({describe_error(e)}); it cannot be loaded "
                             "for inference") from e
    cfg = RunConfig.from_dict(rec.config)
    dims: dict[str, Any] = {}
    if "image_shape" in info:
        dims["image_shape"] = tuple(info["image_shape"])
    if "vocab_size" in info:
        dims.update(vocab_size=int(info["vocab_size"]), max_len=cfg.data.tokenizer.max_len)
    dims.update(info.get("model_dims", {}))  # a task's own builder dimensions (e.g. audio: n_mels, frames, patch)
    model = build_model(cfg, **dims)
    try:
        model.load_state_dict(load_weights(folder))
    except (RuntimeError, OSError) as e:
        raise InferenceError(f"cannot load {weights}: its weights do not fit this run's model (damaged, or written by "
                             "another masklab)") from e
    return LoadedModel(run_id, int(folder.name.split("-")[1]), cfg, info, model.eval())
