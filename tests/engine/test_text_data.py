"""engine.data for text: import of real corpora, cleaning, column roles, bundled fortunes, storage."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.data import (
    ImageDataset,
    ImportOptions,
    ImportReport,
    TextDataset,
    TextImportReport,
    bundled_status,
    import_source,
    inspect_source,
    list_datasets,
    load_dataset,
)
from engine.data.bundled import remove_overstrikes
from engine.data.dataset import n_val_for, seeded_split
from engine.data.sampling import import_order
from engine.data.storage import content_hash
from engine.data.tabular import detect_roles, import_options, read_table
from engine.data.text import clean_texts, split_documents
from engine.errors import DatasetError

REPO = Path(__file__).resolve().parents[2]
FORTUNES_DIR = Path("/usr/share/games/fortunes")
needs_fortunes = pytest.mark.skipif(
    not (FORTUNES_DIR / "computers").is_file(),
    reason=f"{FORTUNES_DIR} missing: install the Debian package fortunes (sudo apt-get install fortunes)",
)


def _norm(t: str) -> str:
    return " ".join(t.split())


def _dedup(texts: list[str]) -> list[int]:
    """Indices of the first occurrence of each normalised text (an independent reference)."""
    seen, keep = set(), []
    for i, t in enumerate(texts):
        if _norm(t) and _norm(t) not in seen:
            seen.add(_norm(t))
            keep.append(i)
    return keep


def _check_split(ds: TextDataset) -> None:
    """Stratified seeded split: each class with >= 2 documents puts n_val_for(n, 0.1) of them in val."""
    for k, n in enumerate(np.bincount(ds.labels, minlength=ds.info.n_classes)):
        if n >= 2:
            assert (ds.split[ds.labels == k] == 1).sum() == n_val_for(int(n), 0.1)


# ---------------------------------------------------------------- real corpora


def test_trec_tsv_columns_detected_duplicates_dropped_labels_counted(workspace, shared_data):
    path = shared_data / "trec" / "train.tsv"
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert len(rows) == 5452  # the README's count
    keep = _dedup([r["text"] for r in rows])

    plan = inspect_source(path)
    assert (plan.modality, plan.kind, plan.columns) == ("text", "tsv", ["label", "fine_label", "text"])
    assert (plan.roles.text, plan.roles.label, plan.roles.group, plan.roles.file) == ("text", "label", None, None)
    assert "named like a label" in plan.roles.reasons["label"] and "longest mean length" in plan.roles.reasons["text"]
    assert plan.class_names == ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM") and plan.n_items == len(keep)
    assert plan.preview[0] == rows[0]

    report = import_source(path, "trec")
    assert isinstance(report, TextImportReport)
    c = report.cleaning
    assert (c.read, c.duplicates, c.kept, c.empty, c.too_short, c.too_long) == (5452, 5452 - len(keep), len(keep), 0, 0, 0)
    assert report.accepted == len(keep) and report.rejected == [] and report.skipped == []
    expected_counts = Counter(rows[i]["label"] for i in keep)
    assert report.label_counts == {k: expected_counts[k] for k in plan.class_names}
    assert f"{5452 - len(keep)} exact duplicates" in report.summary()

    ds = load_dataset("trec")
    assert isinstance(ds, TextDataset) and ds.info == report.dataset
    info = ds.info
    assert (info.modality, info.image_shape, info.source) == ("text", None, "upload:train.tsv")
    assert info.n_train + info.n_val == len(keep) and info.stats["docs"] == len(keep)
    assert info.stats["cleaning"]["duplicates"] == 5452 - len(keep)
    order = [keep[i] for i in import_order(len(keep), 0)]  # stored in the seeded import order
    assert ds.texts() == [_norm(rows[i]["text"]) for i in order]
    assert [info.class_names[k] for k in ds.labels] == [rows[i]["label"] for i in order]
    assert ds.text(0) == _norm(rows[order[0]]["text"]) and ds.text(-1) == _norm(rows[order[-1]]["text"])
    assert ds.texts("val") == [ds.text(i) for i in ds.indices("val")]
    _check_split(ds)
    assert ds.counts().groupby("class_name")["count"].sum().to_dict() == dict(expected_counts)
    assert re.fullmatch(r"[0-9a-f]{64}", info.source_hash) and info.source_hash == content_hash(ds.arrays())


def test_ag_news_csv_quoted_fields_read_like_pandas(workspace, shared_data):
    path = shared_data / "ag-news" / "test_part_a.csv"
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    keep = _dedup(df.description.tolist())
    report = import_source(path, "ag")
    assert (report.kind, report.roles.text, report.roles.label) == ("csv", "description", "label")
    ds = load_dataset("ag")
    assert ds.info.class_names == ("1", "2", "3", "4")
    order = [keep[i] for i in import_order(len(keep), 0)]
    assert ds.texts() == [_norm(df.description[i]) for i in order]
    assert [ds.info.class_names[k] for k in ds.labels] == [df.label[i] for i in order]
    assert report.cleaning.whitespace_normalised == sum(_norm(t) != t for t in df.description)
    _check_split(ds)
    # the title instead, and no labels: '' means "no such column" even though `label` exists
    report = import_source(path, "ag-titles", ImportOptions(text_column="title", label_column=""))
    assert report.roles.label is None and report.dataset.class_names == ("unlabeled",)
    kept_titles = _dedup(df.title.tolist())
    assert load_dataset("ag-titles").texts() == [_norm(df.title[kept_titles[i]]) for i in import_order(len(kept_titles), 0)]


# ---------------------------------------------------------------- bundled fortunes


@needs_fortunes
def test_fortunes_bundled_loads_one_document_per_fortune(workspace):
    listed = {i.name: i for i in list_datasets()}
    assert listed["fortunes"].modality == "text" and listed["fortunes"].created_at == ""
    assert "fortunes" not in [i.name for i in list_datasets(modality="image")]
    assert [i.name for i in list_datasets(modality="text")] == ["fortunes"]
    assert not (workspace / "datasets" / "fortunes").exists()  # listing does not register
    status = {s.name: s for s in bundled_status()}["fortunes"]
    assert status.available and "BSD" in status.description

    ds = load_dataset("fortunes")
    assert isinstance(ds, TextDataset) and ds.info.source == "bundled:fortunes"
    topics = sorted(p.name for p in FORTUNES_DIR.iterdir() if not p.suffix and not p.is_symlink())
    assert ds.info.class_names == tuple(t for t in topics if t != "ascii-art")
    assert listed["fortunes"].n_train == ds.info.n_train and listed["fortunes"].n_val == ds.info.n_val
    texts = ds.texts()
    assert len(texts) == ds.info.n_train + ds.info.n_val == ds.info.stats["docs"] > 10_000
    assert not any("\b" in t or "\n" in t for t in texts)
    # an independent parse of one topic file: entries between lines holding a single %
    raw = (FORTUNES_DIR / "pratchett").read_text(encoding="utf-8").split("\n%\n")
    pratchett = [t for t, k in zip(texts, ds.labels) if ds.info.class_names[k] == "pratchett"]
    assert pratchett == [_norm(e) for e in raw if _norm(e)]
    _check_split(ds)
    assert re.fullmatch(r"[0-9a-f]{64}", ds.info.source_hash)
    assert load_dataset("fortunes").info.source_hash == ds.info.source_hash


def test_fortunes_parse_overstrike_and_missing_package(workspace, tmp_path, monkeypatch):
    d = tmp_path / "fortunes"
    d.mkdir()
    (d / "food").write_bytes(b"Eat.\n%\n_\bH_\be_\by  you\n\n%\n%\nEat.\n%\nLast one\n")
    (d / "food.dat").write_bytes(b"\0\0\0\2binary index")
    (d / "ascii-art").write_text("  (o o)\n%\n  /|\\\n")
    (d / "work").write_text("Work is the curse\nof the drinking classes.\n%\nA second job.\n")
    monkeypatch.setenv("MASKLAB_FORTUNES_DIR", str(d))
    ds = load_dataset("fortunes")
    assert ds.info.class_names == ("food", "work")
    assert ds.texts() == ["Eat.", "Hey you", "Last one", "Work is the curse of the drinking classes.", "A second job."]
    assert ds.labels.tolist() == [0, 0, 0, 1, 1]
    assert {k: ds.info.stats["cleaning"][k] for k in ("read", "empty", "duplicates")} == {"read": 7, "empty": 1, "duplicates": 1}

    monkeypatch.setenv("MASKLAB_FORTUNES_DIR", str(tmp_path / "nowhere"))
    status = {s.name: s for s in bundled_status()}["fortunes"]
    assert not status.available and "sudo apt-get install fortunes" in status.how_to_get
    with pytest.raises(DatasetError, match=r"fortunes.*sudo apt-get install fortunes"):
        load_dataset("fortunes", workspace=tmp_path / "other-ws")
    assert "fortunes" not in [i.name for i in list_datasets(tmp_path / "other-ws")]


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("ext, col", [(".txt", 4), (".csv", 4), (".tsv", 4), (".jsonl", 14)])
def test_invalid_utf8_is_refused_naming_file_and_line(workspace, tmp_path, ext, col):
    lines = {".txt": [b"first line", b"second", b"caf\xe9 au lait", b"fourth"],
             ".csv": [b"text,label", b"hello,a", b"caf\xe9,b", b"ok,a"],
             ".tsv": [b"text\tlabel", b"hello\ta", b"caf\xe9\tb", b"ok\ta"],
             ".jsonl": [b'{"text": "hello"}', b'{"text": "bye"}', b'{"text": "caf\xe9"}', b'{"text": "ok"}']}[ext]  # fmt: skip
    path = tmp_path / f"latin1{ext}"
    path.write_bytes(b"\n".join(lines) + b"\n")
    for call in (lambda: inspect_source(path), lambda: import_source(path, "bad")):
        with pytest.raises(DatasetError, match=rf"latin1\{ext}: invalid UTF-8 at line 3, byte {col} of the line \(0xe9\)"):
            call()
    assert not (workspace / "datasets" / "bad").exists()


def test_zip_of_txt_labels_from_folders_bad_file_rejected_rest_kept(workspace, tmp_path):
    path = tmp_path / "reviews.zip"
    docs = {"reviews/pos/a.txt": "Great film.\nLoved it.", "reviews/pos/b.txt": "Superb acting",
            "reviews/neg/c.txt": "Dull and long.", "reviews/neg/d.txt": "Boring\n"}  # fmt: skip
    with zipfile.ZipFile(path, "w") as z:
        for name, text in docs.items():
            z.writestr(name, text.encode("utf-8"))
        z.writestr("reviews/neg/latin1.txt", b"fine first line\nna\xefve second line\n")
        z.writestr("reviews/README.md", "not a document")
        z.writestr("reviews/.hidden.txt", "hidden")
        z.writestr("__MACOSX/reviews/pos/._a.txt", b"\0\5")
    plan = inspect_source(path)
    assert (plan.modality, plan.kind, plan.class_names) == ("text", "txt files", ("neg", "pos"))
    report = import_source(path)
    assert report.dataset.name == "reviews" and report.accepted == 4
    assert report.rejected == [("reviews/neg/latin1.txt", "invalid UTF-8 at line 2, byte 3 of the line (0xef); save it as UTF-8")]
    assert dict(report.skipped) == {"reviews/README.md": "not a .txt file (.md)", "reviews/.hidden.txt": "hidden file",
                                    "__MACOSX/reviews/pos/._a.txt": "macOS metadata"}  # fmt: skip
    assert "reviews/neg/latin1.txt: invalid UTF-8 at line 2" in report.summary()
    ds = load_dataset("reviews")
    got = {t: ds.info.class_names[k] for t, k in zip(ds.texts(), ds.labels)}
    assert got == {"Dull and long.": "neg", "Boring": "neg", "Great film. Loved it.": "pos", "Superb acting": "pos"}
    assert "reviews" in [i.name for i in list_datasets(modality="text")]
    assert "reviews" not in [i.name for i in list_datasets(modality="image")]
    # the CLI prints the report and exits 1 because a file was refused
    out = subprocess.run([sys.executable, "-m", "engine", "data", "add", str(path), "--name", "reviews-2"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1 and "latin1.txt: invalid UTF-8 at line 2" in out.stdout
    out = subprocess.run([sys.executable, "-m", "engine", "data", "list"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    line = next(x for x in out.stdout.splitlines() if x.startswith("reviews-2 "))
    assert out.returncode == 0 and " text " in line and "train" in line


def test_column_options_errors_name_the_columns(workspace, tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,body,topic\n1,hello there,a\n2,good bye,b\n")
    with pytest.raises(DatasetError, match=r"t.csv: no column 'text' for text_column; columns: 'id', 'body', 'topic'"):
        import_source(path, options=ImportOptions(text_column="text"))
    with pytest.raises(DatasetError, match=r"column 'body' is given for two roles"):
        inspect_source(path, ImportOptions(text_column="body", label_column="body"))
    txt = tmp_path / "plain.txt"
    txt.write_text("one line\n")
    with pytest.raises(DatasetError, match=r"label_column apply to tables"):
        import_source(txt, options=ImportOptions(label_column="x"))
    with pytest.raises(DatasetError, match=r"min_chars \(9\) is larger than max_chars \(3\)"):
        import_options(min_chars=9, max_chars=3)
    with pytest.raises(DatasetError, match=r"reserved for a bundled dataset"):
        import_source(path, "digits")
    assert not list((workspace / "datasets").iterdir())


# ---------------------------------------------------------------- reading rules


def test_cleaning_counts_exact_on_a_handmade_corpus(workspace, tmp_path):
    lines = ["Hello   world", "", "hello world", "Hello world", "  ", "tiny",
             "a much longer line than the limit allows here", "Hello\tworld", "ok fine"]  # fmt: skip
    kept, cleaned, counts = clean_texts(lines, min_chars=5, max_chars=30)
    assert kept == [0, 2, 8] and cleaned == ["Hello world", "hello world", "ok fine"]
    assert counts.as_dict() == {"read": 9, "whitespace_normalised": 3, "empty": 2, "too_short": 1,
                                "too_long": 1, "duplicates": 2, "kept": 3}  # fmt: skip
    path = tmp_path / "hand.jsonl"  # (as a .txt its blank lines and 2-line runs would read as paragraphs)
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in lines), encoding="utf-8")
    report = import_source(path, "hand", ImportOptions(min_chars=5, max_chars=30))
    assert report.kind == "jsonl" and report.cleaning == counts
    assert load_dataset("hand").texts() == [cleaned[i] for i in import_order(len(cleaned), 0)]
    assert "whitespace normalised in 3; dropped 2 empty, 1 too short, 1 too long, 2 exact duplicates; 3 kept" in report.summary()


def test_txt_line_or_paragraph_mode():
    docs, kind, note = split_documents("First para\nline two\n\nSecond\n\n\nThird one\r\nmore\n")
    assert (docs, kind) == (["First para\nline two", "Second", "Third one\nmore"], "paragraphs")
    assert "paragraph mode" in note and "2 of them span several lines" in note
    docs, kind, _ = split_documents("a\n\nb\n\nc")  # blank lines but no multi-line paragraph
    assert (docs, kind) == (["a", "", "b", "", "c"], "lines")
    docs, kind, note = split_documents("one\ntwo\nthree\n")
    assert (docs, kind) == (["one", "two", "three"], "lines") and "no blank line" in note
    one_per_line = [f"document {i}" for i in range(50)]
    docs, kind, note = split_documents("\n".join(one_per_line[:30] + [""] + one_per_line[30:]))  # a stray blank line
    assert (docs, kind) == (one_per_line[:30] + [""] + one_per_line[30:], "lines")
    assert "paragraphs would average 25 lines, more than 20" in note


def test_fortune_overstrikes_are_erased_like_a_terminal():
    got = [remove_overstrikes(x) for x in ["it's *____\b\b\b\bonly* ones", "_\bH_\be_\by", "\b\bx", "A\bA bold", "ab\b\b\bc"]]
    assert got == ["it's *only* ones", "Hey", "x", "A bold", "c"]


def test_one_line_four_word_corpus_imports_with_no_val_row(workspace, tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("the cat sat down\n")
    report = import_source(path)
    ds = load_dataset("tiny")
    assert report.accepted == 1 and (ds.info.n_train, ds.info.n_val) == (1, 0)  # as n_val_for(1, 0.1) == 0
    assert ds.texts("train") == ["the cat sat down"] and ds.texts("val") == []
    assert ds.info.class_names == ("unlabeled",) and ds.info.stats["words_max"] == 4


def test_jsonl_roles_detected_by_name_and_values(tmp_path):
    path = tmp_path / "m.jsonl"
    rows = [{"clip": f"audio/{i}.wav", "transcript": f"utterance number {i} said slowly", "Speaker_ID": f"s{i % 3}",
             "category": ["yes", "no"][i % 2], "score": i * 0.5} for i in range(8)]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n[1, 2]\n{broken\n")
    table = read_table(path)
    assert table.columns == ["clip", "transcript", "Speaker_ID", "category", "score"] and len(table.rows) == 8
    assert table.column("score")[:2] == ["0.0", "0.5"]
    assert table.rejected == [(f"{path}:9", "a JSON list, not an object"), (f"{path}:10", 'not valid JSON at column 2: each line must be one JSON object, e.g. {"text": "...", "label": "..."}')]
    roles = detect_roles(table)
    assert (roles.file, roles.text, roles.label, roles.group) == ("clip", "transcript", "category", "Speaker_ID")
    # file column by its values when no column is named like one; label by cardinality when none is named like one
    path2 = tmp_path / "v.csv"
    path2.write_text("where,words,mood\n" + "".join(f"img/{i}.png,a long caption number {i},{'ab'[i % 2]}\n" for i in range(10)))
    roles = detect_roles(read_table(path2))
    assert (roles.file, roles.text, roles.label) == ("where", "words", "mood")
    assert roles.reasons["file"] == "values look like relative file paths (.png)"
    assert roles.reasons["label"] == "2 distinct values in 10 rows"


def test_csv_row_with_wrong_field_count_is_rejected_with_its_line(workspace, tmp_path):
    path = tmp_path / "r.csv"
    path.write_text('text,label\n"multi\nline, quoted",a\nplain,b,extra\nlast,a\n')
    report = import_source(path)
    assert report.rejected == [(f"{path}:4", "3 fields where the header has 2: a quote left open, or a separator missing or too many")]
    assert sorted(load_dataset("r").texts()) == ["last", "multi line, quoted"]


# ---------------------------------------------------------------- groups, storage


def test_group_split_keeps_groups_apart(workspace, tmp_path):
    rng = np.random.default_rng(1)
    groups = rng.integers(0, 23, 400)
    labels = rng.integers(0, 3, 400)
    split = seeded_split(labels, 0.2, 7, groups=groups)
    for g in np.unique(groups):
        assert np.unique(split[groups == g]).size == 1
    assert 0 < split.sum() <= n_val_for(400, 0.2)
    assert np.array_equal(split, seeded_split(labels, 0.2, 7, groups=groups))
    assert not np.array_equal(split, seeded_split(labels, 0.2, 8, groups=groups))
    assert seeded_split(labels, 0.2, 7, groups=np.zeros(400, int)).sum() == 0  # one group: all train
    assert seeded_split(labels[:4], 0.1, 0, groups=np.array([5, 5, 5, 6])).tolist() in ([0, 0, 0, 1], [1, 1, 1, 0])

    authors = [f"author{i % 9}" for i in range(90)]
    path = tmp_path / "quotes.csv"
    pd.DataFrame({"Author": authors, "quote": [f"quote number {i} is here" for i in range(90)]}).to_csv(path, index=False)
    report = import_source(path, options=ImportOptions(val_fraction=0.25))
    assert report.roles.group == "Author"
    ds = load_dataset("quotes")
    assert ds.info.group_names == tuple(f"author{i}" for i in range(9))
    assert ds.groups.tolist() == [i % 9 for i in import_order(90, 0)]  # stored in the import order
    for g in range(9):
        assert np.unique(ds.split[ds.groups == g]).size == 1
    assert ds.info.n_val > 0


def test_text_arrays_are_checked_against_meta(workspace, tmp_path):
    path = tmp_path / "small.txt"
    path.write_text("alpha beta\ngamma\ndelta epsilon\n")
    import_source(path)
    path = workspace / "datasets" / "small" / "text_offsets.npy"
    np.save(path, np.load(path)[::-1].copy())
    with pytest.raises(DatasetError, match=r"datasets/small: does not match .*text_offsets must be int64 \[4\]"):
        load_dataset("small")


def test_old_meta_without_new_keys_still_loads(workspace):
    load_dataset("digits")
    meta_path = workspace / "datasets" / "digits" / "meta.json"
    meta = json.loads(meta_path.read_text())
    for key in ("stats", "source_hash", "group_names"):
        meta.pop(key)
    meta_path.write_text(json.dumps(meta))
    ds = load_dataset("digits")
    assert isinstance(ds, ImageDataset) and ds.info.image_shape == (1, 8, 8)
    assert (ds.info.stats, ds.info.source_hash, ds.info.group_names) == ({}, "", ())


def test_source_hash_is_the_content(workspace, tmp_path, shared_data):
    path = tmp_path / "c.txt"
    path.write_text("\n".join(f"sentence {i}" for i in range(30)))
    a = import_source(path, "c1").dataset.source_hash
    assert import_source(path, "c2").dataset.source_hash == a
    assert import_source(path, "c3", ImportOptions(seed=1)).dataset.source_hash != a  # another split
    # images: import_source dispatches to the image importer, whose stored info has a hash too
    stamps = shared_data / "tuxpaint-stamps"
    folder = tmp_path / "imgs" / "animals"
    folder.mkdir(parents=True)
    for p in sorted(stamps.rglob("*.png"))[:2]:
        (folder / p.name).write_bytes(p.read_bytes())
    plan = inspect_source(tmp_path / "imgs")
    # one common top folder is stripped (the image importer's rule), so the files have no label folder
    assert (plan.modality, plan.kind, plan.class_names, plan.n_items) == ("image", "image folder", ("unlabeled",), 2)
    report = import_source(tmp_path / "imgs", "imgs", image_size=8)
    assert isinstance(report, ImportReport) and report.accepted == 2
    assert report.dataset.source_hash == content_hash(load_dataset("imgs").arrays())
    with pytest.raises(DatasetError, match="text_column do not apply to a zip or folder of images"):
        import_source(tmp_path / "imgs", "imgs2", ImportOptions(text_column="x"))
