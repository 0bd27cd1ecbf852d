"""New run's Sweep section in AppTest against the real engine: a sweep launched from the form queues
values x seeds runs in the store with the swept field, the seeds and one sweep id, which the Sweeps
page (linked with ``?sweep=<id>``) selects; bad values, seeds and a full queue are refused in words."""

from __future__ import annotations

import time
from urllib.parse import parse_qs

import pytest
from streamlit.testing.v1 import AppTest

from engine.runner.launcher import cancel
from engine.runner.sweep import sweep_of, sweep_table
from engine.store import list_runs
from tests.app.pages import ENTRY, open_with

FORM = {"dataset": "digits", "train.steps": "5", "train.batch_size": "32", "sweep_on": "true"}


def launch_button(at):
    return next(b for b in at.button if b.label == "Launch sweep")


def test_the_section_counts_runs_and_steps_and_keeps_its_state_in_the_url(workspace):
    at = open_with("../pages/new_run.py", {**FORM, "sweep_field": "train.lr", "sweep_values": "0.001, 0.002, 0.004",
                                           "sweep_seeds_as": "list", "sweep_seeds": "3, 7"})  # fmt: skip
    assert at.selectbox(key="nr_sw_field").value == "other" and at.text_input(key="nr_sw_path").value == "train.lr"
    assert at.text_input(key="nr_sw_seeds").value == "3, 7"
    assert "**6 runs** (3 values × 2 seeds) · 5 steps each · **30 steps in all** · 2 train at a time" in \
        [c.value for c in at.caption]
    assert not launch_button(at).disabled and not [b for b in at.button if b.label == "Launch"]
    assert not any("python -m engine sweep" in c.value for c in at.code)  # listed seeds: the CLI takes a count
    at.radio(key="nr_sw_seeds_as").set_value("count").run()
    at.number_input(key="nr_sw_replicates").set_value(1).run()
    assert at.query_params["sweep_seeds_as"] in ("count", ["count"])
    assert at.query_params["sweep_replicates"] in ("1", ["1"])
    assert "**3 runs** (3 values × 1 seed) · 5 steps each · **15 steps in all** · 2 train at a time" in \
        [c.value for c in at.caption]
    command = next(c.value for c in at.code if c.value.startswith("python -m engine sweep"))
    assert "--over train.lr=0.001,0.002,0.004" in command and "--seeds 1" in command
    at.selectbox(key="nr_sw_field").set_value("masking.ratio").run()  # another field: its own proposal
    assert at.text_input(key="nr_sw_values_masking.ratio").value == "0.25, 0.5, 0.75, 0.9"
    assert at.query_params["sweep_field"] in ("masking.ratio", ["masking.ratio"])
    at.toggle(key="nr_sw_on").set_value(False).run()
    assert [b.label for b in at.button if b.label.startswith("Launch")] == ["Launch"]
    assert list_runs(workspace) == []


@pytest.mark.parametrize("params, errors", [
    ({"sweep_values": "0.5, 1.5, abc"}, [
        "sweep value masking.ratio=1.5: invalid run config: masking.ratio: must be at most 1.0 (got 1.5)",
        "sweep value masking.ratio=abc: invalid run config: masking.ratio: must be a number (got 'abc')"]),
    ({"sweep_field": "masking.strategy", "sweep_values": "random, time_mask"}, [
        "sweep value masking.strategy=time_mask: masking.strategy: 'time_mask' does not apply to image patch grids; "
        "strategies for images: attention, bernoulli, block, hierarchical, periodic, random, region, superpixel"]),
    ({"sweep_field": "model.patch_size", "sweep_values": "2, 2"}, ["sweep value model.patch_size=2: listed twice"]),
    ({"sweep_field": "train.seed", "sweep_values": "1, 2"}, [
        "train.seed cannot be swept: the seeds are the sweep's replicates (give them as seeds)"]),
    ({"sweep_seeds_as": "list", "sweep_seeds": "0, x"}, ["seed 'x' is not a whole number from 0 to 2147483647"]),
])  # fmt: skip
def test_a_bad_value_or_seed_is_refused_in_words_and_launch_stays_off(workspace, params, errors):
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    at.run().switch_page("../pages/new_run.py")
    at.query_params.clear()
    for k, v in {**FORM, **params}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [e.value for e in at.error] == errors
    assert launch_button(at).disabled
    assert list_runs(workspace) == []


def test_a_sweep_larger_than_the_queue_room_is_refused(workspace, monkeypatch):
    monkeypatch.setenv("MASKLAB_MAX_QUEUED", "3")
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    at.run().switch_page("../pages/new_run.py")
    at.query_params.clear()
    for k, v in {**FORM, "sweep_values": "0.5, 0.75"}.items():
        at.query_params[k] = v
    at.run()
    assert [e.value for e in at.error] == ["The queue has room for 3 more runs (0 waiting, MASKLAB_MAX_QUEUED=3): "
                                           "sweep fewer values or seeds, or wait for queued runs to start."]
    assert launch_button(at).disabled


@pytest.mark.slow  # starts a worker process per run
def test_launch_queues_values_times_seeds_runs_and_links_to_the_sweep(workspace, monkeypatch):
    monkeypatch.setenv("MASKLAB_MAX_RUNS", "1")  # the workers inherit it: one trains, the others wait
    at = open_with("../pages/new_run.py", {**FORM, "name": "ratios", "sweep_values": "0.5, 0.75",
                                           "sweep_replicates": "2"})  # fmt: skip
    try:
        launch_button(at).click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        runs = list_runs(workspace)
        assert len(runs) == 4
        sweeps = {r.run_id: sweep_of(r.name) for r in runs}
        (sid,) = {s["id"] for s in sweeps.values()}
        assert sorted((s["value"], s["seed"]) for s in sweeps.values()) == [(0.5, 0), (0.5, 1), (0.75, 0), (0.75, 1)]
        for r in runs:
            c = r.config
            assert (c["masking"]["ratio"], c["train"]["seed"]) == (sweeps[r.run_id]["value"], sweeps[r.run_id]["seed"])
            assert c["train"]["steps"] == 5 and c["train"]["batch_size"] == 32 and c["data"]["dataset"] == "digits"
            assert r.name.startswith(f"ratios sweep {sid} masking.ratio=")
        success = at.success[0].value
        assert success.startswith(f"Queued sweep **{sid}**: 4 runs (masking.ratio = 0.5, 0.75 × seeds 0, 1, 20 steps "
                                  "in all).")
        link = next(p for p in at.get("page_link") if p.proto.label == "Open this sweep on the Sweeps page")
        assert parse_qs(link.proto.query_string) == {"sweep": [sid]}
        table = sweep_table(sid, workspace)
        assert list(table["value"]) == [0.5, 0.5, 0.75, 0.75] and list(table["seed"]) == [0, 1, 0, 1]

        sw = open_with("../pages/sweeps.py", {"sweep": sid})  # the link's page, the sweep selected
        assert sw.selectbox(key="sw_id").value == sid
        assert sw.selectbox(key="sw_id").options == [f"ratios · masking.ratio · 4 runs · {sid}"]
    finally:
        for r in list_runs(workspace):
            cancel(r.run_id, workspace)
        deadline = time.time() + 60
        while any(r.is_active for r in list_runs(workspace)) and time.time() < deadline:
            time.sleep(0.5)
