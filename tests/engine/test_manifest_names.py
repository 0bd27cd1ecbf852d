"""The file column of every kind of manifest (an audio manifest, an image-caption table) resolved to
the upload's members the same way (issue 37, point 4; engine.data.manifest): exact path, else by
name or stem in any folder, an ambiguous one refused naming every file; names compared in Unicode
normal form C; rows and members that do not pair named with their near misses. Real recordings
(../shared/data/fsdd) and Tux Paint stamps (../shared/data/tuxpaint-stamps) in tiny zips."""

from __future__ import annotations

import csv
import io
import unicodedata
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from PIL import Image

from engine.data import ImportOptions, import_source, load_dataset
from engine.data.images import fit_square

NFD = lambda s: unicodedata.normalize("NFD", s)  # noqa: E731
NFC = lambda s: unicodedata.normalize("NFC", s)  # noqa: E731


class Kind:
    """One kind of manifest: its members' extension and bytes, its table's second column, and how
    to read back which member each stored row came from."""

    def __init__(self, name: str, ext: str, column: str, files: list[Path]):
        self.name, self.ext, self.column, self.files = name, ext, column, files

    def member(self, k: int) -> bytes:
        return self.files[k].read_bytes()

    def table(self, rows: list[tuple[str, str]]) -> bytes:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([("file", self.column), *rows])
        return buf.getvalue().encode("utf-8")

    def imported(self, z: Path, workspace: Path, name: str):
        opts = ImportOptions(val_fraction=0.0)
        if self.name == "audio":
            return import_source(z, name, opts.model_copy(update={"sample_rate": 8000}), workspace=workspace)
        return import_source(z, name, opts, workspace=workspace, image_size=16, geometry="pad")

    def stored_tags(self, name: str, workspace: Path, tagged: dict[str, int]) -> dict[str, int]:
        """Each stored row's tag (its label or caption) -> the index of the file its content is, so a
        test checks that every row took the member its file cell names."""
        ds = load_dataset(name, workspace)
        out = {}
        for i in range(len(ds)):
            if self.name == "audio":
                tag = ds.info.class_names[ds.labels[i]]
                got = ds.audio_pcm[ds.audio_offsets[i] : ds.audio_offsets[i + 1]]
                want = sf.read(self.files[tagged[tag]], dtype="int16")[0]
                assert np.array_equal(got, want), tag
            else:
                tag = ds.text(i)
                with Image.open(self.files[tagged[tag]]) as im:
                    rgba = im.convert("RGBA")
                white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                want = np.asarray(fit_square(Image.alpha_composite(white, rgba).convert("RGB"), 16, "pad")[0])
                assert np.abs(ds.images[i].astype(int) - want.astype(int)).max() <= 1, tag
            out[tag] = tagged[tag]
        return out


@pytest.fixture(scope="module", params=["audio", "paired"])
def kind(request, shared_data) -> Kind:
    if request.param == "audio":
        files = sorted((shared_data / "fsdd" / "recordings").glob("*_theo_1*.wav"))[:8]
        return Kind("audio", ".wav", "label", files)
    with open(shared_data / "tuxpaint-stamps" / "captions.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:8]
    return Kind("paired", ".png", "caption", [shared_data / "tuxpaint-stamps" / r["image"] for r in rows])


def zip_of(path: Path, members: dict[str, bytes]) -> Path:
    """Write ``path``: a zip of ``members`` (name -> bytes)."""
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    return path


def test_ids_name_files_by_their_stem_in_any_folder_and_an_ambiguous_one_is_refused(kind, tmp_path, workspace):
    """``0007`` is ``clips/0007.ext``; a file name or a path without its extension resolves too;
    ``0010``, in two folders, is refused naming both files. Every stored row is its own file's."""
    e = kind.ext
    layout = {f"clips/0007{e}": 0, f"clips/0008{e}": 1, f"sub/deep/0009{e}": 2, f"a/0010{e}": 3, f"b/0010{e}": 4,
              f"clips/0011{e}": 5}
    members = {n: kind.member(k) for n, k in layout.items()}
    rows = [("0007", "seven"), (f"0008{e}", "eight"), ("deep/0009", "nine"), ("0010", "ten"), ("clips/0011", "eleven")]
    members["set/manifest.csv"] = kind.table(rows)
    z = zip_of(tmp_path / f"{kind.name}.zip", members)
    rep = kind.imported(z, workspace, "ids")
    assert rep.accepted == 4
    assert dict(rep.rejected) == {"set/manifest.csv:5": (
        f"'0010' is ambiguous: it names 2 files by its name or stem, in several folders (a/0010{e}, b/0010{e}); "
        "write the path of one")}
    assert f"set/manifest.csv: 4 rows name their file by its name or stem in another folder (e.g. '0007' is " \
           f"clips/0007{e})" in rep.notes
    ambiguous = "not listed in the " + ("manifest" if kind.name == "audio" else "captions table") + \
        " set/manifest.csv; nearly named at line 5: '0010' (ambiguous: 2 files)"
    assert {n: r for n, r in rep.skipped if "0010" in n} == {f"a/0010{e}": ambiguous, f"b/0010{e}": ambiguous}
    assert kind.stored_tags("ids", workspace, {"seven": 0, "eight": 1, "nine": 2, "eleven": 5}) == \
        {"seven": 0, "eight": 1, "nine": 2, "eleven": 5}


@pytest.mark.parametrize("members_form, table_form", [(NFD, NFC), (NFC, NFD)], ids=["nfd-members", "nfd-table"])
def test_names_that_differ_only_by_unicode_normalisation_pair(kind, tmp_path, workspace, members_form, table_form):
    """macOS writes NFD names into a zip, a table typed elsewhere holds NFC (and the other way
    round): all 4 pairs import (today 1 of 4, the ASCII one), and the report says how they matched."""
    e = kind.ext
    stems = ["café", "crème brûlée", "Ñandú", "plain"]
    members = {members_form(f"files/{s}{e}"): kind.member(k) for k, s in enumerate(stems)}
    members["t.csv"] = kind.table([(table_form(f"files/{s}{e}"), f"tag{k}") for k, s in enumerate(stems)])
    z = zip_of(tmp_path / "nfd.zip", members)
    rep = kind.imported(z, workspace, "nfd")
    assert rep.accepted == 4 and rep.rejected == [] and [s for s, _ in rep.skipped if s.startswith("files/")] == []
    form = "stored decomposed (NFD)" if members_form is NFD else "stored in another Unicode form"
    assert (f"t.csv: 3 rows match their file only in Unicode normal form C (e.g. {table_form('files/café' + e)!r} and "
            f"the upload's {members_form('files/café' + e)!r}, {form})") in rep.notes
    tags = {f"tag{k}": k for k in range(4)}
    assert kind.stored_tags("nfd", workspace, tags) == tags


def test_rows_and_members_that_do_not_pair_are_named_with_their_near_misses(kind, tmp_path, workspace):
    """Each rule of a near miss (case, extension, accents, a close spelling) names the member in the
    row's reason and the row in the member's; a member with none is still named in the summary."""
    e = kind.ext
    other = ".flac" if e == ".wav" else ".jpg"
    members = {f"d/Cafe_Two{e}": kind.member(0), f"d/0012{e}": kind.member(1), f"d/crème{e}": kind.member(2),
               f"d/recording_1243{e}": kind.member(3), f"d/alone{e}": kind.member(4), f"d/ok{e}": kind.member(5)}
    rows = [(f"d/cafe_two{e}", "t0"), (f"d/0012{other}", "t1"), (f"d/creme{e}", "t2"), (f"d/recording_1234{e}", "t3"),
            (f"d/nothing_like_it{e}", "t4"), (f"d/ok{e}", "t5")]
    members["m.csv"] = kind.table(rows)
    z = zip_of(tmp_path / "near.zip", members)
    rep = kind.imported(z, workspace, "near")
    what, tail = ("audio file", "") if kind.name == "audio" else ("image", ": the pair has no image")
    assert dict(rep.rejected) == {
        "m.csv:2": f"no {what} 'd/cafe_two{e}' in {z}{tail}; did you mean 'd/Cafe_Two{e}' (differs only in case)?",
        "m.csv:3": f"no {what} 'd/0012{other}' in {z}{tail}; did you mean 'd/0012{e}' (another extension)?",
        "m.csv:4": f"no {what} 'd/creme{e}' in {z}{tail}; did you mean 'd/crème{e}' (differs in accents or Unicode form)?",
        "m.csv:5": f"no {what} 'd/recording_1234{e}' in {z}{tail}; did you mean 'd/recording_1243{e}' (a close spelling)?",
        "m.csv:6": f"no {what} 'd/nothing_like_it{e}' in {z}{tail}",
    }
    table = "manifest" if kind.name == "audio" else "captions table"
    listed = f"not listed in the {table} m.csv"
    assert dict(rep.skipped) == {
        f"d/Cafe_Two{e}": f"{listed}; nearly named at line 2: 'd/cafe_two{e}' (differs only in case)",
        f"d/0012{e}": f"{listed}; nearly named at line 3: 'd/0012{other}' (another extension)",
        f"d/crème{e}": f"{listed}; nearly named at line 4: 'd/creme{e}' (differs in accents or Unicode form)",
        f"d/recording_1243{e}": f"{listed}; nearly named at line 5: 'd/recording_1234{e}' (a close spelling)",
        f"d/alone{e}": listed,
    }
    assert f"  d/alone{e}: {listed}" in rep.summary().splitlines()  # named, not only counted
    assert rep.accepted == 1


def test_a_caption_file_beside_its_image_pairs_across_unicode_forms_and_near_misses_are_named(shared_data, tmp_path,
                                                                                            workspace):
    """The other pairing by name, a ``.txt`` beside each image: an NFD image and its NFC caption
    file pair; an image and a caption file that differ only in case are each named with the other."""
    with open(shared_data / "tuxpaint-stamps" / "captions.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:3]
    png = [(shared_data / "tuxpaint-stamps" / r["image"]).read_bytes() for r in rows]
    z = zip_of(tmp_path / "txt.zip", {NFD("s/café.png"): png[0], NFC("s/café.txt"): b"A cup of coffee.\n",
                                    "s/plain.png": png[1], "s/plain.txt": b"A plain stamp.\n",
                                    "s/Cat.png": png[2], "s/cat.txt": b"A cat.\n"})
    rep = import_source(z, "txtnfc", ImportOptions(val_fraction=0.0), workspace=workspace, image_size=8)
    assert sorted(load_dataset("txtnfc", workspace).texts()) == ["A cup of coffee.", "A plain stamp."]
    assert dict(rep.rejected) == {
        "s/Cat.png": "no caption: no s/Cat.txt beside the image; did you mean 's/cat.txt' (differs only in case)?",
        "s/cat.txt": "a caption without an image: no image file of the same name beside it; did you mean it for "
                     "'s/Cat.png' (differs only in case)?",
    }
