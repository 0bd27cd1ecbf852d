"""engine.runner.sweep: the configs of a sweep, the refusals that name each bad value, and submit_sweep's
role check and queue room (refused before anything is queued), on the real store."""

from __future__ import annotations

import pytest

from engine.access.audit import read_audit
from engine.access.policy import Identity
from engine.cli import main
from engine.errors import ConfigError, PermissionDeniedError, QueueFullError
from engine.runner.sweep import parse_seeds, parse_values, plan_sweep, submit_sweep, sweep_configs, sweep_of
from engine.store import list_runs

BASE = {"name": "base", "data": {"dataset": "digits"}, "train": {"steps": 7}}


def test_configs_vary_the_field_and_the_seed_and_name_the_sweep():
    cfgs = sweep_configs(BASE, "train.lr", [0.001, 0.002], [3, 7], sweep_id="00abcd")
    assert [(c.train.lr, c.train.seed) for c in cfgs] == [(0.001, 3), (0.001, 7), (0.002, 3), (0.002, 7)]
    assert all(c.train.steps == 7 and c.data.dataset == "digits" for c in cfgs)
    assert [sweep_of(c.name) for c in cfgs][1] == {"id": "00abcd", "field": "train.lr", "value": 0.001, "seed": 7,
                                                  "base": "base"}


def test_small_float_values_round_trip_through_the_run_name_as_numbers():
    cfgs = sweep_configs(BASE, "train.lr", [1e-05, 0.0003])  # repr 1e-05: text to YAML 1.1
    assert [c.train.lr for c in cfgs] == [1e-05, 0.0003]
    assert [sweep_of(c.name)["value"] for c in cfgs] == [1e-05, 0.0003]


def test_a_strategy_sweep_gives_each_other_strategy_its_own_default_parameters():
    base = {**BASE, "masking": {"strategy": "block", "params": {"min_aspect": 0.5}}}
    block, rnd = sweep_configs(base, "masking.strategy", ["block", "random"])
    assert block.masking.params["min_aspect"] == 0.5  # the base's strategy keeps the form's parameters
    assert rnd.masking.strategy == "random" and rnd.masking.params == {}


@pytest.mark.parametrize("field, values, seeds, message", [
    ("masking.ratio", [0.5, 1.5, "abc"], [0], "sweep value masking.ratio=1.5: invalid run config: masking.ratio: "
                                               "must be at most 1.0 (got 1.5)\nsweep value masking.ratio=abc: invalid "
                                               "run config: masking.ratio: must be a number (got 'abc')"),
    ("masking.ratio", [0.5, 0.5], [0], "sweep value masking.ratio=0.5: listed twice"),
    ("model.preset", ["tiny", "very big"], [0], "sweep value model.preset='very big': a swept value cannot be empty or "
                                                "contain a space (the run names record it)"),
    ("train.lrr", [0.1], [0], "sweep value train.lrr=0.1: invalid run config: train.lrr: unknown field"),
    ("train.seed", [1, 2], [0], "train.seed cannot be swept: the seeds are the sweep's replicates"),
    ("name", ["a"], [0], "name cannot be swept: a sweep names its runs itself"),
    ("train lr", [0.1], [0], "sweep field 'train lr' is not a dotted config path"),
    ("train.lr", [0.1], [1, 1], "a seed is listed twice in 1, 1"),
    ("train.lr", [], [0], "needs at least one value and one seed"),
])  # fmt: skip
def test_bad_fields_values_and_seeds_are_refused_naming_each(field, values, seeds, message):
    with pytest.raises(ConfigError) as e:
        sweep_configs(BASE, field, values, seeds)
    assert message in str(e.value)


def test_plan_runs_the_launch_pre_flight_check_per_value(workspace):
    with pytest.raises(ConfigError) as e:
        plan_sweep(BASE, "masking.strategy", ["random", "time_mask"], [0, 1], workspace)
    assert str(e.value).startswith("sweep value masking.strategy=time_mask: masking.strategy: 'time_mask' does not "
                                   "apply to image patch grids")
    assert len(plan_sweep(BASE, "model.patch_size", [2, 4], [0, 1], workspace)) == 4
    with pytest.raises(ConfigError, match=r"^sweep value model.patch_size=3: .*3"):
        plan_sweep(BASE, "model.patch_size", [2, 3], [0], workspace)  # 3 does not tile 8x8 digits


def test_parse_values_and_seeds():
    assert parse_values("0.25, 0.5,, 1e-3, block, true, 3") == [0.25, 0.5, 0.001, "block", True, 3]
    assert [type(v) for v in parse_values("1e-3, 3")] == [float, int]
    assert parse_seeds(" 0, 3,7 ") == [0, 3, 7]
    for text, message in (("", "at least one value"), ("[1, 2]", "is not a single number or word"),
                          ("{a: 1}", "is not a single number or word")):
        with pytest.raises(ConfigError, match=message):
            parse_values(text)
    for text, message in (("", "at least one seed"), ("1, x", "seed 'x' is not a whole number"),
                          ("-1", "seed '-1' is not"), ("2, 2", "seed 2 is listed twice"),
                          ("9999999999", "seed '9999999999' is not")):
        with pytest.raises(ConfigError, match=message):
            parse_seeds(text)


def test_a_viewer_may_not_launch_a_sweep_and_nothing_is_queued(workspace):
    with pytest.raises(PermissionDeniedError, match=r"vera \(viewer\) may not launch runs"):
        submit_sweep(BASE, "masking.ratio", [0.5, 0.75], [0], workspace, actor=Identity("vera", "viewer", "password"))
    assert list_runs(workspace) == []
    entry = read_audit(workspace)[0]
    assert (entry.user, entry.action, entry.outcome) == ("vera", "run.submit", "refused")


def test_a_sweep_larger_than_the_queue_room_is_refused_before_any_run_is_queued(workspace, monkeypatch):
    monkeypatch.setenv("MASKLAB_MAX_QUEUED", "3")
    with pytest.raises(QueueFullError, match=r"this sweep is 4 runs but the queue has room for 3 \(0 waiting, "
                                             r"MASKLAB_MAX_QUEUED=3\); nothing was queued"):
        submit_sweep(BASE, "masking.ratio", [0.5, 0.75], [0, 1], workspace)
    assert list_runs(workspace) == []


def test_the_cli_refuses_bad_values_in_words_and_queues_nothing(workspace, capsys):
    assert main(["sweep", "--over", "masking.ratio=0.5,1.5,0.5", "--set", "train.steps=5"]) == 2
    assert capsys.readouterr().err == ("error: sweep value masking.ratio=1.5: invalid run config: masking.ratio: must "
                                       "be at most 1.0 (got 1.5)\nsweep value masking.ratio=0.5: listed twice\n")
    assert list_runs(workspace) == []
