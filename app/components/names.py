"""Names for people of every logged metric and evaluation figure: one table, used by every page.

Keys (``val_caption_acc``, ``knn_acc/random_init``, ``loss/mse``) stay in tooltips, URLs and
exports; what a page writes in a heading, a caption, a tile or a column title comes from here
(:func:`metric_label`). A key the table does not know is shown with spaces for underscores, so a
new metric is readable before it gets its name.
"""

from __future__ import annotations


def _recall(query: str, found: str) -> dict[str, tuple[str, bool]]:
    """A paired run's retrieval figures: ``val_t2i_r5`` -> ``("text→image R@5", True)``."""
    return {f"val_{d}_r{k}": (f"{name} R@{k}", True) for k in (1, 5, 10)
            for d, name in (("t2i", f"{query}→{found}"), ("i2t", f"{found}→{query}"))}


#: Logged key -> (name, shown as a percentage?). Headlines of every task (``Task.headline``), the
#: figures tasks declare (``Task.figures``), the training curves and the evaluation's figures.
METRIC_NAMES: dict[str, tuple[str, bool]] = {
    "loss": ("loss", False), "val_loss": ("val loss", False), "lr": ("learning rate", False),
    "mask_ratio": ("mask ratio", False), "text_mask_ratio": ("caption mask ratio", False),
    "throughput": ("throughput (samples/s)", False), "step_time": ("step time (s)", False),
    "mfu": ("MFU", True), "peak_mem_bytes": ("peak memory", False),
    "val_top1": ("top-1", True), "val_top5": ("top-5", True), "val_ppl": ("perplexity", False),
    "val_span_acc": ("span accuracy", True), "val_span_acc_pos": ("span accuracy, per position", True),
    "val_span_acc_tf": ("span accuracy, teacher-forced", True), "val_spec_mse": ("log-mel MSE", False),
    "val_caption_acc": ("caption accuracy", True), "val_caption_blank_acc": ("caption accuracy, image alone", True),
    "val_token_acc": ("token accuracy", True), "val_mse": ("pixel MSE", False),
    "val_mse_no_caption": ("pixel MSE, image alone", False), "val_psnr": ("PSNR (dB)", False),
    **_recall("text", "image"),
    "probe_acc": ("linear-probe accuracy", True), "knn_acc": ("kNN accuracy (k=20)", True),
    "kmeans_nmi": ("k-means NMI", False), "kmeans_ari": ("k-means ARI", False), "finetune_acc": ("fine-tune accuracy", True),
}  # fmt: skip
#: The same keys in an audio-text ``paired_audio`` run, whose "image" is a clip's log-mel spectrogram.
AUDIO_PAIR_NAMES: dict[str, tuple[str, bool]] = {
    "val_mse": ("log-mel MSE", False), "val_mse_no_caption": ("log-mel MSE, clip alone", False),
    "val_caption_blank_acc": ("caption accuracy, clip alone", True), **_recall("text", "audio"),
}
#: The encoders an evaluation scores (``<figure>/<encoder>`` in a sweep's table).
ENCODER_NAMES = {"trained": "trained", "random_init": "random init", "raw_input": "raw input", "chance": "chance"}
#: Loss terms (``loss/<objective>``) by objective.
LOSS_NAMES = {"mse": "MSE", "l1": "L1", "cross_entropy": "cross-entropy", "contrastive": "InfoNCE"}


def name_table(config: dict | None) -> dict[str, tuple[str, bool]]:
    """The key -> ``(name, percent?)`` table for a run of ``config`` (:data:`METRIC_NAMES`, with
    :data:`AUDIO_PAIR_NAMES` over it for an audio-text pair)."""
    audio_pair = (config or {}).get("task") == "paired_audio"
    return {**METRIC_NAMES, **AUDIO_PAIR_NAMES} if audio_pair else METRIC_NAMES


def metric_label(key: str, config: dict | None = None) -> str:
    """``key``'s name for people (``val_caption_acc`` -> ``caption accuracy``, ``knn_acc/random_init``
    -> ``kNN accuracy (k=20), random init``, ``loss/mse`` -> ``loss, MSE term``); ``config``: the
    run's resolved config (an audio-text pair names its "image" figures after the spectrogram)."""
    table = name_table(config)
    if key in table:
        return table[key][0]
    head, _, tail = key.partition("/")
    if tail and head == "loss":
        return f"loss, {LOSS_NAMES.get(tail, tail.replace('_', ' '))} term"
    if tail and head in table:
        return f"{table[head][0]}, {ENCODER_NAMES.get(tail, tail.replace('_', ' '))}"
    return key.replace("_", " ").replace("/", " · ")


def is_percent(key: str, config: dict | None = None) -> bool:
    """True when ``key`` is a fraction shown as a percentage (an accuracy, a recall)."""
    return name_table(config).get(key.partition("/")[0], ("", False))[1]
