"""engine.text.stored: an encoded split kept in <workspace>/encoded and read through memory maps gives
exactly the batches of the in-memory encoding; the folder is reused without encoding again, replaced
when damaged, and a folder that cannot be written (a full disk, a path that is not a folder) leaves
the split encoded in memory. Real TREC questions throughout."""

from __future__ import annotations

import csv
import errno
import json
import logging

import numpy as np
import pytest
import torch

from engine.tasks.text.common import text_rows
from engine.text import stored
from engine.text.stored import StoredEncoded, encode_split, store_folder
from engine.text.tokenizer import TokenizerSettings, train_tokenizer

MAX_LEN = 40


@pytest.fixture(scope="module")
def texts(shared_data):
    with open(shared_data / "trec" / "train.tsv", newline="", encoding="utf-8") as f:
        return [r["text"] for r in csv.DictReader(f, delimiter="\t")][:1500]


@pytest.fixture(scope="module")
def tok(texts):
    return train_tokenizer(texts, TokenizerSettings(kind="wordpiece", vocab_size=600))


class Counting:
    """``texts_at`` that counts its calls (a stored split must not be encoded again)."""

    def __init__(self, texts):
        self.texts, self.calls = texts, 0

    def __call__(self, rows):
        self.calls += 1
        return [self.texts[int(r)] for r in rows]


def assert_same_batches(a, b, n):
    g = torch.Generator().manual_seed(0)
    idx_sets = [torch.randperm(n, generator=g)[:32] for _ in range(5)] + [torch.arange(n), torch.tensor([3])]
    for idx in idx_sets:
        ra, rb = text_rows(a, idx), text_rows(b, idx)
        assert ra.keys() == rb.keys()
        for k in ra:
            assert ra[k].dtype == rb[k].dtype and torch.equal(ra[k], rb[k]), k
    assert torch.equal(a.lengths, b.lengths.long())
    if isinstance(b, StoredEncoded):
        assert b.lengths.dtype == torch.int16  # 2 bytes a row in memory


def test_stored_split_gives_exactly_the_in_memory_batches(tmp_path, texts, tok, monkeypatch):
    monkeypatch.setattr(stored, "CHUNK_ROWS", 256)  # several chunks, the last one short
    rows = np.random.default_rng(0).permutation(len(texts))[:1000]
    mem = tok.encode_batch([texts[int(r)] for r in rows], max_len=MAX_LEN)
    at = Counting(texts)
    enc = encode_split(tok, "tok-a", at, rows, MAX_LEN, tmp_path)
    assert isinstance(enc, StoredEncoded) and isinstance(enc.input_ids, np.memmap) and at.calls == 4
    assert enc.folder == store_folder("tok-a", rows, MAX_LEN, tmp_path) and enc.folder.parent == tmp_path / "encoded"
    assert enc.input_ids.dtype == np.int32 and enc.input_ids.shape == (1000, MAX_LEN)
    assert_same_batches(mem, enc, len(rows))
    at2 = Counting(texts)
    again = encode_split(tok, "tok-a", at2, rows, MAX_LEN, tmp_path)
    assert at2.calls == 0 and again.folder == enc.folder  # mapped, nothing encoded
    assert_same_batches(mem, again, len(rows))
    # another tokenizer, other rows or another max_len: another folder
    assert len({enc.folder, store_folder("tok-b", rows, MAX_LEN, tmp_path), store_folder("tok-a", rows[:-1], MAX_LEN, tmp_path),
                store_folder("tok-a", rows, MAX_LEN + 1, tmp_path)}) == 4
    assert sorted(p.name for p in (tmp_path / "encoded").iterdir()) == [enc.folder.name]  # no temporary folder left


def test_a_damaged_store_is_encoded_again_and_replaced(tmp_path, texts, tok):
    rows = np.arange(300)
    mem = tok.encode_batch(texts[:300], max_len=MAX_LEN)
    folder = encode_split(tok, "tok-a", Counting(texts), rows, MAX_LEN, tmp_path).folder
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "rows": 299}))
    at = Counting(texts)
    fixed = encode_split(tok, "tok-a", at, rows, MAX_LEN, tmp_path)
    assert at.calls == 1 and isinstance(fixed, StoredEncoded)
    assert_same_batches(mem, fixed, 300)
    np.save(folder / "word_ids.npy", np.zeros((300, MAX_LEN), np.int64))  # wrong dtype
    assert_same_batches(mem, encode_split(tok, "tok-a", Counting(texts), rows, MAX_LEN, tmp_path), 300)


@pytest.mark.parametrize("how", ["full disk", "not a folder"])
def test_a_store_that_cannot_be_written_leaves_the_split_in_memory(tmp_path, texts, tok, monkeypatch, caplog, how):
    rows = np.arange(200)
    if how == "full disk":
        def full(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(np.lib.format, "open_memmap", full)
    else:
        (tmp_path / "encoded").write_text("a file where the folder should be")
    with caplog.at_level(logging.WARNING, logger="engine.workspace"):
        enc = encode_split(tok, "tok-a", Counting(texts), rows, MAX_LEN, tmp_path)
    assert not isinstance(enc, StoredEncoded) and "they stay in memory" in caplog.text
    monkeypatch.undo()
    assert_same_batches(tok.encode_batch(texts[:200], max_len=MAX_LEN), enc, 200)
    if how == "full disk":
        assert not any(p.name.startswith(".tmp-") for p in (tmp_path / "encoded").iterdir())


def test_without_a_tokenizer_id_the_split_is_encoded_in_memory(tmp_path, texts, tok):
    enc = encode_split(tok, None, Counting(texts), np.arange(50), MAX_LEN, tmp_path)
    assert not isinstance(enc, StoredEncoded) and not (tmp_path / "encoded").exists()
