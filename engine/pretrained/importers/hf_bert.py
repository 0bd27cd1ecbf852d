"""Import a Hugging Face ``save_pretrained`` folder of ``BertForMaskedLM`` (or ``BertForPreTraining``,
or an encoder-only ``BertModel``) as a ``bert_hf`` model (:class:`~engine.models.bert_hf.HFBertMLM`).

What is read: ``config.json``; the weights from ``model.safetensors`` (or the shards of
``model.safetensors.index.json``) with ``safetensors``, never a pickle (a folder with only
``pytorch_model.bin`` is refused with how to re-save it); the tokenizer, ``tokenizer.json`` or
else ``vocab.txt``, with ``tokenizer_config.json`` (``do_lower_case``, ``strip_accents``,
``tokenize_chinese_chars``, special tokens) and ``special_tokens_map.json`` when present.

Every tensor is accounted for before anything is written: each published BERT tensor goes to one
masklab parameter (:func:`masklab_name`, old ``gamma`` / ``beta`` LayerNorm names included); the
heads masklab does not use (``bert.pooler.*``, ``cls.seq_relationship.*``) and the
``position_ids`` / ``token_type_ids`` buffers are ignored and listed in ``source.ignored``; a
tensor that fits nowhere, a missing one or a wrong shape is refused with a
:class:`~engine.pretrained.store.PretrainedError` naming the file and the tensor, and nothing is
registered. ``BertModel`` (no MLM head) gets a fresh head (``source.fresh``, with a note: its
predictions mean nothing until it is trained).

References: Devlin et al. 2019, BERT (the checkpoints' layout is Google's, as ``transformers`` names it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from engine.models.bert_hf import ACTIVATIONS
from engine.pretrained.store import PretrainedError, PretrainedModel, save_pretrained
from engine.pretrained.text import TOKENIZER_FILES, build_bert_hf, build_tokenizer
from engine.text.tokenizer import SPECIAL_ROLES

#: ``config.json`` ``architectures`` masklab imports, and whether the checkpoint carries the MLM head.
ARCHITECTURES = {"BertForMaskedLM": True, "BertForPreTraining": True, "BertModel": False}
DEFAULT_SPECIALS = {"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "unk": "[UNK]"}
#: Tensors of heads and buffers masklab has no use for (``source.ignored``).
IGNORED = re.compile(r"^(bert\.)?pooler\.|^cls\.seq_relationship\.|(^|\.)(position_ids|token_type_ids)$")
HEAD = ("head_dense.weight", "head_dense.bias", "head_norm.weight", "head_norm.bias", "head_bias")

_LAYER = {
    "attention.self.query": "q", "attention.self.key": "k", "attention.self.value": "v",
    "attention.output.dense": "proj", "attention.output.LayerNorm": "norm1",
    "intermediate.dense": "fc1", "output.dense": "fc2", "output.LayerNorm": "norm2",
}
_TOP = {
    "embeddings.word_embeddings.weight": "tok_embed.weight",
    "embeddings.position_embeddings.weight": "pos_embed.weight",
    "embeddings.token_type_embeddings.weight": "type_embed.weight",
    "embeddings.LayerNorm.weight": "embed_norm.weight", "embeddings.LayerNorm.bias": "embed_norm.bias",
    "cls.predictions.transform.dense.weight": "head_dense.weight",
    "cls.predictions.transform.dense.bias": "head_dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "head_norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "head_norm.bias",
    "cls.predictions.bias": "head_bias", "cls.predictions.decoder.bias": "head_bias",
    "cls.predictions.decoder.weight": "head_decoder",
}
_LAYER_RE = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")


def masklab_name(hf_name: str) -> str | None:
    """The :class:`~engine.models.bert_hf.HFBertMLM` parameter a published BERT tensor goes to, or
    None (no such parameter). ``bert.`` prefixes are dropped; ``LayerNorm.gamma`` / ``beta`` (the
    original TensorFlow names, still in e.g. bert-base-uncased) are ``weight`` / ``bias``.

    ``cls.predictions.decoder.weight`` maps to ``head_decoder``, which a tied model does not have
    (the importer compares it with the word embeddings instead).
    """
    name = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
    name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))
    if name in _TOP:
        return _TOP[name]
    m = _LAYER_RE.match(name)
    if m and m.group(2) in _LAYER:
        return f"blocks.{m.group(1)}.{_LAYER[m.group(2)]}.{m.group(3)}"
    return None


def hf_name(masklab: str, prefix: str = "bert.") -> str:
    """The published name of an :class:`~engine.models.bert_hf.HFBertMLM` parameter (the inverse of
    :func:`masklab_name`; ``prefix`` is ``"bert."`` for the encoder of a model with heads)."""
    for hf, ours in _TOP.items():
        if ours == masklab:
            return hf if hf.startswith("cls.") else prefix + hf
    m = re.match(r"^blocks\.(\d+)\.(\w+)\.(weight|bias)$", masklab)
    if m:
        layer = next(k for k, v in _LAYER.items() if v == m.group(2))
        return f"{prefix}encoder.layer.{m.group(1)}.{layer}.{m.group(3)}"
    return masklab


def arch_config(config: dict[str, Any], cfg_file: Path) -> dict[str, Any]:
    """``HFBertMLM``'s keyword arguments from a BERT ``config.json``.

    Raises:
        PretrainedError: a field masklab cannot honour (unknown ``hidden_act``, relative position
            embeddings, a causal decoder, a width the heads do not divide), naming the file and field.
    """
    def need(key: str) -> Any:
        if key not in config:
            raise PretrainedError(f"{cfg_file}: no {key!r}; not a BERT config")
        return config[key]

    act = config.get("hidden_act", "gelu")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise PretrainedError(f"{cfg_file}: hidden_act {act!r} is not one masklab implements "
                              f"({', '.join(ACTIVATIONS)})")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise PretrainedError(f"{cfg_file}: position_embedding_type {config['position_embedding_type']!r}; masklab "
                              "implements BERT's absolute (learned) positions only")
    if config.get("is_decoder") or config.get("add_cross_attention"):
        raise PretrainedError(f"{cfg_file}: is_decoder / add_cross_attention is set: a causal BERT decoder is not a "
                              "masked language model")
    d, heads = int(need("hidden_size")), int(need("num_attention_heads"))
    if d % heads:
        raise PretrainedError(f"{cfg_file}: num_attention_heads {heads} does not divide hidden_size {d}")
    return {
        "vocab_size": int(need("vocab_size")), "max_len": int(config.get("max_position_embeddings", 512)),
        "embed_dim": d, "depth": int(need("num_hidden_layers")), "num_heads": heads,
        "intermediate_size": int(need("intermediate_size")), "hidden_act": act,
        "layer_norm_eps": float(config.get("layer_norm_eps", 1e-12)),
        "type_vocab_size": int(config.get("type_vocab_size", 2)),
        "pad_id": int(config.get("pad_token_id") or 0),
        "dropout": float(config.get("hidden_dropout_prob", 0.1)),
        "attn_dropout": float(config.get("attention_probs_dropout_prob", 0.1)),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", True)),
    }


def read_safetensors(folder: Path) -> tuple[dict[str, torch.Tensor], str]:
    """All tensors of ``model.safetensors`` (or its shards) -> ``(name -> tensor, file name for messages)``.

    Raises:
        PretrainedError: no safetensors weights (only ``pytorch_model.bin``: says how to re-save),
            or an unreadable file.
    """
    from safetensors import safe_open  # noqa: PLC0415 (only an import reads weights)

    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.is_file():
        files = [single]
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError) as e:
            raise PretrainedError(f"{index}: unreadable shard index ({e})") from e
        files = [folder / f for f in sorted(set(weight_map.values()))]
    elif (folder / "pytorch_model.bin").is_file():
        raise PretrainedError(f"{folder / 'pytorch_model.bin'}: masklab reads weights from safetensors only (a .bin "
                              "is a pickle, which can run code); re-save the folder with transformers: "
                              "AutoModelForMaskedLM.from_pretrained(DIR).save_pretrained(DIR2) writes model.safetensors")
    else:
        raise PretrainedError(f"{folder}: no model.safetensors")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as st:
                for k in st.keys():  # noqa: SIM118 (safe_open has no __iter__)
                    tensors[k] = st.get_tensor(k)
        except Exception as e:  # noqa: BLE001 (safetensors raises its own and OS errors)
            raise PretrainedError(f"{f}: unreadable safetensors file ({e})") from e
    return tensors, (single.name if single.is_file() else index.name)


def _token(value: Any) -> str | None:
    """A special token as tokenizer_config / special_tokens_map write it (a string or ``{"content": ...}``)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def tokenizer_preprocessing(folder: Path, max_len: int) -> tuple[dict[str, Any], str, int]:
    """``(preprocessing, tokenizer file name, tokenizer vocabulary size)`` of a BERT folder (see :mod:`engine.pretrained.text`).

    Lower-casing, accent stripping and Chinese-character splitting come from ``tokenizer_config.json``
    when it says (as ``transformers`` 5 does), else from ``tokenizer.json``'s ``BertNormalizer``,
    else BERT's defaults (lower-cased, accents stripped with it). Special tokens come from
    ``special_tokens_map.json``, then ``tokenizer_config.json``, then BERT's ``[PAD]`` ... ``[UNK]``;
    their ids from the tokenizer's vocabulary.

    Raises:
        PretrainedError: no tokenizer file, an unreadable one, or a special token missing from it.
    """
    name = next((f for f in TOKENIZER_FILES if (folder / f).is_file()), None)
    if name is None:
        raise PretrainedError(f"{folder}: no tokenizer file ({' or '.join(TOKENIZER_FILES)}); a BERT is imported with "
                              "the tokenizer it was trained with: save it beside the model (tokenizer.save_pretrained)")
    tcfg = _read_json(folder / "tokenizer_config.json")
    smap = _read_json(folder / "special_tokens_map.json")
    json_norm: dict[str, Any] = {}
    if name == "tokenizer.json":
        norm = _read_json(folder / name).get("normalizer")
        json_norm = norm if isinstance(norm, dict) and norm.get("type") == "BertNormalizer" else {}
    lowercase = tcfg.get("do_lower_case", json_norm.get("lowercase", True))
    specials = {r: _token(smap.get(f"{r}_token")) or _token(tcfg.get(f"{r}_token")) or DEFAULT_SPECIALS[r]
                for r in SPECIAL_ROLES}
    pre = {
        "tokenizer": name, "lowercase": bool(lowercase),
        "strip_accents": tcfg.get("strip_accents", json_norm.get("strip_accents")),
        "tokenize_chinese_chars": bool(tcfg.get("tokenize_chinese_chars", json_norm.get("handle_chinese_chars", True))),
        "special_tokens": specials, "max_len": int(max_len),
    }
    tok = build_tokenizer(folder, pre)
    pre["special"] = dict(zip(SPECIAL_ROLES, tok.special_ids))
    return pre, name, tok.vocab_size


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise PretrainedError(f"{path}: unreadable ({e})") from e
    return d if isinstance(d, dict) else {}


def import_folder(path: Path, name: str, config: dict[str, Any], options: dict[str, Any] | None = None,
                  workspace=None) -> PretrainedModel:
    """Import the BERT ``save_pretrained`` folder ``path`` as the ``bert_hf`` model ``name``.

    Args:
        config: the folder's ``config.json`` (``model_type`` "bert").
        options: the CLI's; ``source_format`` / ``hub_id`` when the folder was fetched from the Hub.

    Returns:
        The record (``models/<name>/``: weights under masklab's names, float32, and the tokenizer file).

    Raises:
        PretrainedError: an architecture other than :data:`ARCHITECTURES`, a config field masklab
            cannot honour, no safetensors weights or no tokenizer, a tensor that fits nowhere, is
            missing or has the wrong shape (the message names the file and the tensor). Nothing is
            written then.
    """
    options = dict(options or {})
    cfg_file = path / "config.json"
    archs = config.get("architectures") or []
    known = [a for a in archs if a in ARCHITECTURES]
    if archs and not known:
        raise PretrainedError(f"{cfg_file}: unknown architecture {', '.join(map(str, archs))}; masklab imports BERT as "
                              f"{', '.join(ARCHITECTURES)}")
    ac = arch_config(config, cfg_file)
    tensors, wfile = read_safetensors(path)
    wpath = path / wfile
    # No "architectures" (an old config): the tensors say whether the MLM head is there.
    has_head = ARCHITECTURES[known[0]] if known else any(k.startswith("cls.predictions.") for k in tensors)
    preprocessing, tok_file, tok_vocab = tokenizer_preprocessing(path, ac["max_len"])
    if tok_vocab > ac["vocab_size"]:
        raise PretrainedError(f"{path / tok_file}: {tok_vocab} tokens, more than config.json's vocab_size "
                              f"{ac['vocab_size']}: not this model's tokenizer")

    model = build_bert_hf(ac)
    expected = model.state_dict()
    state: dict[str, torch.Tensor] = {}
    ignored: list[str] = []
    notes: list[str] = []
    src_of: dict[str, str] = {}
    decoder = None
    for k in sorted(tensors):
        if IGNORED.search(k):
            ignored.append(k)
            continue
        target = masklab_name(k)
        if target == "head_decoder" and ac["tie_word_embeddings"]:
            decoder = (k, tensors[k])  # the tied copy: checked against the word embeddings below
            continue
        if target is None or target not in expected:
            raise PretrainedError(f"{wpath}: tensor {k!r} fits nowhere in masklab's BERT "
                                  f"({ac['depth']} layers, {known[0] if known else 'BertForMaskedLM'})")
        t = tensors[k]
        if tuple(t.shape) != tuple(expected[target].shape):
            raise PretrainedError(f"{wpath}: tensor {k!r} has shape {list(t.shape)}, config.json's BERT expects "
                                  f"{list(expected[target].shape)}")
        if target in state:  # cls.predictions.bias and its alias decoder.bias: one tensor
            if not torch.equal(state[target], t):
                raise PretrainedError(f"{wpath}: tensors {src_of[target]!r} and {k!r} should be the same tensor "
                                      "(the MLM output bias) but differ")
            continue
        state[target], src_of[target] = t, k
    if decoder is not None:
        k, t = decoder
        if tuple(t.shape) != tuple(expected["tok_embed.weight"].shape):
            raise PretrainedError(f"{wpath}: tensor {k!r} has shape {list(t.shape)}, config.json's BERT expects "
                                  f"{list(expected['tok_embed.weight'].shape)}")
        if "tok_embed.weight" in state and not torch.equal(t.to(state["tok_embed.weight"].dtype),
                                                           state["tok_embed.weight"]):
            ignored.append(k)
            notes.append(f"{k} differs from the word embeddings; the decoder is tied to them (tie_word_embeddings), "
                         "as transformers loads it")
    fresh: list[str] = []
    if not has_head:
        missing_head = [h for h in HEAD if h not in state] + (["head_decoder"] if "head_decoder" in expected else [])
        if len(missing_head) < len(HEAD):
            raise PretrainedError(f"{wpath}: a BertModel (encoder only) with part of an MLM head")
        for h in missing_head:
            state[h] = expected[h]  # BERT's init of the fresh model: N(0, 0.02) weights, zero bias, LayerNorm (1, 0)
        fresh.append("mlm_head")
        notes.append("BertModel is the encoder only: the MLM head (dense, LayerNorm, output bias) is initialised "
                     "fresh, so its fill-in predictions mean nothing until it is trained")
    missing = [k for k in expected if k not in state]
    if missing:
        prefix = "bert." if any(k.startswith("bert.") for k in tensors) else ""
        names = [hf_name(m, prefix) for m in missing]
        raise PretrainedError(f"{wpath}: missing tensor(s) {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}; "
                              f"config.json's BERT ({ac['depth']} layers) needs them")
    dtypes = sorted({str(t.dtype).replace("torch.", "") for t in state.values() if t.is_floating_point()})
    if dtypes != ["float32"]:
        notes.append(f"weights stored as {', '.join(dtypes)}, kept as float32")
    model.load_state_dict(state)  # every name and shape was checked above; this cannot fail silently
    info = PretrainedModel(
        name=name, arch="bert_hf", modality="text", arch_config=ac, preprocessing=preprocessing,
        source={"path": options.get("source_path") or options.get("hub_id") or str(path.resolve()), "format": options.get("source_format", "hf"),
                "architecture": known[0] if known else None, "ignored": ignored, "fresh": fresh, "notes": notes},
    )
    return save_pretrained(info, state, files={tok_file: (path / tok_file).read_bytes()}, workspace=workspace)
