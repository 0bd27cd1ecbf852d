"""Encoded text splits kept on disk and read through memory maps, so a training process's private
memory does not grow with the number of texts.

A text task trains on the train split encoded once (:meth:`engine.text.tokenizer.TextTokenizer.encode_batch`,
``pad_to_max``), chunk by chunk, into ``<workspace>/encoded/<id>/``: ``input_ids`` int32,
``attention_mask`` and ``special_mask`` bool, ``word_ids`` and ``sentence_ids`` int32, each
``[N, max_len]``, then ``meta.json`` (the complete marker), published whole
(:func:`engine.workspace.publish_folder`). ``id`` hashes the tokenizer id (itself a hash of the
dataset's content and the tokenizer settings), the rows encoded and ``max_len``, so runs on the same
data and tokenizer share one folder and a later run encodes nothing. A batch reads only its rows
(:meth:`StoredEncoded.rows`) and gets the very tensors an in-memory :class:`~engine.text.tokenizer.Encoded`
gives (int64 ids, bool masks, cut to the batch's longest row). Character offsets, which training
never reads, are not stored.

The folder is derived data: deleting it costs the next run's start an encoding pass. A folder that
cannot be written (a full disk, a path that is not a folder) leaves the split encoded in memory,
with a warning; a damaged one is replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from engine.workspace import atomic_write_json, derived_folder, workspace_root

#: Stored arrays and their dtypes (ids fit int32: a vocabulary has at most 2,000,000 tokens).
FIELDS: dict[str, type] = {"input_ids": np.int32, "attention_mask": np.bool_, "special_mask": np.bool_,
                           "word_ids": np.int32, "sentence_ids": np.int32}
META = "meta.json"
FORMAT = 1
#: Texts encoded at a time: bounds the encoding's memory (a few MB of int64 per field).
CHUNK_ROWS = 4096


class StoredEncoded:
    """An encoded split read through read-only memory maps: ``N`` rows of ``[CLS] tokens [SEP]
    [PAD]...`` of ``max_len`` columns (module docstring).

    Attributes:
        input_ids, attention_mask, special_mask, word_ids, sentence_ids: ``[N, max_len]`` numpy
            memory maps (int32 / bool), the fields of :class:`~engine.text.tokenizer.Encoded`.
        folder: where they are mapped from.
    """

    def __init__(self, folder: Path, arrays: dict[str, np.ndarray]):
        self.folder = Path(folder)
        for k, a in arrays.items():
            setattr(self, k, a)
        # int64 on disk, int16 in memory (max_len <= 4096): 2 bytes a row, read through a map, so no
        # 8-byte copy of millions of rows is ever private memory.
        lengths = np.load(self.folder / "lengths.npy", mmap_mode="r")
        self._lengths = torch.from_numpy(np.asarray(lengths, dtype=np.int16 if self.input_ids.shape[1] < 2**15 else np.int32))

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def lengths(self) -> torch.Tensor:
        """int16 ``[N]`` (int32 past 32,767 columns): real tokens per row (``[CLS]`` and ``[SEP]`` included)."""
        return self._lengths

    def rows(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """Rows ``idx`` (int ``[B]``) cut to their longest row ``L_b``: ``ids`` int64, ``attention``
        bool, ``eligible`` bool (real, non-special tokens), ``word_ids`` and ``sentence_ids`` int64,
        each ``[B, L_b]``: what ``TextTask.rows`` gives for an in-memory encoding."""
        i = np.asarray(idx, dtype=np.int64)
        L = max(1, int(self._lengths[torch.as_tensor(i)].max())) if len(i) else 1

        def take(name: str, dtype) -> torch.Tensor:
            return torch.from_numpy(np.asarray(getattr(self, name)[i, :L], dtype=dtype))

        att = take("attention_mask", np.bool_)
        return {"ids": take("input_ids", np.int64), "attention": att, "eligible": att & ~take("special_mask", np.bool_),
                "word_ids": take("word_ids", np.int64), "sentence_ids": take("sentence_ids", np.int64)}


def store_folder(tokenizer_id: str, rows: np.ndarray, max_len: int, workspace: str | os.PathLike | None = None) -> Path:
    """``<workspace>/encoded/<id>``: ``id`` hashes the tokenizer id, the dataset rows encoded (in
    order) and ``max_len``."""
    h = hashlib.sha256(json.dumps({"tokenizer": tokenizer_id, "max_len": int(max_len), "format": FORMAT}).encode())
    h.update(np.ascontiguousarray(rows, dtype=np.int64))  # the buffer itself: no copy of N x 8 bytes
    return workspace_root(workspace) / "encoded" / h.hexdigest()[:24]


def _open(folder: Path, n: int, max_len: int) -> StoredEncoded | None:
    try:
        meta = json.loads((folder / META).read_text())
        if meta != {"format": FORMAT, "rows": int(n), "max_len": int(max_len)}:
            return None
        arrays = {k: np.load(folder / f"{k}.npy", mmap_mode="r") for k in FIELDS}
        if any(a.shape != (n, max_len) or a.dtype != FIELDS[k] for k, a in arrays.items()):
            return None
        out = StoredEncoded(folder, arrays)
    except (OSError, ValueError):
        return None
    return out if out.lengths.shape == (n,) else None


def _write(tmp: Path, tok, texts_at: Callable[[np.ndarray], list[str]], rows: np.ndarray, max_len: int) -> None:
    n = len(rows)
    maps = {k: np.lib.format.open_memmap(tmp / f"{k}.npy", mode="w+", dtype=dt, shape=(n, max_len))
            for k, dt in FIELDS.items()}  # fmt: skip
    lengths = np.lib.format.open_memmap(tmp / "lengths.npy", mode="w+", dtype=np.int64, shape=(n,))
    for s in range(0, n, CHUNK_ROWS):
        enc = tok.encode_batch(texts_at(rows[s : s + CHUNK_ROWS]), max_len=max_len, pad_to_max=True)
        for k, m in maps.items():
            m[s : s + len(enc)] = getattr(enc, k).numpy()
        lengths[s : s + len(enc)] = enc.lengths.numpy()
    for m in [*maps.values(), lengths]:
        m.flush()
    del maps, lengths
    atomic_write_json(tmp / META, {"format": FORMAT, "rows": int(n), "max_len": int(max_len)})  # last: complete


def encode_split(tok, tokenizer_id: str | None, texts_at: Callable[[np.ndarray], list[str]], rows: np.ndarray,
                 max_len: int, workspace: str | os.PathLike | None = None):
    """The texts of dataset ``rows`` encoded, as a :class:`StoredEncoded` (mapped from
    :func:`store_folder`, encoded there first if needed), or, without a ``tokenizer_id`` (no
    content hash to name the folder by) or when the folder cannot be written, an in-memory
    :class:`~engine.text.tokenizer.Encoded` of them.

    Args:
        tok: the :class:`~engine.text.tokenizer.TextTokenizer`.
        tokenizer_id: its cache id (:func:`~engine.text.tokenizer.get_tokenizer`), or None.
        texts_at: ``rows -> texts`` of the dataset (``TextDataset.texts_at``), called per chunk.
        rows: int ``[N]`` dataset rows, in the order the split is indexed.
        max_len: tokens per row at most, specials included.
    """
    rows = np.asarray(rows, dtype=np.int64)
    if tokenizer_id:
        got = derived_folder(store_folder(tokenizer_id, rows, max_len, workspace), META,
                             lambda f: _open(f, len(rows), max_len), lambda tmp: _write(tmp, tok, texts_at, rows, max_len),
                             "encoded texts")  # fmt: skip
        if got is not None:
            return got
    return tok.encode_batch(texts_at(rows), max_len=max_len)
