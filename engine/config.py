"""Run configuration: one validated model per concern, collected in :class:`RunConfig`.

Validating a config checks its fields only and imports neither the tasks nor torch;
:func:`engine.tasks.resolve` returns the complete config (every default filled in), which is saved
with each run as ``config.json``, so a config diff between two runs is a plain dict diff of
:meth:`RunConfig.to_dict`.

Configs are pydantic models with ``extra="forbid"``: an unknown key or a bad value raises
:class:`~engine.errors.ConfigError` whose message names the field, e.g.
``train.batch_size: Input should be greater than or equal to 1 (got 0)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.errors import ConfigError
from engine.messages import format_problems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TokenizerConfig(_Strict):
    """How text is cut into tokens (text tasks): a WordPiece vocabulary trained on the train split,
    or characters. Special tokens are ``[PAD] [CLS] [SEP] [MASK] [UNK]`` (ids 0..4)."""

    kind: Literal["wordpiece", "char"] = Field("wordpiece", description="WordPiece (BERT) or one token per character")
    vocab_size: int = Field(8000, ge=16, le=200_000, description="WordPiece vocabulary size (ignored for char)")
    lowercase: bool = True
    min_frequency: int = Field(2, ge=1, description="a piece (or character) needs this many occurrences")
    max_len: int = Field(128, ge=4, le=4096, description="tokens per text including [CLS] and [SEP]; longer texts are cut")


#: A WordPiece vocabulary is *far below* its request when it reaches less than this share of
#: ``data.tokenizer.vocab_size`` (:func:`vocab_shortfall`): the train texts hold too few distinct
#: words and pieces for the size asked, and the dashboard says so wherever it shows the tokenizer.
VOCAB_FAR_BELOW = 0.5


def vocab_text(tokenizer: dict | None, reached: int | None) -> str:
    """A tokenizer in a few words, with the vocabulary it really has (``reached``: ids, specials
    included, as a run's ``task.json`` records it; None when not known yet): ``wordpiece 8000``
    (reached as asked, or not known), ``wordpiece 13 (8000 asked)``, ``char`` / ``char 57``."""
    tok = tokenizer or {}
    kind = str(tok.get("kind", "wordpiece"))
    if kind == "char":
        return f"char {reached}" if reached else "char"
    asked = tok.get("vocab_size", TokenizerConfig().vocab_size)
    return f"{kind} {asked}" if not reached or reached == asked else f"{kind} {reached} ({asked} asked)"


def vocab_shortfall(tokenizer: dict | None, reached: int | None, dataset: str | None = None) -> str | None:
    """The warning for a WordPiece vocabulary far below its request (under :data:`VOCAB_FAR_BELOW`
    of ``data.tokenizer.vocab_size``), with both numbers and what to do; None when it is not (or
    ``reached`` is unknown, or the tokenizer is ``char``, which has no requested size).

    Args:
        tokenizer: the config's ``data.tokenizer`` (a dict); reached: the ids the trained tokenizer
            has; dataset: the dataset's name, for the message.
    """
    tok = tokenizer or {}
    if tok.get("kind", "wordpiece") != "wordpiece" or not reached:
        return None
    asked = int(tok.get("vocab_size", TokenizerConfig().vocab_size))
    if reached >= VOCAB_FAR_BELOW * asked:
        return None
    texts = f"the train texts of {dataset!r}" if dataset else "the train texts"
    return (f"The tokenizer has {reached:,} ids where {asked:,} were asked (data.tokenizer.vocab_size), under "
            f"{VOCAB_FAR_BELOW:.0%} of the request: {texts} hold too few distinct words and pieces for more. Ask for "
            f"{reached:,} or fewer (the same tokenizer, named for what it is), or import more text for a larger one.")


class AudioConfig(_Strict):
    """How audio becomes the spectrogram a model sees (audio tasks): a log-mel spectrogram
    (``log(mel power + 1e-6)``, torchaudio's ``MelSpectrogram``, Hann window, centred frames) cut
    into windows of ``clip_seconds``, normalised per mel bin with the train split's statistics.
    See :mod:`engine.audio.features`."""

    n_mels: int = Field(64, ge=4, le=256, description="mel bins F (AudioMAE: 128)")
    window_ms: float = Field(25.0, gt=0.0, le=200.0, description="analysis window in ms (n_fft = window samples)")
    hop_ms: float = Field(10.0, gt=0.0, le=100.0, description="hop between frames in ms (100 frames/s at 10 ms)")
    f_min: float = Field(0.0, ge=0.0, description="lowest mel filter edge in Hz")
    f_max: float | None = Field(None, gt=0.0, description="highest mel filter edge in Hz; None = half the sample rate")
    clip_seconds: float = Field(1.0, gt=0.0, le=60.0,
                                description="the model's window: shorter clips are padded with silence (never masked "
                                            "or scored), longer ones are cut (a random window in training)")

    @model_validator(mode="after")
    def _check(self) -> "AudioConfig":
        if self.hop_ms > self.window_ms:
            raise ValueError(f"hop_ms ({self.hop_ms:g}) must not exceed window_ms ({self.window_ms:g}): frames would skip samples")
        if self.f_max is not None and self.f_max <= self.f_min:
            raise ValueError(f"f_max ({self.f_max:g}) must be above f_min ({self.f_min:g})")
        return self


class DataConfig(_Strict):
    """Which registered (or bundled) dataset a run trains on, and how text is tokenised or audio
    turned into spectrograms."""

    dataset: str = Field("digits", min_length=1, description="dataset name, see `python -m engine data list`")
    tokenizer: TokenizerConfig | None = Field(None, description="text tasks only; filled with the defaults there")
    audio: AudioConfig | None = Field(None, description="audio tasks only; filled with the defaults there")


class MaskingConfig(_Strict):
    """How the input is masked: a strategy of :mod:`engine.masking`, its ratio and parameters.

    ``ratio`` is the fraction of (eligible) positions hidden from the encoder at the start of
    training; with ``schedule`` ``linear`` or ``cosine`` it ramps to ``final_ratio`` over the run
    (:func:`engine.masking.ratio_at`). ``params`` holds the strategy's own parameters; once
    resolved (:func:`engine.tasks.resolve`) it holds every parameter of the strategy with its default filled in, so the
    saved config is complete. Strategies with their own budget (``uses_ratio`` False, e.g.
    ``specaugment``) ignore ``ratio``.

    Validation checks the fields alone; the strategy's name and parameters are checked and filled
    in by :func:`engine.tasks.resolve` (it needs the masking registry, which imports torch).
    """

    strategy: str = Field("random", min_length=1, description="masking strategy, see engine.masking.MASKING_REGISTRY")
    ratio: float = Field(0.75, ge=0.0, le=1.0, description="mask ratio in [0, 1]; MAE uses 0.75, BERT 0.15")
    params: dict[str, Any] = Field(default_factory=dict, description="the strategy's own parameters (resolved)")
    schedule: Literal["constant", "linear", "cosine"] = Field("constant", description="mask ratio over training")
    final_ratio: float | None = Field(None, ge=0.0, le=1.0, description="ratio at the last step of a ramp")

    @model_validator(mode="after")
    def _check(self) -> "MaskingConfig":
        # The strategy's own checks (its name, its params, whether it uses the ratio) need the masking
        # registry, which imports torch: :func:`engine.tasks.resolve` does them.
        if self.schedule == "constant":
            if self.final_ratio is not None and self.final_ratio != self.ratio:
                raise ValueError(f"@masking.final_ratio: {self.final_ratio} is set but masking.schedule is "
                                 f"'constant'; use 'linear' or 'cosine' to ramp from ratio to final_ratio")
        elif self.final_ratio is None:
            raise ValueError(f"@masking.final_ratio: schedule {self.schedule!r} needs final_ratio (the ratio at the last step)")
        return self


class ModelConfig(_Strict):
    """Model architecture. ``arch`` is a key of ``engine.models.MODEL_REGISTRY`` ("" = the task's
    default); ``preset`` picks widths/depths from that arch's presets. ``patch_size`` is for tasks
    with patches (images); it stays None elsewhere."""

    arch: str = Field("", description="model architecture; '' = the task's default (resolved)")
    preset: str = "tiny"
    patch_size: int | None = Field(None, ge=1, le=64, description="patch side P in pixels; must divide H and W")
    init_from: str = Field("", max_length=64, description="start from an imported model (its name in `python -m "
                           "engine models list`: its architecture, patch size and preprocessing) or a run's "
                           "checkpoint (its id: a fork; the weights that fit are loaded), on this run's data; "
                           "'' = a fresh model")
    init_step: int | None = Field(None, ge=0, description="the checkpoint step of the run model.init_from names "
                                  "(None: its latest)")


class ObjectiveTerm(_Strict):
    """One weighted term of a mixed objective."""

    loss: str = Field(min_length=1, description="a key of engine.objectives.OBJECTIVE_REGISTRY")
    weight: float = Field(1.0, ge=0.0, le=1e6)


class ObjectiveConfig(_Strict):
    """Prediction target and loss: a registered objective (``loss``; "" = the task's default), or a
    weighted sum of several (``terms``; each is logged as ``loss/<name>``). ``norm_pix_loss``
    scores against per-patch normalised pixels (MAE sec. 4)."""

    loss: str = Field("", description="objective; '' = the task's default (resolved)")
    norm_pix_loss: bool = Field(False, description="target = per-patch normalised pixels (MAE sec. 4)")
    terms: list[ObjectiveTerm] = Field(default_factory=list, description="weighted sum; empty = one term `loss`")

    @model_validator(mode="after")
    def _check(self) -> "ObjectiveConfig":
        if self.terms and not any(t.weight > 0 for t in self.terms):
            raise ValueError("@objective.terms: at least one weight must be > 0")
        return self


class TrainConfig(_Strict):
    """Optimisation and bookkeeping. Steps are optimizer steps; intervals are in steps."""

    steps: int = Field(1000, ge=0, description="optimiser steps; 0 evaluates and keeps the initial model "
                       "(an imported one, model.init_from) without training it")
    batch_size: int = Field(128, ge=1, le=65536)
    lr: float = Field(1.5e-3, gt=0.0, le=10.0, description="peak learning rate after warmup")
    min_lr: float = Field(0.0, ge=0.0)
    warmup_steps: int = Field(50, ge=0)
    weight_decay: float = Field(0.05, ge=0.0)
    group_by_length: bool = Field(True, description="batches of rows of similar length (tasks whose rows vary in "
                                  "length, e.g. text): less padding per step, the same rows per epoch "
                                  "(engine.training.loop.epoch_order)")
    eval_interval: int = Field(100, ge=1, description="val loss + reconstructions every N steps")
    checkpoint_interval: int = Field(500, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    num_vis: int = Field(8, ge=1, le=64, description="fixed validation images in the reconstruction grid")
    seed: int = Field(0, ge=0, lt=2**63)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    amp: bool = Field(True, description="bfloat16 autocast on CUDA; ignored on CPU")
    num_threads: int = Field(0, ge=0, description="torch CPU threads; 0 = torch's default")
    compile: bool = Field(False, description="torch.compile the model (first steps slower while it compiles; "
                          "worth it on a GPU for long runs; off by default, as on CPU it rarely pays)")
    deterministic: bool = Field(False, description="torch.use_deterministic_algorithms (and cuBLAS's fixed "
                                "workspace on CUDA): identical results on the same device, some ops slower or refused")
    max_restarts: int = Field(0, ge=0, le=100, description="background runs: when the worker process dies without "
                              "recording an outcome (killed, crashed), resume it from its last checkpoint up to "
                              "this many times (torchrun's --max-restarts)")

    @model_validator(mode="after")
    def _check(self) -> "TrainConfig":
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr ({self.min_lr}) must not exceed lr ({self.lr})")
        return self


class EvalConfig(_Strict):
    """The evaluation job (:mod:`engine.eval.job`): representation figures of frozen features next to
    a randomly initialised encoder and the raw input, a short downstream fine-tune
    (:mod:`engine.eval.finetune`) within ``budget`` (:mod:`engine.eval.budget`), reconstruction
    figures and the FLOPs of a training step."""

    auto: bool = Field(True, description="evaluate the final checkpoint when the run completes (in its worker)")
    max_rows: int = Field(2000, ge=20, le=100_000, description="rows of each split whose features are probed")
    tsne_max_rows: int = Field(1000, ge=0, le=10_000, description="t-SNE map only up to this many val rows (PCA always)")
    finetune_epochs: int = Field(5, ge=0, le=100, description="epochs of the downstream fine-tune of the encoder and "
                                 "a linear head, at most 300 steps (0: no fine-tune)")
    budget: float | None = Field(0.5, ge=0, le=100, description="the evaluation may take this share of the "
                                 "checkpoint's training time (its optimiser steps); probes, kNN and k-means always "
                                 "run, the fine-tune takes what is left (0: no fine-tune; null: no limit, the "
                                 "fine-tune's full recipe; engine/eval/budget.py)")


#: The budget an evaluation asked for without one takes: the run's own ``evaluation.budget``.
RUN_BUDGET = "run"


def parse_eval_budget(text: str | float | None) -> float | str | None:
    """An evaluation budget asked for (CLI ``--budget``, a page): a share of the training time in
    [0, 100] (float), ``"full"`` (None: no limit, the fine-tune's full recipe), or ``"run"``
    (:data:`RUN_BUDGET`: the run's ``evaluation.budget``).

    Raises:
        ConfigError: anything else, naming the value.
    """
    if text is None or text == "full":
        return None
    if text == RUN_BUDGET:
        return RUN_BUDGET
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 <= value <= 100:
        raise ConfigError(f"evaluation budget {text!r}: must be a share of the training time between 0 and 100, "
                          f"or 'full' (no limit)")
    return value


#: Launch back-ends (``launch.backend``): where a run's processes execute (:mod:`engine.runner.backends`):
#: ``local`` (this machine's processes), ``ray`` (a Ray Job on an existing Ray cluster), ``slurm``
#: (an sbatch job through submitit). The last two need the cluster extra (requirements-cluster.txt).
LAUNCH_BACKENDS = ("local", "ray", "slurm")


#: ``launch`` fields that only a cluster back-end reads (ray, slurm).
CLUSTER_FIELDS = ("cpus", "gpus", "mem_gb", "time_min", "ray_address", "slurm_partition", "slurm_account",
                  "slurm_params", "workspace")


class LaunchConfig(_Strict):
    """How many processes train one run, and where; named as torchrun names them
    (``torchrun --nproc_per_node --nnodes --node_rank --rdzv_endpoint``).

    The default (one process, one node) trains in the worker's own process, exactly as masklab
    always did; such a config's saved form has no ``launch`` section (:meth:`RunConfig.to_dict`).
    With more processes the worker starts ``torchrun`` (:mod:`engine.runner.torchrun`): data-parallel
    training (PyTorch DDP; gloo on CPU, NCCL on CUDA), ``train.batch_size`` staying the global batch.
    ``node_rank`` is the rank of the launch that holds the run (the dashboard's or ``submit``'s);
    the other nodes join with ``python -m engine join RUN_ID --node-rank K``.

    ``backend`` says where the worker runs (:mod:`engine.runner.backends`): ``local`` starts it on this
    machine; ``ray`` and ``slurm`` hand it to a cluster as one job on one node, asking for ``cpus``,
    ``gpus``, ``mem_gb`` and ``time_min`` (0: the cluster's default); the ``nproc_per_node``
    processes of a distributed run then start on that node. The cluster's nodes must see the
    workspace (at ``workspace``, default: the same path) and this checkout with its venv.
    """

    nproc_per_node: int = Field(1, ge=1, le=256, description="training processes on each node (one per GPU)")
    nnodes: int = Field(1, ge=1, le=1024, description="nodes (machines) that train the run together")
    node_rank: int = Field(0, ge=0, description="rank of the node whose launch holds the run (0)")
    rdzv_endpoint: str = Field("", max_length=300, description="host:port of the c10d rendezvous; needed when "
                               "nnodes > 1 (one node: torchrun --standalone)")
    backend: str = Field("local", description="where the processes run: local (this machine's processes), ray "
                         "(a Ray Job on an existing Ray cluster) or slurm (an sbatch job through submitit)")
    cpus: int = Field(0, ge=0, le=4096, description="CPUs the cluster job asks for (ray, slurm; 0: train.num_threads, "
                      "else 1)")
    gpus: int = Field(0, ge=0, le=64, description="GPUs the cluster job asks for (ray, slurm); the run's processes see "
                      "them as CUDA_VISIBLE_DEVICES")
    mem_gb: float = Field(0, ge=0, le=65536, description="memory the cluster job asks for, in GB (0: the cluster's default)")
    time_min: int = Field(0, ge=0, le=525_600, description="wall-clock limit of the slurm job in minutes (0: 24 h)")
    ray_address: str = Field("", max_length=300, description="the Ray cluster's dashboard address (http://head:8265); "
                             "empty: $RAY_ADDRESS")
    slurm_partition: str = Field("", max_length=100, description="sbatch --partition (empty: the cluster's default)")
    slurm_account: str = Field("", max_length=100, description="sbatch --account (empty: none)")
    slurm_params: dict[str, str] = Field(default_factory=dict, description="more sbatch options, name: value "
                                         "(e.g. qos: high, constraint: a100)")
    workspace: str = Field("", max_length=1000, description="the workspace's path on the cluster's nodes (ray, slurm; "
                           "empty: the same path as here)")

    @property
    def world_size(self) -> int:
        """Training processes in all: ``nproc_per_node * nnodes``."""
        return self.nproc_per_node * self.nnodes

    @property
    def distributed(self) -> bool:
        """True when the run trains in more than one process (torchrun)."""
        return self.world_size > 1

    @model_validator(mode="after")
    def _check(self) -> "LaunchConfig":
        if self.backend not in LAUNCH_BACKENDS:
            raise ValueError(f"@launch.backend: {self.backend!r} is not available; use one of "
                             f"{', '.join(LAUNCH_BACKENDS)}")
        if self.backend != "local" and self.nnodes > 1:
            raise ValueError(f"@launch.nnodes: the {self.backend} back-end runs a run on one node (its "
                             f"launch.nproc_per_node processes); {self.nnodes} nodes need launch.backend=local and "
                             f"python -m engine join on each other node")
        if self.node_rank >= self.nnodes:
            raise ValueError(f"@launch.node_rank: {self.node_rank} must be below launch.nnodes ({self.nnodes})")
        if self.nnodes > 1:
            host, sep, port = self.rdzv_endpoint.rpartition(":")
            if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
                raise ValueError(f"@launch.rdzv_endpoint: {self.rdzv_endpoint!r}: {self.nnodes} nodes need the "
                                 f"rendezvous address as host:port (e.g. node0.cluster:29400)")
        return self


class RunConfig(_Strict):
    """Everything a run needs; saved resolved with the run.

    ``task`` names the modality's recipe (``engine.tasks.TASK_REGISTRY``: ``image_mim``,
    ``text_mlm``, ``text_span``, ...). Validation checks the fields only (types, ranges, the batch
    split over the processes) and imports neither the tasks nor torch; :func:`engine.tasks.resolve`
    returns the complete config (the task's defaults filled in: ``model.arch``, ``objective.loss``,
    ``model.patch_size`` or ``data.tokenizer``, ``task_params``, ``masking.params``), once per
    config version of a run (submit, a resume that changes fields), and that is what is saved.
    """

    name: str = Field("", max_length=200)
    task: str = Field("", description="the modality's recipe, see engine.tasks; empty: the default task "
                      "(engine.tasks.DEFAULT_TASK), filled in by resolve")
    task_params: dict[str, Any] = Field(default_factory=dict, description="the task's own parameters (resolved)")
    data: DataConfig = DataConfig()
    masking: MaskingConfig = MaskingConfig()
    model: ModelConfig = ModelConfig()
    objective: ObjectiveConfig = ObjectiveConfig()
    train: TrainConfig = TrainConfig()
    evaluation: EvalConfig = EvalConfig()
    launch: LaunchConfig = LaunchConfig()

    @model_validator(mode="after")
    def _check(self) -> "RunConfig":
        world = self.launch.world_size
        if self.train.batch_size % world:
            raise ValueError(f"@train.batch_size: {self.train.batch_size} is the global batch and must split evenly "
                             f"over the {world} training processes (launch.nproc_per_node x launch.nnodes)")
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (JSON-safe) with every field (resolved ones once :func:`engine.tasks.resolve` ran).

        A single-process launch (the default ``launch`` section) is left out, so the config of a
        run that trains in one process reads exactly as before ``launch`` existed; a local launch
        leaves out the cluster back-ends' fields (:data:`CLUSTER_FIELDS`) left at their defaults."""
        d = self.model_dump(mode="json")
        default = LaunchConfig().model_dump(mode="json")
        if d["launch"]["backend"] == "local":  # a local launch reads as before the cluster back-ends
            d["launch"] = {k: v for k, v in d["launch"].items() if k not in CLUSTER_FIELDS or v != default[k]}
        if d["launch"] == {k: v for k, v in default.items() if k not in CLUSTER_FIELDS}:
            del d["launch"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "RunConfig":
        """Validate a nested dict. Raises :class:`ConfigError` naming the field and value."""
        try:
            return cls.model_validate(d or {})
        except ValidationError as e:
            raise ConfigError(_format_validation_error(e)) from None


def _format_validation_error(e: ValidationError) -> str:
    """``invalid run config: <field>: <what is wrong>; ...`` in masklab's words (:mod:`engine.messages`)."""
    return "invalid run config: " + format_problems(e)


def apply_overrides(d: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides (CLI ``--set``) to a nested dict, in place; returns it.

    Values are parsed as YAML scalars (``3`` is an int, ``1e-3`` a float, ``true`` a bool).
    Raises :class:`ConfigError` for an item without ``=``.
    """
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value, e.g. train.steps=200")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw.strip() else ""
        node = d
        *parents, leaf = key.strip().split(".")
        for p in parents:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {item!r}: {p} is not a section")
            node = nxt
        node[leaf] = value
    return d


#: The largest config file read (a run config is a few KB; a 6 MB YAML took minutes and GBs to parse).
MAX_CONFIG_BYTES = 1024 * 1024


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML run config, apply ``overrides`` and validate.

    Raises:
        ConfigError: the file is missing, over :data:`MAX_CONFIG_BYTES` or not YAML, or a field is
            invalid (the message names it).
    """
    d: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            size = p.stat().st_size
            if size > MAX_CONFIG_BYTES:  # before parsing: YAML's aliases make a large file costly to read
                raise ConfigError(f"{p}: {size:,} bytes; a run config is a few KB, and masklab reads at most "
                                  f"{MAX_CONFIG_BYTES:,} (is this the right file?)")
            loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{p}: config file not found") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {e}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: expected a mapping at the top level, got {type(loaded).__name__}")
        d = loaded or {}
    apply_overrides(d, overrides or [])
    return RunConfig.from_dict(d)
