"""engine.data: bundled sets, registry, seeded split, zip/folder import (real data, no mocks)."""

from __future__ import annotations

import csv
import dataclasses
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from engine.data import (
    BundledStatus,
    DatasetInfo,
    ImageDataset,
    ImportReport,
    bundled_status,
    import_archive,
    list_datasets,
    load_dataset,
)
from engine.data.dataset import seeded_split
from engine.errors import DatasetError

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
CATEGORIES = ("animals", "food", "plants")
PER_CLASS = 5


def _file_ids(folder: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime_ns) of every file in a dataset folder."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()}


@pytest.fixture(scope="module")
def stamp_files(shared_data) -> dict[str, list[Path]]:
    """PER_CLASS real Tux Paint stamp PNGs (RGBA) for each of CATEGORIES, from captions.csv."""
    root = shared_data / "tuxpaint-stamps"
    out: dict[str, list[Path]] = {c: [] for c in CATEGORIES}
    with open(root / "captions.csv", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            files = out.get(row["category"])
            if files is not None and len(files) < PER_CLASS:
                files.append(root / row["image"])
    assert all(len(v) == PER_CLASS for v in out.values()), out
    return out


@pytest.fixture
def stamps_zip(tmp_path, stamp_files) -> Path:
    """stamps.zip as `zip -r stamps.zip stamps/` makes it: stamps/<category>/*.png, plus junk."""
    path = tmp_path / "stamps.zip"
    rng = np.random.default_rng(0)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("stamps/", "")
        for cat, files in stamp_files.items():
            z.writestr(f"stamps/{cat}/", "")
            for f in files:
                z.write(f, f"stamps/{cat}/{f.name}")
        z.writestr("stamps/food/corrupt.png", rng.integers(0, 256, 2000, dtype=np.uint8).tobytes())
        z.writestr("stamps/plants/empty.JPG", b"")
        z.writestr("stamps/notes.txt", "made by hand\n")
        z.writestr("__MACOSX/stamps/food/._food__pizza.png", b"\0\5\26\7")
        z.writestr("stamps/.DS_Store", b"\0\0\0\1Bud1")
    return path


# ---------------------------------------------------------------- bundled: digits


def test_digits_loads_with_shapes_dtypes_and_ranges(workspace):
    ds = load_dataset("digits")
    assert isinstance(ds, ImageDataset)
    info = ds.info
    assert (info.name, info.modality, info.source) == ("digits", "image", "bundled:digits")
    assert info.image_shape == (1, 8, 8) and info.class_names == tuple("0123456789")
    assert (info.n_train, info.n_val) == (1618, 179) and info.created_at.endswith("+00:00")
    assert ds.images.shape == (1797, 8, 8, 1) and ds.images.dtype == np.uint8
    assert ds.images.min() == 0 and ds.images.max() == 255
    assert ds.labels.dtype == np.int64 and set(np.unique(ds.labels)) == set(range(10))
    assert ds.split.dtype == np.uint8 and set(np.unique(ds.split)) == {0, 1}

    x, y = ds.tensors("train")
    assert x.shape == (1618, 1, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert 0.0 <= x.min() and x.max() <= 1.0
    xv, yv = ds.tensors("val")
    assert xv.shape == (179, 1, 8, 8) and yv.shape == (179,)
    idx = ds.indices("val")
    assert np.all(np.diff(idx) > 0) and np.array_equal(yv.numpy(), ds.labels[idx])
    assert torch.equal(xv[0, 0], torch.from_numpy(ds.images[idx[0], :, :, 0]).float() / 255)
    with pytest.raises(ValueError):
        ds.tensors("test")

    counts = ds.counts()
    assert list(counts.columns) == ["class_name", "split", "count"] and len(counts) == 20
    assert counts.groupby("split")["count"].sum().to_dict() == {"train": 1618, "val": 179}
    assert (workspace / "datasets" / "digits" / "meta.json").is_file()


def test_digits_split_is_deterministic_and_stratified(tmp_path):
    a = load_dataset("digits", workspace=tmp_path / "ws1")
    b = load_dataset("digits", workspace=tmp_path / "ws2")
    assert np.array_equal(a.split, b.split) and np.array_equal(a.images, b.images)
    val_per_class = a.counts().query("split == 'val'")["count"]
    expected = np.floor(np.bincount(a.labels) * 0.1 + 0.5)  # 10% of each class, rounded
    assert np.array_equal(val_per_class.to_numpy(), expected), val_per_class.tolist()

    labels = a.labels
    assert np.array_equal(seeded_split(labels, 0.1, 0), a.split)
    assert not np.array_equal(seeded_split(labels, 0.1, 1), a.split)
    assert seeded_split(labels, 0.0, 0).sum() == 0
    tiny = seeded_split(np.array([0, 1, 2]), 0.5, 0)  # a class of 1: plain random, >= 1 train
    assert tiny.sum() == 2 and np.array_equal(tiny, seeded_split(np.array([0, 1, 2]), 0.5, 0))
    assert seeded_split(np.array([0, 0, 1, 1, 2, 2]), 0.1, 0).reshape(3, 2).sum(1).tolist() == [1, 1, 1]
    assert seeded_split(np.array([5]), 0.5, 0).tolist() == [0]
    with pytest.raises(DatasetError):
        seeded_split(labels, 1.0, 0)


def test_registered_dataset_is_not_rewritten_and_listing_is_cheap(workspace):
    listed = list_datasets()
    assert [d.name for d in listed][:1] == ["digits"] and listed[0].created_at == ""
    assert not (workspace / "datasets" / "digits").exists()  # listing does not register

    first = load_dataset("digits")
    folder = workspace / "datasets" / "digits"
    before = _file_ids(folder)
    assert set(before) == {"meta.json", "images.npy", "labels.npy", "split.npy"}
    again = load_dataset("digits", workspace=workspace)
    assert _file_ids(folder) == before
    assert again.info == first.info and np.array_equal(again.images, first.images)
    assert list_datasets()[0] == first.info
    assert dataclasses.replace(listed[0], created_at=first.info.created_at) == first.info
    assert [p.name for p in (workspace / "datasets").iterdir() if p.name.startswith(".")] == []


def test_unknown_dataset_names_known_ones(workspace):
    with pytest.raises(DatasetError, match=r"'nope'.*digits"):
        load_dataset("nope")
    with pytest.raises(DatasetError, match="invalid dataset name '../x'"):
        load_dataset("../x")


# ---------------------------------------------------------------- bundled: fashion-mnist


needs_fashion = pytest.mark.skipif(
    not FASHION_DIR.is_dir(), reason=f"{FASHION_DIR} missing (Debian package dataset-fashion-mnist)"
)


@needs_fashion
def test_fashion_mnist_loads_official_split(workspace, monkeypatch):
    monkeypatch.delenv("MASKLAB_FASHION_MNIST_DIR", raising=False)
    status = {s.name: s for s in bundled_status()}
    assert isinstance(status["fashion-mnist"], BundledStatus) and status["fashion-mnist"].available
    before = {d.name: d for d in list_datasets()}["fashion-mnist"]  # from the IDX headers only
    ds = load_dataset("fashion-mnist")
    assert dataclasses.replace(before, created_at=ds.info.created_at) == ds.info
    assert (ds.info.n_train, ds.info.n_val, ds.info.image_shape) == (60000, 10000, (1, 28, 28))
    assert ds.info.class_names[0] == "T-shirt/top" and ds.info.class_names[-1] == "Ankle boot"
    assert ds.images.shape == (70000, 28, 28, 1) and ds.images.dtype == np.uint8
    assert np.array_equal(ds.split, np.repeat(np.array([0, 1], dtype=np.uint8), [60000, 10000]))
    counts = ds.counts().pivot(index="class_name", columns="split", values="count")
    assert (counts["train"] == 6000).all() and (counts["val"] == 1000).all()
    x, y = ds.tensors("val")
    assert x.shape == (10000, 1, 28, 28) and y.shape == (10000,)
    listed = {d.name: d for d in list_datasets()}
    assert listed["fashion-mnist"] == ds.info


def test_fashion_mnist_missing_says_how_to_install(workspace, tmp_path, monkeypatch):
    monkeypatch.setenv("MASKLAB_FASHION_MNIST_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("MASKLAB_FORTUNES_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("MASKLAB_ASTERISK_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("MASKLAB_TUXPAINT_DIR", str(tmp_path / "nowhere"))
    status = {s.name: s for s in bundled_status()}
    assert status["digits"].available and not status["fashion-mnist"].available
    assert "apt-get install dataset-fashion-mnist" in status["fashion-mnist"].how_to_get
    assert [d.name for d in list_datasets()] == ["digits"]
    with pytest.raises(DatasetError, match=r"fashion-mnist.*sudo apt-get install dataset-fashion-mnist"):
        load_dataset("fashion-mnist")


@needs_fashion
def test_fashion_mnist_bad_magic_names_the_file(workspace, tmp_path, monkeypatch):
    d = tmp_path / "fm"
    d.mkdir()
    for name in ("train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (d / name).symlink_to(FASHION_DIR / name)
    (d / "train-images-idx3-ubyte.gz").symlink_to(FASHION_DIR / "t10k-labels-idx1-ubyte.gz")  # labels file
    monkeypatch.setenv("MASKLAB_FASHION_MNIST_DIR", str(d))
    with pytest.raises(DatasetError, match=r"train-images-idx3-ubyte\.gz.*magic number 2049, expected 2051"):
        load_dataset("fashion-mnist")
    assert not (workspace / "datasets" / "fashion-mnist").exists()


# ---------------------------------------------------------------- import


def test_import_zip_reports_every_file(workspace, stamps_zip):
    report = import_archive(stamps_zip)
    assert isinstance(report, ImportReport) and report.source == str(stamps_zip)
    assert report.accepted == 3 * PER_CLASS
    assert dict(report.rejected).keys() == {"stamps/food/corrupt.png", "stamps/plants/empty.JPG"}
    assert dict(report.rejected)["stamps/food/corrupt.png"] == (
        "its content is not an accepted image format (PNG, JPEG, WebP, BMP, TIFF, GIF); re-export it as one")
    assert dict(report.rejected)["stamps/plants/empty.JPG"] == "empty file"
    skipped = dict(report.skipped)
    assert skipped["stamps/notes.txt"] == "not an image file (.txt)"
    assert skipped["__MACOSX/stamps/food/._food__pizza.png"] == "macOS metadata"
    assert skipped["stamps/.DS_Store"] == "hidden file"
    summary = report.summary()
    assert "stamps/food/corrupt.png: its content is not an accepted" in summary and "stamps/plants/empty.JPG" in summary

    info = report.dataset
    assert isinstance(info, DatasetInfo) and info.name == "stamps" and info.source == "upload:stamps.zip"
    # stamps come in several sizes: the automatic size is 64, each centre-cropped (or kept square)
    assert info.class_names == CATEGORIES and info.image_shape == (3, 64, 64) and "sizes differ" in report.size_rule
    assert sum(report.geometry_counts.values()) == 15 and set(report.geometry_counts) <= {"cropped", "resized", "kept"}
    assert info.n_train + info.n_val == 15 and info.n_val == 3  # stratified: one val image per class
    ds = load_dataset("stamps")
    assert ds.info == info and ds.images.shape == (15, 64, 64, 3) and ds.images.dtype == np.uint8
    assert np.bincount(ds.labels).tolist() == [PER_CLASS] * 3
    assert ds.counts().query("split == 'val'")["count"].tolist() == [1, 1, 1]
    assert (ds.images[:, 0, 0] == 255).all()  # transparent corners composited over white
    x, _ = ds.tensors("train")
    assert x.shape == (12, 3, 64, 64)
    assert "stamps" in [d.name for d in list_datasets()]

    import_archive(stamps_zip, name="stamps-2", seed=0)
    assert np.array_equal(load_dataset("stamps-2").split, ds.split)


def test_import_folder_grayscale_and_unlabeled(workspace, tmp_path, stamp_files):
    folder = tmp_path / "Gray Stamps"
    (folder / "food").mkdir(parents=True)
    for f in stamp_files["food"]:
        Image.open(f).convert("LA").save(folder / "food" / f.name)
    for f in stamp_files["plants"][:3]:  # at the root: class "unlabeled"
        Image.open(f).convert("L").save(folder / f.name.replace(".png", ".jpg"))
    (folder / "readme.md").write_text("hi")

    report = import_archive(folder, image_size=16, val_fraction=0.2, seed=3)
    info = report.dataset
    assert info.name == "gray-stamps" and report.accepted == 8 and report.rejected == []
    assert report.skipped == [("readme.md", "not an image file (.md)")]
    assert info.image_shape == (1, 16, 16) and info.class_names == ("food", "unlabeled")
    ds = load_dataset("gray-stamps")
    assert ds.images.shape == (8, 16, 16, 1) and np.bincount(ds.labels).tolist() == [5, 3]

    flat = tmp_path / "flat"
    flat.mkdir()
    for f in stamp_files["animals"]:
        shutil.copy(f, flat / f.name)
    info = import_archive(flat, name="flat_1", image_size=8).dataset
    assert info.class_names == ("unlabeled",) and info.image_shape == (3, 8, 8)
    assert (info.n_train, info.n_val) == (4, 1)


def test_import_errors_name_the_path_or_name(workspace, tmp_path, stamps_zip):
    with pytest.raises(DatasetError, match="Bad Name"):
        import_archive(stamps_zip, name="Bad Name")
    with pytest.raises(DatasetError, match="'digits' is reserved"):
        import_archive(stamps_zip, name="digits")
    missing = tmp_path / "missing.zip"
    with pytest.raises(DatasetError, match=re.escape(str(missing))):
        import_archive(missing)
    not_zip = tmp_path / "notes.zip"
    not_zip.write_text("not a zip")
    with pytest.raises(DatasetError, match=re.escape(f"{not_zip}: not a zip")):
        import_archive(not_zip)
    junk = tmp_path / "junk.zip"
    with zipfile.ZipFile(junk, "w") as z:
        z.writestr("a/bad.png", b"\x89PNG\r\n\x1a\n broken")
        z.writestr("a/readme.txt", "x")
    refused = re.escape(f"{junk}: no readable images; 1 file refused: a/bad.png: damaged PNG file: its header")
    with pytest.raises(DatasetError, match=refused):
        import_archive(junk)
    assert [p for p in (workspace / "datasets").iterdir()] == []

    import_archive(stamps_zip)
    with pytest.raises(DatasetError, match="'stamps' already exists"):
        import_archive(stamps_zip)


def test_failed_overwrite_leaves_existing_dataset_intact(workspace, tmp_path, stamps_zip, stamp_files):
    import_archive(stamps_zip)
    folder = workspace / "datasets" / "stamps"
    before, original = _file_ids(folder), load_dataset("stamps")

    junk = tmp_path / "junk.zip"
    bomb = tmp_path / "bomb.png"
    Image.new("1", (13500, 13500)).save(bomb)  # 182 Mpixel, a few kB: Pillow's DecompressionBombError
    with zipfile.ZipFile(junk, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("bad.jpg", b"not a jpeg at all")
        z.writestr("big.png", bytes(51 * 2**20))  # 51 MB of zeros: deflated about 1000:1
        z.write(bomb, "bomb.png")
    with pytest.raises(DatasetError, match="no readable images; 3 files refused") as err:
        import_archive(junk, name="stamps", overwrite=True)
    for expected in ("bad.jpg: its content is not an accepted image format", "big.png: compressed 1",
                     "bomb.png: declares 13500x13500 px; the limit is 40000000 px"):
        assert expected in str(err.value)
    assert _file_ids(folder) == before
    assert load_dataset("stamps").info == original.info
    assert [p.name for p in (workspace / "datasets").iterdir()] == ["stamps"]  # no temp folders left

    replacement = tmp_path / "replacement"
    replacement.mkdir()
    for f in stamp_files["animals"]:
        shutil.copy(f, replacement / f.name)
    report = import_archive(replacement, name="stamps", overwrite=True, image_size=8)
    assert load_dataset("stamps").info == report.dataset and report.dataset.class_names == ("unlabeled",)
    assert [p.name for p in (workspace / "datasets").iterdir()] == ["stamps"]
