"""Checkpoints: ``checkpoints/step-NNNNNNN/model.safetensors`` + ``state.pt``.

``model.safetensors`` holds the weights only (safe to load, no pickle). ``state.pt`` holds what
resuming needs: optimizer state, step, the resolved config and the RNG states. Each checkpoint is
written to a temporary folder and renamed into place, so a crash never leaves a half checkpoint.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

CKPT_DIR = "checkpoints"


def save_checkpoint(run_dir: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    cfg, rng: dict, *, keep: int = 2) -> Path:
    """Write the checkpoint of ``step`` and delete all but the newest ``keep``. Returns its folder."""
    root = Path(run_dir) / CKPT_DIR
    final = root / f"step-{step:07d}"
    tmp = root / f".tmp-step-{step:07d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(weights, str(tmp / "model.safetensors"), metadata={"step": str(step)})
    torch.save({"step": step, "optimizer": optimizer.state_dict(), "config": cfg.to_dict(),
                "rng": rng, "torch_rng": torch.get_rng_state()}, tmp / "state.pt")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoint folders of a run, oldest first."""
    return sorted((Path(run_dir) / CKPT_DIR).glob("step-*"))


def load_weights(ckpt_dir: Path) -> dict[str, torch.Tensor]:
    """The model state dict stored in ``ckpt_dir/model.safetensors`` (CPU tensors)."""
    return load_file(str(Path(ckpt_dir) / "model.safetensors"))
