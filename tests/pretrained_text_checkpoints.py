"""Published-style BERT checkpoints for the text import and run tests, made with transformers.

- :func:`make_checkpoint`: a ``save_pretrained`` folder of a small random ``BertConfig`` (64 wide, 2
  layers, 4 heads, MLP 128, 40 positions, ``initializer_range`` 0.2) whose every parameter is moved
  off its initialisation (``+ 0.02 * randn``), beside a tokenizer made from :func:`vocab_of`
  (``tokenizer.json``, or ``vocab.txt`` with ``tokenizer_config.json`` as older checkpoints have);
- :func:`vocab_of`: its vocabulary, with the special tokens at non-zero ids: bert-base's layout
  (``[PAD]`` 0, ``[UNK]`` 100, ``[CLS]`` 101, ``[SEP]`` 102, ``[MASK]`` 103) or a shuffled one
  (``[UNK]`` 3, ``[CLS]`` 5, ``[SEP]`` 6, ``[MASK]`` 7).

tests/engine/test_pretrained_text.py says why the init is wider than BERT's.

References: Devlin et al. 2019, BERT.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers

WORDS = ["the", "capital", "of", "france", "is", "paris", "Paris", "what", "?", "a", "cat", "dog", "##s", "sat",
         "on", "mat", ".", "hello", "world", "cafe", "and", "city", "big", "small", "red", "##ly", "run", ","]


def vocab_of(layout: str) -> list[str]:
    """A vocabulary with BERT's special tokens at non-zero ids (see the module docstring)."""
    if layout == "bertbase":
        return (["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS)
    return ["[PAD]", "x", "y", "[UNK]", "z", "[CLS]", "[SEP]", "[MASK]"] + WORDS


def make_checkpoint(folder: Path, *, arch: str = "BertForMaskedLM", hidden_act: str = "gelu", eps: float = 1e-12,
                    tokenizer: str = "json", lowercase: bool = True, layout: str = "shuffled", seed: int = 0) -> Path:
    """A ``save_pretrained`` folder of a perturbed random BERT and its tokenizer (``tokenizer.json``,
    or ``vocab.txt`` with ``tokenizer_config.json`` as older checkpoints have)."""
    folder.mkdir(parents=True)
    vocab = vocab_of(layout)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    if tokenizer == "json":
        tok = transformers.BertTokenizer(str(folder / "vocab.txt"), do_lower_case=lowercase)
        (folder / "vocab.txt").unlink()
        tok.save_pretrained(folder)
        assert (folder / "tokenizer.json").is_file() and not (folder / "vocab.txt").exists()
    else:
        (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer",
                                                                   "do_lower_case": lowercase}), encoding="utf-8")
        (folder / "special_tokens_map.json").write_text(json.dumps(
            {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
             "mask_token": "[MASK]"}), encoding="utf-8")
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=40, hidden_act=hidden_act,
                                     layer_norm_eps=eps, pad_token_id=0, initializer_range=0.2)
    torch.manual_seed(seed)
    model = getattr(transformers, arch)(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    model.save_pretrained(folder)
    return folder


__all__ = ["WORDS", "make_checkpoint", "vocab_of"]
