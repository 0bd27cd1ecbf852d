"""Pre-flight checks of a run config against the data it names, before any process starts.

Type and range errors are caught by the config models; this catches what needs the dataset: an
unknown dataset, a patch size that does not tile the images, an unknown model preset, a masking
strategy that does not apply to image patch grids, and masking that hides no patch in a probe batch
of 64 (the loss, on masked patches only, would be 0) or every patch of every sample (the encoder
would see nothing), at ``masking.ratio`` and, with a schedule, at ``masking.final_ratio``. ``submit`` and ``python -m engine run`` call it, so such a run is
refused at once instead of failing a few seconds later in its worker; ``fit`` calls it too.
"""

from __future__ import annotations

import torch

from engine.config import RunConfig
from engine.data import list_datasets
from engine.errors import ConfigError, DatasetError
from engine.masking import draw_mask, get_masking, grid_shape, strategies_for
from engine.models import PRESETS


def check_run(cfg: RunConfig, workspace=None) -> tuple[int, int, int]:
    """Check ``cfg`` against its dataset; return the image shape ``(C, H, W)``.

    Raises:
        DatasetError: ``data.dataset`` is neither registered nor an available bundled set.
        ConfigError: the patch size does not divide the image size, the preset is unknown, or the
            mask ratio leaves no masked or no visible patch (the message gives the counts).
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
    # The masks of a probe batch (side inputs from a blank image batch are not needed: only
    # superpixels need images, and they always mask something): the loss needs masked patches,
    # the encoder visible ones.
    ratios = [cfg.masking.ratio] + ([cfg.masking.final_ratio] if cfg.masking.schedule != "constant" else [])
    for r in ratios:
        if strategy.needs:
            break
        probe = draw_mask(cfg.masking, (64, h, w), torch.Generator().manual_seed(0), ratio=r).flatten(1)
        field = "masking.ratio" if r == cfg.masking.ratio else "masking.final_ratio"
        if not strategy.uses_ratio:
            field = "masking.params"
        if not probe.any():
            raise ConfigError(f"{field}: {cfg.masking.strategy} with {_describe(cfg, r)} masks 0 of the {h * w} "
                              f"patches, so the loss (on masked patches only) would always be 0")
        if probe.all():
            raise ConfigError(f"{field}: {cfg.masking.strategy} with {_describe(cfg, r)} masks all {h * w} "
                              f"patches, so the encoder would see nothing")
    return shape  # type: ignore[return-value]


def _describe(cfg: RunConfig, ratio: float) -> str:
    strategy = get_masking(cfg.masking.strategy)
    if strategy.uses_ratio:
        return f"ratio {ratio}"
    return "params " + ", ".join(f"{k}={v}" for k, v in cfg.masking.params.items())
