"""Training loop on real digits: reproducibility, logged metrics, samples, checkpoints, failures."""

from __future__ import annotations

import pytest
import torch

from engine.config import RunConfig
from engine.masking import preview_masks, strategies_for
from engine.runner.worker import execute_run
from engine.store import create_run, get_run, load_samples, read_metrics
from engine.store.checkpoints import list_checkpoints, load_weights
from engine.store.metrics import MetricsWriter
from engine.tasks import resolve
from engine.training.loop import epoch_order, train
from engine.training.writers import run_writers

SHORT = {"name": "t", "data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
         "train": {"steps": 12, "batch_size": 32, "eval_interval": 6, "checkpoint_interval": 6,
                   "warmup_steps": 2, "seed": 3, "num_vis": 8, "device": "cpu"}}


def _run(cfg: dict) -> str:
    run_id, d = create_run(resolve(RunConfig.from_dict(cfg)).to_dict())
    assert execute_run(d) == "completed", get_run(run_id).error
    return run_id


def _curve(run_id: str, key: str = "loss"):
    df = read_metrics([run_id], [key], max_points=None)
    return df.step.tolist(), df.value.tolist()


def test_same_seed_same_loss_curve_and_masks(workspace):
    a, b = _run(SHORT), _run(SHORT)
    steps, va = _curve(a)
    assert steps == list(range(1, 13))
    assert va == _curve(b)[1]  # bit-identical on CPU
    c = _run({**SHORT, "train": {**SHORT["train"], "seed": 4}})
    assert _curve(c)[1] != va


def test_metrics_samples_and_checkpoints(workspace):
    run_id = _run(SHORT)
    rec = get_run(run_id)
    assert rec.status == "completed" and rec.step == 12 and rec.progress == 1.0
    assert {"loss", "lr", "mask_ratio", "throughput", "step_time", "val_loss"} <= set(rec.latest)
    assert _curve(run_id, "val_loss")[0] == [0, 6, 12]  # step 0 is the untrained model
    ratios = _curve(run_id, "mask_ratio")[1]
    assert all(r == 12 / 16 for r in ratios)  # exact count: 12 of 16 patches at ratio 0.75
    s = load_samples(run_id)
    assert s.step == 12 and s.kind == "image" and s["images"].shape == (8, 1, 8, 8) and s["mask"].shape == (8, 4, 4)
    assert s["pred_img"].shape == s["pasted"].shape == s["images"].shape
    # The reconstruction grid uses exactly the masks that the New run preview draws.
    cfg = resolve(RunConfig.from_dict(rec.config))
    assert torch.equal(torch.from_numpy(s["mask"]), preview_masks(cfg, (1, 8, 8), 8))
    # pasted keeps the original pixels at visible patches
    vis = ~s["mask"].repeat(2, axis=1).repeat(2, axis=2)[:, None]
    assert (abs(s["pasted"] - s["images"])[vis] < 1e-6).all()
    ckpts = list_checkpoints(rec.path)
    assert [p.name for p in ckpts] == ["step-0000006", "step-0000012"]
    assert any(k.startswith("decoder") for k in load_weights(ckpts[-1]))


def test_failed_run_records_the_error(workspace):
    run_id, d = create_run(resolve(RunConfig.from_dict({**SHORT, "data": {"dataset": "no-such-set"}})).to_dict())
    assert execute_run(d) == "failed"
    rec = get_run(run_id)
    assert rec.status == "failed" and "no-such-set" in rec.error


def test_every_image_strategy_trains_with_its_defaults(workspace):
    """Image runs use the masking library: every strategy offered for images trains a few steps on
    real digits, ragged ones (Bernoulli, superpixels...) through the padded encoder batch."""
    for name in strategies_for("image", 2):
        cfg = {**SHORT, "masking": {"strategy": name, "ratio": 0.5},
               "train": {**SHORT["train"], "steps": 3, "eval_interval": 3, "checkpoint_interval": 3}}
        run_id = _run(cfg)
        rec = get_run(run_id)
        assert rec.step == 3 and 0.0 < rec.latest["mask_ratio"] < 1.0, name
        assert torch.isfinite(torch.tensor(_curve(run_id)[1])).all(), name


def test_ratio_schedule_is_followed_step_by_step(workspace):
    cfg = {**SHORT, "masking": {"strategy": "random", "ratio": 0.25, "schedule": "linear", "final_ratio": 0.75},
           "train": {**SHORT["train"], "steps": 9}}
    ratios = _curve(_run(cfg), "mask_ratio")[1]
    # step s (1-based log) used ratio_at(s - 1): 0.25 -> 0.75 in 8 equal steps, exact counts of 16 patches
    expected = [round((0.25 + 0.5 * i / 8) * 16) / 16 for i in range(9)]
    assert ratios == expected


def test_epoch_order_without_lengths_is_a_random_permutation():
    order = epoch_order(10, 3, torch.Generator().manual_seed(5))
    assert order.dtype == torch.int32  # 4 bytes a row: the order of millions of texts stays small
    assert torch.equal(order.long(), torch.randperm(10, generator=torch.Generator().manual_seed(5)))


def _grouped_order_reference(n, batch, generator, lengths, group_batches):
    """Length-grouped order, written plainly with new arrays at every stage (int64)."""
    perm = torch.randperm(n, generator=generator)
    full = n - n % batch
    body, tail = perm[:full], perm[full:]
    size = group_batches * batch
    grouped = torch.cat([g[torch.argsort(lengths[g], stable=True)] for g in body.split(size)]) if full else body
    batches = grouped.view(-1, batch)
    return torch.cat([batches[torch.randperm(len(batches), generator=generator)].reshape(-1), tail])


def test_epoch_order_in_place_equals_the_plain_length_grouped_order():
    """The in-place sort and shuffle give exactly the order of the plain construction, so a run's
    batches (and a resume's) do not depend on how the order is built; ties keep their random order."""
    for n, batch, groups in [(0, 4, 50), (3, 4, 50), (4, 4, 1), (23, 4, 100), (1000, 7, 3), (5000, 64, 50)]:
        lengths = torch.randint(1, 12, (n,), generator=torch.Generator().manual_seed(n))  # many ties
        got = epoch_order(n, batch, torch.Generator().manual_seed(9), lengths, group_batches=groups)
        want = _grouped_order_reference(n, batch, torch.Generator().manual_seed(9), lengths, groups)
        assert got.dtype == torch.int32 and torch.equal(got.long(), want), (n, batch, groups)


def test_epoch_order_groups_rows_of_similar_length_into_batches():
    n, batch = 23, 4
    lengths = torch.randperm(n, generator=torch.Generator().manual_seed(0)) + 3  # distinct lengths 3..25
    order = epoch_order(n, batch, torch.Generator().manual_seed(1), lengths, group_batches=100)
    assert sorted(order.tolist()) == list(range(n))  # every row once
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    assert torch.equal(order[20:], perm[20:])  # the 3 rows the loop leaves out: the random draw's tail
    # One group holds all 20 other rows: the batches are consecutive runs of their sorted lengths.
    body = sorted(lengths[perm[:20]].tolist())
    expected = {tuple(body[i : i + batch]) for i in range(0, 20, batch)}
    got = [tuple(sorted(lengths[order[i : i + batch]].tolist())) for i in range(0, 20, batch)]
    assert set(got) == expected and len(got) == len(expected)
    # Small groups (2 batches of 2) on lengths = row ids: each group of 4 random rows is sorted on its own.
    small = epoch_order(16, 2, torch.Generator().manual_seed(2), torch.arange(16), group_batches=2)
    p = torch.randperm(16, generator=torch.Generator().manual_seed(2))
    expected = {tuple(g[i : i + 2]) for g in (sorted(q.tolist()) for q in p.split(4)) for i in (0, 2)}
    assert {tuple(small[i : i + 2].tolist()) for i in range(0, 16, 2)} == expected


def test_epoch_order_refuses_bad_lengths_and_batch():
    with pytest.raises(ValueError, match=r"lengths must be \[n\] = \[5\]"):
        epoch_order(5, 2, torch.Generator(), torch.ones(4))
    with pytest.raises(ValueError, match="batch must be >= 1"):
        epoch_order(5, 0, torch.Generator())


def test_a_checkpoint_is_written_only_after_the_rows_up_to_its_step_are_stored(workspace):
    """A kill just after a checkpoint must not lose the rows before it (a resume starts at the
    checkpoint's step + 1). The real metrics writer, with a flush interval that never elapses, is
    read back at every step: wherever a checkpoint of step N exists, rows 1..N are on disk."""
    spec = {**SHORT, "train": {**SHORT["train"], "eval_interval": 12, "checkpoint_interval": 4}}  # an eval flushes too
    run_id, d = create_run(resolve(RunConfig.from_dict(spec)).to_dict())
    cfg = resolve(RunConfig.from_dict(spec))
    writer = MetricsWriter(d, run_id, flush_interval=1e9)
    seen = []

    def check(step: int) -> None:
        ckpts = [int(p.name.split("-")[1]) for p in list_checkpoints(d)]
        if ckpts:
            stored = read_metrics([run_id], ["loss"], max_points=None).step.tolist()
            assert stored[: max(ckpts)] == list(range(1, max(ckpts) + 1)), (step, ckpts, stored)
            seen.append(max(ckpts))

    train(cfg, run_writers(d, writer, keep_checkpoints=cfg.train.keep_checkpoints), on_step=check, workspace=workspace)
    assert seen and seen[-1] == 12 and {4, 8} <= set(seen)
