"""Images to the device as uint8, converted there (engine.training.feed): the same values as the
dataset's own float conversion, on every path; the image task's batches come from it."""

from __future__ import annotations

import pytest
import torch

from engine.config import RunConfig
from engine.data import load_dataset
from engine.pretrained.runs import FittedImages
from engine.tasks import build_task, resolve
from engine.training.feed import DEVICE_DATA_MB, ImageFeed, device_data_mb, image_feed


@pytest.mark.parametrize("keep", [False, True])
def test_a_feed_gives_the_datasets_own_float_images_for_any_positions(keep):
    ds = load_dataset("digits")
    rows = ds.indices("train")
    feed = ImageFeed(ds.images, rows, torch.device("cpu"), keep=keep)
    assert (feed.resident is not None) == keep
    idx = torch.tensor([5, 0, 5, len(rows) - 1])  # any order, repeats
    want = ds.rows_tensors(rows[idx.numpy()])[0]
    got = feed.batch(idx)
    assert got.dtype == torch.float32 and got.shape == want.shape and torch.equal(got, want)


def test_on_a_cpu_nothing_is_kept_and_the_cap_comes_from_the_environment(monkeypatch):
    ds = load_dataset("digits")
    assert ImageFeed(ds.images, ds.indices("train"), torch.device("cpu")).resident is None
    monkeypatch.setenv("MASKLAB_DEVICE_DATA_MB", "12.5")
    assert device_data_mb() == 12.5
    for bad in ("lots", ""):
        monkeypatch.setenv("MASKLAB_DEVICE_DATA_MB", bad)
        assert device_data_mb() == DEVICE_DATA_MB


def test_the_image_task_reads_its_batches_through_the_feed():
    cfg = resolve(RunConfig.from_dict({"name": "feed", "data": {"dataset": "digits"}, "train": {"steps": 2, "batch_size": 8}}))
    task = build_task(cfg, torch.device("cpu"))
    assert task._feed is not None
    idx = torch.tensor([3, 1, 4])
    want = load_dataset("digits").rows_tensors(task.train_rows[idx.numpy()])[0]
    assert torch.equal(task.train_batch(idx), want)


def test_only_stored_uint8_images_are_fed_fitted_ones_are_read_as_before():
    ds = load_dataset("digits")
    rows = ds.indices("train")
    assert image_feed(ds, rows, torch.device("cpu")) is not None
    assert image_feed(FittedImages(ds, (3, 16, 16)), rows, torch.device("cpu")) is None  # resized for an imported model
