"""The task seam: what a modality must provide to be trained, evaluated and shown by masklab.

A run is a *task*: a modality's data (load, split, batch), its unit grid for masking, a model, an
objective, a way to extract frozen features for evaluation, and a way to turn a validation batch
into reconstruction samples for the UI. The training loop (:mod:`engine.training.loop`), the worker, the
store, the launcher and the pre-flight checks only talk to this interface, so a new modality is new
files plus one :func:`engine.tasks.registry.register_task` (fairseq's tasks and Hugging Face's processors +
``*ForPreTraining`` heads are the same idea).

Two halves:

- **Config time** (class methods, no data loaded, cheap): :meth:`Task.resolve` fills the task's
  defaults into a copy of a :class:`~engine.config.RunConfig` and checks the fields that need no
  data (callers use :func:`engine.tasks.resolve`, which returns the new config);
  :meth:`Task.check` is the pre-flight check against the dataset (``submit`` and
  ``python -m engine run`` call it before a run folder exists).
- **Run time** (an instance per run, built in the worker): the model, the training loss of a batch
  of train rows, validation metrics on fixed masks, reconstruction samples, features.

Randomness: the loop owns the batch order (``g_data``) and passes a generator to
:meth:`Task.train_loss` for the masks (``g_mask``); the task draws its fixed validation masks from
its own generator seeded with ``train.seed + 10_000``. Model weights are initialised from the
global torch RNG, which the loop seeds with ``train.seed`` right before building the task.

Resume: a checkpoint holds the model's weights, the optimiser, the loop's generators, the data
order and :meth:`Task.state_dict`; a task must draw every random number of training from the
generator it is given (or the global torch RNG, which the checkpoint also keeps), so a resumed run
continues bit-identically. A task with state beyond the model (an EMA teacher...) returns it from
:meth:`Task.state_dict` and takes it back in :meth:`Task.load_state_dict`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from engine.errors import ConfigError, EvaluationError
from engine.models import get_model_spec
from engine.objectives import Objective
from engine.registry import validate_params


class NoTaskParams(BaseModel):
    """A task without parameters of its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

if TYPE_CHECKING:
    from engine.config import RunConfig
    from engine.data.dataset import DatasetInfo
    from engine.eval.finetune import FinetuneInputs
    from engine.store.samples import Sample


class Task(ABC):
    """A modality's masked-modeling recipe. Subclasses set the class attributes and implement the
    abstract methods; register them with :func:`engine.tasks.registry.register_task`.

    Class attributes:
        name: the ``task`` config value, e.g. ``image_mim``.
        modality: the dataset modality it trains on (``DatasetInfo.modality``): image, text, audio...
        archs: ``model.arch`` values it can train; the first is the default.
        default_loss: the ``objective.loss`` used when the config leaves it empty.
        unit: what one masking position is, for messages ("patch", "token", "frame").
        params: pydantic model of the task's own parameters (``task_params``), e.g. BERT's 80/10/10 shares.
        headline: ``(metric, "min" | "max")``: the validation figure that says how well a run does,
            compared with the ``baseline/*`` figures of :meth:`baselines` (same masks, same units).
        summary: one line for the dashboard, naming the paper the recipe follows.
        data_sections: the optional ``data`` sub-configs the task reads (``"tokenizer"`` for text,
            ``"audio"`` for audio); a config that sets another one is refused by :meth:`resolve`.
        sample_kind: the ``kind`` of the :class:`~engine.store.Sample` that :meth:`sample` saves (the
            dashboard draws it with the view its modality's UI declares for that kind).
        interactive: the name of the dashboard's interactive box for its runs (declared by its
            modality's UI, e.g. ``"fill_in"``); ``""``: none.
        train_defaults: what New run proposes for the ``train`` section, over ``TrainConfig``'s
            defaults: a dict, or the name of an example config (``configs/<name>.yaml``) whose
            ``train`` section it is (measured recipes: bench/README.md).
        task_params_defaults: what New run proposes for ``task_params`` where its fields leave them
            open: a dict, or the name of an example config whose ``task_params`` it is.
        init_from_arch: the ``model.arch`` an imported model (``model.init_from``,
            :mod:`engine.pretrained.runs`) trains as in this task (the default arch of a run with
            ``init_from``); ``""``: the task cannot start from an imported model or fork a run.

    Instance attributes (set by ``__init__``):
        model: the ``nn.Module`` being trained (on ``device``).
        n_train: number of train rows; the loop draws batch indices in ``[0, n_train)``.
        batch_size: the effective batch (``min(train.batch_size, n_train)``).
    """

    name: ClassVar[str]
    modality: ClassVar[str]
    archs: ClassVar[tuple[str, ...]]
    default_loss: ClassVar[str]
    unit: ClassVar[str] = "position"
    params: ClassVar[type[BaseModel]] = NoTaskParams
    headline: ClassVar[tuple[str, str]] = ("val_loss", "min")
    summary: ClassVar[str] = ""
    data_sections: ClassVar[tuple[str, ...]] = ()
    sample_kind: ClassVar[str] = ""
    interactive: ClassVar[str] = ""
    train_defaults: ClassVar[dict | str] = {}
    task_params_defaults: ClassVar[dict | str] = {}
    init_from_arch: ClassVar[str] = ""

    model: torch.nn.Module
    n_train: int
    batch_size: int

    # --- config time ------------------------------------------------------------------------------

    @classmethod
    def resolve(cls, cfg: "RunConfig") -> None:
        """Fill the task's defaults into ``cfg`` in place and check what needs no data. ``cfg`` is
        :func:`engine.tasks.resolve`'s own copy: call that function, not this method.

        The base version resolves ``task_params`` against :attr:`params`, refuses a ``data``
        sub-config the task does not read (:attr:`data_sections`), sets ``model.arch`` and
        ``objective.loss`` when empty and checks that the arch is one of :attr:`archs`, the preset
        is one of the arch's presets and the objective's inputs are among the model's outputs
        (:meth:`outputs`).

        Raises:
            ConfigError: naming the field.
        """
        resolved = validate_params(cls.params, cfg.task_params, "task_params", f"task {cls.name!r}").model_dump(mode="json")
        if resolved != cfg.task_params:
            object.__setattr__(cfg, "task_params", resolved)  # bypass validate_assignment (no recursion)
        for section in type(cfg.data).model_fields:
            if section != "dataset" and section not in cls.data_sections and getattr(cfg.data, section) is not None:
                raise ConfigError(f"data.{section}: task {cls.name!r} does not use it; remove it")
        if cfg.model.init_step is not None and not cfg.model.init_from:
            raise ConfigError("model.init_step: it picks a checkpoint of the run model.init_from names; set "
                              "model.init_from too, or remove it")
        if cfg.model.init_from:  # the imported model's arch (checked against the source by Task.check)
            if not cls.init_from_arch:
                raise ConfigError(f"model.init_from: task {cls.name!r} cannot start from an imported model or "
                                  "another run; image_mim (MAE) and text_mlm (BERT) can")
            cfg.model.arch = cfg.model.arch or cls.init_from_arch
        if not cfg.model.arch:
            cfg.model.arch = cls.archs[0]
        if cfg.model.arch not in cls.archs:
            raise ConfigError(f"model.arch: task {cls.name!r} trains {', '.join(cls.archs)}, not {cfg.model.arch!r}")
        spec = get_model_spec(cfg.model.arch)
        if cfg.model.preset not in spec.presets:
            raise ConfigError(f"model.preset: unknown preset {cfg.model.preset!r} for {cfg.model.arch}; "
                              f"known presets: {', '.join(spec.presets)}")
        if not cfg.objective.loss:
            cfg.objective.loss = cls.default_loss
        Objective.from_config(cfg.objective, cls.outputs(cfg))

    @classmethod
    def init_fit(cls, cfg: "RunConfig", rec: dict, name: str) -> None:
        """Check ``cfg`` against the imported architecture it starts from (``rec``:
        :func:`engine.pretrained.runs.record` of the model ``name``), beyond ``model.arch``.
        Default: nothing.

        Raises:
            ConfigError: naming the field and the value to set.
        """

    @classmethod
    def fork_fit(cls, cfg: "RunConfig", parent: dict, name: str) -> None:
        """Check a fork's ``cfg`` against the config of the run ``name`` it starts from (``parent``),
        beyond the task and ``model.arch``. Default: nothing.

        Raises:
            ConfigError: naming the field and the value to set.
        """

    @classmethod
    def init_view(cls, rec: dict) -> dict:
        """What the run that shows the imported architecture ``rec`` on a dataset sets beyond its
        task, arch and ``model.init_from`` (:func:`engine.pretrained.manage.view_config`): a partial run
        config (its masking, the fields ``rec`` fixes). Default: ``{}``."""
        return {}

    @classmethod
    def trains_on(cls, modality: str) -> bool:
        """Whether the task trains on datasets of ``modality`` (default: its :attr:`modality` only; a
        task that reads several modalities overrides it)."""
        return modality in (cls.modality,)

    @classmethod
    def outputs(cls, cfg: "RunConfig") -> set[str]:
        """Names of the model outputs (keys of :data:`engine.objectives.OUTPUTS`) this task's model
        returns for ``cfg``; the objective may read only these."""
        return {"pred", "target", "mask"}

    @classmethod
    @abstractmethod
    def check(cls, cfg: "RunConfig", info: "DatasetInfo", workspace=None) -> None:
        """Pre-flight check of ``cfg`` against its dataset (``info`` is cheap metadata; load data only
        when a probe needs it). Called before a run folder is created.

        Raises:
            ConfigError, DatasetError: naming the field and what to change.
        """

    # --- run time ---------------------------------------------------------------------------------

    @abstractmethod
    def __init__(self, cfg: "RunConfig", device: torch.device, workspace=None):
        """Load the data, build the model on ``device`` (from the global torch RNG, seeded by the
        caller) and draw the fixed validation masks."""

    @abstractmethod
    def train_loss(self, idx: torch.Tensor, generator: torch.Generator, ratio: float) -> tuple[torch.Tensor, dict[str, float]]:
        """Training loss of the train rows ``idx`` (int64 ``[B]``), masked at ``ratio`` with masks
        drawn from ``generator``.

        Returns:
            ``(loss, logs)``: the scalar loss in the autograd graph, and floats to log with it:
            ``mask_ratio`` (the actual fraction of eligible positions masked) and, for a mixed
            objective, each term as ``loss/<name>``.
        """

    def run_info(self) -> dict:
        """Facts about what this run trains on that readers need later, saved once at the start as
        ``<run_dir>/task.json`` (JSON-safe): e.g. ``dataset_hash`` (the dataset content it trained
        on), ``tokenizer_id`` and ``vocab_size``; ``model_dims``, when present, are the keyword
        dimensions its model builder takes (:func:`engine.eval.inference.load_model` passes them on).
        Default: none."""
        return {}

    def train_lengths(self) -> torch.Tensor | None:
        """Size of each train row (int64 ``[n_train]``, e.g. real tokens per text) when rows vary
        in size and a batch costs what its longest row costs; the loop then groups rows of similar
        size into batches (``train.group_by_length``, :func:`engine.training.loop.epoch_order`). Default:
        None (rows of one size, e.g. images)."""
        return None

    def after_step(self, step: int) -> None:
        """Hook after each optimiser step (e.g. an EMA teacher update). Default: nothing."""

    def state_dict(self) -> dict:
        """The task's training state beyond :attr:`model`'s weights and the loop's generators, saved
        in every checkpoint (e.g. an EMA teacher's weights, a running statistic). Values must be
        tensors, numbers, strings, lists or dicts (``torch.load(weights_only=True)`` loads them; see
        :func:`engine.store.checkpoints.plain_state`). Default: nothing (``{}``)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned, when a run resumes from a checkpoint (called
        after the model's weights are loaded). ``state`` is ``{}`` for a checkpoint written without
        task state. Default: nothing."""

    def baselines(self) -> dict[str, float]:
        """Figures of trivial predictors on the same validation masks and objective as
        ``val_loss`` (``baseline/<name>``), logged once at step 0 so every chart and table can show
        the run next to them. Default: none."""
        return {}

    @abstractmethod
    def evaluate(self) -> dict[str, float]:
        """Validation metrics on the fixed validation masks; always includes ``val_loss`` (the
        objective, comparable along a ratio schedule), plus task figures (e.g. ``val_top1``)."""

    @abstractmethod
    def sample(self, step: int) -> "Sample | None":
        """Reconstruction samples of the fixed visualisation rows at ``step``, for the UI."""

    @abstractmethod
    def features(self, split: str, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Frozen features of a split for linear probes / kNN: the rows
        :func:`engine.data.sampling.eval_rows` picks (at most ``max_rows``, a seeded sample).

        Returns:
            ``(X float32 [N, D], y int64 [N])`` (labels; -1 where a row has none).
        """

    def finetune_inputs(self, max_rows: int | None = None) -> "FinetuneInputs | None":
        """The rows the evaluation job fine-tunes on (:mod:`engine.eval.finetune`): the labels of the
        rows of each split that :meth:`features` reads and how to encode a
        batch of them through a given model with gradient (usually
        :func:`engine.eval.finetune.pooled_features`). Default: None (no fine-tune figure)."""
        return None

    def reconstruction_quality(self) -> dict[str, dict[str, float]]:
        """Reconstruction figures beyond :meth:`evaluate`, of the model at its current weights and of
        the task's trivial baselines on the same validation inputs and masks:
        ``{predictor: {figure: value}}`` with ``trained`` the model (:mod:`engine.eval.reconstruction`:
        SSIM for images, spectral error for audio). Default: ``{}``."""
        return {}

    def raw_features(self, max_rows: int | None = None) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """The raw-input baseline of the representation figures: ``((X_train, y_train), (X_val, y_val))``,
        ``X float32 [N, D]`` (an array, or a SciPy sparse matrix when most entries are 0), of the rows
        of each split that :meth:`features` reads.
        Images: the pixels; audio: log-mel mean and standard deviation per band; text: TF-IDF fitted on
        the train split. Both splits at once, since such features may be fitted on train.

        Raises:
            EvaluationError: the task has no raw-input features (the default).
        """
        raise EvaluationError(f"task {self.name!r} defines no raw-input features (Task.raw_features)")
