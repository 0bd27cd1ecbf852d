"""Pre-flight checks of a run config against the data it names, before any process starts.

Type and range errors are caught by the config models (and :func:`engine.tasks.resolve`); this catches
what needs the dataset: an unknown dataset, a dataset of another modality than the task's, and the
task's own checks (:meth:`engine.tasks.Task.check`: for images a patch size that does not tile the
images, a strategy that does not apply to patch grids, and masks that hide no unit in a probe batch
or every unit of more than a quarter of the samples). ``submit`` and ``python -m engine run`` call
:func:`check_run` on the resolved config, so such a run is refused at once instead of failing a few
seconds later in its worker (which trains the stored config without checking it again). The pages
call :func:`masking_problem` on their own masks to warn early.
"""

from __future__ import annotations

import torch

from engine.config import MaskingConfig, RunConfig
from engine.data import list_datasets
from engine.errors import DatasetError
from engine.masking import get_masking
from engine.tasks.registry import get_task


def check_run(cfg: RunConfig, workspace=None):
    """Check ``cfg`` (resolved: :func:`engine.tasks.resolve`) against its dataset; return the
    dataset's :class:`~engine.data.DatasetInfo`.

    Raises:
        DatasetError: ``data.dataset`` is neither registered nor an available bundled set, or its
            modality is not the task's.
        ConfigError: from the task's :meth:`~engine.tasks.Task.check` (names the field).
    """
    infos = {i.name: i for i in list_datasets(workspace)}
    if cfg.data.dataset not in infos:
        raise DatasetError(f"data.dataset: no dataset {cfg.data.dataset!r}; available: {', '.join(infos) or 'none'}")
    info = infos[cfg.data.dataset]
    task = get_task(cfg.task)
    if not task.trains_on(info.modality):
        fits = ", ".join(n for n, i in infos.items() if task.trains_on(i.modality)) or "none yet"
        raise DatasetError(f"data.dataset: {info.name!r} is a {info.modality} dataset, but task {task.name!r} "
                           f"trains on {task.modality} data ({task.modality} datasets: {fits})")
    task.check(cfg, info, workspace)
    return info


def no_validation_note(info) -> str | None:
    """A dataset without a validation split (a validation fraction of 0, or a single item) is
    evaluated on its training items, as every task does; then say so in words, else None."""
    if info.n_val:
        return None
    return (f"{info.name!r} has no validation split ({info.n_train:,} training item{'s' * (info.n_train != 1)}): "
            "validation figures and baselines are measured on the training items, so they show how well a run "
            "fits them, not how it generalises. Import it again with a validation fraction above 0 for a held-out split.")


#: Largest share of fully masked samples a run may have: the encoder sees nothing of them.
MAX_FULLY_MASKED = 0.25


def masking_problem(cfg: MaskingConfig, probe: torch.Tensor, ratio: float | None = None,
                    unit: str = "patches", eligible: torch.Tensor | None = None) -> str | None:
    """Why masks like ``probe`` cannot train an MAE, or None when they can.

    Refused: no patch masked in the whole batch (the loss, on masked patches only, would be 0),
    or more than :data:`MAX_FULLY_MASKED` of the samples fully masked (the encoder would see
    nothing of them; strategies without an exact count, e.g. Bernoulli at a high ratio on a small
    grid, or superpixels with very few segments, can do that).

    Args:
        cfg: the ``masking`` config (for the message: strategy, ratio or params).
        probe: ``[N, *grid]`` bool masks drawn as the run would draw them.
        ratio: the ratio the probe was drawn at (default ``cfg.ratio``).
        unit: the plural of what one position is, for the message ("patches", "tokens", "frames").
        eligible: ``[N, *grid]`` bool, the positions that may be masked (e.g. not padding or special
            tokens); a sample is fully masked when all of its eligible positions are. Default: all.

    Returns:
        A one-line message naming the field to change, or None.
    """
    r = cfg.ratio if ratio is None else ratio
    strategy = get_masking(cfg.strategy)
    flat = probe.reshape(probe.shape[0], -1)
    L = flat.shape[1]
    ok = torch.ones_like(flat) if eligible is None else eligible.reshape(flat.shape).bool()
    rows = ok.any(dim=1)  # samples with something to mask
    if strategy.uses_ratio:
        field = "masking.ratio" if r == cfg.ratio else "masking.final_ratio"
        what = f"{strategy.name} at ratio {r:g}"
    else:
        field = "masking.params"
        what = f"{strategy.name} with " + ", ".join(f"{k}={v}" for k, v in cfg.params.items())
    if not flat.any():
        return (f"{field}: {what} masks 0 of the {L} {unit}, so the loss (on masked {unit} only) "
                f"would always be 0")
    full = float((flat | ~ok).all(dim=1)[rows].float().mean()) if bool(rows.any()) else 0.0
    if eligible is not None:
        L = "eligible"
    if full > MAX_FULLY_MASKED:
        n = "all" if full == 1.0 else f"{full:.0%} of the samples: all"
        return (f"{field}: {what} masks {n} {L} {unit}, so the encoder would see nothing"
                + ("" if full == 1.0 else f" of them (at most {MAX_FULLY_MASKED:.0%} may be)"))
    return None
