"""New run's "Devices and nodes" fields (the launch section) and Run detail's "Runs on" line, in
AppTest against the real engine."""

from __future__ import annotations

from engine.config import RunConfig
from engine.store import create_run, write_status
from tests.app.test_pages_apptest import open_page


def test_new_run_offers_processes_nodes_and_back_end(workspace):
    at = open_page("../pages/new_run.py")
    assert not at.exception
    assert at.number_input(key="nr_nproc").value == 1 and at.selectbox(key="nr_backend").options == ["local"]
    assert "launch.nproc_per_node" not in at.query_params  # the default: no launch section
    at.number_input(key="nr_nproc").set_value(2).run()
    assert not at.exception and not at.error
    assert at.query_params["launch.nproc_per_node"] == "2"
    assert "--set launch.nproc_per_node=2" in at.code[0].value
    assert not at.button[0].disabled  # Launch
    at.number_input(key="nr_nnodes").set_value(2).run()  # two nodes need the rendezvous endpoint
    assert "launch.rdzv_endpoint" in at.error[0].value and at.button[0].disabled
    at.text_input(key="nr_rdzv").input("node0:29400").run()
    assert not at.error and not at.button[0].disabled
    assert any("python -m engine join RUN_ID --node-rank K" in c.value for c in at.caption)
    at.number_input(key="nr_nproc").set_value(3).run()  # batch 128 does not split over 6 processes
    assert "must split evenly over the 6 training processes" in at.error[0].value and at.button[0].disabled


def test_run_detail_says_where_the_run_trains(workspace):
    cfg = RunConfig.from_dict({"data": {"dataset": "digits"}, "train": {"batch_size": 32},
                               "launch": {"nproc_per_node": 2}}).to_dict()
    run_id, d = create_run(cfg, workspace)
    write_status(d, {"status": "completed", "step": 10, "total_steps": 10, "placement": {
        "backend": "local", "hosts": ["node-a"], "processes": 2, "devices": ["0,1"]}})
    at = open_page("../pages/run_detail.py")
    assert not at.exception
    assert "Runs on: local · host node-a · 2 processes · GPU 0,1" in [c.value for c in at.caption]
