"""Pre-flight checks of a run config against the data it names, before any process starts.

Type and range errors are caught by the config models; this catches what needs the dataset: an
unknown dataset, a patch size that does not tile the images, an unknown model preset, and a mask
ratio that masks no patch (the loss, on masked patches only, would be 0) or every patch (the
encoder would see nothing). ``submit`` and ``python -m engine run`` call it, so such a run is
refused at once instead of failing a few seconds later in its worker; ``fit`` calls it too.
"""

from __future__ import annotations

import torch

from engine.config import RunConfig
from engine.data import list_datasets
from engine.errors import ConfigError, DatasetError
from engine.masking import draw_mask, grid_shape
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
    n_masked = int(draw_mask(cfg.masking, (1, h, w), torch.Generator().manual_seed(0)).sum())
    if n_masked == 0:
        raise ConfigError(f"masking.ratio: {cfg.masking.ratio} masks 0 of the {h * w} patches, so the loss "
                          f"(on masked patches only) would always be 0; raise the ratio")
    if n_masked == h * w:
        raise ConfigError(f"masking.ratio: {cfg.masking.ratio} masks all {h * w} patches, so the encoder "
                          f"would see nothing; lower the ratio")
    return shape  # type: ignore[return-value]
