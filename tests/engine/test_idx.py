"""IDX (MNIST format) import: real MNIST t10k from ../shared, the whole family of type codes, and
every refusal naming the file."""

from __future__ import annotations

import gzip
import struct
import zipfile

import numpy as np
import pytest

from engine.data import detect_modality, detect_source, import_source, inspect_source, load_dataset
from engine.data.idx import IDX_TYPES, find_pairs, read_idx
from engine.data.tabular import ImportOptions
from engine.errors import DatasetError


def idx_bytes(a: np.ndarray, type_code: int, gz: bool = False) -> bytes:
    dt = IDX_TYPES[type_code][0]
    raw = struct.pack(">HBB", 0, type_code, a.ndim) + struct.pack(f">{a.ndim}I", *a.shape) + a.astype(dt).tobytes()
    return gzip.compress(raw, mtime=0) if gz else raw


@pytest.mark.parametrize("code", sorted(IDX_TYPES))
@pytest.mark.parametrize("gz", [False, True])
def test_every_type_code_reads_back_exact_values(code, gz):
    values = np.array([[0, 1, -2], [3, 100, -7]]) if code != 0x08 else np.array([[0, 1, 2], [3, 100, 255]])
    if code in (0x0D, 0x0E):
        values = values + 0.5
    got = read_idx(idx_bytes(values, code, gz), "x.idx")
    assert got.shape == (2, 3) and got.dtype == np.dtype(IDX_TYPES[code][0]).newbyteorder("=")
    assert np.array_equal(got, values)


@pytest.mark.parametrize("data, match", [
    (b"\x00\x00", r"x: truncated IDX header \(2 bytes\)"),
    (b"\x01\x00\x08\x01\x00\x00\x00\x01\x05", r"x: not an IDX file \(first bytes 0100"),
    (b"\x00\x00\x07\x01\x00\x00\x00\x01\x05", r"x: unknown IDX type code 0x07"),
    (b"\x00\x00\x08\x00", r"x: IDX header with no dimensions"),
    (b"\x00\x00\x08\x02\x00\x00\x00\x01", r"x: truncated IDX header \(expected 2 dimension sizes\)"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x03\x05", r"x: fewer data bytes than its header announces"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x01\x05\x06", r"x: more data bytes than its header announces"),
    (b"\x1f\x8b\x08\x00garbage", r"x: damaged gzip data"),
])  # fmt: skip
def test_malformed_files_are_refused_naming_the_file(data, match):
    with pytest.raises(DatasetError, match=match):
        read_idx(data, "x")


def test_header_over_the_byte_budget_is_refused_before_reading():
    with pytest.raises(DatasetError, match=r"announces 4.*MASKLAB_MAX_DECODED_BYTES"):
        read_idx(b"\x00\x00\x0c\x01\x00\x00\x00\x01\x00\x00\x00\x00", "x", max_bytes=3)


def test_pairs_by_name_and_refusals():
    names = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images.idx3-ubyte",
             "t10k-labels.idx1-ubyte", "README.md"]
    pairs = find_pairs(names, "src.zip")
    assert [(p.images, p.labels, p.split) for p in pairs] == [
        ("t10k-images.idx3-ubyte", "t10k-labels.idx1-ubyte", "val"),
        ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "train")]
    one = find_pairs(["digits_idx3_ubyte", "whatever-idx1-ubyte.gz"], "d")
    assert (one[0].images, one[0].labels, one[0].split) == ("digits_idx3_ubyte", "whatever-idx1-ubyte.gz", "")
    with pytest.raises(DatasetError, match=r"src: an IDX import needs .*labels none"):
        find_pairs(["a-idx3-ubyte"], "src")
    with pytest.raises(DatasetError, match=r"src: no labels file for b-images-idx3-ubyte \(expected b-labels-idx1-ubyte"):
        find_pairs(["a-images-idx3-ubyte", "b-images-idx3-ubyte", "a-labels-idx1-ubyte", "c-labels-idx1-ubyte"], "src")


def test_real_mnist_folder_imports_like_any_image_set(workspace, shared_data):
    src = shared_data / "mnist-t10k"
    assert detect_source(src) == "idx" and detect_modality(src) == "image"
    plan = inspect_source(src)
    assert plan.modality == "image" and plan.n_items == 8000 and plan.class_names == tuple("0123456789")
    assert plan.label_counts == dict(zip("0123456789", [773, 905, 834, 803, 788, 723, 756, 813, 787, 818]))
    assert plan.skipped == [("README.md", "not an IDX file")] and "28x28 px, 1 channel(s)" in plan.notes[1]
    report = import_source(src, "mnist", ImportOptions(val_fraction=0.25, seed=3))
    ds = load_dataset("mnist")
    assert report.accepted == 8000 and ds.info.image_shape == (1, 28, 28)
    assert ds.info.n_train + ds.info.n_val == 8000 and abs(ds.info.n_val - 2000) <= 10
    # the stored pixels are the file's, row for row (the import may reorder rows: match by content)
    with gzip.open(src / "images-idx3-ubyte.gz") as f:
        raw = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(src / "labels-idx1-ubyte.gz") as f:
        lab = np.frombuffer(f.read(), np.uint8, offset=8)
    stored = {ds.images[i, :, :, 0].tobytes(): int(ds.labels[i]) for i in range(len(ds.images))}
    assert all(stored[raw[i].tobytes()] == int(lab[i]) for i in range(0, 8000, 97))


def test_zip_with_official_split_names_keeps_the_split(workspace, tmp_path):
    rng = np.random.default_rng(0)
    tr, va = rng.integers(0, 256, (12, 5, 4)), rng.integers(0, 256, (6, 5, 4))
    ytr, yva = np.arange(12) % 3 + 7, np.arange(6) % 3 + 7
    z = tmp_path / "mnistish.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("mnist/train-images-idx3-ubyte.gz", idx_bytes(tr, 0x08, gz=True))
        zf.writestr("mnist/train-labels-idx1-ubyte.gz", idx_bytes(ytr, 0x0C, gz=True))
        zf.writestr("mnist/t10k-images-idx3-ubyte", idx_bytes(va, 0x08))
        zf.writestr("mnist/t10k-labels-idx1-ubyte", idx_bytes(yva, 0x08))
        zf.writestr("mnist/notes.txt", "hello")
    report = import_source(z, None)
    ds = load_dataset(report.dataset.name)
    assert ds.info.class_names == ("7", "8", "9") and (ds.info.n_train, ds.info.n_val) == (12, 6)
    assert ds.info.image_shape == (1, 5, 4)
    val = ds.indices("val")
    got = {ds.images[i, :, :, 0].tobytes(): int(ds.labels[i]) for i in val}
    assert got == {va[i].astype(np.uint8).tobytes(): int(yva[i] - 7) for i in range(6)}


@pytest.mark.parametrize("case, match", [
    ("float_images", r"t-images-idx3-ubyte: IDX images of type float32 ; masklab imports 8-bit images"),
    ("count_mismatch", r"t-images-idx3-ubyte holds 4 images but t-labels-idx1-ubyte holds 3 labels"),
    ("float_labels", r"t-labels-idx1-ubyte: labels of shape \(4,\) and type float32"),
    ("two_channel", r"t-images-idx4-ubyte: images of shape \(4, 2, 2, 2\)"),
])  # fmt: skip
def test_bad_pairs_are_refused_and_nothing_is_written(workspace, tmp_path, case, match):
    d = tmp_path / "src"
    d.mkdir()
    im, lb, name = np.zeros((4, 2, 2)), np.zeros(4), "t-images-idx3-ubyte"
    codes = {"images": 0x08, "labels": 0x08}
    if case == "float_images":
        codes["images"] = 0x0D
    elif case == "count_mismatch":
        lb = np.zeros(3)
    elif case == "float_labels":
        codes["labels"] = 0x0D
    elif case == "two_channel":
        im, name = np.zeros((4, 2, 2, 2)), "t-images-idx4-ubyte"
    (d / name).write_bytes(idx_bytes(im, codes["images"]))
    (d / "t-labels-idx1-ubyte").write_bytes(idx_bytes(lb, codes["labels"]))
    with pytest.raises(DatasetError, match=match):
        import_source(d, "bad")
    assert not (workspace / "datasets" / "bad").exists()
