"""Datasets on disk: one ``.npy`` per array, the payload memory-mapped (engine.data.storage).

For every modality, on slices of real bundled data: the memory-mapped dataset gives exactly the
batches, masks, losses and validation figures of the same data held in memory (an old-format
``data.npz`` dataset, which is read whole); an old ``data.npz`` dataset still trains through the
worker; a truncated, garbled or missing array file is a DatasetError naming the file.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from engine.config import RunConfig
from engine.data import AudioDataset, ImageDataset, PairedDataset, TextDataset, load_dataset
from engine.data.dataset import to_pcm
from engine.data.storage import LEGACY_DATA, MAPPED, META, array_path, content_hash, datasets_dir, save_dataset
from engine.errors import DatasetError
from engine.runner.worker import execute_run
from engine.store import create_run, get_run
from engine.tasks import build_task, resolve
from engine.workspace import atomic_write_json

ROWS = 64  # rows of each real dataset kept (the first ones in stored order: shuffled at import)
TRAIN = {"steps": 2, "batch_size": 8, "eval_interval": 2, "checkpoint_interval": 2, "num_vis": 2, "warmup_steps": 1,
         "num_threads": 1}
CONFIGS = {
    "image": {"task": "image_mim", "model": {"preset": "tiny", "patch_size": 2}},
    "text": {"task": "text_mlm", "data": {"tokenizer": {"vocab_size": 300, "max_len": 32}}, "model": {"preset": "tiny"}},
    "audio": {"task": "audio_mae", "data": {"audio": {"n_mels": 64, "window_ms": 25, "hop_ms": 10, "clip_seconds": 1.0}},
              "model": {"arch": "audio_mae_vit", "preset": "tiny", "patch_size": 8}},
    "paired": {"task": "paired", "data": {"tokenizer": {"vocab_size": 300, "max_len": 24}},
               "model": {"preset": "tiny", "patch_size": 2}},
}


PAYLOAD = {"image": "images", "text": "text_bytes", "audio": "audio_pcm", "paired": "images"}


def _info(info, split: np.ndarray, name: str):
    return dataclasses.replace(info, name=name, n_train=int((split == 0).sum()), n_val=int((split == 1).sum()))


def _slice(ds, name: str):
    """The first :data:`ROWS` rows of a real dataset, in memory, as a dataset ``name`` of its class."""
    rows = np.arange(min(ROWS, len(ds)))
    labels, split = np.asarray(ds.labels[rows]), np.asarray(ds.split[rows])
    info = _info(ds.info, split, name)
    if isinstance(ds, PairedDataset):
        return PairedDataset.from_pairs(info, np.asarray(ds.images[rows]), ds.texts_at(rows), labels, split)
    if isinstance(ds, ImageDataset):
        return ImageDataset(info, np.asarray(ds.images[rows]), labels, split)
    if isinstance(ds, TextDataset):
        return TextDataset.from_texts(info, ds.texts_at(rows), labels, split)
    assert isinstance(ds, AudioDataset)
    return AudioDataset.from_clips(info, [to_pcm(ds.clip(int(i)))[0] for i in rows], ds.rate, labels, split,
                                   transcripts=[ds.transcript(int(i)) for i in rows])


def write_legacy(ds, name: str, workspace) -> None:
    """Register ``ds`` as ``name`` the way masklab did before the memory-mapped format: one
    uncompressed ``data.npz`` beside ``meta.json``."""
    arrays = ds.arrays()
    info = dataclasses.replace(ds.info, name=name, source_hash=content_hash(arrays))
    folder = datasets_dir(workspace) / name
    folder.mkdir()
    np.savez(folder / LEGACY_DATA, **arrays)
    atomic_write_json(folder / META, info.to_dict())


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A workspace with ``<modality>-new`` (memory-mapped format) and ``<modality>-old``
    (``data.npz``) for each modality: the same first rows of digits, fortunes, asterisk-prompts, and
    digits captioned with fortunes as pairs."""
    root = tmp_path_factory.mktemp("storage")
    bundled = root / "bundled"
    ws = root / "workspace"
    parts = {m: _slice(load_dataset(name, bundled), f"{m}-new")
             for m, name in (("image", "digits"), ("text", "fortunes"), ("audio", "asterisk-prompts"))}
    # Pairs: the digit images captioned with the first fortunes (real pixels and real text; the
    # pairing does not matter to storage, and building tuxpaint-stamps would cost ~10 s).
    img, txt = parts["image"], parts["text"]
    parts["paired"] = PairedDataset.from_pairs(dataclasses.replace(img.info, name="paired-new", modality="paired"),
                                               img.images, txt.texts(), img.labels, img.split)
    for m, part in parts.items():
        save_dataset(part, ws)
        write_legacy(part, f"{m}-old", ws)
    return ws


def cfg_of(modality: str, dataset: str) -> RunConfig:
    d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in CONFIGS[modality].items()}
    d["data"] = {**d.get("data", {}), "dataset": dataset}
    d["train"] = TRAIN
    return resolve(RunConfig.from_dict(d))


@pytest.mark.parametrize("modality", list(CONFIGS))
def test_memory_mapped_dataset_gives_the_in_memory_batches(ws, modality):
    new, old = load_dataset(f"{modality}-new", ws), load_dataset(f"{modality}-old", ws)
    a_new, a_old = new.arrays(), old.arrays()
    assert a_new.keys() == a_old.keys()
    for key in a_new:  # payload mapped from disk, read-only; the old format wholly in memory; same bytes
        assert isinstance(getattr(new, key), np.memmap) == (key in MAPPED), key
        assert not isinstance(getattr(old, key), np.memmap)
        assert a_new[key].dtype == a_old[key].dtype and np.array_equal(a_new[key], a_old[key]), key
    assert load_dataset(f"{modality}-new", ws).info.source_hash == old.info.source_hash
    with pytest.raises(ValueError, match="read-only"):  # nothing can write through to the stored dataset
        getattr(new, PAYLOAD[modality])[0] = 0

    tasks = []
    for name in (f"{modality}-new", f"{modality}-old"):
        torch.manual_seed(0)
        tasks.append(build_task(cfg_of(modality, name), "cpu", ws))
    t_new, t_old = tasks
    assert t_new.n_train == t_old.n_train
    idx = torch.randperm(t_new.n_train, generator=torch.Generator().manual_seed(1))[:8]
    if hasattr(t_new, "train_batch"):  # image and paired read each batch's rows from the dataset
        xb = t_new.train_batch(idx)
        rows = t_new.train_rows[idx.numpy()]
        expected = torch.from_numpy(a_old["images"][rows]).permute(0, 3, 1, 2).float() / 255
        assert torch.equal(xb, t_old.train_batch(idx)) and torch.equal(xb, expected)
    out = [t.train_loss(idx, torch.Generator().manual_seed(2), 0.5) for t in tasks]
    (l_new, logs_new), (l_old, logs_old) = out
    assert torch.equal(l_new, l_old) and float(l_new.detach()) > 0
    assert {k: float(v) for k, v in logs_new.items()} == {k: float(v) for k, v in logs_old.items()}
    with torch.no_grad():
        assert t_new.evaluate() == t_old.evaluate()


def test_image_masks_of_a_memory_mapped_batch_are_the_in_memory_ones(ws):
    tasks = []
    for name in ("image-new", "image-old"):
        torch.manual_seed(0)
        tasks.append(build_task(cfg_of("image", name), "cpu", ws))
    idx = torch.tensor([5, 0, 17, 3, 3, 40])  # any order, repeats allowed
    masks = [t._draw(t.train_batch(idx), torch.Generator().manual_seed(7), 0.75) for t in tasks]
    assert masks[0].shape == (6, 16) and torch.equal(masks[0], masks[1])
    assert torch.equal(tasks[0].eval_masks[0], tasks[1].eval_masks[0])
    assert torch.equal(tasks[0].vis_x, tasks[1].vis_x) and torch.equal(tasks[0].vis_mask, tasks[1].vis_mask)


def test_an_old_data_npz_dataset_still_trains_through_the_worker(ws, monkeypatch):
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    folder = datasets_dir(ws) / "image-old"
    assert sorted(p.name for p in folder.iterdir()) == [LEGACY_DATA, META]
    run_id, d = create_run(cfg_of("image", "image-old").to_dict(), ws)
    assert execute_run(d) == "completed"
    rec = get_run(run_id, ws)
    assert rec.step == 2 and np.isfinite(rec.latest["val_loss"])
    assert sorted(p.name for p in folder.iterdir()) == [LEGACY_DATA, META]  # read, never rewritten


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-7])


def _garble(path):
    path.write_bytes(b"not a numpy file" + path.read_bytes()[16:])


@pytest.mark.parametrize("damage", [_truncate, _garble, lambda p: p.unlink()], ids=["truncated", "garbled", "missing"])
@pytest.mark.parametrize("key", ["images", "labels", "split"])
def test_a_damaged_array_file_is_a_dataset_error_naming_it(ws, key, damage):
    name = f"broken-{key}-{damage.__name__.strip('_<>')}"
    ds = load_dataset("image-new", ws)
    save_dataset(dataclasses.replace(ds, info=_info(ds.info, ds.split, name)), ws)
    path = array_path(datasets_dir(ws) / name, key)
    damage(path)
    with pytest.raises(DatasetError, match=rf"{name}/{key}\.npy: (cannot read|missing)"):
        load_dataset(name, ws)


def test_a_damaged_old_data_npz_is_a_dataset_error_naming_it(ws):
    write_legacy(load_dataset("text-old", ws), "old-broken", ws)
    _truncate(datasets_dir(ws) / "old-broken" / LEGACY_DATA)
    with pytest.raises(DatasetError, match=r"old-broken/data\.npz: cannot read dataset arrays"):
        load_dataset("old-broken", ws)


def test_rows_and_texts_read_only_what_is_asked(ws):
    """The per-row readers give what slicing a whole split gave, for any row order."""
    img, txt = load_dataset("image-new", ws), load_dataset("paired-new", ws)
    rows = img.indices("train")[[4, 1, 9]]
    x, y = img.rows_tensors(rows)
    whole_x, whole_y = img.tensors("train")
    assert torch.equal(x, whole_x[[4, 1, 9]]) and torch.equal(y, whole_y[[4, 1, 9]])
    assert torch.equal(img.tensors("val", limit=3)[0], img.tensors("val")[0][:3])
    assert txt.texts_at([3, 0]) == [txt.text(3), txt.text(0)]
    assert txt.texts("train", limit=5) == txt.texts("train")[:5] and len(txt.texts("train", limit=5)) == 5
