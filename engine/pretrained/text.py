"""Imported text models: the ``bert_hf`` builder and the tokenizer that travels with the model.

An imported BERT's preprocessing (``model.json``'s ``preprocessing``) is what its tokenizer needs::

    {"tokenizer": "tokenizer.json" | "vocab.txt",   # the file kept in models/<name>/
     "lowercase": bool, "strip_accents": bool | None, "tokenize_chinese_chars": bool,
     "special": {"pad": id, "cls": id, "sep": id, "mask": id, "unk": id},
     "special_tokens": {"pad": "[PAD]", ...},       # the tokens of those roles
     "max_len": N}                                    # max_position_embeddings

The tokenizer is Hugging Face ``tokenizers`` (never a WordPiece of masklab's own): ``tokenizer.json``
as saved, or a ``vocab.txt`` put in BERT's pipeline (``BertNormalizer``, ``BertPreTokenizer``,
``WordPiece`` with ``##`` pieces, ``[CLS] $A [SEP]``). In both, the normalizer's lower-casing,
accent stripping and Chinese-character splitting are the recorded ones (from
``tokenizer_config.json``, as ``transformers`` 5 does), and the five special tokens are matched
whole in the text before normalisation, so ``[MASK]`` typed by the user is the mask id even when
the text is lower-cased.

References: Devlin et al. 2019 (BERT); Wu et al. 2016 (WordPiece).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from engine.models.bert_hf import HFBertMLM
from engine.pretrained.registry import PretrainedError, register_pretrained_arch
from engine.text.tokenizer import SPECIAL_ROLES, TextTokenizer, TokenizerSettings

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")
"""The tokenizer files an imported BERT may keep, in order of preference."""


@register_pretrained_arch("bert_hf")
def build_bert_hf(arch_config: dict[str, Any]) -> HFBertMLM:
    """``HFBertMLM(**arch_config)`` in eval mode (random weights: the store loads them).

    Raises:
        PretrainedError: ``arch_config`` does not fit :class:`~engine.models.bert_hf.HFBertMLM`.
    """
    try:
        return HFBertMLM(**arch_config).eval()
    except (TypeError, ValueError) as e:
        raise PretrainedError(f"bert_hf: the model.json's arch_config does not build a BERT ({e})") from e


def build_tokenizer(folder: Path, preprocessing: dict[str, Any]) -> TextTokenizer:
    """The tokenizer of an imported BERT, from ``folder/<preprocessing["tokenizer"]>``.

    Args:
        folder: where the tokenizer file is (the model's folder, or the folder being imported).
        preprocessing: see the module docstring (``special_tokens``: role -> token).

    Returns:
        A :class:`~engine.text.tokenizer.TextTokenizer` whose ``pad_id`` ... ``unk_id`` are the
        model's; ``encode_batch`` gives ``[CLS] tokens [SEP] [PAD]...`` with those ids.

    Raises:
        PretrainedError: the file is missing or unreadable, or a special token is not in its
            vocabulary (naming the file).
    """
    name = preprocessing["tokenizer"]
    path = folder / name
    specials = dict(preprocessing["special_tokens"])
    norm = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=preprocessing["tokenize_chinese_chars"],
                                      strip_accents=preprocessing["strip_accents"],
                                      lowercase=preprocessing["lowercase"])
    try:
        if name == "tokenizer.json":
            tok = Tokenizer.from_file(str(path))
            if _normalizer_type(path) == "BertNormalizer":
                tok.normalizer = norm  # the recorded flags (tokenizer_config.json wins, as in transformers 5)
        elif name == "vocab.txt":
            tok = Tokenizer(models.WordPiece.from_file(str(path), unk_token=specials["unk"]))
            tok.normalizer = norm
            tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            tok.decoder = decoders.WordPiece(prefix="##")
        else:
            raise PretrainedError(f"{path}: not a tokenizer file masklab reads ({', '.join(TOKENIZER_FILES)})")
    except PretrainedError:
        raise
    except Exception as e:  # noqa: BLE001 (the Rust library raises plain Exceptions)
        raise PretrainedError(f"{path}: the tokenizer cannot be read ({e})") from e
    missing = [f"{role} {tok_!r}" for role, tok_ in specials.items() if tok.token_to_id(tok_) is None]
    if missing:
        raise PretrainedError(f"{path}: special tokens not in the vocabulary: {', '.join(missing)}")
    # Specials are matched whole before normalisation ("[MASK]" stays one token when lower-casing).
    tok.add_special_tokens([AddedToken(specials[r], special=True, normalized=False) for r in SPECIAL_ROLES])
    if name == "vocab.txt" or tok.post_processor is None:
        cls, sep = specials["cls"], specials["sep"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A {sep}", special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))])
    settings = TokenizerSettings(kind="wordpiece", vocab_size=max(tok.get_vocab_size(with_added_tokens=True), 6),
                                 lowercase=bool(preprocessing["lowercase"]), max_len=int(preprocessing["max_len"]))
    try:
        return TextTokenizer(tok, settings, special_tokens=specials)
    except ValueError as e:
        raise PretrainedError(f"{path}: {e}") from e


def load_text_tokenizer(info: Any) -> TextTokenizer:
    """The tokenizer of the imported text model ``info`` (a :class:`~engine.pretrained.store.PretrainedModel`,
    not imported here: the store imports this module to build models), kept in its folder.

    Raises:
        PretrainedError: not a text model, or see :func:`build_tokenizer`.
    """
    if info.modality != "text" or info.path is None:
        raise PretrainedError(f"imported model {info.name!r} is not a text model ({info.modality})")
    return build_tokenizer(info.path, info.preprocessing)


def _normalizer_type(path: Path) -> str | None:
    with open(path, encoding="utf-8") as f:
        norm = json.load(f).get("normalizer")
    return norm.get("type") if isinstance(norm, dict) else None
