"""What an import's plan, report and errors say (issue 37, "Smaller"), for every importer: the audio
plan states the rate it proposes; an error that counts refusals lists them all or says how many it
leaves out (the CLI prints each); a removed byte-order mark and a ``\\`` read as a folder separator
are reported on every path that reads them; every document that cleaning drops is named. Real
recordings (../shared/data/fsdd) and Tux Paint stamps (../shared/data/tuxpaint-stamps)."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from engine.cli import main
from engine.data import ImportOptions, import_source, inspect_source
from engine.data.audio import proposed_rate
from engine.errors import NothingImportedError
from tests.engine.test_manifest_names import zip_of

BOM = codecs.BOM_UTF8


@pytest.fixture(scope="module")
def clip(shared_data) -> bytes:
    return (shared_data / "fsdd" / "recordings" / "3_theo_7.wav").read_bytes()  # 8 kHz


@pytest.fixture(scope="module")
def png(shared_data) -> bytes:
    return (shared_data / "tuxpaint-stamps" / "images" / "animals__amphibians__frog.png").read_bytes()


def test_the_audio_plan_states_the_rate_it_proposes(clip, tmp_path, capsys):
    """8 kHz clips: the plan proposes 8,000 Hz and its decoding line says 8,000 Hz, not 16,000;
    a rate chosen is the one said. ``data inspect`` prints both lines, and they agree."""
    z = zip_of(tmp_path / "clips.zip", {f"three/{i}.wav": clip for i in range(3)})
    plan = inspect_source(z)
    assert proposed_rate(plan.sample_rates) == 8000
    assert plan.notes[-1] == "clips are decoded on import (mono, 8,000 Hz, proposed from their own rates); unreadable " \
                             "ones are rejected then"
    chosen = inspect_source(z, ImportOptions(sample_rate=16000))
    assert chosen.notes[-1] == "clips are decoded on import (mono, 16,000 Hz); unreadable ones are rejected then"
    assert main(["data", "inspect", str(z)]) == 0
    out = capsys.readouterr().out
    assert "sample rate: 8,000 Hz" in out and "16,000" not in out


def _four_bad(kind: str, png: bytes) -> dict[str, bytes]:
    """Four files of ``kind`` that its importer refuses, and nothing it accepts."""
    if kind == "image":
        return {f"a/{i}.png": png[: 60 + i] for i in range(4)}  # cut off inside the header chunks
    if kind == "audio":
        return {f"a/{i}.wav": b"RIFF" + bytes(40 + i) for i in range(4)}
    if kind == "text":
        return {f"a/{i}.txt": b"caf\xe9 " * (i + 1) for i in range(4)}  # Latin-1, not UTF-8
    return {**{f"a/{i}.png": png for i in range(4)}, **{f"a/{i}.txt": b" \n" for i in range(4)}}  # empty captions


@pytest.mark.parametrize("kind", ["image", "audio", "text", "paired"])
def test_an_error_that_counts_refusals_lists_every_one_or_says_how_many_it_leaves_out(kind, png, tmp_path, workspace,
                                                                                     capsys):
    """Four refused files: the message names three "and 1 more" (it used to say 4 and list 3); the
    exception carries all four, and ``data add`` prints each of them."""
    z = zip_of(tmp_path / f"{kind}.zip", _four_bad(kind, png))
    with pytest.raises(NothingImportedError) as err:
        import_source(z, "bad", workspace=workspace)
    rejected = err.value.rejected
    assert len(rejected) == 4
    message = str(err.value)
    assert all(f"{p}: {r}" in message for p, r in rejected[:3]) and "; and 1 more" in message, message
    assert rejected[3][0] not in message
    assert main(["data", "add", str(z), "--name", "bad"]) == 2
    err_out = capsys.readouterr().err
    assert all(f"  refused {p}: {r}" in err_out.splitlines() for p, r in rejected), err_out


def test_a_removed_byte_order_mark_is_reported_on_every_path_that_reads_text(clip, png, tmp_path, workspace):
    """A UTF-8 BOM at the start of: a .txt corpus, each kind of table, a .txt in a zip, an audio
    manifest, a captions table, a caption file beside its image. Each report says it was removed."""
    rows = "text,label\nthe first text,a\nthe second text,b\n"
    sources = {
        "corpus.txt": BOM + b"one document\nanother document\n",
        "table.csv": BOM + rows.encode(),
        "table.tsv": BOM + rows.replace(",", "\t").encode(),
        "table.jsonl": BOM + b'{"text": "the first text"}\n{"text": "the second text"}\n',
        "texts.zip": zip_of(tmp_path / "texts.zip", {"a/1.txt": BOM + b"hello there", "b/2.txt": b"general kenobi"}),
        "audio.zip": zip_of(tmp_path / "audio.zip", {"m.csv": BOM + b"file,label\nc/1.wav,three\n", "c/1.wav": clip}),
        "table-pairs.zip": zip_of(tmp_path / "tp.zip", {"t.csv": BOM + b"file,caption\n1.png,A frog.\n", "1.png": png}),
        "txt-pairs.zip": zip_of(tmp_path / "xp.zip", {"s/1.png": png, "s/1.txt": BOM + b"A frog.\n"}),
    }
    missing = []
    for i, (name, data) in enumerate(sources.items()):
        path = data if isinstance(data, Path) else tmp_path / name
        if not isinstance(data, Path):
            path.write_bytes(data)
        rep = import_source(path, f"bom{i}", ImportOptions(val_fraction=0.0), workspace=workspace)
        if not any("a byte-order mark (BOM) was removed" in n for n in rep.notes):
            missing.append(name)
    assert missing == []


def test_a_backslash_read_as_a_folder_separator_is_reported(clip, png, tmp_path, workspace):
    """Names written by old Windows zip tools (``cats\\1.png``), for every importer, and a manifest's
    file cell (``c\\1.wav``): the folders are read, and the plan and the report say how."""
    cases = {
        "image": ({"cats\\1.png": png, "dogs\\2.png": png}, ("cats", "dogs")),
        "audio": ({"three\\1.wav": clip, "four\\2.wav": clip}, ("four", "three")),
        "text": ({"pos\\1.txt": b"good film", "neg\\2.txt": b"bad film"}, ("neg", "pos")),
        "paired": ({"x\\1.png": png, "x\\1.txt": b"A frog.", "y\\2.png": png, "y\\2.txt": b"A toad."}, ("x", "y")),
    }
    for kind, (members, classes) in cases.items():
        said = f"member names: ASCII; {len(members)} use \\ as the folder separator (as Windows tools write them), read as /"
        z = zip_of(tmp_path / f"{kind}.zip", members)
        assert any(n.startswith(said) for n in inspect_source(z).notes), kind
        rep = import_source(z, f"bs-{kind}", ImportOptions(val_fraction=0.0), workspace=workspace, image_size=8)
        assert said in rep.summary(), kind
        assert rep.dataset.class_names == classes
    z = zip_of(tmp_path / "manifest.zip", {"m.csv": b"file,label\nc\\1.wav,three\n", "c/1.wav": clip})
    rep = import_source(z, "bs-manifest", ImportOptions(val_fraction=0.0), workspace=workspace)
    assert rep.accepted == 1 and "m.csv: 1 row uses \\ as the folder separator, read as / (e.g. c\\1.wav)" in rep.notes


def test_every_document_that_cleaning_drops_is_named(tmp_path, workspace):
    """Empty, too short and duplicate documents are named by line (a .txt, a table) or file (a zip
    of .txt files), in the plan and the report, not only counted."""
    txt = tmp_path / "lines.txt"
    txt.write_text("alpha document\n\nbeta\n   \nalpha document\n")  # line mode: no paragraph spans several lines
    table = tmp_path / "t.csv"
    table.write_text("text,label\nfirst text,a\n ,b\nsecond text,a\nfirst text,b\n")
    texts = zip_of(tmp_path / "docs.zip", {"a/1.txt": b"hello world", "a/2.txt": b" \n\t", "b/3.txt": b"hello world"})
    want = {
        txt: ["dropped as empty (nothing but whitespace): line 2, line 4", "dropped as too short: line 3",
              "dropped as exact duplicates: line 5 (as line 1)"],
        table: ["dropped as empty (nothing but whitespace): line 3", "dropped as exact duplicates: line 5 (as line 2)"],
        texts: ["dropped as empty (nothing but whitespace): a/2.txt", "dropped as exact duplicates: b/3.txt (as a/1.txt)"],
    }
    for i, (path, lines) in enumerate(want.items()):
        opts = ImportOptions(min_chars=5, val_fraction=0.0)
        plan = inspect_source(path, opts)
        assert [n for n in plan.notes if n.startswith("dropped")] == lines, path.name
        rep = import_source(path, f"clean{i}", opts, workspace=workspace)
        assert all(line in rep.summary().splitlines() for line in lines), rep.summary()
