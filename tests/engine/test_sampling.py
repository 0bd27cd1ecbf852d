"""Representative samples (issue 8, item 3): one seeded, class-stratified choice for every view and
for a run's fixed visualisation rows; imports store their rows shuffled."""

from __future__ import annotations

import gzip
import io
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image

from engine.config import RunConfig
from engine.data import import_source, load_dataset, representative
from engine.data.sampling import eval_rows, import_order
from engine.masking import preview_masks
from engine.tasks import resolve
from engine.tasks.image.recipe import ImageMIMTask
from engine.tasks.text.preview import preview
from engine.tasks.text.recipe import TextMLMTask


def _round_robin(labels: np.ndarray, n: int, seed: int) -> list[int]:
    """The rule of :func:`representative` written as a plain loop, to check the vectorised one."""
    rng = np.random.default_rng(seed)
    classes = sorted(set(labels.tolist()))
    order = [classes[k] for k in rng.permutation(len(classes))]
    members = {c: list(rng.permutation([i for i, y in enumerate(labels) if y == c])) for c in classes}
    out: list[int] = []
    while len(out) < min(n, len(labels)):
        for c in order:
            if members[c] and len(out) < n:
                out.append(int(members[c].pop(0)))
    return out


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_representative_is_the_round_robin_rule(seed):
    rng = np.random.default_rng(123)
    labels = np.repeat([3, 0, 5, 1], [40, 2, 17, 9])  # class-ordered, uneven, with gaps in the ids
    labels = np.concatenate([labels, rng.integers(0, 6, 30)])
    for n in (0, 1, 4, 5, 30, len(labels), len(labels) + 5):
        got = representative(labels, n, seed=seed)
        assert got.dtype == np.int64 and got.tolist() == _round_robin(labels, n, seed), n


def test_representative_covers_classes_first_and_grows_by_prefix():
    labels = np.repeat(np.arange(10), 50)  # class-ordered like an MNIST zip
    pick = representative(labels, 8)
    assert len(set(labels[pick])) == 8  # eight rows, eight classes
    assert set(labels[representative(labels, 10)]) == set(range(10))
    assert np.array_equal(representative(labels, 16)[:8], pick)  # num_vis 8 is a prefix of 16
    assert np.array_equal(pick, representative(labels, 8))  # the same rows at every call
    assert not np.array_equal(pick, representative(labels, 8, seed=1))
    one = representative(np.zeros(100, int), 5)  # an unlabelled set: a seeded random sample
    assert len(set(one.tolist())) == 5 and not np.array_equal(one, np.arange(5))
    with pytest.raises(ValueError, match="n must be >= 0"):
        representative(labels, -1)


def _mnist(shared_data, n: int) -> tuple[np.ndarray, np.ndarray]:
    root = shared_data / "mnist-t10k"
    x = np.frombuffer(gzip.open(root / "images-idx3-ubyte.gz").read(), np.uint8, offset=16).reshape(-1, 28, 28)
    y = np.frombuffer(gzip.open(root / "labels-idx1-ubyte.gz").read(), np.uint8, offset=8)
    return x[:n], y[:n]


def test_fixed_validation_samples_of_a_class_ordered_import_cover_several_classes(workspace, tmp_path, shared_data):
    """A zip of real MNIST digits written class by class (0/, 1/, ... as a user zips folders): the
    stored rows are shuffled, and the run's fixed validation images (and the New run preview,
    which calls the same function) are one per class."""
    x, y = _mnist(shared_data, 400)
    path = tmp_path / "mnist.zip"
    with zipfile.ZipFile(path, "w") as z:
        for i in np.argsort(y, kind="stable"):
            b = io.BytesIO()
            Image.fromarray(x[i]).save(b, "PNG")
            z.writestr(f"mnist/{y[i]}/{i:05d}.png", b.getvalue())
    report = import_source(path, "mnist")
    ds = load_dataset("mnist")
    assert report.dataset.image_shape == (1, 28, 28)  # the data's own size
    assert (np.diff(ds.labels) != 0).sum() > 100  # not stored class by class any more
    val_labels = ds.labels[ds.indices("val")]
    assert len(set(val_labels[:8].tolist())) > 1

    cfg = resolve(RunConfig.from_dict({"data": {"dataset": "mnist"}, "model": {"preset": "tiny", "patch_size": 4},
                               "train": {"num_vis": 8, "device": "cpu"}}))
    task = ImageMIMTask(cfg, torch.device("cpu"))
    s = task.sample(0)
    names = [ds.info.class_names[k] for k in s["labels"]]
    assert len(set(names)) == 8, names  # eight fixed validation images, eight different digits
    # what the New run preview draws: the same rows (representative) and the same masks
    rows = representative(val_labels, 8)
    x_val, _ = ds.tensors("val")
    assert np.array_equal(s["images"], x_val[rows].numpy())
    assert np.array_equal(s["mask"], preview_masks(cfg, (1, 28, 28), 8, images=x_val[rows]).numpy())


def test_text_samples_of_a_class_ordered_table_cover_every_class_and_match_the_preview(workspace, tmp_path, shared_data):
    lines = (shared_data / "trec" / "train.tsv").read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], sorted(lines[1:600], key=lambda r: r.split("\t")[0])  # class by class
    path = tmp_path / "questions.tsv"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    import_source(path, "questions")
    cfg = resolve(RunConfig.from_dict({"task": "text_mlm", "data": {"dataset": "questions", "tokenizer": {"vocab_size": 500}},
                               "model": {"preset": "mini"}, "train": {"num_vis": 8, "device": "cpu"}}))
    task = TextMLMTask(cfg, torch.device("cpu"))
    s = task.sample(0)
    ds = load_dataset("questions")
    assert {ds.info.class_names[k] for k in s["labels"]} == set(ds.info.class_names)  # 6 classes in 8 rows
    pv = preview(cfg, 8)
    assert pv.texts == s.meta["texts"] and np.array_equal(pv.mask, s["mask"]) and np.array_equal(pv.labels, s["labels"])


def test_import_order_is_a_seeded_permutation():
    a = import_order(50, 0)
    assert sorted(a.tolist()) == list(range(50)) and np.array_equal(a, import_order(50, 0))
    assert not np.array_equal(a, import_order(50, 1)) and not np.array_equal(a, np.arange(50))


def test_eval_rows_are_a_seeded_sample_of_the_split_not_its_first_rows():
    class Split:  # any dataset: rows 0..999 in class order, the odd hundreds in val
        labels = np.repeat(np.arange(10), 100)
        split = (np.arange(1000) // 100 % 2).astype(np.uint8)

        def indices(self, s):
            return np.flatnonzero(self.split == ("train", "val").index(s))

    ds = Split()
    rows = eval_rows(ds, "train", 50)
    assert len(rows) == 50 and np.all(np.diff(rows) > 0) and set(rows) <= set(ds.indices("train"))
    assert np.array_equal(rows, eval_rows(ds, "train", 50))  # the same rows for every run
    assert len(set(ds.labels[rows])) == 5 and len(set(ds.labels[ds.indices("train")[:50]])) == 1
    assert np.array_equal(eval_rows(ds, "val", 500), ds.indices("val"))  # a small split: every row
    assert np.array_equal(eval_rows(ds, "val", None), ds.indices("val"))


def test_an_evaluation_of_a_class_ordered_idx_import_reads_every_class(workspace, tmp_path, shared_data):
    """Real MNIST digits in an IDX file sorted by class (an IDX import keeps its file's order): the
    rows the probes, the fine-tune and the raw-input baseline read cover every digit."""
    x, y = _mnist(shared_data, 600)
    order = np.argsort(y, kind="stable")
    for name, magic, arr in (("images-idx3-ubyte.gz", 0x803, x[order]), ("labels-idx1-ubyte.gz", 0x801, y[order])):
        header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in arr.shape)
        (tmp_path / name).write_bytes(gzip.compress(header + arr.astype(np.uint8).tobytes()))
    import_source(tmp_path, "sorted-digits")
    ds = load_dataset("sorted-digits")
    assert len(set(ds.labels[ds.indices("train")[:60]])) <= 2  # stored class by class
    cfg = resolve(RunConfig.from_dict({"data": {"dataset": "sorted-digits"}, "model": {"preset": "tiny", "patch_size": 7},
                                       "train": {"device": "cpu"}}))
    task = ImageMIMTask(cfg, torch.device("cpu"))
    _, y_feat = task.features("train", 60)
    (_, y_raw), _ = task.raw_features(60)
    ft = task.finetune_inputs(60)
    assert set(y_feat.tolist()) == set(range(10)), sorted(set(y_feat.tolist()))
    assert np.array_equal(y_feat, ds.labels[eval_rows(ds, "train", 60)])
    assert np.array_equal(y_raw, y_feat) and np.array_equal(ft.y_train, y_feat)
