"""Pre-flight checks of a run config against the data it names, before any process starts.

Type and range errors are caught by the config models; this catches what needs the dataset: an
unknown dataset, a patch size that does not tile the images, an unknown model preset, a masking
strategy that does not apply to image patch grids, and masking that hides no patch in a probe batch
(the loss, on masked patches only, would be 0) or every patch of more than a quarter of the samples
(the encoder would see nothing of them), at ``masking.ratio`` and, with a schedule, at
``masking.final_ratio``. The pages call :func:`masking_problem` on their own masks to warn early. ``submit`` and ``python -m engine run`` call it, so such a run is
refused at once instead of failing a few seconds later in its worker; ``fit`` calls it too.
"""

from __future__ import annotations

import torch

from engine.config import MaskingConfig, RunConfig
from engine.data import list_datasets, load_dataset
from engine.errors import ConfigError, DatasetError
from engine.masking import draw_mask, get_masking, grid_shape, image_side_inputs, strategies_for
from engine.models import PRESETS


def check_run(cfg: RunConfig, workspace=None) -> tuple[int, int, int]:
    """Check ``cfg`` against its dataset; return the image shape ``(C, H, W)``.

    Raises:
        DatasetError: ``data.dataset`` is neither registered nor an available bundled set.
        ConfigError: the patch size does not divide the image size, the preset is unknown, the
            strategy does not apply to images, or :func:`masking_problem` finds a probe batch of
            masks untrainable (at ``masking.ratio`` and, with a schedule, ``masking.final_ratio``).
    """
    infos = {i.name: i for i in list_datasets(workspace)}
    if cfg.data.dataset not in infos:
        raise DatasetError(f"data.dataset: no dataset {cfg.data.dataset!r}; available: {', '.join(infos) or 'none'}")
    shape = tuple(infos[cfg.data.dataset].image_shape)
    h, w = grid_shape(shape[1:], cfg.model.patch_size)
    if cfg.model.preset not in PRESETS:
        raise ConfigError(f"model.preset: unknown preset {cfg.model.preset!r}; known presets: {', '.join(PRESETS)}")
    strategy = get_masking(cfg.masking.strategy)
    if 2 not in strategy.grid_dims or "image" not in strategy.modalities:
        ok = ", ".join(strategies_for("image", 2))
        raise ConfigError(f"masking.strategy: {strategy.name!r} does not apply to image patch grids; "
                          f"strategies for images: {ok}")
    n, images = PROBE_ROWS, None
    if strategy.needs:  # e.g. superpixels: probe with real images of the dataset (SLIC ~1 ms each)
        images = load_dataset(cfg.data.dataset, workspace).tensors("train")[0][:PROBE_IMAGES].float()
        n = len(images)
    side = image_side_inputs(cfg.masking, images, cfg.model.patch_size)
    ratios = [cfg.masking.ratio] + ([cfg.masking.final_ratio] if cfg.masking.schedule != "constant" else [])
    for r in ratios:
        probe = draw_mask(cfg.masking, (n, h, w), torch.Generator().manual_seed(0), ratio=r, **side)
        problem = masking_problem(cfg.masking, probe, ratio=r)
        if problem:
            raise ConfigError(problem)
    return shape  # type: ignore[return-value]


#: Masks drawn to probe a config (rows of the probe batch); real images for strategies that need them.
PROBE_ROWS = 256
PROBE_IMAGES = 64
#: Largest share of fully masked samples a run may have: the encoder sees nothing of them.
MAX_FULLY_MASKED = 0.25


def masking_problem(cfg: MaskingConfig, probe: torch.Tensor, ratio: float | None = None) -> str | None:
    """Why masks like ``probe`` cannot train an MAE, or None when they can.

    Refused: no patch masked in the whole batch (the loss, on masked patches only, would be 0),
    or more than :data:`MAX_FULLY_MASKED` of the samples fully masked (the encoder would see
    nothing of them; strategies without an exact count, e.g. Bernoulli at a high ratio on a small
    grid, or superpixels with very few segments, can do that).

    Args:
        cfg: the ``masking`` config (for the message: strategy, ratio or params).
        probe: ``[N, *grid]`` bool masks drawn as the run would draw them.
        ratio: the ratio the probe was drawn at (default ``cfg.ratio``).

    Returns:
        A one-line message naming the field to change, or None.
    """
    r = cfg.ratio if ratio is None else ratio
    strategy = get_masking(cfg.strategy)
    flat = probe.reshape(probe.shape[0], -1)
    L = flat.shape[1]
    if strategy.uses_ratio:
        field = "masking.ratio" if r == cfg.ratio else "masking.final_ratio"
        what = f"{strategy.name} at ratio {r:g}"
    else:
        field = "masking.params"
        what = f"{strategy.name} with " + ", ".join(f"{k}={v}" for k, v in cfg.params.items())
    if not flat.any():
        return (f"{field}: {what} masks 0 of the {L} patches, so the loss (on masked patches only) "
                f"would always be 0")
    full = float(flat.all(dim=1).float().mean())
    if full > MAX_FULLY_MASKED:
        n = "all" if full == 1.0 else f"{full:.0%} of the samples: all"
        return (f"{field}: {what} masks {n} {L} patches, so the encoder would see nothing"
                + ("" if full == 1.0 else f" of them (at most {MAX_FULLY_MASKED:.0%} may be)"))
    return None
