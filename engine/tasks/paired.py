"""Joint image-text masked modeling (``task: paired``): M3AE on a paired dataset (Geng et al. 2022).

Audio-text pairs go through the same seam: on an audio dataset the "image" is each clip's log-mel
spectrogram ``[1, F, T]`` (the audio tasks' features, ``data.audio``) and the text its transcript or
class name (``task_params.text_source``), read through :class:`engine.tasks.paired_audio.AudioTextPairs`;
the masks use the 2-D audio strategies and never hide a clip's silence padding, and the spectrogram
figures score the clip's frames only (normalised log-mel, the ``audio_mae`` units), next to the
audio tasks' ``mean_spec`` and ``interp_spec`` predictors instead of ``mean_image`` / ``visible_mean``.

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
:data:`DEFAULT_TERMS`): ``mse`` on the hidden patches (pixels in [0, 1]), ``cross_entropy`` on the
hidden tokens, ``contrastive`` (symmetric InfoNCE with a learned temperature, CLIP) on the
embeddings of each modality encoded alone; any of them alone or mixed.

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
(retrieval), ``mean_image`` and ``visible_mean`` (``/mse``; audio-text: ``mean_spec`` and ``interp_spec``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from engine.config import MaskingConfig, ObjectiveTerm, RunConfig, TokenizerConfig
from engine.errors import ConfigError
from engine.masking import draw_mask, get_masking, grid_shape, image_side_inputs, preview_masks, strategies_on
from engine.store.samples import Sample
from engine.tasks import register_task
from engine.tasks.audio import Grid
from engine.tasks.base import Task
from engine.tasks.image import ImageMIMTask
from engine.tasks.paired_audio import AudioTextPairs, pairs_of
from engine.tasks.text import TextTask, baseline_rows, ensure_one_masked, token_strings
from engine.text.stored import encode_split

EVAL_MAX_ROWS = 2048
EVAL_CHUNK = 256
PROBE_ROWS = 256
DEFAULT_PATCH = 4
#: The objective when the config gives none: M3AE's pixel and token losses (token weight 0.5 as
#: M3AE) and CLIP's InfoNCE on the unimodal embeddings, at the measured recipe's weight 0.5
#: (configs/paired-tuxpaint.yaml; 0.1 retrieved worse, bench/README.md).
DEFAULT_TERMS = (("mse", 1.0), ("cross_entropy", 0.5), ("contrastive", 0.5))
#: Tokenizer defaults for captions (short: Tux Paint's are 2 to 30 words).
DEFAULT_TOKENIZER = {"vocab_size": 2000, "max_len": 48}
OUTPUTS = {"pred", "target", "mask", "logits", "labels", "emb_a", "emb_b", "logit_scale"}


class PairedParams(BaseModel):
    """The caption's masking and the cross-modal completion shares (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text_strategy: str = Field("random", description="masking strategy of the caption tokens")
    text_ratio: float = Field(0.15, ge=0.0, le=1.0, description="share of caption tokens hidden (M3AE: 0.15)")
    text_params: dict = Field(default_factory=dict, validate_default=True, description="the text strategy's own parameters")
    caption_completion: float = Field(0.25, ge=0.0, le=1.0,
                                      description="share of training pairs whose whole caption is hidden (their image shown whole)")
    image_completion: float = Field(0.0, ge=0.0, le=1.0, description="share of training pairs whose whole image is hidden (their caption shown whole)")
    text_source: Literal["text", "label", "digit_word"] = Field(
        "text", description="audio datasets: the text of a clip: its transcript (text), its class name (label), or "
                            "the class name with a digit spelt as its English word (digit_word)")

    @field_validator("text_strategy")
    @classmethod
    def _strategy(cls, name: str) -> str:
        text = ", ".join(strategies_on("tokens-1d"))
        try:
            s = get_masking(name)
        except ConfigError:
            raise ValueError(f"unknown strategy {name!r}; strategies for text: {text}") from None
        if not s.works_on("tokens-1d"):
            raise ValueError(f"{name!r} does not apply to token sequences; strategies for text: {text}")
        return name

    @field_validator("text_params")
    @classmethod
    def _params(cls, params: dict, info: ValidationInfo) -> dict:
        if "text_strategy" not in info.data:  # the strategy was refused already
            return params
        try:
            return get_masking(info.data["text_strategy"]).parse_params(params).model_dump(mode="json")
        except ConfigError as e:
            raise ValueError(str(e).split(": ", 1)[-1]) from None

    @model_validator(mode="after")
    def _shares(self) -> "PairedParams":
        if self.caption_completion + self.image_completion > 1.0 + 1e-12:
            raise ValueError("caption_completion + image_completion must be <= 1 (a pair hides one whole modality at most)")
        return self

    def text_masking(self) -> MaskingConfig:
        """The caption's masking as a ``masking`` config (for :func:`engine.masking.draw_mask`)."""
        return MaskingConfig(strategy=self.text_strategy, ratio=self.text_ratio, params=self.text_params)


def _text_rows(enc, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    return TextTask.rows(enc, idx)


@register_task
class PairedTask(Task):
    """Joint image-text masked modeling (M3AE, or FLAVA-style encoders). See the module docstring."""

    name = "paired"
    modality = "paired"
    sample_kind = "paired"
    interactive = "retrieval"
    train_defaults = "paired-tuxpaint"  # image-text; audio-text: the audio UI's FSDD recipe
    archs = ("flava", "m3ae")  # the first is the default: the measured recipe (bench/paired_quality.py)
    default_loss = "mse"
    unit = "patch and token"
    params = PairedParams
    headline = ("val_caption_acc", "max")
    data_sections = ("tokenizer", "audio")
    summary = ("joint image-text (or audio-text) masked modeling with cross-modal completion and InfoNCE (M3AE, "
               "Geng et al. 2022; or FLAVA-style unimodal + fusion encoders, Singh et al. 2022)")
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

    @classmethod
    def trains_on(cls, modality: str) -> bool:
        """Image-text pairs, and audio datasets whose clips have a text (:mod:`engine.tasks.paired_audio`)."""
        return modality in ("paired", "audio")

    @classmethod
    def check(cls, cfg: RunConfig, info, workspace=None) -> None:
        """The image half as ``image_mim`` checks it (patch grid, strategy, probe masks), or the
        spectrogram half of audio-text pairs as ``audio_mae`` does (texts present, mel bins tiled,
        a 2-D audio strategy, probe masks over real clips); then a probe batch of real captions gets
        trainable caption masks."""
        from engine.tasks.checks import masking_problem
        from engine.data import load_dataset
        from engine.tasks.audio import check_masks, check_strategy

        ds = pairs_of(cfg, load_dataset(cfg.data.dataset, workspace), workspace)
        if isinstance(ds, AudioTextPairs):
            check_strategy(cfg, ds.grid, cls.name)
            check_masks(cfg, ds.grid, ds.probe_window(PROBE_ROWS), "patches")
        else:
            ImageMIMTask.check(cfg, info, workspace)
        if ds.info.n_train == 0:
            raise ConfigError(f"data.dataset: {ds.info.name!r} has no train pairs")
        tok, _ = TextTask.tokenizer_for(cfg, ds, workspace)
        enc = tok.encode_batch(ds.texts("train", limit=PROBE_ROWS), max_len=cfg.data.tokenizer.max_len)
        b = _text_rows(enc, torch.arange(len(enc)))
        text_cfg = PairedParams(**cfg.task_params).text_masking()
        probe = draw_mask(text_cfg, tuple(b["ids"].shape), torch.Generator().manual_seed(0), eligible=b["eligible"],
                          word_ids=b["word_ids"], sentence_ids=b["sentence_ids"])
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
        from engine.data import load_dataset, representative
        from engine.models import build_model
        from engine.objectives import Objective

        self.cfg, self.device = cfg, device
        self.prm = PairedParams(**cfg.task_params)
        self.text_cfg = self.prm.text_masking()
        ds = self._ds = pairs_of(cfg, load_dataset(cfg.data.dataset, workspace), workspace)
        self.audio = isinstance(ds, AudioTextPairs)  # the "image" is a clip's log-mel spectrogram
        self.class_names = tuple(ds.info.class_names)
        self.tok, self.tokenizer_id = TextTask.tokenizer_for(cfg, ds, workspace)
        max_len = cfg.data.tokenizer.max_len
        # Row indices only: a batch reads its own images (train_batch), as image_mim does.
        self.train_rows = ds.indices("train")
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
            b = _text_rows(self.val_enc, idx)
            img_mask, txt_mask = self._masks(self.val_rows[idx.numpy()], self.x_val[idx], b, g, cfg.masking.ratio)
            self.eval_batches.append((idx, b, img_mask, txt_mask))

    def run_info(self) -> dict:
        info = {"dataset_hash": self._ds.info.source_hash, "tokenizer_id": self.tokenizer_id,
                "vocab_size": self.tok.vocab_size, "image_shape": list(self.image_shape), "n_train": self.n_train}
        if self.audio:
            info.update(stream="audio", sample_rate=self._ds.spec.sample_rate, n_mels=self._ds.grid.n_mels,
                        frames=self._ds.grid.frames)
        return info

    def train_lengths(self) -> torch.Tensor:
        """Real tokens per train caption: batches of similar caption length cost less (the text rows
        are cut to their longest caption); every image costs the same."""
        return self.train_enc.lengths

    def _masks(self, rows: np.ndarray, xb: torch.Tensor, b: dict, g: torch.Generator, ratio: float
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Joint masks of a batch of pairs ``rows``: image ``[B, L_i]`` (``masking`` at ``ratio``; a
        spectrogram's padding never hidden) and caption ``[B, L_t]`` (``text_*``, at least one
        hidden token per caption), both from ``g``."""
        if self.audio:
            img = self._ds.masks(self.cfg, rows, g, ratio)
        else:
            side = image_side_inputs(self.cfg.masking, xb.float().cpu() if self.needs_images else None,
                                     self.cfg.model.patch_size)
            img = draw_mask(self.cfg.masking, (len(xb), *self.grid), g, ratio=ratio, **side).flatten(1)
        txt = draw_mask(self.text_cfg, tuple(b["ids"].shape), g, eligible=b["eligible"], word_ids=b["word_ids"],
                        sentence_ids=b["sentence_ids"])
        return img, ensure_one_masked(txt, b["eligible"], g)

    def _forward(self, xb, b, img_mask, txt_mask, contrastive=False) -> dict[str, torch.Tensor]:
        dev = self.device
        return self.model(xb, b["ids"].to(dev), b["eligible"].to(dev), img_mask.to(dev), txt_mask.to(dev),
                          contrastive=contrastive)

    train_batch = ImageMIMTask.train_batch
    baseline_reference = ImageMIMTask.baseline_reference

    def train_loss(self, idx, generator, ratio):
        xb = self.train_batch(idx)
        rows = self.train_rows[idx.cpu().numpy()]
        b = _text_rows(self.train_enc, idx.cpu())
        img_mask, txt_mask = self._masks(rows, xb, b, generator, ratio)
        u = torch.rand(len(idx), generator=generator)  # cross-modal completion, per pair
        hide_caption = u < self.prm.caption_completion
        hide_image = (u >= self.prm.caption_completion) & (u < self.prm.caption_completion + self.prm.image_completion)
        # a completion pair hides one modality whole and shows the other whole (what the headline
        # figures ask of the model: the caption from the whole image, the image from the whole caption)
        txt_mask = torch.where(hide_caption[:, None], b["eligible"], txt_mask & ~hide_image[:, None])
        whole = self._ds.eligible(rows) if self.audio else torch.ones_like(img_mask)  # never a spectrogram's padding
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

    def _pixel_sse(self, pred: torch.Tensor, target: torch.Tensor, img_mask: torch.Tensor, rows: np.ndarray
                   ) -> tuple[float, int]:
        """``(sum of squared errors, values scored)`` of a prediction ``[B, L_i, P*P*C]`` on the hidden
        patches ``img_mask [B, L_i]``: pixels clipped to [0, 1] (:func:`masked_pixel_sse`) for images;
        for spectrograms the normalised log-mel cells of the clip, padding left out (:func:`spec_sse`,
        as ``audio_mae``'s ``val_spec_mse``)."""
        if self.audio:
            from engine.tasks.audio import spec_sse

            w = self._ds.window(rows)
            return spec_sse(self.model.unpatchify(pred.float().cpu())[:, 0], w.spec, self._ds.grid.cells(img_mask), w.real)
        from engine.eval.image_baselines import masked_pixel_sse

        return masked_pixel_sse(pred.float(), target, img_mask.to(self.device))

    @torch.no_grad()
    def embeddings(self, x: torch.Tensor, enc) -> tuple[np.ndarray, np.ndarray]:
        """Contrastive embeddings ``(image [N, E], caption [N, E])`` of images ``x [N, C, H, W]`` and
        their encoded captions, each modality encoded alone."""
        img, txt = [], []
        for i in range(0, len(x), EVAL_CHUNK):
            idx = torch.arange(i, min(i + EVAL_CHUNK, len(x)))
            b = _text_rows(enc, idx)
            img.append(self.model.embed_image(x[idx.to(x.device)].to(self.device)).float().cpu())
            txt.append(self.model.embed_text(b["ids"].to(self.device), b["eligible"].to(self.device)).float().cpu())
        return torch.cat(img).numpy(), torch.cat(txt).numpy()

    def retrieval(self) -> dict[str, float]:
        """``t2i_r{k}`` and ``i2t_r{k}`` among the val pairs (:func:`engine.eval.retrieval.retrieval_figures`)."""
        from engine.eval.retrieval import retrieval_figures

        return retrieval_figures(*self.embeddings(self.x_val, self.val_enc), self.val_captions)

    @torch.no_grad()
    def baselines(self) -> dict[str, float]:
        """Trivial and classical predictors on the same val pairs and masks (module docstring)."""
        from engine.eval.image_baselines import masked_pixel_sse, mean_image_patches, visible_mean_patches
        from engine.eval.retrieval import KS, ONE_CHAR_WORDS, cca_embeddings, chance_recall, retrieval_figures
        from engine.eval.text_baselines import TokenBaselines
        from engine.tasks.audio import SPEC_BASELINES, spec_baseline_sse

        base = TokenBaselines.fit(*baseline_rows(self.train_enc), tuple(self.tok.special_ids),
                                  self.tok.vocab_size)
        hits = {"position": 0.0, "unigram": 0.0}
        n_tok, px = 0, 0
        sse = dict.fromkeys(SPEC_BASELINES if self.audio else ("mean_image", "visible_mean"), 0.0)
        P = self.cfg.model.patch_size
        x_ref = self.baseline_reference()
        for idx, b, img_mask, _ in self.eval_batches:
            whole = b["eligible"]
            for k in hits:
                hits[k] += float((base.predict(k, b["ids"].masked_fill(whole, self.tok.mask_id), b["attention"], whole)
                                  == b["ids"][whole]).sum())
            n_tok += int(whole.sum())
            if self.audio:  # the audio tasks' predictors, on the clip's cells only
                w = self._ds.window(self.val_rows[idx.numpy()])
                for name, (s, c) in spec_baseline_sse(w.spec, self._ds.grid.cells(img_mask), w.real).items():
                    sse[name] += s
                px += c
                continue
            xb = self.x_val[idx.to(self.device)].float()
            target = self.model.patchify(xb)
            for name, pred in (("mean_image", mean_image_patches(x_ref, len(xb), P)),
                               ("visible_mean", visible_mean_patches(xb, img_mask.to(xb.device), P))):
                s, c = masked_pixel_sse(pred.to(target.device), target, img_mask.to(target.device))
                sse[name] += s
            px += c
        out = {f"baseline/{k}": v / max(n_tok, 1) for k, v in hits.items()}
        out.update({f"baseline/{k}/mse": v / max(px, 1) for k, v in sse.items()})
        chance = chance_recall(self.val_captions)
        for k in KS:
            out[f"baseline/chance/t2i_r{k}"] = out[f"baseline/chance/i2t_r{k}"] = chance[k]
        cca = cca_embeddings(x_ref.cpu().flatten(1).numpy(), self._ds.texts("train", limit=len(x_ref)),
                             self.x_val.cpu().flatten(1).numpy(),
                             self.val_captions, seed=self.cfg.train.seed,
                             token_pattern=ONE_CHAR_WORDS if self.audio else None)  # a clip's text may be "7"
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
        b = _text_rows(self.val_enc, idx)
        img_mask, txt_mask = vis_masks(self.cfg, xb.cpu(), b, self._ds, rows)
        img_mask = img_mask.flatten(1)
        out = self._forward(xb, b, img_mask, txt_mask)
        cap = self._forward(xb, b, torch.zeros_like(img_mask), b["eligible"])
        text = {"tokens": token_strings(self.tok, b["ids"]), "text_mask": txt_mask.numpy(),
                "pred_tokens": self._predicted(b["ids"], txt_mask, out["logits"]),
                "caption_from_image": self._predicted(b["ids"], b["eligible"], cap["logits"]),
                "labels": self.y_val[idx.numpy()].astype(np.int64)}
        meta = {"class_names": list(self.class_names), "patch_size": self.cfg.model.patch_size,
                "captions": [self.val_captions[i] for i in idx.tolist()], "tokenizer_id": self.tokenizer_id}
        if self.audio:  # the audio tasks' sample arrays (spectrograms, hidden cells, Griffin-Lim audio)
            from engine.tasks.audio import spectrogram_arrays

            ds = self._ds
            pred = self.model.unpatchify(out["pred"].float().cpu())[:, 0]
            arrays = spectrogram_arrays(ds.feats, ds.grid, ds.window(rows), img_mask.view(-1, *self.grid), pred,
                                        [ds.clip(int(r)) for r in rows])  # fmt: skip
            return Sample(step=step, kind="paired", arrays={**arrays, **text}, meta={
                **meta, "stream": "audio", "sample_rate": ds.spec.sample_rate, "hop": ds.spec.hop,
                "grid": list(self.grid), "patch": [ds.grid.pf, ds.grid.pt], "unit": "patch", "transcripts": meta["captions"]})
        rec = self.model.reconstruct(xb, out["pred"], img_mask.to(self.device))
        return Sample(step=step, kind="paired", arrays={
            "images": xb.float().cpu().numpy(), "mask": img_mask.view(-1, *self.grid).numpy(),
            "pred_img": rec["pred_img"].float().cpu().numpy(), "pasted": rec["pasted"].float().cpu().numpy(), **text,
        }, meta=meta)

    def _predicted(self, ids: torch.Tensor, where: torch.Tensor, logits: torch.Tensor) -> np.ndarray:
        """Token strings ``[N, L_t]``: the top-1 prediction at ``where``, ``""`` elsewhere."""
        pred = torch.full_like(ids, self.tok.pad_id)
        pred[where] = logits.argmax(-1).cpu()
        return token_strings(self.tok, pred)

    @torch.no_grad()
    def features(self, split: str, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The pair encoded jointly (nothing hidden): the image tokens' mean next to the caption
        tokens' mean, ``X float32 [N, 2D]``."""
        rows = self._ds.indices(split)[:max_rows]  # images read chunk by chunk, never the whole split
        enc = self.tok.encode_batch(self._ds.texts_at(rows), max_len=self.cfg.data.tokenizer.max_len)
        out = []
        for i in range(0, len(rows), EVAL_CHUNK):
            b = _text_rows(enc, torch.arange(i, min(i + EVAL_CHUNK, len(rows))))
            x = self._ds.rows_tensors(rows[i : i + EVAL_CHUNK])[0]
            img, txt = self.model.encode(x.to(self.device), b["ids"].to(self.device), True, b["eligible"].to(self.device))
            out.append(torch.cat([img, txt], dim=1).float().cpu())
        feats = torch.cat(out).numpy() if out else np.zeros((0, 1), np.float32)
        return feats.astype(np.float32), self._ds.labels[rows].astype(np.int64)

    def raw_features(self, max_rows: int | None = None):
        """The pixels in [0, 1] next to the caption's TF-IDF (fitted on train), ``X float32 [N, C*H*W + V]``."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        from engine.eval.retrieval import ONE_CHAR_WORDS

        texts = {s: self._ds.texts(s, limit=max_rows) for s in ("train", "val")}
        words = {"token_pattern": ONE_CHAR_WORDS} if self.audio else {}  # a clip's text may be "7"
        vec = TfidfVectorizer(sublinear_tf=True, max_features=5000, **words).fit(texts["train"])
        out = []
        for s in ("train", "val"):
            x, y = self._ds.tensors(s, limit=max_rows)
            tfidf = vec.transform(texts[s]).toarray().astype(np.float32)
            out.append((np.concatenate([x.flatten(1).numpy(), tfidf], axis=1), y.numpy()))
        return out[0], out[1]


# --- previews (New run, Mask lab) -----------------------------------------------------------------


def vis_masks(cfg: RunConfig, images: torch.Tensor, rows: dict[str, torch.Tensor], pairs=None,
              pair_rows: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The masks of the run's fixed visualisation pairs: the image's ``[N, h, w]`` bool
    (:func:`engine.masking.preview_masks`: ``masking`` at ``masking.ratio`` from ``train.seed``; for
    audio-text pairs :func:`engine.tasks.audio.draw_masks` over the clips' windows from
    ``train.seed``, padding never hidden) and the caption's ``[N, L_t]`` bool (``task_params.text_*``
    from ``train.seed``, at least one hidden token per caption). The run's samples and the New run /
    Mask lab previews call this with the same pairs, so the preview shows the run's own masks.

    Args:
        images: ``[N, C, H, W]`` float in [0, 1] on the CPU; rows: the captions' ``TextTask.rows``;
        pairs, pair_rows: for audio-text pairs, the :class:`AudioTextPairs` and the ``N`` pairs' positions.
    """
    if isinstance(pairs, AudioTextPairs):
        img = pairs.masks(cfg, pair_rows, torch.Generator().manual_seed(cfg.train.seed)).view(-1, *pairs.grid.shape)
    else:
        img = preview_masks(cfg, tuple(images.shape[1:]), len(images), images=images)
    g = torch.Generator().manual_seed(cfg.train.seed)
    text_cfg = PairedParams(**cfg.task_params).text_masking()
    txt = draw_mask(text_cfg, tuple(rows["ids"].shape), g, eligible=rows["eligible"], word_ids=rows["word_ids"],
                    sentence_ids=rows["sentence_ids"])
    return img, ensure_one_masked(txt, rows["eligible"], g)


@dataclass(frozen=True)
class PairedPreview:
    """What the dashboard shows of a paired config before a run: its ``N`` visualisation pairs
    (:func:`engine.data.representative` over the first :data:`EVAL_MAX_ROWS` val pairs, as the run
    picks them) with the run's masks of both.

    Attributes:
        images: float32 ``[N, C, H, W]`` in [0, 1]; image_mask: bool ``[N, h, w]``.
        captions: the ``N`` captions; tokens: ``[N, L_t]`` strings (``""`` at padding);
        text_mask, eligible: bool ``[N, L_t]``; labels: int64 ``[N]``.
        real, cells: audio-text pairs only (None otherwise): ``images`` is then the clips'
            normalised log-mel ``[N, 1, F, T]``, ``real`` bool ``[N, T]`` the frames of each clip
            (False = silence padding) and ``cells`` bool ``[N, F, T]`` the mel bins x frames the
            spectrogram mask hides.
        grid: audio-text pairs only: the spectrogram's mask grid.
    """

    images: np.ndarray
    image_mask: np.ndarray
    captions: list[str]
    tokens: np.ndarray
    text_mask: np.ndarray
    eligible: np.ndarray
    labels: np.ndarray
    real: np.ndarray | None = None
    cells: np.ndarray | None = None
    grid: Grid | None = None


def preview(cfg: RunConfig, n: int, workspace=None) -> PairedPreview:
    """The run's visualisation pairs and both masks for ``cfg`` (trains or loads the cached tokenizer).

    Raises:
        DatasetError, ConfigError: unknown dataset, a patch size that does not tile the images, a
            strategy that needs what the data cannot give.
    """
    from engine.data import load_dataset, representative

    ds = pairs_of(cfg, load_dataset(cfg.data.dataset, workspace), workspace)
    split = "val" if ds.info.n_val else "train"
    pool = ds.indices(split)[:EVAL_MAX_ROWS]  # the task's val rows; only the picked ones are read
    y = ds.labels[pool]
    pick = representative(y, n)
    captions = ds.texts_at(pool[pick])
    tok, _ = TextTask.tokenizer_for(cfg, ds, workspace)
    rows = _text_rows(tok.encode_batch(captions, max_len=cfg.data.tokenizer.max_len), torch.arange(len(pick)))
    images = ds.rows_tensors(pool[pick])[0]
    img, txt = vis_masks(cfg, images, rows, ds, pool[pick])
    real = cells = grid = None
    if isinstance(ds, AudioTextPairs):
        real, cells, grid = ds.window(pool[pick]).real.numpy(), ds.grid.cells(img).numpy(), ds.grid
    return PairedPreview(images.numpy(), img.numpy(), captions, token_strings(tok, rows["ids"]), txt.numpy(),
                         rows["eligible"].numpy(), y[pick].astype(np.int64), real, cells, grid)


def caption_train_masks(cfg: RunConfig, n: int, workspace=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The caption masks of paired config ``cfg`` over ``n`` train captions (or clip texts) for
    Mask lab's statistics: drawn as ``text_mlm`` draws its token masks
    (:func:`engine.tasks.text.train_masks` with ``task_params.text_*`` as the masking), which is how
    the paired task draws them, with the run's caption tokenizer.

    Returns:
        ``(mask [n, L_t] bool, eligible [n, L_t] bool)``.

    Raises:
        DatasetError, ConfigError: as :func:`preview`.
    """
    from engine.data import load_dataset
    from engine.tasks.text import train_masks

    text_cfg = cfg.model_copy(update={"masking": PairedParams(**cfg.task_params).text_masking()})
    return train_masks(text_cfg, n, workspace, ds=pairs_of(cfg, load_dataset(cfg.data.dataset, workspace), workspace))


# --- retrieval box (Run detail) -----------------------------------------------------------------


@dataclass(frozen=True)
class RetrievalIndex:
    """A checkpoint's contrastive embeddings of the run's validation pairs (the pairs its
    ``val_t2i_r*`` / ``val_i2t_r*`` figures rank), for the retrieval box.

    Attributes:
        images: float32 ``[N, C, H, W]`` in [0, 1]; for audio-text pairs ``[N, 1, F, T]`` the clips'
            log-mel (natural log, not normalised); captions: the ``N`` captions; labels: int64 ``[N]``.
        image_emb, text_emb: float32 ``[N, E]``, each row of unit length (rank by dot product).
        real: audio-text pairs: bool ``[N, T]`` the frames of each clip (False = padding); None for images.
    """

    images: np.ndarray
    captions: list[str]
    labels: np.ndarray
    image_emb: np.ndarray
    text_emb: np.ndarray
    real: np.ndarray | None = None


def _unit(x: torch.Tensor) -> np.ndarray:
    return torch.nn.functional.normalize(x.float(), dim=-1).numpy()


@torch.no_grad()
def retrieval_index(loaded, workspace=None) -> RetrievalIndex:
    """Embed the run's validation pairs (the first :data:`EVAL_MAX_ROWS`; train when the dataset has
    no val split) with a ``paired`` checkpoint, each modality encoded alone.

    Args:
        loaded: :func:`engine.eval.inference.load_model` of a ``paired`` run.

    Raises:
        InferenceError: the run's tokenizer is gone, or its dataset changed since the run (other
            pairs than it ranked).
        DatasetError: the dataset is gone.
    """
    from engine.data import load_dataset
    from engine.eval.inference import InferenceError
    from engine.tasks.text import tokenizer_of

    ds = pairs_of(loaded.cfg, load_dataset(loaded.cfg.data.dataset, workspace), workspace)
    if loaded.info.get("dataset_hash") not in (None, ds.info.source_hash):
        raise InferenceError(f"run {loaded.run_id}: dataset {ds.info.name!r} was re-imported since the run; its "
                             "validation pairs are not the ones the run ranked")
    split = "val" if ds.info.n_val else "train"
    x, y = ds.tensors(split, limit=EVAL_MAX_ROWS)
    y = y.numpy().astype(np.int64)
    captions = ds.texts(split, limit=EVAL_MAX_ROWS)
    tok = tokenizer_of(loaded, workspace)
    enc = tok.encode_batch(captions, max_len=loaded.cfg.data.tokenizer.max_len)
    img, txt = [], []
    for i in range(0, len(x), EVAL_CHUNK):
        b = _text_rows(enc, torch.arange(i, min(i + EVAL_CHUNK, len(x))))
        img.append(loaded.model.embed_image(x[i : i + EVAL_CHUNK]))
        txt.append(loaded.model.embed_text(b["ids"], b["eligible"]))
    emb = (_unit(torch.cat(img)), _unit(torch.cat(txt)))
    if isinstance(ds, AudioTextPairs):  # shown as spectrograms: log-mel before the normalisation
        w = ds.window(ds.indices(split)[:EVAL_MAX_ROWS])
        return RetrievalIndex(ds.feats.denormalize(w.spec)[:, None].numpy(), captions, y, *emb, real=w.real.numpy())
    return RetrievalIndex(x.numpy(), captions, y, *emb)


@torch.no_grad()
def embed_caption(loaded, text: str, workspace=None) -> np.ndarray:
    """A ``paired`` checkpoint's contrastive embedding of one typed caption, float32 ``[E]`` of unit length.

    Raises:
        InferenceError: the text has no token the run's tokenizer keeps, or the tokenizer is gone.
    """
    from engine.eval.inference import InferenceError
    from engine.tasks.text import tokenizer_of

    tok = tokenizer_of(loaded, workspace)
    b = _text_rows(tok.encode_batch([text], max_len=loaded.cfg.data.tokenizer.max_len), torch.arange(1))
    if not bool(b["eligible"].any()):
        raise InferenceError("type a caption: the text has no word to embed")
    return _unit(loaded.model.embed_text(b["ids"], b["eligible"]))[0]


def nearest(query: np.ndarray, keys: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The ``k`` rows of ``keys [N, E]`` most similar to ``query [E]`` (unit vectors: cosine
    similarity), best first, as ``(row, similarity)``; ties broken by row."""
    sim = keys @ query
    order = np.argsort(-sim, kind="stable")[:k]
    return [(int(i), float(sim[i])) for i in order]
