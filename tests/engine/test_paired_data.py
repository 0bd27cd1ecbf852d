"""Paired (image + caption) data: detection, import from a captions table or .txt captions, every
broken pair named in the report with the rest kept, pairs kept together by the split, the bundled set.
Real Tux Paint stamps from ../shared/data/tuxpaint-stamps."""

from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.data import ImportOptions, bundled, detect_source, import_source, inspect_source, load_dataset
from engine.data.images import NOTE_LOST_ON_FILL, fit_square
from engine.data.paired import caption_of
from engine.errors import DatasetError

N_GOOD = 12


@pytest.fixture(scope="module")
def stamps(shared_data) -> list[dict]:
    """The first :data:`N_GOOD` rows of the real captions table (id, category, image path, caption)."""
    d = shared_data / "tuxpaint-stamps"
    with open(d / "captions.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:N_GOOD]
    for r in rows:
        r["path"] = d / r["image"]
    return rows


def _csv_bytes(rows: list[list[str]]) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue().encode("utf-8")


def _broken_table_zip(stamps, path: Path) -> Path:
    """A zip of real stamps and a captions.csv with one row per stamp plus three broken pairs: a row
    naming a missing image (line 12), an empty caption (line 13) and a caption in Latin-1 (line 14)."""
    body = _csv_bytes([["file", "caption", "category"]] +
                      [[f"images/{r['id']}.png", r["caption_en"], r["category"]] for r in stamps[:-2]] +
                      [["images/missing.png", "A stamp that is not there.", "animals"],
                       [f"images/{stamps[-2]['id']}.png", "  ", stamps[-2]["category"]]])
    body += f"images/{stamps[-1]['id']}.png,".encode() + "Un caf\u00e9 cr\u00e8me.".encode("latin-1") + b",food\n"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("stamps/captions.csv", body)
        for r in stamps:
            z.write(r["path"], f"stamps/images/{r['id']}.png")
    return path


def test_a_captions_table_names_every_broken_pair_and_keeps_the_rest(stamps, tmp_path, workspace):
    src = _broken_table_zip(stamps, tmp_path / "stamps.zip")
    assert detect_source(src) == "paired"
    rep = import_source(src, "pairs", ImportOptions(val_fraction=0.25), workspace=workspace, image_size=16,
                        geometry="pad")
    rejected = dict(rep.rejected)
    assert rejected == {
        "stamps/captions.csv:12": "no image 'stamps/images/missing.png' in " + str(src) + ": the pair has no image",
        "stamps/captions.csv:13": f"stamps/images/{stamps[-2]['id']}.png: empty caption",
        "stamps/captions.csv:14": "not valid UTF-8 (byte 0xe9); save the file as UTF-8",
    }
    assert rep.accepted == N_GOOD - 2
    assert "3 rejected" in rep.summary() and "empty caption" in rep.summary()
    ds = load_dataset("pairs", workspace)
    assert ds.info.modality == "paired" and ds.images.shape == (N_GOOD - 2, 16, 16, 3)
    assert rep.roles.text == "caption" and rep.roles.label == "category"
    assert sorted(ds.texts()) == sorted(r["caption_en"] for r in stamps[:-2])


def test_each_pair_stays_together_through_the_shuffle_and_split(stamps, tmp_path, workspace):
    """Unique captions (the stamp ids) let every stored row be checked: its image is its file's."""
    body = _csv_bytes([["image", "text"]] + [[f"{r['id']}.png", r["id"]] for r in stamps])
    with zipfile.ZipFile(tmp_path / "ids.zip", "w") as z:
        z.writestr("captions.csv", body)
        for r in stamps:
            z.write(r["path"], f"{r['id']}.png")
    import_source(tmp_path / "ids.zip", "ids", ImportOptions(val_fraction=0.3, seed=3), workspace=workspace,
                  image_size=16, geometry="pad")
    ds = load_dataset("ids", workspace)
    by_id = {r["id"]: r for r in stamps}
    for i in range(len(ds)):
        with Image.open(by_id[ds.text(i)]["path"]) as im:
            rgba = im.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        expected = np.asarray(fit_square(Image.alpha_composite(white, rgba).convert("RGB"), 16, "pad")[0])
        assert np.abs(ds.images[i].astype(int) - expected.astype(int)).max() <= 1, ds.text(i)
    assert ds.info.n_val == int(ds.split.sum()) > 0 and ds.info.class_names == ("unlabeled",)


def test_txt_captions_beside_the_images(stamps, tmp_path, workspace):
    """A folder of images with a same-stem .txt each: the first line is the caption (Tux Paint's
    layout); a missing image, a missing caption, an empty caption and invalid UTF-8 are each named."""
    root = tmp_path / "folder"
    for r in stamps:
        d = root / r["subcategory"]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{r['id']}.png").write_bytes(r["path"].read_bytes())
        (d / f"{r['id']}.txt").write_text(f"{r['caption_en']}\nfr.utf8={r['caption_fr']}\n", encoding="utf-8")
    a, b, c, e = stamps[0], stamps[1], stamps[2], stamps[3]
    (root / a["subcategory"] / f"{a['id']}.txt").write_bytes(b"\n  \n")  # empty caption
    (root / b["subcategory"] / f"{b['id']}.txt").write_bytes(b"Caf\xe9\n")  # Latin-1
    (root / c["subcategory"] / f"{c['id']}.txt").unlink()  # an image without a caption
    (root / e["subcategory"] / f"{e['id']}.png").unlink()  # a caption without an image
    assert detect_source(root) == "paired"
    plan = inspect_source(root)
    assert plan.modality == "paired" and plan.n_items == N_GOOD - 4
    rep = import_source(root, "txtpairs", workspace=workspace, image_size=8)
    assert dict(rep.rejected) == {
        f"{a['subcategory']}/{a['id']}.txt": f"empty caption (for {a['subcategory']}/{a['id']}.png)",
        f"{b['subcategory']}/{b['id']}.txt": "caption invalid UTF-8 at line 1, byte 4 of the line (0xe9); save it as UTF-8",
        f"{c['subcategory']}/{c['id']}.png": f"no caption: no {c['subcategory']}/{c['id']}.txt beside the image",
        f"{e['subcategory']}/{e['id']}.txt": "a caption without an image: no image file of the same name beside it",
    }
    ds = load_dataset("txtpairs", workspace)
    assert len(ds) == rep.accepted == N_GOOD - 4
    assert set(ds.texts()) == {r["caption_en"] for r in stamps[4:]}  # the first line only
    assert set(ds.info.class_names) == {r["subcategory"] for r in stamps[4:]}


def test_caption_of_takes_the_first_non_empty_line():
    assert caption_of("\ufeff\n  A frog.  \nfr.utf8=Une grenouille.\n".encode()) == "A frog."
    assert caption_of(b"") == ""


def test_refusals_name_the_problem(stamps, tmp_path, workspace):
    root = tmp_path / "f"
    root.mkdir()
    (root / "a.png").write_bytes(stamps[0]["path"].read_bytes())
    (root / "a.txt").write_text("A frog.")
    with pytest.raises(DatasetError, match="text_column apply to a captions table"):
        import_source(root, "x", ImportOptions(text_column="caption"), workspace=workspace)
    (root / "a.txt").write_text(" \n")
    with pytest.raises(DatasetError, match=r"no usable image-caption pair; a.txt: empty caption \(for a.png\)$"):
        import_source(root, "x", workspace=workspace)
    (root / "a.txt").write_text("")
    with pytest.raises(DatasetError, match="no usable image-caption pair; a.txt: empty file$"):
        import_source(root, "x", workspace=workspace)
    (root / "captions.csv").write_text("id,n\n1,2\n")
    with pytest.raises(DatasetError, match="captions.csv: no file column"):
        import_source(root, "x", workspace=workspace)


def test_an_image_zip_with_a_readme_stays_an_image_import(stamps, tmp_path):
    with zipfile.ZipFile(tmp_path / "imgs.zip", "w") as z:
        for r in stamps[:4]:
            z.write(r["path"], f"{r['category']}/{r['id']}.png")
        z.writestr("README.txt", "pictures")
    assert detect_source(tmp_path / "imgs.zip") == "image"


def test_bundled_tuxpaint_stamps(workspace):
    status = {s.name: s for s in bundled.bundled_status()}["tuxpaint-stamps"]
    if not status.available:
        pytest.skip(status.how_to_get)
    info = bundled.bundled_info("tuxpaint-stamps")
    ds = load_dataset("tuxpaint-stamps", workspace)
    assert (ds.info.n_train, ds.info.n_val, ds.info.class_names) == (info.n_train, info.n_val, info.class_names)
    assert ds.info.modality == "paired" and ds.images.shape[1:] == (32, 32, 3) and len(ds) > 500
    assert "animals" in ds.info.class_names and all(ds.texts("val"))


def test_a_paired_import_names_the_images_that_vanish_on_the_fill(stamps, shared_data, tmp_path, workspace):
    """The paired importer reports and keeps, like the image importer, a stamp that vanishes on the
    colour under transparency (the white lightning bolt over white)."""
    bolt = shared_data / "tuxpaint-stamps" / "images" / "naturalforces__lightningbolt.png"
    rows = [[f"images/{r['id']}.png", r["caption_en"], r["category"]] for r in stamps] + \
        [["images/bolt.png", "A lightning bolt.", "naturalforces"]]
    with zipfile.ZipFile(tmp_path / "pairs.zip", "w") as z:
        z.writestr("stamps/captions.csv", _csv_bytes([["file", "caption", "category"], *rows]))
        for r in stamps:
            z.write(r["path"], f"stamps/images/{r['id']}.png")
        z.write(bolt, "stamps/images/bolt.png")
    rep = import_source(tmp_path / "pairs.zip", "bolts", ImportOptions(val_fraction=0.25), workspace=workspace,
                        image_size=16, geometry="pad")
    lost = [f for f, note in rep.converted if NOTE_LOST_ON_FILL in note]
    assert lost == ["stamps/images/bolt.png"], rep.converted
    assert rep.dataset.description.endswith(" 1 image vanishes on that colour (stamps/images/bolt.png): import again "
                                            "with another colour under transparency.")
