"""Text tokenizers for masked language modeling: WordPiece or characters, trained on a train split.

Both kinds are Hugging Face ``tokenizers`` pipelines saved as one ``tokenizer.json``:

- ``wordpiece``: BERT's ``BertNormalizer`` (accents stripped and lower-cased when ``lowercase``),
  ``BertPreTokenizer``, a ``WordPiece`` model (``##`` continuation pieces) and decoder.
- ``char``: NFC, whitespace runs -> one space, lower-cased when ``lowercase``; every character
  seen at least ``min_frequency`` times is a token (spaces included), the others ``[UNK]``.

Special tokens, always ids 0..4: ``[PAD] [CLS] [SEP] [MASK] [UNK]`` (an imported model's tokenizer,
:mod:`engine.pretrained.text`, keeps its own ids); a sequence is ``[CLS] tokens [SEP]`` then ``[PAD]``
up to the batch's length. Word ids (:meth:`TextTokenizer.encode_batch`): a
token belongs to the whitespace-separated word its first character lies in (``world`` ``##s``
``,`` share one; ``char`` spaces belong to none). A sentence starts at a text's first word and
after a word ending in ``.``, ``!`` or ``?``, optionally followed by one closing quote or bracket.

Cached (:func:`get_tokenizer`) in ``<workspace>/tokenizers/<id>/`` with ``id`` =
:func:`tokenizer_id`; the cache is what makes runs share exactly one WordPiece tokenizer (its
training is not deterministic across processes: docs/architecture.md, "Data").

References: Devlin et al. 2019 (BERT); Wu et al. 2016 (WordPiece).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from itertools import chain
from pathlib import Path
from typing import Callable, Iterable, Iterator, Literal, Mapping, Sequence

import numpy as np
import tokenizers
import torch
from pydantic import BaseModel, ConfigDict, Field
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from engine.messages import describe_error
from engine.workspace import atomic_write_bytes, atomic_write_json, publish_folder, read_json, workspace_root

log = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")
"""Special tokens; token ``SPECIAL_TOKENS[i]`` has id ``i``."""
PAD_ID, CLS_ID, SEP_ID, MASK_ID, UNK_ID = range(len(SPECIAL_TOKENS))
SPECIAL_ROLES = ("pad", "cls", "sep", "mask", "unk")
"""The roles of :data:`SPECIAL_TOKENS`, in order (the keys of an imported tokenizer's ``special_tokens``)."""

TOKENIZER_FILE, META_FILE = "tokenizer.json", "meta.json"
FORMAT_VERSION = 1
"""Bumped when the saved pipeline changes, so that old cached tokenizers are not reused."""

_SENTENCE_END = np.array([ord(c) for c in ".!?"], dtype=np.uint32)
_CLOSERS = np.array([ord(c) for c in "\"')]\u201d\u2019"], dtype=np.uint32)


class TokenizerSettings(BaseModel):
    """How a tokenizer is built (strict: wrong types are refused, not converted).

    Attributes:
        kind: ``"wordpiece"`` (subwords) or ``"char"`` (one token per character).
        vocab_size: WordPiece vocabulary size target, specials included (the trainer stops
            earlier when the corpus has fewer merges; it also keeps every character of the train
            texts, which may exceed it); ignored for ``char``.
        lowercase: lower-case (and, for WordPiece, strip accents) before tokenizing.
        min_frequency: WordPiece: a pair is merged only if it occurs at least this often (Hugging
            Face's ``WordPieceTrainer``); char: a character needs this many occurrences to get an id.
        max_len: tokens per sequence at most, ``[CLS]`` and ``[SEP]`` included; longer texts are
            truncated (their end is cut).
    Raises:
        pydantic.ValidationError naming the field.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    kind: Literal["wordpiece", "char"] = "wordpiece"
    vocab_size: int = Field(8000, ge=len(SPECIAL_TOKENS) + 1, le=1_000_000)
    lowercase: bool = True
    min_frequency: int = Field(2, ge=1)
    max_len: int = Field(128, ge=3, le=1_000_000)

    def cache_key(self) -> dict:
        """The settings that change a tokenizer (``vocab_size`` is left out for ``char``)."""
        d = self.model_dump()
        if self.kind == "char":
            d.pop("vocab_size")
        return d


@dataclass(frozen=True)
class Encoded:
    """A tokenized batch (:meth:`TextTokenizer.encode_batch`); all tensors on the CPU, ``[B, L]``.

    Attributes:
        input_ids: int64, ``[CLS] tokens [SEP] [PAD]...``.
        attention_mask: bool, True at real tokens (``[CLS]``, text tokens, ``[SEP]``), False at padding.
        special_mask: bool, True at ``[CLS]``, ``[SEP]`` and ``[PAD]`` (never to be masked or labelled).
        word_ids: int64, index of the whitespace-separated word of the text each token comes from
            (0-based per row; pieces of one word share it), ``-1`` for specials, padding and (char
            mode) spaces. What ``engine.masking``'s ``whole_word`` strategy takes as ``word_ids``.
        sentence_ids: int64, index of the sentence each token belongs to (0-based per row), ``-1``
            for specials and padding.
        char_offsets: int64 ``[B, L, 2]``, ``(start, end)`` character offsets of each token in its
            input text (``(0, 0)`` for specials and padding), e.g. to highlight masked tokens.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    special_mask: torch.Tensor
    word_ids: torch.Tensor
    sentence_ids: torch.Tensor
    char_offsets: torch.Tensor

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def lengths(self) -> torch.Tensor:
        """int64 ``[B]``: real tokens per row (``[CLS]`` and ``[SEP]`` included)."""
        return self.attention_mask.sum(1)


@lru_cache(maxsize=1)
def _whitespace_codepoints() -> np.ndarray:
    """Every code point that ``str.isspace`` calls whitespace (all are below U+3001)."""
    return np.array([c for c in range(0x3001) if chr(c).isspace()], dtype=np.uint32)


def word_and_sentence_ids(texts: Sequence[str], rows: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Word and sentence index (rules in the module docstring) of the characters ``texts[rows[k]][starts[k]]``.

    Vectorized over the whole batch (one pass over the concatenated code points), no Python loop
    per token.

    Args:
        texts: the ``B`` input texts.
        rows: int64 ``[T]`` text index of each token.
        starts: int64 ``[T]`` character offset of each token's first character in its text.
    Returns:
        ``(word_ids, sentence_ids)``, int64 ``[T]``; word ``-1`` when the character is whitespace
        (or past the end of its text).
    """
    if rows.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lens = np.fromiter(map(len, texts), np.int64, len(texts))
    base = np.zeros(len(texts), np.int64)
    np.cumsum(lens[:-1] + 1, out=base[1:])
    cp = np.frombuffer("\n".join(texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    space = np.isin(cp, _whitespace_codepoints())
    word_start = ~space & np.concatenate([[True], space[:-1]])
    word_end = ~space & np.concatenate([space[1:], [True]])
    word_num = np.cumsum(word_start)
    ws, we = np.flatnonzero(word_start), np.flatnonzero(word_end)
    doc = np.searchsorted(base, ws, side="right") - 1
    first = np.ones(ws.size, dtype=bool)
    first[1:] = doc[1:] != doc[:-1]
    last, prev = cp[we], cp[np.maximum(we - 1, 0)]
    ends_sentence = np.isin(last, _SENTENCE_END) | ((we > ws) & np.isin(last, _CLOSERS) & np.isin(prev, _SENTENCE_END))
    starts_sentence = first.copy()
    starts_sentence[1:] |= ends_sentence[:-1]
    sent_mark = np.zeros(cp.size, dtype=np.int64)
    sent_mark[ws[starts_sentence]] = 1
    sent_num = np.cumsum(sent_mark)
    before = base - 1  # the separator before each text (-1 for the first text)
    words_before = np.where(before >= 0, word_num[np.maximum(before, 0)], 0)
    sents_before = np.where(before >= 0, sent_num[np.maximum(before, 0)], 0)
    pos = base[rows] + starts
    inside = starts < lens[rows]
    pos = np.minimum(pos, cp.size - 1)
    word = np.where(inside & ~space[pos], word_num[pos] - words_before[rows] - 1, -1)
    sentence = np.maximum(sent_num[pos] - sents_before[rows] - 1, 0)
    return word.astype(np.int64), sentence.astype(np.int64)


class TextTokenizer:
    """A trained tokenizer (:func:`train_tokenizer`, :func:`get_tokenizer`) around a Hugging Face
    ``tokenizers.Tokenizer``. Safe to share between threads.

    Attributes:
        settings: its :class:`TokenizerSettings`.
        pad_id, cls_id, sep_id, mask_id, unk_id: 0, 1, 2, 3, 4 (masklab's own tokenizers); an
            imported model's tokenizer (``special_tokens``) has them wherever its vocabulary does.
        special_ids: ``(pad_id, cls_id, sep_id, mask_id, unk_id)``.
    """

    pad_id, cls_id, sep_id, mask_id, unk_id = PAD_ID, CLS_ID, SEP_ID, MASK_ID, UNK_ID
    special_ids = tuple(range(len(SPECIAL_TOKENS)))

    def __init__(self, tokenizer, settings: TokenizerSettings, special_tokens: Mapping[str, str] | None = None):
        """Wrap ``tokenizer`` (a ``tokenizers.Tokenizer``).

        Args:
            special_tokens: role (:data:`SPECIAL_ROLES`) -> token, for a tokenizer that came with an
                imported model (e.g. bert-base: ``[PAD]`` 0, ``[UNK]`` 100, ``[CLS]`` 101, ``[SEP]``
                102, ``[MASK]`` 103); None (masklab's own): :data:`SPECIAL_TOKENS` at ids 0..4.

        Raises:
            ValueError: without ``special_tokens``, special tokens other than ``[PAD] [CLS] [SEP]
                [MASK] [UNK]`` with ids 0..4; with them, a role missing or a token not in the
                vocabulary.
        """
        if special_tokens is None:
            found = [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS]
            if found != list(range(len(SPECIAL_TOKENS))):
                raise ValueError(f"special tokens {SPECIAL_TOKENS} must have ids 0..4, found {found}")
        else:
            special_tokens = {role: str(special_tokens[role]) for role in SPECIAL_ROLES if role in special_tokens}
            ids = {role: tokenizer.token_to_id(special_tokens[role]) if role in special_tokens else None
                   for role in SPECIAL_ROLES}
            missing = [f"{role} ({special_tokens.get(role, 'not given')!r})" for role, i in ids.items() if i is None]
            if missing:
                raise ValueError(f"special tokens not in the vocabulary: {', '.join(missing)}")
            self.pad_id, self.cls_id, self.sep_id, self.mask_id, self.unk_id = (ids[r] for r in SPECIAL_ROLES)
            self.special_ids = tuple(ids[r] for r in SPECIAL_ROLES)
        self.special_tokens = special_tokens
        self._tok = tokenizer
        self._tok.no_padding()
        self._tok.no_truncation()
        self.settings = settings
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:  # picklable (e.g. for DataLoader workers): the JSON and the settings
        return {"json": self.to_str(), "settings": self.settings.model_dump(), "special_tokens": self.special_tokens}

    def __setstate__(self, state: dict) -> None:
        self.__init__(Tokenizer.from_str(state["json"]), TokenizerSettings.model_validate(state["settings"]),
                      state.get("special_tokens"))

    @property
    def vocab_size(self) -> int:
        """Number of token ids (specials included); ids are ``0 .. vocab_size - 1``."""
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    def id_to_token(self, i: int) -> str | None:
        """The token of id ``i`` (None for an unknown id)."""
        return self._tok.id_to_token(int(i))

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` (None when it is not in the vocabulary)."""
        return self._tok.token_to_id(token)

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text`` without ``[CLS]`` / ``[SEP]`` and without truncation."""
        return self._tok.encode(text, add_special_tokens=False).tokens

    def encode_batch(self, texts: Sequence[str], max_len: int | None = None, pad_to_max: bool = False) -> Encoded:
        """Tokenize ``B`` texts into padded ``[B, L]`` tensors (see :class:`Encoded`).

        A text is normalised, split into tokens, truncated to ``max_len - 2`` tokens (its end is
        cut), and laid out ``[CLS] tokens [SEP] [PAD]...``. ``[MASK]`` (or another special token)
        written in a text is recognised as that token (the fill-in box relies on it).
        Tokenization runs in Hugging Face's ``encode_batch`` (Rust, parallel); words, sentences and
        padding are numpy over the whole batch.

        Args:
            texts: ``B`` strings.
            max_len: tokens per row at most, specials included (default ``settings.max_len``), >= 3.
            pad_to_max: ``L = max_len`` instead of the longest row of the batch.
        Returns:
            :class:`Encoded` with ``L`` = longest row (or ``max_len``); ``B = 0`` gives ``[0, L]``.
        Raises:
            ValueError: ``max_len < 3``.
        """
        max_len = self.settings.max_len if max_len is None else int(max_len)
        if max_len < 3:
            raise ValueError(f"max_len must be at least 3 ([CLS], one token, [SEP]), not {max_len}")
        texts = list(texts)
        with self._lock:
            self._tok.enable_truncation(max_length=max_len)
            try:
                encs = self._tok.encode_batch(texts)
            finally:
                self._tok.no_truncation()
        B = len(encs)
        lens = np.fromiter((len(e.ids) for e in encs), np.int64, B)
        L = max_len if pad_to_max else int(lens.max(initial=0))
        ids = np.fromiter(chain.from_iterable(e.ids for e in encs), np.int64)
        offsets = np.fromiter(chain.from_iterable(chain.from_iterable(e.offsets for e in encs)), np.int64)
        offsets = offsets.reshape(-1, 2)
        rows = np.repeat(np.arange(B), lens)
        cols = np.arange(ids.size) - np.repeat(np.cumsum(lens) - lens, lens)
        special = (cols == 0) | (cols == lens[rows] - 1)  # [CLS] first, [SEP] last in every row
        text_tok = ~special
        word, sentence = word_and_sentence_ids(texts, rows[text_tok], offsets[text_tok, 0])

        input_ids = np.full((B, L), self.pad_id, dtype=np.int64)
        input_ids[rows, cols] = ids
        attention = np.zeros((B, L), dtype=bool)
        attention[rows, cols] = True
        special_mask = ~attention
        special_mask[rows[special], cols[special]] = True
        word_ids = np.full((B, L), -1, dtype=np.int64)
        word_ids[rows[text_tok], cols[text_tok]] = word
        sentence_ids = np.full((B, L), -1, dtype=np.int64)
        sentence_ids[rows[text_tok], cols[text_tok]] = sentence
        char_offsets = np.zeros((B, L, 2), dtype=np.int64)
        char_offsets[rows[text_tok], cols[text_tok]] = offsets[text_tok]
        return Encoded(*(torch.from_numpy(a) for a in
                         (input_ids, attention, special_mask, word_ids, sentence_ids, char_offsets)))  # fmt: skip

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """Text of a sequence of ids (a list, numpy array or 1-D tensor).

        With ``skip_special_tokens`` (default) ``[PAD]``, ``[CLS]`` and ``[SEP]`` are left out;
        ``[MASK]`` and ``[UNK]`` are always shown. WordPiece joins words with spaces and ``##``
        pieces to their word (and removes the space before ``. , ! ?``); char joins characters.
        The text is the normalised one (e.g. lower-cased).
        """
        ids = [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]
        if skip_special_tokens:
            ids = [i for i in ids if i not in (self.pad_id, self.cls_id, self.sep_id)]
        return self._tok.decode(ids, skip_special_tokens=False)

    def to_str(self) -> str:
        """The Hugging Face ``tokenizer.json`` text."""
        return self._tok.to_str()

    def save(self, folder: str | os.PathLike[str]) -> None:
        """Write ``folder/tokenizer.json`` (atomically); the settings go in the caller's ``meta.json``."""
        atomic_write_bytes(Path(folder) / TOKENIZER_FILE, self.to_str().encode("utf-8"))

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> TextTokenizer:
        """Load ``folder/tokenizer.json`` and the settings in ``folder/meta.json`` (:func:`get_tokenizer`'s
        layout; an imported model's tokenizer also has its ``special_tokens`` there, :func:`cache_tokenizer`).

        Raises:
            ValueError: a missing or unreadable file, or wrong special tokens (naming the folder).
        """
        folder = Path(folder)
        try:
            meta = read_json(folder / META_FILE)
            settings = TokenizerSettings.model_validate(meta["settings"])
            return cls(Tokenizer.from_file(str(folder / TOKENIZER_FILE)), settings, meta.get("special_tokens"))
        except Exception as e:  # noqa: BLE001 - JSON, pydantic and Rust errors all mean "unusable"
            raise ValueError(f"{folder}: cannot load the tokenizer ({describe_error(e)}); a new run trains it again") from e


def _build(settings: TokenizerSettings):
    """An untrained ``tokenizers.Tokenizer`` pipeline and its trainer for ``settings``."""
    specials = list(SPECIAL_TOKENS)
    if settings.kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=settings.lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=settings.vocab_size, min_frequency=settings.min_frequency,
            special_tokens=specials, show_progress=False,
        )  # fmt: skip
    else:
        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        steps = [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " ")]
        tok.normalizer = normalizers.Sequence(steps + ([normalizers.Lowercase()] if settings.lowercase else []))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
        tok.decoder = decoders.Fuse()
        trainer = trainers.WordLevelTrainer(
            vocab_size=1_000_000, min_frequency=settings.min_frequency, special_tokens=specials,
            show_progress=False,
        )  # fmt: skip
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)]
    )
    return tok, trainer


def train_tokenizer(texts: Sequence[str], settings: TokenizerSettings | None = None) -> TextTokenizer:
    """Train a tokenizer on ``texts`` (pass the TRAIN split only, so val stays unseen).

    WordPiece with Hugging Face's ``WordPieceTrainer``, or a character vocabulary with its
    ``WordLevelTrainer`` over single characters (module docstring). Trec's 4,842 train questions
    take about 0.2 s.

    Raises:
        ValueError: no text, or no text with a character to learn.
    """
    return train_tokenizer_chunks([list(texts)], settings)[0]


def train_tokenizer_chunks(chunks: Iterable[Sequence[str]], settings: TokenizerSettings | None = None
                           ) -> tuple[TextTokenizer, int]:
    """:func:`train_tokenizer` on texts that come in chunks (e.g. :data:`TRAIN_CHUNK` texts read
    at a time from a memory-mapped split), so the texts are never all in memory: the trainer keeps
    only its counts. Returns ``(tokenizer, texts seen)``.

    Raises:
        ValueError: no text, or no text with a character to learn.
    """
    settings = settings or TokenizerSettings()
    seen = {"docs": 0, "text": False}

    def feed():
        for chunk in chunks:
            chunk = list(chunk)
            seen["docs"] += len(chunk)
            seen["text"] = seen["text"] or any(t.strip() for t in chunk)
            yield chunk

    tok, trainer = _build(settings)
    tok.train_from_iterator(feed(), trainer)
    if not seen["text"]:
        raise ValueError("cannot train a tokenizer on no text (the train split is empty or blank)")
    return TextTokenizer(tok, settings), seen["docs"]


def tokenizer_id(dataset_hash: str, settings: TokenizerSettings) -> str:
    """Cache id of a tokenizer: the first 16 hex digits of sha256 over the dataset's content hash,
    the settings that matter (:meth:`TokenizerSettings.cache_key`) and :data:`FORMAT_VERSION`."""
    key = {"dataset": dataset_hash, "settings": settings.cache_key(), "format": FORMAT_VERSION}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def texts_hash(texts: Sequence[str]) -> str:
    """sha256 (hex) of a list of texts (count and each text's UTF-8 bytes, length-prefixed)."""
    h = hashlib.sha256(f"{len(texts)}|".encode())
    for t in texts:
        b = t.encode("utf-8", "surrogatepass")
        h.update(f"{len(b)}|".encode())
        h.update(b)
    return h.hexdigest()


def tokenizers_dir(workspace: str | os.PathLike[str] | None = None) -> Path:
    """``<workspace>/tokenizers`` (created if missing)."""
    d = workspace_root(workspace) / "tokenizers"
    d.mkdir(parents=True, exist_ok=True)
    return d


#: Texts read at a time by :func:`text_chunks`.
TRAIN_CHUNK = 8192


def text_chunks(ds, split: str, size: int = TRAIN_CHUNK) -> Iterator[list[str]]:
    """The texts of ``split`` of a dataset with ``indices(split)`` and ``texts_at(rows)`` (a text
    dataset, image-text or audio-text pairs), ``size`` at a time, in the split's order."""
    rows = ds.indices(split)
    for s in range(0, len(rows), size):
        yield ds.texts_at(rows[s : s + size])


def load_tokenizer(tok_id: str, workspace: str | os.PathLike[str] | None = None) -> TextTokenizer:
    """Load cached tokenizer ``tok_id`` (the id a run recorded). Raises ValueError naming the folder."""
    return TextTokenizer.load(tokenizers_dir(workspace) / tok_id)


def get_tokenizer(
    dataset_name: str,
    dataset_hash: str,
    train_texts: Sequence[str] | Callable[[], Sequence[str]],
    settings: TokenizerSettings | None = None,
    workspace: str | os.PathLike[str] | None = None,
    train_chunks: Callable[[], Iterable[Sequence[str]]] | None = None,
) -> tuple[TextTokenizer, str]:
    """The tokenizer of a dataset's train split, trained once and then loaded from the cache.

    Args:
        dataset_name: recorded in ``meta.json`` (not part of the id).
        dataset_hash: the dataset's ``info.source_hash`` (content and split); ``""`` (an old
            dataset) falls back to :func:`texts_hash` of ``train_texts``.
        train_texts: the dataset's TRAIN split, or a function returning it (called only when the
            texts are needed: no cached tokenizer, or no ``dataset_hash``; so a cached tokenizer
            decodes no text); must be what ``dataset_hash`` stands for, as the cache trusts the hash.
        settings: tokenizer settings (default :class:`TokenizerSettings`).
        workspace: workspace folder.
        train_chunks: with a ``dataset_hash``, a function giving the same train texts in chunks
            (:func:`text_chunks`): a new tokenizer is trained from them
            (:func:`train_tokenizer_chunks`), so the whole split is never in memory at once.
    Returns:
        ``(tokenizer, tokenizer_id)``; the id names ``<workspace>/tokenizers/<id>/``
        (``tokenizer.json`` + ``meta.json``: settings, dataset, dataset_hash, vocab_size,
        train_docs, train_seconds, created_at, tokenizers version). A cached folder that cannot be
        loaded is trained again and replaced.
    Raises:
        ValueError: as :func:`train_tokenizer`.
    """
    settings = settings or TokenizerSettings()
    kept: list[list[str]] = []

    def texts() -> list[str]:
        if not kept:
            kept.append(list(train_texts() if callable(train_texts) else train_texts))
        return kept[0]

    tok_id = tokenizer_id(dataset_hash or f"texts:{texts_hash(texts())}", settings)
    folder = tokenizers_dir(workspace) / tok_id
    broken = False
    if (folder / META_FILE).exists():
        try:
            return TextTokenizer.load(folder), tok_id
        except ValueError as e:
            log.warning("%s; training it again", e)
            broken = True
    t0 = time.perf_counter()
    if dataset_hash and train_chunks is not None:
        tok, n_docs = train_tokenizer_chunks(train_chunks(), settings)
    else:
        tok, n_docs = train_tokenizer_chunks([texts()], settings)
    meta = {
        "id": tok_id, "settings": settings.model_dump(), "dataset": dataset_name, "dataset_hash": dataset_hash,
        "vocab_size": tok.vocab_size, "train_docs": n_docs,
        "train_seconds": round(time.perf_counter() - t0, 3),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tokenizers_version": tokenizers.__version__, "format": FORMAT_VERSION,
    }  # fmt: skip

    def fill(tmp: Path) -> None:
        tok.save(tmp)
        atomic_write_json(tmp / META_FILE, meta)  # written last: the folder's "complete" marker

    if not publish_folder(folder, fill, marker=META_FILE, overwrite=broken):
        return TextTokenizer.load(folder), tok_id  # another process cached it first: use theirs
    return tok, tok_id


def cache_tokenizer(tok: TextTokenizer, tok_id: str, meta: dict, workspace: str | os.PathLike[str] | None = None
                    ) -> TextTokenizer:
    """Keep a tokenizer that was not trained here (an imported model's) as ``<workspace>/tokenizers/<tok_id>/``
    beside the trained ones, so that :func:`load_tokenizer` finds it by the id a run records; the
    cached one when the folder is already there.

    Args:
        tok: the tokenizer (its ``special_tokens`` are kept in ``meta.json``).
        tok_id: the id, unique to its content (the caller hashes it).
        meta: extra ``meta.json`` entries (e.g. where it came from).

    Raises:
        ValueError: a cached folder of that id that cannot be loaded (naming it).
    """
    folder = tokenizers_dir(workspace) / tok_id
    if (folder / META_FILE).exists():
        return TextTokenizer.load(folder)
    full = {**meta, "id": tok_id, "settings": tok.settings.model_dump(), "special_tokens": tok.special_tokens,
            "vocab_size": tok.vocab_size, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "tokenizers_version": tokenizers.__version__, "format": FORMAT_VERSION}

    def fill(tmp: Path) -> None:
        tok.save(tmp)
        atomic_write_json(tmp / META_FILE, full)  # written last: the folder's "complete" marker

    publish_folder(folder, fill, marker=META_FILE)  # False: another process cached the same content first
    return tok
