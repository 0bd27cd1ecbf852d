"""Interactive inference of an ``image_mim`` checkpoint: the Run detail masking box (see
:mod:`engine.eval.inference` for how a checkpoint is loaded)."""

from __future__ import annotations

import numpy as np
import torch


@torch.no_grad()
def reconstruct(loaded, image, mask) -> dict[str, np.ndarray]:
    """A kept checkpoint's reconstruction of one image under a mask the caller chose (the
    dashboard's interactive masking box; :func:`engine.eval.inference.load_model` gives ``loaded``).

    Args:
        loaded: an :class:`engine.eval.inference.LoadedModel` of an ``image_mim`` run (model in eval mode).
        image: float ``[C, H, W]`` in [0, 1] (numpy or torch), the run's image shape.
        mask: bool ``[h, w]`` (or ``[L]``, row-major), True = hidden from the encoder; the run's
            patch grid. Every patch may be hidden (MAE's encoder then sees its class token only)
            or none (nothing is scored, the prediction is shown anyway).

    Returns:
        ``{"pred_img", "pasted"}``, float32 numpy ``[C, H, W]`` in [0, 1], as
        ``MaskedAutoencoderViT.reconstruct``: the prediction of every patch, and the original at
        visible patches with the prediction at hidden ones. With ``norm_pix_loss`` the prediction is
        de-normalised with each true patch's mean and std (MAE's display, which peeks at the hidden
        patch's statistics).

    Raises:
        ValueError: the image is not the run's ``(C, H, W)`` or the mask not its ``(h, w)`` grid,
            naming both shapes.
    """
    model = loaded.model
    x = torch.as_tensor(np.asarray(image, dtype=np.float32))
    expected = (model.in_chans, *model.img_size)
    if tuple(x.shape) != expected:
        raise ValueError(f"reconstruct: image of shape {tuple(x.shape)}, but run {loaded.run_id} trains on "
                         f"{expected} (C, H, W)")
    m = torch.as_tensor(np.asarray(mask, dtype=bool))
    if tuple(m.shape) not in (tuple(model.grid_size), (model.num_patches,)):
        raise ValueError(f"reconstruct: mask of shape {tuple(m.shape)}, but run {loaded.run_id} has a "
                         f"{model.grid_size[0]}x{model.grid_size[1]} patch grid")
    device = next(model.parameters()).device
    rec = model.reconstruct(x[None].to(device), m.reshape(1, -1).to(device))
    return {k: v[0].float().cpu().numpy() for k, v in rec.items()}
