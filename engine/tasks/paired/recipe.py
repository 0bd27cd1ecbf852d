"""Joint image-text masked modeling (``task: paired``): M3AE on a paired dataset (Geng et al. 2022).

:class:`PairedBase` is the recipe both paired tasks share (image-caption ``paired`` here, audio-text
``paired_audio`` in :mod:`engine.tasks.paired_audio.recipe`); what differs, the "image" half, is a
handful of hooks (:meth:`PairedBase.pairs`, :meth:`~PairedBase.vis_image_masks`, ``_image_masks``,
``_whole_images``, ``_pixel_sse``, ``_image_baseline_sse``, ``_image_sample``...).

Data: each row is an image (``[C, H, W]`` in [0, 1], cut into ``P x P`` patches on the ``[B, h, w]``
grid) and its caption, tokenised with the run's tokenizer (``data.tokenizer``, trained on the train
captions and cached, as the text tasks do; ``[CLS]``, ``[SEP]`` and padding never take part).

Masking, two grids at once, each with its own strategy and ratio from the masking registry:
``masking`` (strategy, ratio, schedule) for the image patches (M3AE: random 0.75) and
``task_params.text_strategy`` / ``text_ratio`` / ``text_params`` for the caption tokens (M3AE:
0.15); every caption gets at least one hidden token. Cross-modal completion: a share
``task_params.caption_completion`` of the training pairs has its whole caption hidden and its whole
image shown (the caption predicted from the image alone, as the headline figure asks) and a share
``image_completion`` its whole image hidden and its whole caption shown (the image reconstructed from
the caption alone); the two shares are drawn per pair from the mask generator.

Model ``model.arch``: ``flava`` (the default; :class:`engine.models.flava.FLAVA`, Singh et al. 2022):
an image encoder and a text encoder over their visible patches and tokens, a fusion encoder over
both, M3AE's light decoder and heads, the contrastive embeddings from the unimodal encoders; or
``m3ae`` (:class:`engine.models.m3ae.M3AE`): one encoder over the visible tokens of both modalities,
a light decoder, a pixel head and a token head, contrastive projections. FLAVA-style is the default
because it retrieved better in the measured recipe (bench/README.md) and costs less CPU a step.

Objective (``objective.terms``, each term logged as ``loss/<name>``; default
:data:`~engine.tasks.paired.common.DEFAULT_TERMS`): ``mse`` on the hidden patches (pixels in [0, 1]),
``cross_entropy`` on the hidden tokens, ``contrastive`` (symmetric InfoNCE with a learned
temperature, CLIP) on the embeddings of each modality encoded alone; any of them alone or mixed.

Validation (fixed masks drawn once from ``train.seed + 10_000``, at most :data:`EVAL_MAX_ROWS` val
pairs): ``val_loss`` (the objective with the joint masks), ``val_token_acc`` (top-1 on the hidden
tokens of the joint masks), ``val_caption_acc`` (the whole caption hidden, predicted from the whole
image; the headline), ``val_caption_acc_blank`` (the same with the image hidden too: what the
model predicts from positions alone), ``val_mse`` / ``val_mse_no_caption`` (pixel MSE of the hidden
patches under the image masks, the caption visible / hidden), ``val_t2i_r{1,5,10}`` and
``val_i2t_r{1,5,10}`` (retrieval among the val pairs with the contrastive embeddings; a retrieved
item whose caption equals the query's is a hit, :mod:`engine.eval.retrieval`). Baselines (step 0):
``position`` and ``unigram`` (most frequent training token at each position / overall, on the whole
hidden caption: ``baseline/position`` is scored like the headline), ``chance`` and ``cca``
(retrieval), ``mean_image`` and ``visible_mean`` (``/mse``).
"""

from __future__ import annotations

import numpy as np
import torch

from engine.config import ObjectiveTerm, RunConfig, TokenizerConfig
from engine.data import load_dataset, representative
from engine.data.dataset import counted
from engine.data.sampling import eval_rows
from engine.errors import ConfigError
from engine.eval.image_baselines import masked_pixel_sse, mean_image_patches, visible_mean_patches
from engine.eval.representation import tfidf_splits
from engine.eval.retrieval import (
    CCA_MIN_PAIRS,
    KS,
    ONE_CHAR_WORDS,
    cca_embeddings,
    cca_problem,
    chance_recall,
    retrieval_figures,
)
from engine.eval.text_baselines import TokenBaselines
from engine.masking import draw_mask, get_masking, grid_shape, image_side_inputs, preview_masks
from engine.models import build_model
from engine.objectives import Objective
from engine.store.samples import Sample
from engine.tasks.base import Task
from engine.tasks.checks import masking_problem
from engine.tasks.image.recipe import ImageMIMTask
from engine.tasks.paired.common import (
    DEFAULT_PATCH,
    DEFAULT_TERMS,
    DEFAULT_TOKENIZER,
    EVAL_CHUNK,
    EVAL_MAX_ROWS,
    OUTPUTS,
    PROBE_ROWS,
    PairedParams,
    caption_vis_masks,
)
from engine.tasks.registry import register_task
from engine.tasks.text.common import (
    baseline_rows,
    draw_text_mask,
    ensure_one_masked,
    text_rows,
    token_strings,
    tokenizer_for,
)
from engine.text.stored import encode_split
from engine.training.feed import image_feed


class PairedBase(Task):
    """What both paired tasks share (M3AE, or FLAVA-style encoders): the caption half, the joint
    masks, the cross-modal completion, validation, retrieval, samples and features. A subclass
    gives the "image" half through the hooks below (module docstring)."""

    archs = ("flava", "m3ae")  # the first is the default: the measured recipe (bench/paired_quality.py)
    default_loss = "mse"
    unit = "patch and token"
    sample_kind = "paired"
    interactive = "retrieval"
    params = PairedParams
    headline = ("val_caption_acc", "max")
    #: Whether a text may be one character ("7"): the TF-IDF and CCA baselines then count such words.
    one_char_words = False
    #: Figures shown next to the headline, with their baselines ``baseline/<name>/<figure>``.
    figures = (("val_mse", "min"), ("val_t2i_r5", "max"), ("val_i2t_r5", "max"))

    @classmethod
    def resolve(cls, cfg: RunConfig) -> None:
        """Base defaults, plus ``model.patch_size`` (:data:`DEFAULT_PATCH`), the caption tokenizer
        (:data:`DEFAULT_TOKENIZER`) and the objective terms (:data:`DEFAULT_TERMS`) when unset."""
        if cfg.model.patch_size is None:
            cfg.model.patch_size = DEFAULT_PATCH
        if cfg.data.tokenizer is None:
            cfg.data.tokenizer = TokenizerConfig(**DEFAULT_TOKENIZER)
        if cfg.objective.norm_pix_loss:
            raise ConfigError("objective.norm_pix_loss: the paired task predicts pixels as they are; turn it off")
        if not cfg.objective.terms and not cfg.objective.loss:
            cfg.objective.terms = [ObjectiveTerm(loss=n, weight=w) for n, w in DEFAULT_TERMS]
        super().resolve(cfg)

    @classmethod
    def outputs(cls, cfg: RunConfig) -> set[str]:
        return set(OUTPUTS)

    # --- the "image" half: what a subclass gives ----------------------------------------------------

    @classmethod
    def pairs(cls, cfg: RunConfig, workspace=None):
        """What the task reads of ``data.dataset``: rows, splits, labels, ``rows_tensors(rows) -> (x
        [n, C, H, W], y [n])``, ``tensors``, ``texts``, ``texts_at``, ``indices`` and ``info``.

        Raises:
            ConfigError, DatasetError: the dataset cannot give pairs (naming the field).
        """
        raise NotImplementedError

    @classmethod
    def check_images(cls, cfg: RunConfig, info, ds, workspace=None) -> None:
        """Pre-flight of the image half (patch grid, strategy, probe masks); raises ConfigError."""
        raise NotImplementedError

    @classmethod
    def vis_image_masks(cls, cfg: RunConfig, ds, rows: np.ndarray, images: torch.Tensor) -> torch.Tensor:
        """The image masks ``[N, *grid]`` bool of the visualisation pairs ``rows`` (``images [N, C, H, W]``),
        from ``train.seed``: what the run's samples and the previews show."""
        raise NotImplementedError

    @classmethod
    def preview_extras(cls, ds, rows: np.ndarray, img_mask: torch.Tensor) -> dict:
        """Extra :class:`~engine.tasks.paired.preview.PairedPreview` fields of the pairs ``rows`` (none for images)."""
        return {}

    @classmethod
    def retrieval_images(cls, ds, split: str, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray | None]:
        """``(images, real)`` the retrieval box shows of the first ``EVAL_MAX_ROWS`` pairs of
        ``split`` (``x``: their ``rows_tensors``); ``real`` None but for spectrograms."""
        return x.numpy(), None

    def _image_masks(self, rows: np.ndarray, xb: torch.Tensor, g: torch.Generator, ratio: float) -> torch.Tensor:
        """Image masks ``[B, L_i]`` bool of a batch of pairs ``rows`` (images ``xb``) at ``ratio`` from ``g``."""
        raise NotImplementedError

    def _whole_images(self, rows: np.ndarray, img_mask: torch.Tensor) -> torch.Tensor:
        """``[B, L_i]`` bool: the patches a whole-image completion hides (every one, for images)."""
        return torch.ones_like(img_mask)

    def _pixel_sse(self, pred: torch.Tensor, target: torch.Tensor, img_mask: torch.Tensor, rows: np.ndarray
                   ) -> tuple[float, int]:
        """``(sum of squared errors, values scored)`` of a prediction ``[B, L_i, P*P*C]`` on the hidden
        patches ``img_mask [B, L_i]`` (the ``val_mse`` rule)."""
        raise NotImplementedError

    #: The trivial image predictors of :meth:`baselines` (``baseline/<name>/mse``).
    image_baselines: tuple[str, ...] = ()

    def _image_baseline_sse(self, idx: torch.Tensor, img_mask: torch.Tensor, x_ref: torch.Tensor
                            ) -> dict[str, tuple[float, int]]:
        """``{name: (sse, values scored)}`` of each of :attr:`image_baselines` on val pairs ``idx``."""
        raise NotImplementedError

    def _image_sample(self, step: int, xb: torch.Tensor, rows: np.ndarray, img_mask: torch.Tensor, out: dict,
                      text: dict, meta: dict) -> Sample:
        """The sample of the visualisation pairs: the image half's arrays next to ``text``'s."""
        raise NotImplementedError

    def _run_info_extra(self) -> dict:
        """What ``task.json`` records of the image half beyond the image shape."""
        return {}

    # --- config time ------------------------------------------------------------------------------

    @classmethod
    def check(cls, cfg: RunConfig, info, workspace=None) -> None:
        """The image half (:meth:`check_images`), then a probe batch of real captions gets
        trainable caption masks."""
        ds = cls.pairs(cfg, workspace)
        cls.check_images(cfg, info, ds, workspace)
        if ds.info.n_train == 0:
            raise ConfigError(f"data.dataset: {ds.info.name!r} has no train pairs")
        if ds.info.n_train < CCA_MIN_PAIRS:  # its CCA baseline (step 0) fits PCA and CCA on the train pairs
            n, n_val = ds.info.n_train, ds.info.n_val
            raise ConfigError(
                f"data.dataset: {ds.info.name!r} has {counted(n + n_val, 'pair')} ({n} for training, {n_val} for "
                f"validation); task {cls.name!r} needs at least {CCA_MIN_PAIRS} train pairs: its CCA retrieval baseline "
                f"fits PCA and CCA on them. Import more pairs"
                + (f", or import this set again with a validation fraction of 0 to train on all {n + n_val}"
                   if n + n_val >= CCA_MIN_PAIRS else ""))
        tok, _ = tokenizer_for(cfg, ds, workspace)
        enc = tok.encode_batch(ds.texts("train", limit=PROBE_ROWS), max_len=cfg.data.tokenizer.max_len)
        b = text_rows(enc, torch.arange(len(enc)))
        text_cfg = PairedParams.of(cfg.task_params).text_masking()
        probe = draw_text_mask(text_cfg, b, torch.Generator().manual_seed(0))
        # A one-token text (a spoken digit's word) can only be hidden whole: the run hides it (one
        # token per caption at least) and predicts it from the other modality; only longer ones are probed.
        longer = b["eligible"].sum(dim=1) >= 2
        problem = masking_problem(text_cfg, probe[longer], unit="tokens", eligible=b["eligible"][longer]) \
            if bool(longer.any()) else None  # fmt: skip
        if problem:
            raise ConfigError(problem.replace("masking.ratio", "task_params.text_ratio")
                              .replace("masking.params", "task_params.text_params"))

    # --- run time ---------------------------------------------------------------------------------

    def __init__(self, cfg: RunConfig, device: torch.device, workspace=None):
        self.cfg, self.device = cfg, device
        self.prm = PairedParams.of(cfg.task_params)
        self.text_cfg = self.prm.text_masking()
        ds = self._ds = self.pairs(cfg, workspace)
        self.class_names = tuple(ds.info.class_names)
        self.tok, self.tokenizer_id = tokenizer_for(cfg, ds, workspace)
        max_len = cfg.data.tokenizer.max_len
        # Row indices only: a batch reads its own images (train_batch), as image_mim does.
        self.train_rows = ds.indices("train")
        self._feed = image_feed(ds, self.train_rows, device)  # uint8 to the device (none for audio pairs)
        val_split = "val" if ds.info.n_val else "train"  # a tiny upload may have no val split
        self.val_rows = ds.indices(val_split)[:EVAL_MAX_ROWS]
        x_val, y_val = ds.rows_tensors(self.val_rows)
        self.val_captions = ds.texts(val_split, limit=EVAL_MAX_ROWS)
        self.x_val, self.y_val = x_val.to(device), y_val.numpy()
        self.train_enc = encode_split(self.tok, self.tokenizer_id, ds.texts_at, self.train_rows, max_len, workspace)
        self.val_enc = self.tok.encode_batch(self.val_captions, max_len=max_len)
        self.image_shape = tuple(ds.info.image_shape)
        self.grid = grid_shape(self.image_shape[1:], cfg.model.patch_size)
        self.model = build_model(cfg, image_shape=self.image_shape, vocab_size=self.tok.vocab_size,
                                 max_len=max_len).to(device)
        self.objective = Objective.from_config(cfg.objective, OUTPUTS)
        self.contrastive = "contrastive" in self.objective.names
        self.n_train = len(self.train_rows)
        self.batch_size = min(cfg.train.batch_size, self.n_train)
        self.needs_images = bool(get_masking(cfg.masking.strategy).needs)
        self.vis_idx = torch.from_numpy(representative(self.y_val, cfg.train.num_vis))
        g = torch.Generator().manual_seed(cfg.train.seed + 10_000)
        self.eval_batches = []
        for i in range(0, len(self.x_val), EVAL_CHUNK):
            idx = torch.arange(i, min(i + EVAL_CHUNK, len(self.x_val)))
            b = text_rows(self.val_enc, idx)
            img_mask, txt_mask = self._masks(self.val_rows[idx.numpy()], self.x_val[idx], b, g, cfg.masking.ratio)
            self.eval_batches.append((idx, b, img_mask, txt_mask))
        # The CCA baseline fits on the train pairs baseline_reference() reads; when it cannot, the other
        # baselines are logged without it and task.json says why (Run detail shows it).
        n_ref = self.baseline_reference_rows()
        self.cca_problem = cca_problem(n_ref, self._ds.texts("train", limit=n_ref), self._tfidf_words)
        self.baseline_notes = [f"no CCA retrieval baseline: {self.cca_problem}"] if self.cca_problem else []

    @property
    def _tfidf_words(self) -> str | None:
        """The TF-IDF word pattern of the CCA baseline and raw input (None: scikit-learn's)."""
        return ONE_CHAR_WORDS if self.one_char_words else None  # a clip's text may be "7"

    def run_info(self) -> dict:
        """The dataset's hash, the tokenizer's id and size, the image shape, train pairs; and
        ``baseline_notes`` when a baseline could not be measured (the CCA one: :func:`cca_problem`)."""
        info = {"dataset_hash": self._ds.info.source_hash, "tokenizer_id": self.tokenizer_id,
                "vocab_size": self.tok.vocab_size, "image_shape": list(self.image_shape), "n_train": self.n_train,
                **({"baseline_notes": self.baseline_notes} if self.baseline_notes else {})}
        return {**info, **self._run_info_extra()}

    def train_lengths(self) -> torch.Tensor:
        """Real tokens per train caption: batches of similar caption length cost less (the text rows
        are cut to their longest caption); every image costs the same."""
        return self.train_enc.lengths

    def _masks(self, rows: np.ndarray, xb: torch.Tensor, b: dict, g: torch.Generator, ratio: float
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Joint masks of a batch of pairs ``rows``: image ``[B, L_i]`` (``masking`` at ``ratio``; a
        spectrogram's padding never hidden) and caption ``[B, L_t]`` (``text_*``, at least one
        hidden token per caption), both from ``g``."""
        img = self._image_masks(rows, xb, g, ratio)
        txt = draw_text_mask(self.text_cfg, b, g)
        return img, ensure_one_masked(txt, b["eligible"], g)

    def _forward(self, xb, b, img_mask, txt_mask, contrastive=False) -> dict[str, torch.Tensor]:
        dev = self.device
        return self.model(xb, b["ids"].to(dev), b["eligible"].to(dev), img_mask.to(dev), txt_mask.to(dev),
                          contrastive=contrastive)

    train_batch = ImageMIMTask.train_batch
    baseline_reference = ImageMIMTask.baseline_reference
    baseline_reference_rows = ImageMIMTask.baseline_reference_rows

    def train_loss(self, idx, generator, ratio):
        xb = self.train_batch(idx)
        rows = self.train_rows[idx.cpu().numpy()]
        b = text_rows(self.train_enc, idx.cpu())
        img_mask, txt_mask = self._masks(rows, xb, b, generator, ratio)
        u = torch.rand(len(idx), generator=generator)  # cross-modal completion, per pair
        hide_caption = u < self.prm.caption_completion
        hide_image = (u >= self.prm.caption_completion) & (u < self.prm.caption_completion + self.prm.image_completion)
        # a completion pair hides one modality whole and shows the other whole (what the headline
        # figures ask of the model: the caption from the whole image, the image from the whole caption)
        txt_mask = torch.where(hide_caption[:, None], b["eligible"], txt_mask & ~hide_image[:, None])
        whole = self._whole_images(rows, img_mask)
        img_mask = (img_mask | (hide_image[:, None] & whole)) & ~hide_caption[:, None]
        loss, parts = self.objective(self._forward(xb, b, img_mask, txt_mask, self.contrastive))
        return loss, {"mask_ratio": (img_mask.sum() / whole.sum().clamp_min(1)).float(),
                      "text_mask_ratio": (txt_mask.sum() / b["eligible"].sum().clamp_min(1)).float(),
                      **{f"loss/{k}": v for k, v in parts.items()}}

    # --- validation -------------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """The validation figures of the module docstring."""
        total = n = 0.0
        acc = dict.fromkeys(("token", "caption", "caption_blank"), 0.0)
        count = dict.fromkeys(acc, 0)
        sse = {"with": 0.0, "without": 0.0}
        px = 0
        for idx, b, img_mask, txt_mask in self.eval_batches:
            xb = self.x_val[idx.to(self.device)]
            whole = b["eligible"]
            none_img = torch.zeros_like(img_mask)
            out = self._forward(xb, b, img_mask, txt_mask, self.contrastive)
            loss, _ = self.objective(out)
            total, n = total + float(loss) * len(idx), n + len(idx)
            for key, o in (("token", out), ("caption", self._forward(xb, b, none_img, whole)),
                           ("caption_blank", self._forward(xb, b, ~none_img, whole))):
                acc[key] += float((o["logits"].argmax(-1) == o["labels"]).sum())
                count[key] += int(o["labels"].numel())
            for key, shown in (("with", torch.zeros_like(whole)), ("without", whole)):
                o = self._forward(xb, b, img_mask, shown)  # txt_mask = the hidden tokens
                s, c = self._pixel_sse(o["pred"], o["target"], img_mask, self.val_rows[idx.numpy()])
                sse[key] += s
            px += c
        out = {"val_loss": total / max(n, 1), **{f"val_{k}_acc": acc[k] / max(count[k], 1) for k in acc},
               "val_mse": sse["with"] / max(px, 1), "val_mse_no_caption": sse["without"] / max(px, 1)}
        return {**out, **{f"val_{k}": v for k, v in self.retrieval().items()}}

    @torch.no_grad()
    def embeddings(self, x: torch.Tensor, enc) -> tuple[np.ndarray, np.ndarray]:
        """Contrastive embeddings ``(image [N, E], caption [N, E])`` of images ``x [N, C, H, W]`` and
        their encoded captions, each modality encoded alone."""
        img, txt = [], []
        for i in range(0, len(x), EVAL_CHUNK):
            idx = torch.arange(i, min(i + EVAL_CHUNK, len(x)))
            b = text_rows(enc, idx)
            img.append(self.model.embed_image(x[idx.to(x.device)].to(self.device)).float().cpu())
            txt.append(self.model.embed_text(b["ids"].to(self.device), b["eligible"].to(self.device)).float().cpu())
        return torch.cat(img).numpy(), torch.cat(txt).numpy()

    def retrieval(self) -> dict[str, float]:
        """``t2i_r{k}`` and ``i2t_r{k}`` among the val pairs (:func:`engine.eval.retrieval.retrieval_figures`)."""
        return retrieval_figures(*self.embeddings(self.x_val, self.val_enc), self.val_captions)

    @torch.no_grad()
    def baselines(self) -> dict[str, float]:
        """Trivial and classical predictors on the same val pairs and masks (module docstring)."""
        base = TokenBaselines.fit(*baseline_rows(self.train_enc), tuple(self.tok.special_ids),
                                  self.tok.vocab_size)
        hits = {"position": 0.0, "unigram": 0.0}
        n_tok, px = 0, 0
        sse = dict.fromkeys(self.image_baselines, 0.0)
        x_ref = self.baseline_reference()
        for idx, b, img_mask, _ in self.eval_batches:
            whole = b["eligible"]
            for k in hits:
                hits[k] += float((base.predict(k, b["ids"].masked_fill(whole, self.tok.mask_id), b["attention"], whole)
                                  == b["ids"][whole]).sum())
            n_tok += int(whole.sum())
            for name, (s, c) in self._image_baseline_sse(idx, img_mask, x_ref).items():
                sse[name] += s
            px += c
        out = {f"baseline/{k}": v / max(n_tok, 1) for k, v in hits.items()}
        out.update({f"baseline/{k}/mse": v / max(px, 1) for k, v in sse.items()})
        chance = chance_recall(self.val_captions)
        for k in KS:
            out[f"baseline/chance/t2i_r{k}"] = out[f"baseline/chance/i2t_r{k}"] = chance[k]
        if self.cca_problem is None:  # else left out, and said (run_info's baseline_notes)
            cca = cca_embeddings(x_ref.cpu().flatten(1).numpy(), self._ds.texts("train", limit=len(x_ref)),
                                 self.x_val.cpu().flatten(1).numpy(), self.val_captions, seed=self.cfg.train.seed,
                                 token_pattern=self._tfidf_words)
            out.update({f"baseline/cca/{k}": v for k, v in retrieval_figures(*cca, self.val_captions).items()})
        return out

    # --- samples and features ---------------------------------------------------------------------

    @torch.no_grad()
    def sample(self, step: int) -> Sample:
        """The fixed visualisation pairs with the run's preview masks (image: :func:`preview_masks`;
        caption: ``text_*`` from ``train.seed``): the images, their reconstruction, the caption
        tokens with the hidden ones predicted, and the caption predicted from the image alone."""
        idx = self.vis_idx
        rows = self.val_rows[idx.numpy()]
        xb = self.x_val[idx.to(self.device)]
        b = text_rows(self.val_enc, idx)
        img_mask = self.vis_image_masks(self.cfg, self._ds, rows, xb.cpu()).flatten(1)
        txt_mask = caption_vis_masks(self.cfg, b)
        out = self._forward(xb, b, img_mask, txt_mask)
        cap = self._forward(xb, b, torch.zeros_like(img_mask), b["eligible"])
        text = {"tokens": token_strings(self.tok, b["ids"]), "text_mask": txt_mask.numpy(),
                "pred_tokens": self._predicted(b["ids"], txt_mask, out["logits"]),
                "caption_from_image": self._predicted(b["ids"], b["eligible"], cap["logits"]),
                "labels": self.y_val[idx.numpy()].astype(np.int64)}
        meta = {"class_names": list(self.class_names), "patch_size": self.cfg.model.patch_size,
                "captions": [self.val_captions[i] for i in idx.tolist()], "tokenizer_id": self.tokenizer_id}
        return self._image_sample(step, xb, rows, img_mask, out, text, meta)

    def _predicted(self, ids: torch.Tensor, where: torch.Tensor, logits: torch.Tensor) -> np.ndarray:
        """Token strings ``[N, L_t]``: the top-1 prediction at ``where``, ``""`` elsewhere."""
        pred = torch.full_like(ids, self.tok.pad_id)
        pred[where] = logits.argmax(-1).cpu()
        return token_strings(self.tok, pred)

    @torch.no_grad()
    def features(self, split: str, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The pair encoded jointly (nothing hidden): the image tokens' mean next to the caption
        tokens' mean, ``X float32 [N, 2D]``."""
        rows = eval_rows(self._ds, split, max_rows)  # images read chunk by chunk, never the whole split
        enc = self.tok.encode_batch(self._ds.texts_at(rows), max_len=self.cfg.data.tokenizer.max_len)
        out = []
        for i in range(0, len(rows), EVAL_CHUNK):
            b = text_rows(enc, torch.arange(i, min(i + EVAL_CHUNK, len(rows))))
            x = self._ds.rows_tensors(rows[i : i + EVAL_CHUNK])[0]
            img, txt = self.model.encode(x.to(self.device), b["ids"].to(self.device), True, b["eligible"].to(self.device))
            out.append(torch.cat([img, txt], dim=1).float().cpu())
        feats = torch.cat(out).numpy() if out else np.zeros((0, 1), np.float32)
        return feats.astype(np.float32), self._ds.labels[rows].astype(np.int64)

    def raw_features(self, max_rows: int | None = None):
        """The pixels in [0, 1] next to the caption's TF-IDF (fitted on train), ``X float32 [N, C*H*W + V]``.

        Raises:
            EvaluationError: no train caption has a word the TF-IDF counts (no term)."""
        rows = {s: eval_rows(self._ds, s, max_rows) for s in ("train", "val")}
        texts = {s: self._ds.texts_at(rows[s]) for s in ("train", "val")}
        words = {"token_pattern": self._tfidf_words} if self.one_char_words else {}  # a clip's text may be "7"
        vecs = tfidf_splits(texts["train"], [texts["train"], texts["val"]], "caption", sublinear_tf=True,
                            max_features=5000, **words)
        out = []
        for s, tfidf in zip(("train", "val"), vecs):
            x, y = self._ds.rows_tensors(rows[s])
            out.append((np.concatenate([x.flatten(1).numpy(), tfidf.toarray()], axis=1), y.numpy()))
        return out[0], out[1]


@register_task
class PairedTask(PairedBase):
    """Joint image-text masked modeling on image-caption pairs (module docstring)."""

    name = "paired"
    modality = "paired"
    data_sections = ("tokenizer",)
    train_defaults = "paired-tuxpaint"  # the audio-text recipe is the audio UI's (FSDD), per dataset
    summary = ("joint image-text masked modeling with cross-modal completion and InfoNCE (M3AE, Geng et al. 2022; "
               "or FLAVA-style unimodal + fusion encoders, Singh et al. 2022)")
    image_baselines = ("mean_image", "visible_mean")

    @classmethod
    def pairs(cls, cfg: RunConfig, workspace=None):
        """The paired dataset itself.

        Raises:
            ConfigError: ``data.dataset`` is not an image-text dataset (naming it and its modality).
        """
        ds = load_dataset(cfg.data.dataset, workspace)
        if ds.info.modality != "paired":
            raise ConfigError(f"data.dataset: {ds.info.name!r} is a {ds.info.modality} dataset; task 'paired' trains on "
                              "image-text pairs")
        return ds

    @classmethod
    def check_images(cls, cfg: RunConfig, info, ds, workspace=None) -> None:
        """As ``image_mim`` checks its images: patch grid, strategy, probe masks."""
        ImageMIMTask.check(cfg, info, workspace)

    @classmethod
    def vis_image_masks(cls, cfg: RunConfig, ds, rows: np.ndarray, images: torch.Tensor) -> torch.Tensor:
        """:func:`engine.masking.preview_masks`: ``masking`` at ``masking.ratio`` from ``train.seed``, ``[N, h, w]``."""
        return preview_masks(cfg, tuple(images.shape[1:]), len(images), images=images)

    def _image_masks(self, rows, xb, g, ratio):
        side = image_side_inputs(self.cfg.masking, xb.float().cpu() if self.needs_images else None,
                                 self.cfg.model.patch_size, generator=g)  # attention: random scores from g
        return draw_mask(self.cfg.masking, (len(xb), *self.grid), g, ratio=ratio, **side).flatten(1)

    def _pixel_sse(self, pred, target, img_mask, rows):
        """Pixels clipped to [0, 1] (:func:`~engine.eval.image_baselines.masked_pixel_sse`)."""
        return masked_pixel_sse(pred.float(), target, img_mask.to(self.device))

    def _image_baseline_sse(self, idx, img_mask, x_ref):
        P = self.cfg.model.patch_size
        xb = self.x_val[idx.to(self.device)].float()
        target = self.model.patchify(xb)
        return {name: masked_pixel_sse(pred.to(target.device), target, img_mask.to(target.device))
                for name, pred in (("mean_image", mean_image_patches(x_ref, len(xb), P)),
                                   ("visible_mean", visible_mean_patches(xb, img_mask.to(xb.device), P)))}

    def _image_sample(self, step, xb, rows, img_mask, out, text, meta):
        rec = self.model.reconstruct(xb, out["pred"], img_mask.to(self.device))
        return Sample(step=step, kind="paired", arrays={
            "images": xb.float().cpu().numpy(), "mask": img_mask.view(-1, *self.grid).numpy(),
            "pred_img": rec["pred_img"].float().cpu().numpy(), "pasted": rec["pasted"].float().cpu().numpy(), **text,
        }, meta=meta)
