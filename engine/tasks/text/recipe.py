"""Text tasks: masked language modeling (``text_mlm``) and span completion (``text_span``).

Both tokenise the dataset with the run's tokenizer (``data.tokenizer``: WordPiece trained on the
train split, or characters; cached per dataset content and settings, so runs and sweeps with the
same settings share it; the run records its id in ``task.json``). Every text is encoded once as
``[CLS] tokens [SEP] [PAD]...``; a batch is cut to its longest row. Units are tokens on the
``[B, L]`` grid; ``[PAD]``, ``[CLS]`` and ``[SEP]`` are never eligible, so never masked or labelled.

- ``text_mlm`` (BERT, Devlin et al. 2019): any text strategy of the masking library (random,
  Bernoulli, span, whole-word, periodic...) chooses the predicted tokens; every row with a
  maskable token gets at least one (so no batch has nothing to score); BERT's 80/10/10
  replacement (:func:`engine.masking.mlm.apply_mlm`, shares in ``task_params``) corrupts the input;
  the ``bert`` model's MLM head runs at those positions only; cross-entropy on them.
  Validation shows every predicted position as ``[MASK]`` (no 10% unchanged tokens to copy), on
  fixed masks: ``val_loss`` (cross-entropy, nats/token), ``val_ppl``, ``val_top1``, ``val_top5``.
  Baselines on the same masks and tokenizer (:mod:`engine.eval.text_baselines`): the most frequent
  token, the most frequent token at each position, the bidirectional bigram.
  Methods on ``bert`` (:mod:`engine.models.bert_methods`): ``task_params.target: latent`` (data2vec,
  Baevski et al. 2022: the MSE to an EMA teacher's top-K-block average on the unmasked text, at the
  masked positions; ``objective.loss`` defaults to ``mse``; the MLM head is a readout on detached
  features, ``loss/readout``, so ``val_top1`` and the fill-in box still work; ``target_std`` and
  ``val_target_std`` watch for collapse; :meth:`TextMLMTask.after_step` updates the teacher, which
  is saved with the weights) and a ``contrastive`` term in ``objective.terms`` (InfoNCE between the
  pooled encodings of two independently masked views of each text).
- ``text_span`` (T5-style infilling, Raffel et al. 2020): a one-segment strategy
  (``sentence_span``: a whole sentence of 20-50% of the text where there are several, else a random
  segment) hides one contiguous span; the encoder sees the text with one sentinel (``[MASK]``) in
  its place, the decoder writes the span and ``[SEP]``. Validation: ``val_loss`` (teacher-forced
  cross-entropy), ``val_span_acc`` (greedy generation compared token by token with the span,
  ``[SEP]`` excluded: what the baselines are scored on), ``val_span_acc_len`` (the same with
  length-constrained decoding: the model is told the span's length, as the baselines are),
  ``val_span_acc_tf`` (teacher-forced top-1 on the span tokens; its baseline is ``bigram_tf_acc``,
  the bigram given the true previous token, logged as ``baseline/bigram_tf_acc/span_acc_tf``),
  ``val_span_acc_pos`` (told the length, each position's most probable token from the text and the
  position alone: ``SpanInfiller.per_position``; logged for runs trained with
  ``task_params.decoder_input_mask`` > 0), ``val_exact`` (the whole span and its end).
"""


from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from engine.config import RunConfig, TokenizerConfig
from engine.data import load_dataset
from engine.data.sampling import eval_rows
from engine.errors import ConfigError
from engine.eval.finetune import FinetuneInputs, pooled_features
from engine.eval.representation import tfidf_splits
from engine.eval.text_baselines import BASELINE_KINDS, TokenBaselines
from engine.masking import get_masking, strategies_on
from engine.masking.mlm import apply_mlm
from engine.masking.segment import segment_bounds
from engine.methods.teacher import TARGET_STD, target_std
from engine.models import build_model, get_model_spec
from engine.models.bert_methods import MethodBertMLM, MLMParams, check_top_k, text_method
from engine.models.span_infill import shift_right, span_corrupt, span_exact_match, span_scored_mask
from engine.objectives import Objective, masked_cross_entropy, masked_mse
from engine.pretrained.runs import check_init, init_model
from engine.store.samples import Sample
from engine.tasks.base import Task
from engine.tasks.checks import masking_problem
from engine.tasks.registry import register_task
from engine.tasks.text.common import (
    EVAL_CHUNK,
    EVAL_MAX_ROWS,
    GEN_MAX_ROWS,
    PROBE_ROWS,
    TOP_K,
    baseline_rows,
    draw_text_mask,
    ensure_one_masked,
    text_rows,
    token_strings,
    tokenizer_for,
    vis_masks,
    vis_rows,
    whole_words,
)
from engine.text.stored import encode_split
from engine.training.perf import pin, to_device


class SpanParams(BaseModel):
    """Decoder-input masking of the span task (training only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decoder_input_mask: float = Field(
        0.0, ge=0.0, le=1.0,
        description="largest share of the decoder's input tokens (the true span, shifted right) shown as [MASK] "
                    "in training; each text draws its share uniformly in [0, this]. Above 0 the model also learns "
                    "each span position from the text and the position alone, which the per-position decoding "
                    "(val_span_acc_pos) reads",
    )



class TextTask(Task):
    """What both text tasks share: the tokenizer, the encoded splits, batches, masks."""

    modality = "text"
    unit = "token"
    default_loss = "cross_entropy"
    data_sections = ("tokenizer",)
    train_defaults = {"steps": 2000, "batch_size": 64, "lr": 1e-3, "warmup_steps": 100, "eval_interval": 200}  # New run's proposal for both

    @classmethod
    def resolve(cls, cfg: RunConfig) -> None:
        """Base defaults, plus ``data.tokenizer`` (WordPiece defaults when unset) and no patches."""
        if cfg.model.patch_size is not None:
            raise ConfigError("model.patch_size: text tasks have no patches; remove it")
        if cfg.data.tokenizer is None:
            cfg.data.tokenizer = TokenizerConfig()
        super().resolve(cfg)

    @classmethod
    def outputs(cls, cfg: RunConfig) -> set[str]:
        return {"logits", "labels"}

    # --- data -------------------------------------------------------------------------------------

    #: ``(tokenizer, tokenizer_id)`` of the run (:func:`~engine.tasks.text.common.tokenizer_for`).
    tokenizer_for = staticmethod(tokenizer_for)

    @classmethod
    def _probe(cls, cfg: RunConfig, workspace=None):
        """Real encoded train texts (at most :data:`PROBE_ROWS`) for pre-flight probes."""
        ds = load_dataset(cfg.data.dataset, workspace)
        if ds.info.n_train == 0:
            raise ConfigError(f"data.dataset: {ds.info.name!r} has no train texts")
        tok, _ = cls.tokenizer_for(cfg, ds, workspace)
        return tok.encode_batch(ds.texts("train", limit=PROBE_ROWS), max_len=cfg.data.tokenizer.max_len)

    @classmethod
    def _check_strategy(cls, cfg: RunConfig) -> None:
        s = get_masking(cfg.masking.strategy)
        if not s.works_on("tokens-1d"):
            raise ConfigError(f"masking.strategy: {s.name!r} does not apply to token sequences; "
                              f"strategies for text: {', '.join(strategies_on('tokens-1d'))}")

    def _load(self, cfg: RunConfig, device: torch.device, workspace=None) -> None:
        self.cfg, self.device = cfg, device
        ds = load_dataset(cfg.data.dataset, workspace)
        self._ds = ds
        self.class_names = tuple(ds.info.class_names)
        self.tok, self.tokenizer_id = self.tokenizer_for(cfg, ds, workspace)
        max_len = cfg.data.tokenizer.max_len
        # The train split encoded once into <workspace>/encoded and read through memory maps
        # (engine.text.stored): memory does not grow with the number of texts.
        self.train = encode_split(self.tok, self.tokenizer_id, ds.texts_at, ds.indices("train"), max_len, workspace)
        val_split = "val" if ds.info.n_val else "train"  # tiny uploads may have no val split
        self.val_texts = ds.texts(val_split, limit=EVAL_MAX_ROWS)
        self.val = self.tok.encode_batch(self.val_texts, max_len=max_len)
        self.val_labels = ds.labels[ds.indices(val_split)][:EVAL_MAX_ROWS].astype(np.int64)
        self.vis_idx = torch.from_numpy(vis_rows(self.val_labels, cfg.train.num_vis))  # == preview()
        self.n_train = len(self.train)
        self.batch_size = min(cfg.train.batch_size, self.n_train)
        self.special_ids = tuple(self.tok.special_ids)

    def train_lengths(self) -> torch.Tensor:
        """Real tokens per train text (``[CLS]`` and ``[SEP]`` included): a batch is cut to its
        longest row (:meth:`rows`), so the loop groups texts of similar length."""
        return self.train.lengths

    def run_info(self) -> dict:
        """The dataset's hash, the tokenizer's id and size, train rows; for an imported model also
        its record (``model_dims``); for a run with ``model.init_from``, what was loaded (``init``)."""
        info = {"dataset_hash": self._ds.info.source_hash, "tokenizer_id": self.tokenizer_id,
                "vocab_size": self.tok.vocab_size, "n_train": self.n_train}
        if getattr(self, "model_dims", None):
            info["model_dims"] = self.model_dims
        if getattr(self, "init_report", None):
            info["init"] = self.init_report
        return info

    #: The rows of an encoded split cut to their longest (:func:`~engine.tasks.text.common.text_rows`).
    rows = staticmethod(text_rows)

    def _mask(self, b: dict[str, torch.Tensor], generator: torch.Generator, ratio: float) -> torch.Tensor:
        return draw_text_mask(self.cfg.masking, b, generator, ratio)

    def _chunks(self):
        n = len(self.val)
        return [torch.arange(i, min(i + EVAL_CHUNK, n)) for i in range(0, n, EVAL_CHUNK)]

    def token_strings(self, ids: torch.Tensor) -> np.ndarray:
        return token_strings(self.tok, ids)

    def features(self, split: str, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        rows = eval_rows(self._ds, split, max_rows)
        texts = self._ds.texts_at(rows)
        labels = self._ds.labels[rows].astype(np.int64)
        enc = self.tok.encode_batch(texts, max_len=self.cfg.data.tokenizer.max_len)
        # chunks of rows of similar length (each chunk is cut to its longest row), in the rows' order after
        order = torch.argsort(enc.attention_mask.sum(1), stable=True)
        out = []
        with torch.no_grad():
            for i in range(0, len(enc), EVAL_CHUNK):
                b = self.rows(enc, order[i : i + EVAL_CHUNK])
                out.append(self._features(b).float().cpu())
        if not out:
            return np.zeros((0, 1), np.float32), labels
        feats = torch.empty_like(sorted_feats := torch.cat(out))
        feats[order] = sorted_feats
        return feats.numpy().astype(np.float32), labels

    def finetune_inputs(self, max_rows: int | None = None):
        """The texts of each split that the probes read (:func:`engine.data.sampling.eval_rows`),
        tokenised as the run's features are."""
        ds, max_len = self._ds, self.cfg.data.tokenizer.max_len
        rows = {s: eval_rows(ds, s, max_rows) for s in ("train", "val")}
        enc = {s: self.tok.encode_batch(ds.texts_at(rows[s]), max_len=max_len) for s in ("train", "val")}
        y = {s: ds.labels[rows[s]].astype(np.int64) for s in ("train", "val")}

        def encode(model, split, pos):
            b = self.rows(enc[split], pos)
            dev = next(model.parameters()).device
            return pooled_features(model)(b["ids"].to(dev), b["attention"].to(dev))

        return FinetuneInputs(y["train"], y["val"], encode,
                              lengths={s: enc[s].attention_mask.sum(1).numpy() for s in ("train", "val")})

    def raw_features(self, max_rows: int | None = None):
        """TF-IDF of words and word pairs (scikit-learn ``TfidfVectorizer``, sublinear tf, at most
        :data:`TFIDF_MAX_FEATURES` terms, fitted on the train rows), ``X float32 [N, V]`` per split,
        a SciPy CSR matrix (a row holds a few dozen of the terms: sparse, the probe is 4x faster).

        Raises:
            EvaluationError: no train text has a word of two letters or digits (no TF-IDF term)."""
        splits = []
        for split in ("train", "val"):
            rows = eval_rows(self._ds, split, max_rows)
            splits.append((self._ds.texts_at(rows), self._ds.labels[rows].astype(np.int64)))
        tr, va = tfidf_splits(splits[0][0], [t for t, _ in splits], "text", ngram_range=(1, 2), sublinear_tf=True,
                              max_features=TFIDF_MAX_FEATURES, lowercase=True)
        return (tr, splits[0][1]), (va, splits[1][1])


#: Terms of the TF-IDF raw-input baseline (:meth:`TextTask.raw_features`).
TFIDF_MAX_FEATURES = 5_000


@register_task
class TextMLMTask(TextTask):
    """Masked language modeling with a BERT encoder. See the module docstring."""

    name = "text_mlm"
    sample_kind = "text_mlm"
    interactive = "fill_in"
    archs = ("bert", "bert_hf")
    init_from_arch = "bert_hf"  # an imported BertForMaskedLM (engine.pretrained.runs)
    params = MLMParams  # BERT's shares and the method: target, teacher, contrastive head (engine.models.bert_methods)
    headline = ("val_top1", "max")
    summary = "masked language modeling: BERT's 80/10/10 on any token masking (Devlin et al. 2019)"

    @classmethod
    def resolve(cls, cfg: RunConfig) -> None:
        """Text defaults; with ``task_params.target: latent`` the objective defaults to ``mse``
        (cross-entropy scores tokens, not the teacher's features: refused), and a latent target or a
        contrastive term needs a fresh ``bert`` (refused for ``bert_hf``, imported models and forks)
        with ``top_k`` at most its depth."""
        latent = (cfg.task_params or {}).get("target") == "latent"
        contrastive = any(t.loss == "contrastive" for t in cfg.objective.terms)
        if latent or contrastive:
            field = "task_params.target" if latent else "objective.terms"
            what = "the latent target" if latent else "a contrastive term"
            if cfg.model.init_from:
                raise ConfigError(f"{field}: {what} trains a fresh bert (its teacher or projection head starts with "
                                  f"the run); an imported model or a fork (model.init_from) trains the token target "
                                  f"only; remove model.init_from or train the token target")
            arch = cfg.model.arch or cls.archs[0]
            if arch != "bert":
                raise ConfigError(f"{field}: {what} runs on masklab's bert, not {arch} (bert_hf is kept exactly as "
                                  f"transformers' BertForMaskedLM, for imported checkpoints and export); set "
                                  f"model.arch to bert")
        if latent:
            ce = ([f"objective.terms.{i}.loss" for i, t in enumerate(cfg.objective.terms) if t.loss == "cross_entropy"]
                  or (["objective.loss"] if cfg.objective.loss == "cross_entropy" and not cfg.objective.terms else []))
            if ce:
                raise ConfigError(f"{ce[0]}: cross_entropy scores tokens, and the latent target (task_params.target: "
                                  f"latent) regresses the teacher's features: use mse (the default when objective.loss "
                                  f"is left empty); the MLM head still trains as a readout (loss/readout)")
            if not cfg.objective.loss:
                cfg.objective.loss = "mse"
        super().resolve(cfg)
        terms = [(t.loss, t.weight) for t in cfg.objective.terms] or [(cfg.objective.loss, 1.0)]
        if all(name == "contrastive" for name, w in terms if w > 0):
            field = "objective.terms" if cfg.objective.terms else "objective.loss"
            raise ConfigError(f"{field}: a contrastive term alone trains no masked prediction; add "
                              f"{'mse' if latent else 'cross_entropy'} beside it (objective.terms)")
        if latent:  # pre-flight, as the builder checks it
            prm, _ = text_method(cfg)
            check_top_k(prm, get_model_spec(cfg.model.arch).presets[cfg.model.preset]["depth"], cfg.model.preset)

    @classmethod
    def outputs(cls, cfg: RunConfig) -> set[str]:
        """Tokens (``logits``, ``labels``), or on ``bert`` with the latent target the teacher's features
        (``pred``, ``target``, ``mask``: the MLM head is then a readout outside the objective); on
        ``bert`` also two masked views' embeddings for a contrastive term."""
        if cfg.model.arch not in ("", "bert"):
            return super().outputs(cfg)
        latent = (cfg.task_params or {}).get("target") == "latent"
        return ({"pred", "target", "mask"} if latent else {"logits", "labels"}) | {"emb_a", "emb_b", "logit_scale"}

    @classmethod
    def init_fit(cls, cfg: RunConfig, rec: dict, name: str) -> None:
        """An imported BERT holds ``max_len`` positions: ``data.tokenizer.max_len`` at most that."""
        most = int(rec["preprocessing"]["max_len"])
        if cfg.data.tokenizer is not None and cfg.data.tokenizer.max_len > most:
            raise ConfigError(f"data.tokenizer.max_len: {name} has {most} positions; set it to at most {most}")

    @classmethod
    def fork_fit(cls, cfg: RunConfig, parent: dict, name: str) -> None:
        """A fork reads with its parent's tokenizer and positions: the same ``data.tokenizer.max_len``."""
        theirs = ((parent.get("data") or {}).get("tokenizer") or {}).get("max_len")
        if cfg.data.tokenizer is not None and theirs is not None and cfg.data.tokenizer.max_len != theirs:
            raise ConfigError(f"data.tokenizer.max_len: run {name} has {theirs} positions; set it to {theirs} "
                              "(a fork reads with its parent's tokenizer and positions)")

    @classmethod
    def init_view(cls, rec: dict) -> dict:
        """BERT's masking (random 15%), at most 128 tokens (attention's cost grows with the square of the length)."""
        return {"data": {"tokenizer": {"max_len": min(128, int(rec["preprocessing"]["max_len"]))}},
                "masking": {"strategy": "random", "ratio": 0.15}}

    @classmethod
    def check(cls, cfg: RunConfig, info, workspace=None) -> None:
        """The strategy applies to token sequences, and a probe batch of real texts gets trainable
        masks (:func:`engine.tasks.checks.masking_problem` over the maskable tokens)."""
        cls._check_strategy(cfg)
        if cfg.model.init_from:
            check_init(cfg, cls, workspace)
        enc = cls._probe(cfg, workspace)
        b = cls.rows(enc, torch.arange(len(enc)))
        ratios = [cfg.masking.ratio] + ([cfg.masking.final_ratio] if cfg.masking.schedule != "constant" else [])
        for r in ratios:
            probe = draw_text_mask(cfg.masking, b, torch.Generator().manual_seed(0), r)
            problem = masking_problem(cfg.masking, probe, ratio=r, unit="tokens", eligible=b["eligible"])
            if problem:
                raise ConfigError(problem)

    def __init__(self, cfg: RunConfig, device: torch.device, workspace=None):
        self._load(cfg, device, workspace)
        p, self.contrastive = text_method(cfg)
        self.shares = {"mask_share": p.mask_share, "random_share": p.random_share}
        self.latent = p.target == "latent"
        self.model_dims, self.init_report = {}, {}

        def build():
            return build_model(cfg, vocab_size=self.tok.vocab_size, max_len=cfg.data.tokenizer.max_len)

        if cfg.model.init_from:  # an imported BERT or a parent run, with its tokenizer (self.tok)
            model, self.model_dims, self.init_report = init_model(cfg, build, workspace)
        else:
            model = build()
        self.model = model.to(device)
        self.objective = Objective.from_config(cfg.objective, self.outputs(cfg))
        # Fixed val masks, every predicted token shown as [MASK] (nothing to copy), drawn once.
        g = torch.Generator().manual_seed(cfg.train.seed + 10_000)
        self.eval_batches = []
        for idx in self._chunks():
            b = self.rows(self.val, idx)
            mask = ensure_one_masked(self._mask(b, g, cfg.masking.ratio), b["eligible"], g)
            self.eval_batches.append((b, mask, b["ids"].masked_fill(mask, self.tok.mask_id)))

    def _corrupt(self, b, mask, generator, **shares):
        return apply_mlm(b["ids"], mask, generator=generator, mask_token_id=self.tok.mask_id,
                         vocab_size=self.tok.vocab_size, special_ids=self.special_ids, **shares)

    def train_loss(self, idx, generator, ratio):
        b = self.rows(self.train, idx)
        mask = ensure_one_masked(self._mask(b, generator, ratio), b["eligible"], generator)
        inputs, _ = self._corrupt(b, mask, generator, **self.shares)
        dev = self.device

        def put(t):  # host batch -> device: pinned + non_blocking on CUDA (engine.training.perf.to_device)
            return to_device(pin(t, dev), dev)

        labels = put(b["ids"][mask])
        if not isinstance(self.model, MethodBertMLM):
            out = {"logits": self.model(put(inputs), put(b["attention"]), put(mask))}
        else:
            inputs_b = None
            if self.contrastive:  # a second view: its own mask and 80/10/10, from the same generator
                mask_b = ensure_one_masked(self._mask(b, generator, ratio), b["eligible"], generator)
                inputs_b, _ = self._corrupt(b, mask_b, generator, **self.shares)
                inputs_b = put(inputs_b)
            out = self.model.forward_outputs(put(inputs), put(b["attention"]), put(mask),
                                             clean_ids=put(b["ids"]) if self.latent else None, input_ids_b=inputs_b)
        out["labels"] = labels
        loss, parts = self.objective(out)
        eligible = b["eligible"].sum()
        logs = {"mask_ratio": mask.sum() / eligible.clamp_min(1), **{f"loss/{k}": v for k, v in parts.items()}}
        if self.latent:  # the readout (detached features: trains the head only) and the collapse watch
            readout = masked_cross_entropy(out["logits"], labels)
            loss = loss + readout
            logs["loss/readout"] = readout.detach()
            logs[TARGET_STD] = target_std(out["target"], out["mask"])
        return loss, logs

    def after_step(self, step: int) -> None:
        """The EMA teacher's update (latent target); nothing otherwise."""
        if getattr(self.model, "teacher", None) is not None:
            self.model.ema_update(step)

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """``val_loss`` (cross-entropy of the MLM head, nats/token; with the latent target the MSE to
        the teacher's targets instead, and ``val_target_std`` their spread at the first chunk's masked
        positions), ``val_ppl``, ``val_top1``, ``val_top5`` of the MLM head (the readout with the
        latent target). A contrastive term is a training term only: on the one fixed view it means
        nothing, so ``val_loss`` stays comparable with plain runs."""
        dev = self.device
        nll = top1 = top5 = n = sq = 0.0
        spread = None
        for b, mask, inputs in self.eval_batches:
            if self.latent:
                out = self.model.forward_outputs(inputs.to(dev), b["attention"].to(dev), mask.to(dev),
                                                 clean_ids=b["ids"].to(dev))
                logits = out["logits"].float()
                sq += float(masked_mse(out["pred"].float(), out["target"], out["mask"])) * int(mask.sum())
                if spread is None:
                    spread = float(target_std(out["target"], out["mask"]))
            else:
                logits = self.model(inputs.to(dev), b["attention"].to(dev), mask.to(dev)).float()
            labels = b["ids"][mask].to(dev)
            nll += float(F.cross_entropy(logits, labels, reduction="sum"))
            top = logits.topk(min(5, logits.shape[-1]), dim=-1).indices
            top1 += float((top[:, 0] == labels).sum())
            top5 += float((top == labels[:, None]).any(dim=1).sum())
            n += len(labels)
        n = max(n, 1)
        ce = nll / n
        out = {"val_loss": ce, "val_ppl": math.exp(min(ce, 50.0)), "val_top1": top1 / n, "val_top5": top5 / n}
        if self.latent:
            out.update({"val_loss": sq / n, "val_" + TARGET_STD: spread if spread is not None else float("nan")})
        return out

    @torch.no_grad()
    def baselines(self) -> dict[str, float]:
        """Top-1 accuracy of the three trivial predictors on the same val masks and inputs."""
        base = TokenBaselines.fit(*baseline_rows(self.train), self.special_ids, self.tok.vocab_size)
        hits = dict.fromkeys(BASELINE_KINDS, 0.0)
        n = 0
        for b, mask, inputs in self.eval_batches:
            for k in BASELINE_KINDS:
                pred = base.predict(k, inputs, b["attention"], mask)
                hits[k] += float((pred == b["ids"][mask]).sum())
            n += int(mask.sum())
        return {f"baseline/{k}_top1": v / max(n, 1) for k, v in hits.items()}

    @torch.no_grad()
    def sample(self, step: int) -> Sample:
        b = self.rows(self.val, self.vis_idx)
        mask = vis_masks(self.cfg, b)
        inputs = b["ids"].masked_fill(mask, self.tok.mask_id)
        dev = self.device
        ids, probs = self.model.predict_topk(inputs.to(dev), b["attention"].to(dev), mask.to(dev), k=TOP_K,
                                             exclude_ids=self.special_ids)
        top_ids = torch.zeros(*mask.shape, TOP_K, dtype=torch.long)
        top_p = torch.zeros(*mask.shape, TOP_K)
        top_ids[mask], top_p[mask] = ids.cpu(), probs.float().cpu()
        return Sample(step=step, kind="text_mlm", arrays={
            "tokens": self.token_strings(b["ids"]), "mask": mask.numpy(), "attention": b["attention"].numpy(),
            "top_tokens": self.token_strings(top_ids.view(len(mask), -1)).reshape(*mask.shape, TOP_K),
            "top_probs": top_p.numpy().astype(np.float32), "labels": self.val_labels[self.vis_idx.numpy()],
        }, meta={"class_names": list(self.class_names), "texts": [self.val_texts[i] for i in self.vis_idx.tolist()],
                 "tokenizer_id": self.tokenizer_id})

    def _features(self, b):
        return self.model.features(b["ids"].to(self.device), b["attention"].to(self.device))


@register_task
class TextSpanTask(TextTask):
    """Span completion with a T5-style encoder-decoder. See the module docstring."""

    name = "text_span"
    sample_kind = "text_span"
    interactive = "completion"
    task_params_defaults = "mlm-span-fortunes"  # bench/README.md, "Text quality"
    archs = ("t5_span",)
    params = SpanParams
    headline = ("val_span_acc", "max")
    #: Teacher-forced top-1 (its baseline: the bigram given the true previous token,
    #: ``baseline/bigram_tf_acc/span_acc_tf``) and per-position decoding (runs trained with
    #: ``task_params.decoder_input_mask`` > 0; its baselines are the headline's, logged again as
    #: ``baseline/<name>/span_acc_pos`` for the figure table).
    figures = (("val_span_acc_tf", "max"), ("val_span_acc_pos", "max"))
    summary = "span completion: one hidden segment infilled by an encoder-decoder (T5, Raffel et al. 2020)"

    @classmethod
    def check(cls, cfg: RunConfig, info, workspace=None) -> None:
        """The strategy applies to token sequences and hides exactly one contiguous segment of
        every probe text (the encoder input has one sentinel)."""
        cls._check_strategy(cfg)
        enc = cls._probe(cfg, workspace)
        b = cls.rows(enc, torch.arange(len(enc)))
        probe = draw_text_mask(cfg.masking, b, torch.Generator().manual_seed(0), cfg.masking.ratio)
        try:
            segment_bounds(probe)
        except ValueError:
            raise ConfigError(f"masking.strategy: span completion hides one contiguous segment per text; "
                              f"{cfg.masking.strategy!r} can hide several (use sentence_span)") from None
        if not bool(probe.any(dim=1)[b["eligible"].any(dim=1)].all()):
            raise ConfigError(f"masking: {cfg.masking.strategy!r} hides nothing in some texts; use sentence_span")

    def __init__(self, cfg: RunConfig, device: torch.device, workspace=None):
        self._load(cfg, device, workspace)
        self.model = build_model(cfg, vocab_size=self.tok.vocab_size, max_len=cfg.data.tokenizer.max_len).to(device)
        self.objective = Objective.from_config(cfg.objective, self.outputs(cfg))
        g = torch.Generator().manual_seed(cfg.train.seed + 10_000)
        self.eval_batches = []
        for idx in self._chunks():
            b = self.rows(self.val, idx)
            span = self._mask(b, g, cfg.masking.ratio)
            self.eval_batches.append((b, span, self._example(b, span)))

    def _mask(self, b, generator, ratio):
        """The one-segment strategy's span, grown to whole words (:func:`whole_words`)."""
        return whole_words(super()._mask(b, generator, ratio), b["word_ids"])

    def _example(self, b, span):
        return span_corrupt(b["ids"], b["attention"], span, sentinel_id=self.tok.mask_id, eos_id=self.tok.sep_id,
                            pad_id=self.tok.pad_id)

    def _logits(self, ex, tgt_in=None):
        dev = self.device
        if tgt_in is None:
            tgt_in = shift_right(ex.tgt_ids, bos_id=self.tok.cls_id)
        return self.model(ex.src_ids.to(dev), ex.src_mask.to(dev), tgt_in.to(dev), ex.tgt_mask.to(dev))

    @property
    def per_position_decoding(self) -> bool:
        """Trained with part of the decoder input hidden, so ``val_span_acc_pos`` means something."""
        return self.cfg.task_params.get("decoder_input_mask", 0.0) > 0

    def _masked_input(self, ex, generator):
        """The teacher-forcing input with each text's share of its tokens (bos kept) shown as [MASK]:
        the share drawn uniformly in ``[0, task_params.decoder_input_mask]`` -> ``[B, T]``."""
        tgt_in = shift_right(ex.tgt_ids, bos_id=self.tok.cls_id)
        if not self.per_position_decoding:
            return tgt_in
        top = self.cfg.task_params["decoder_input_mask"]
        B, T = tgt_in.shape
        share = torch.rand(B, 1, generator=generator, device=generator.device) * top
        hide = torch.rand(B, T, generator=generator, device=generator.device) < share
        hide = hide.cpu() & ex.tgt_mask  # real positions only (padding stays padding)
        hide[:, 0] = False
        return tgt_in.masked_fill(hide, self.tok.mask_id)

    def train_loss(self, idx, generator, ratio):
        b = self.rows(self.train, idx)
        span = self._mask(b, generator, ratio)
        ex = self._example(b, span)
        logits = self._logits(ex, self._masked_input(ex, generator))
        labels = ex.tgt_ids.masked_fill(~ex.tgt_mask, -100).to(self.device)
        loss, parts = self.objective({"logits": logits.reshape(-1, logits.shape[-1]), "labels": labels.reshape(-1)})
        return loss, {"mask_ratio": span.sum() / b["eligible"].sum().clamp_min(1),
                      **{f"loss/{k}": v for k, v in parts.items()}}

    def _like_target(self, ex, gen):
        """Generated ids ``[B, T']`` laid over ``ex.tgt_ids``' shape ``[B, T]`` (cut or padded)."""
        out = torch.full_like(ex.tgt_ids, self.tok.pad_id)
        T = min(gen.shape[1], out.shape[1])
        out[:, :T] = gen[:, :T].cpu()
        return out

    def _generate(self, ex, lengths=None):
        return self._like_target(ex, self.model.generate(ex.src_ids.to(self.device), ex.src_mask.to(self.device),
                                                         max_new_tokens=ex.tgt_ids.shape[1], lengths=lengths))

    def _per_position(self, ex, lengths):
        return self._like_target(ex, self.model.per_position(ex.src_ids.to(self.device), ex.src_mask.to(self.device),
                                                             lengths, unknown_id=self.tok.mask_id))

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        nll = n_tok = hits = hits_len = hits_tf = hits_pos = n_span = exact = n_rows = 0.0
        for i, (b, span, ex) in enumerate(self.eval_batches):
            logits = self._logits(ex).float()
            tm = ex.tgt_mask.to(logits.device)
            nll += float(F.cross_entropy(logits[tm], ex.tgt_ids.to(logits.device)[tm], reduction="sum"))
            n_tok += float(tm.sum())
            if i * EVAL_CHUNK < GEN_MAX_ROWS:
                scored = span_scored_mask(ex.tgt_mask)
                hits_tf += float(((logits.argmax(-1).cpu() == ex.tgt_ids) & scored).sum())
                gen = self._generate(ex)
                hits += float(((gen == ex.tgt_ids) & scored).sum())
                n_span += float(scored.sum())
                exact += float(span_exact_match(gen, ex.tgt_ids, ex.tgt_mask, reduction="sum"))
                n_rows += len(gen)
                gen = self._generate(ex, lengths=scored.sum(dim=1))  # told the length, as the baselines are
                hits_len += float(((gen == ex.tgt_ids) & scored).sum())
                if self.per_position_decoding:
                    gen = self._per_position(ex, scored.sum(dim=1))
                    hits_pos += float(((gen == ex.tgt_ids) & scored).sum())
        return {"val_loss": nll / max(n_tok, 1), "val_span_acc": hits / max(n_span, 1),
                "val_span_acc_len": hits_len / max(n_span, 1), "val_span_acc_tf": hits_tf / max(n_span, 1),
                "val_exact": exact / max(n_rows, 1),
                **({"val_span_acc_pos": hits_pos / max(n_span, 1)} if self.per_position_decoding else {})}

    @torch.no_grad()
    def baselines(self) -> dict[str, float]:
        """Span token accuracy of the three trivial predictors on the same val spans (the rows
        whose generation :meth:`evaluate` scores)."""
        base = TokenBaselines.fit(*baseline_rows(self.train), self.special_ids, self.tok.vocab_size)
        hits = dict.fromkeys([*BASELINE_KINDS, "bigram_tf"], 0.0)
        n = 0
        for i, (b, span, _) in enumerate(self.eval_batches):
            if i * EVAL_CHUNK >= GEN_MAX_ROWS:
                break
            truth = b["ids"][span]
            for k in BASELINE_KINDS:
                hits[k] += float((base.predict_span(k, b["ids"].masked_fill(span, self.tok.mask_id), b["attention"], span)
                                  == truth).sum())
            # the bigram given the true previous token: the baseline for val_span_acc_tf
            hits["bigram_tf"] += float((base.predict_span("bigram", b["ids"], b["attention"], span, teacher_forced=True)
                                        == truth).sum())
            n += int(span.sum())
        tf = hits.pop("bigram_tf")
        out = {f"baseline/{k}_acc": v / max(n, 1) for k, v in hits.items()}
        out["baseline/bigram_tf_acc/span_acc_tf"] = tf / max(n, 1)  # a figure of its own: it reads the true prefix
        if self.per_position_decoding:  # the same spans, scored the same way
            out.update({f"baseline/{k}_acc/span_acc_pos": out[f"baseline/{k}_acc"] for k in BASELINE_KINDS})
        return out

    @torch.no_grad()
    def sample(self, step: int) -> Sample:
        b = self.rows(self.val, self.vis_idx)
        span = vis_masks(self.cfg, b)
        ex = self._example(b, span)
        gen = self._generate(ex)
        return Sample(step=step, kind="text_span", arrays={
            "tokens": self.token_strings(b["ids"]), "mask": span.numpy(), "attention": b["attention"].numpy(),
            "target": self.token_strings(ex.tgt_ids), "generated": self.token_strings(gen),
            "target_mask": ex.tgt_mask.numpy(), "labels": self.val_labels[self.vis_idx.numpy()],
        }, meta={"class_names": list(self.class_names), "texts": [self.val_texts[i] for i in self.vis_idx.tolist()],
                 "tokenizer_id": self.tokenizer_id})

    def _features(self, b):
        return self.model.features(b["ids"].to(self.device), b["attention"].to(self.device))
