"""A task with training state beyond its model: the toy pixel task plus an EMA teacher and input noise.

It exercises what a resume must restore that the built-in tasks do not have: the teacher's weights
(an exponential moving average of the student's, updated in ``after_step``, as BYOL / DINO /
data2vec teachers are) through :meth:`Task.state_dict` / :meth:`Task.load_state_dict`, and the
global torch RNG (the training inputs get Gaussian noise drawn from it). The validation loss is
the teacher's, so a resume that lost either shows in ``val_loss``. Loaded with
``MASKLAB_PLUGINS=tests.plugins.ema_task`` (or imported in-process).
"""

from __future__ import annotations

import copy

import torch

from engine.masking import draw_mask
from engine.tasks import register_task
from tests.plugins.toy_task import ToyPixelTask

EMA_DECAY = 0.9
NOISE = 0.05


@register_task
class EMAPixelTask(ToyPixelTask):
    name = "toy_pixels_ema"

    def __init__(self, cfg, device, workspace=None):
        super().__init__(cfg, device, workspace)
        self.teacher = copy.deepcopy(self.model).requires_grad_(False)
        self.updates = 0

    def train_loss(self, idx, generator, ratio):
        xb = self.x[idx]
        noisy = xb + NOISE * torch.randn_like(xb)  # the global torch RNG, which checkpoints keep

        mask = draw_mask(self.cfg.masking, tuple(xb.shape), generator, ratio=ratio)
        out = self.model(noisy, mask)
        loss, _ = self.objective({**out, "target": xb.unsqueeze(-1)})
        return loss, {"mask_ratio": mask.float().mean()}

    @torch.no_grad()
    def after_step(self, step):
        for t, s in zip(self.teacher.parameters(), self.model.parameters()):
            t.lerp_(s, 1 - EMA_DECAY)
        self.updates += 1

    @torch.no_grad()
    def evaluate(self):
        loss, _ = self.objective(self.teacher(self.xv, self.val_mask))
        return {"val_loss": float(loss), "ema_updates": float(self.updates)}

    def state_dict(self):
        return {"teacher": self.teacher.state_dict(), "updates": self.updates}

    def load_state_dict(self, state):
        self.teacher.load_state_dict(state["teacher"])
        self.updates = int(state["updates"])
