"""Export the exact BERT (:class:`~engine.models.bert_hf.HFBertMLM`, arch ``bert_hf``) as a folder that
``transformers.BertForMaskedLM.from_pretrained`` and ``transformers.AutoTokenizer.from_pretrained`` load.

Files: ``config.json`` (``BertConfig``'s fields, written by hand), ``model.safetensors`` under
``BertForMaskedLM``'s names (:func:`~engine.pretrained.importers.hf_bert.hf_name`, the inverse of
the importer's table; with tied embeddings the decoder weight ``cls.predictions.decoder.weight`` is
written too, a copy of the word embeddings, for readers that do not tie), and the tokenizer:
``tokenizer.json`` (or an imported model's kept ``vocab.txt``), ``tokenizer_config.json``
(``tokenizer_class``, ``do_lower_case``, ``model_max_length``, the special tokens) and
``special_tokens_map.json``.

References: Devlin et al. 2019, BERT (the checkpoints' layout is Google's, as ``transformers`` names it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch
from safetensors.torch import save as safetensors_bytes

from engine.models.bert_hf import HFBertMLM
from engine.pretrained.importers.hf_bert import hf_name
from engine.pretrained.registry import PretrainedError
from engine.text.tokenizer import SPECIAL_ROLES

#: ``transformers``' tokenizer classes an export names: BERT's own pipeline (``BertNormalizer``,
#: ``BertPreTokenizer``, ``WordPiece``) loads as ``BertTokenizer``; any other ``tokenizer.json``
#: (masklab's character tokenizer) as ``PreTrainedTokenizerFast``, which runs the file as it is.
BERT_TOKENIZER, FAST_TOKENIZER = "BertTokenizer", "PreTrainedTokenizerFast"


@dataclass(frozen=True)
class TokenizerExport:
    """The tokenizer a BERT export carries.

    Attributes:
        files: file name -> bytes (``tokenizer.json``, or the ``vocab.txt`` an imported model kept).
        special_tokens: role (:data:`~engine.text.tokenizer.SPECIAL_ROLES`) -> token.
        max_len: ``model_max_length`` (tokens per sequence, ``[CLS]`` and ``[SEP]`` included).
        tokenizer_class: :data:`BERT_TOKENIZER` or :data:`FAST_TOKENIZER`.
        lowercase, strip_accents, tokenize_chinese_chars: the BERT normaliser's flags
            (``tokenizer_config.json``'s ``do_lower_case`` ...).
    """

    files: dict[str, bytes]
    special_tokens: dict[str, str]
    max_len: int
    tokenizer_class: str = BERT_TOKENIZER
    lowercase: bool = True
    strip_accents: bool | None = None
    tokenize_chinese_chars: bool = True


def tokenizer_export(tokenizer_json: str, special_tokens: dict[str, str], max_len: int) -> TokenizerExport:
    """A :class:`TokenizerExport` of a ``tokenizers`` pipeline (``tokenizer.json`` text): its BERT
    normaliser's flags read from the file, ``BertTokenizer`` when it is BERT's pipeline, else
    ``PreTrainedTokenizerFast``."""
    d = json.loads(tokenizer_json)
    norm, pre, model = (d.get(k) or {} for k in ("normalizer", "pre_tokenizer", "model"))
    bert = norm.get("type") == "BertNormalizer" and pre.get("type") == "BertPreTokenizer" \
        and model.get("type") == "WordPiece"
    return TokenizerExport(
        files={"tokenizer.json": tokenizer_json.encode("utf-8")}, special_tokens=dict(special_tokens),
        max_len=int(max_len), tokenizer_class=BERT_TOKENIZER if bert else FAST_TOKENIZER,
        lowercase=bool(norm.get("lowercase", False)) if bert else False,
        strip_accents=norm.get("strip_accents") if bert else None,
        tokenize_chinese_chars=bool(norm.get("handle_chinese_chars", True)) if bert else False)


def bert_config(model: HFBertMLM, pad_id: int) -> dict[str, Any]:
    """``config.json`` of a ``BertForMaskedLM``: ``BertConfig``'s fields for ``model`` (its sizes,
    activation, LayerNorm epsilon, dropouts and tying), ``pad_token_id`` the tokenizer's ``[PAD]``."""
    blk = model.blocks[0] if len(model.blocks) else None
    D = int(model.tok_embed.embedding_dim)
    drop = model.embed_drop.p if isinstance(model.embed_drop, torch.nn.Dropout) else 0.0
    return {
        "architectures": ["BertForMaskedLM"], "model_type": "bert",
        "vocab_size": int(model.tok_embed.num_embeddings), "hidden_size": D,
        "num_hidden_layers": len(model.blocks), "num_attention_heads": blk.num_heads if blk else 1,
        "intermediate_size": blk.fc1.out_features if blk else 4 * D, "hidden_act": model.hidden_act,
        "hidden_dropout_prob": float(drop), "attention_probs_dropout_prob": float(blk.attn_dropout if blk else 0.0),
        "max_position_embeddings": int(model.pos_embed.num_embeddings),
        "type_vocab_size": int(model.type_embed.num_embeddings), "initializer_range": 0.02,
        "layer_norm_eps": float(model.layer_norm_eps), "pad_token_id": int(pad_id),
        "position_embedding_type": "absolute", "is_decoder": False, "add_cross_attention": False,
        "tie_word_embeddings": model.head_decoder is None,
    }


def bert_state_dict(model: HFBertMLM) -> dict[str, torch.Tensor]:
    """``model``'s tensors under ``BertForMaskedLM``'s names, float32 contiguous copies, plus
    ``cls.predictions.decoder.weight`` ``[V, D]`` (the word embeddings when tied).

    Raises:
        PretrainedError: a tensor that no name table maps.
    """
    out: dict[str, torch.Tensor] = {}
    for name, t in model.state_dict().items():
        hf = hf_name(name)
        if hf == name:
            raise PretrainedError(f"tensor {name} of this BERT has no BertForMaskedLM name")
        out[hf] = t.detach().to(torch.float32).clone(memory_format=torch.contiguous_format)
    out.setdefault(hf_name("head_decoder"), out[hf_name("tok_embed.weight")].clone())
    return out


def tokenizer_files(tok: TokenizerExport) -> dict[str, bytes]:
    """The tokenizer's files, ``tokenizer_config.json`` and ``special_tokens_map.json``."""
    specials = {f"{role}_token": tok.special_tokens[role] for role in SPECIAL_ROLES}
    config = {"tokenizer_class": tok.tokenizer_class, "do_lower_case": tok.lowercase,
              "strip_accents": tok.strip_accents, "tokenize_chinese_chars": tok.tokenize_chinese_chars,
              "model_max_length": int(tok.max_len), **specials}
    return {**tok.files, "tokenizer_config.json": _json(config), "special_tokens_map.json": _json(specials)}


def bert_files(model: HFBertMLM, tok: TokenizerExport, pad_id: int) -> dict[str, bytes]:
    """Every file of the export (see the module docstring); ``pad_id``: the tokenizer's ``[PAD]`` id.

    Raises:
        PretrainedError: not an :class:`HFBertMLM`, or see :func:`bert_state_dict`.

    References: Devlin et al. 2019, BERT.
    """
    if not isinstance(model, HFBertMLM):
        raise PretrainedError(f"a {type(model).__name__}, not the exact BERT (HFBertMLM)")
    return {
        "config.json": _json(bert_config(model, pad_id)),
        "model.safetensors": safetensors_bytes(bert_state_dict(model), metadata={"format": "pt"}),
        **tokenizer_files(tok),
    }


def _json(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode("utf-8")
