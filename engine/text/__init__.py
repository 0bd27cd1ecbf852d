"""Text modality: tokenizers for masked language modeling (Hugging Face ``tokenizers``, no download).

    >>> from engine.text import TokenizerSettings, get_tokenizer
    >>> ds = load_dataset("fortunes")
    >>> tok, tok_id = get_tokenizer(ds.info.name, ds.info.source_hash, ds.texts("train"), TokenizerSettings())
    >>> enc = tok.encode_batch(ds.texts("val")[:32])     # input_ids int64 [32, L], word_ids, sentence_ids...
"""

from engine.text.tokenizer import (
    CLS_ID,
    MASK_ID,
    PAD_ID,
    SEP_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    Encoded,
    TextTokenizer,
    TokenizerSettings,
    get_tokenizer,
    load_tokenizer,
    tokenizer_id,
    train_tokenizer,
)

__all__ = [
    "CLS_ID",
    "MASK_ID",
    "PAD_ID",
    "SEP_ID",
    "SPECIAL_TOKENS",
    "UNK_ID",
    "Encoded",
    "TextTokenizer",
    "TokenizerSettings",
    "get_tokenizer",
    "load_tokenizer",
    "tokenizer_id",
    "train_tokenizer",
]
