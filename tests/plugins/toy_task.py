"""A toy task registered from outside engine/: pixel-sequence infilling on digits with an MLP.

It proves the task seam: the training loop, worker, store, launcher and pre-flight checks train it
without knowing it exists. Each 8x8 digit is a sequence of L = 64 pixels (grid ``[B, L]``); the
masking library's strategy hides pixels; a two-layer MLP sees the masked sequence (hidden pixels
zeroed, plus the mask as a second channel) and predicts every pixel; the registered ``mse``
objective scores the hidden ones. Loaded with ``MASKLAB_PLUGINS=tests.plugins.toy_task``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from engine.data import load_dataset
from engine.errors import ConfigError
from engine.masking import draw_mask, get_masking
from engine.models import build_model, register_model
from engine.objectives import Objective
from engine.store.samples import Sample
from engine.tasks import Task, register_task
from engine.tasks.checks import masking_problem


class PixelMLP(nn.Module):
    """``[B, L]`` pixels + ``[B, L]`` mask -> ``{"pred", "target", "mask"}`` with ``D = 1`` per unit."""

    def __init__(self, length: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * length, hidden), nn.GELU(), nn.Linear(hidden, length))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        visible = torch.where(mask, torch.zeros_like(x), x)
        pred = self.net(torch.cat([visible, mask.float()], dim=1))
        return {"pred": pred.unsqueeze(-1), "target": x.unsqueeze(-1), "mask": mask}


@register_model("toy_mlp", {"tiny": {"hidden": 64}})
def _build(cfg, *, length: int) -> PixelMLP:
    return PixelMLP(length, **{"tiny": {"hidden": 64}}[cfg.model.preset])


@register_task
class ToyPixelTask(Task):
    name = "toy_pixels"
    modality = "image"
    archs = ("toy_mlp",)
    default_loss = "mse"
    unit = "pixel"

    @classmethod
    def check(cls, cfg, info, workspace=None) -> None:
        c, h, w = info.image_shape
        if c != 1:
            raise ConfigError("data.dataset: the toy task needs grayscale images")
        if 1 not in get_masking(cfg.masking.strategy).grid_dims:
            raise ConfigError("masking.strategy: the toy task needs a strategy for [B, L] grids")
        probe = draw_mask(cfg.masking, (64, h * w), torch.Generator().manual_seed(0))
        problem = masking_problem(cfg.masking, probe, unit="pixels")
        if problem:
            raise ConfigError(problem)

    def __init__(self, cfg, device, workspace=None):
        self.cfg, self.device = cfg, device
        ds = load_dataset(cfg.data.dataset, workspace)
        self.ds = ds
        x, _ = ds.tensors("train")
        xv, yv = ds.tensors("val")
        self.x = x.flatten(1).to(device)
        self.xv = xv.flatten(1).to(device)
        self.yv = yv
        self.model = build_model(cfg, length=self.x.shape[1]).to(device)
        self.objective = Objective.from_config(cfg.objective, self.outputs(cfg))
        self.n_train = len(self.x)
        self.batch_size = min(cfg.train.batch_size, self.n_train)
        self.val_mask = draw_mask(cfg.masking, tuple(self.xv.shape), torch.Generator().manual_seed(cfg.train.seed + 10_000))

    def train_loss(self, idx, generator, ratio):
        xb = self.x[idx]
        mask = draw_mask(self.cfg.masking, tuple(xb.shape), generator, ratio=ratio)
        loss, _ = self.objective(self.model(xb, mask))
        return loss, {"mask_ratio": mask.float().mean()}

    def evaluate(self):
        loss, _ = self.objective(self.model(self.xv, self.val_mask))
        return {"val_loss": float(loss)}

    def sample(self, step):
        out = self.model(self.xv[:4], self.val_mask[:4])
        return Sample(step, "toy", {"pred": out["pred"].squeeze(-1).detach().numpy(), "mask": self.val_mask[:4].numpy()})

    def features(self, split, max_rows=None):
        x, y = self.ds.tensors(split)
        return x.flatten(1)[:max_rows].numpy().astype(np.float32), y[:max_rows].numpy()
