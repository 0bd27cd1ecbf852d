"""New run's "Devices, nodes and back-end" fields (the launch section) and Run detail's "Runs on"
line, in AppTest against the real engine."""

from __future__ import annotations

import sys

import pytest

from engine.config import RunConfig
from engine.runner.backends import write_job
from engine.store import create_run, write_status
from engine.tasks import resolve
from tests.app.test_pages_apptest import open_page


def test_new_run_offers_processes_nodes_and_back_end(workspace):
    at = open_page("../pages/new_run.py")
    assert not at.exception
    assert at.number_input(key="nr_nproc").value == 1
    assert at.selectbox(key="nr_backend").value == "local"
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
    cfg = resolve(RunConfig.from_dict({"data": {"dataset": "digits"}, "train": {"batch_size": 32},
                               "launch": {"nproc_per_node": 2}})).to_dict()
    run_id, d = create_run(cfg, workspace)
    write_status(d, {"status": "completed", "step": 10, "total_steps": 10, "placement": {
        "backend": "local", "hosts": ["node-a"], "processes": 2, "devices": ["0,1"]}})
    at = open_page("../pages/run_detail.py")
    assert not at.exception
    assert "Runs on: local · host node-a · 2 processes · GPU 0,1" in [c.value for c in at.caption]


def test_new_run_offers_the_cluster_back_ends_with_their_fields(workspace):
    pytest.importorskip("ray")
    pytest.importorskip("submitit")
    at = open_page("../pages/new_run.py")
    assert at.selectbox(key="nr_backend").options == ["local (this machine)", "ray (a Ray Job)",
                                                      "slurm (sbatch)"]
    at.selectbox(key="nr_backend").set_value("ray").run()
    assert not at.exception and not at.error
    at.text_input(key="nr_ray").input("http://head:8265").run()
    at.number_input(key="nr_gpus").set_value(1).run()
    assert at.query_params["launch.backend"] == "ray" and at.query_params["launch.ray_address"] == "http://head:8265"
    assert "--set launch.gpus=1" in at.code[0].value
    assert not at.button[0].disabled  # Launch: the address is checked when the run is submitted
    at.selectbox(key="nr_backend").set_value("slurm").run()
    at.text_input(key="nr_part").input("gpu").run()
    at.number_input(key="nr_time").set_value(90).run()
    assert at.query_params["launch.slurm_partition"] == "gpu" and at.query_params["launch.time_min"] == "90"
    assert "nr_nnodes" not in [w.key for w in at.number_input]  # one node per cluster job


def test_a_back_end_without_its_extra_is_marked_and_blocks_launch(workspace, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as where the cluster extra is not installed
    at = open_page("../pages/new_run.py")
    assert "ray (a Ray Job) (not installed)" in at.selectbox(key="nr_backend").options
    at.selectbox(key="nr_backend").set_value("ray").run()
    assert not at.exception
    assert ("The ray back-end cannot be used here: ray is not installed here (pip install -r "
            "requirements-cluster.txt).") in [e.value for e in at.error]
    assert at.button[0].disabled and "nr_ray" not in [w.key for w in at.text_input]
    at.selectbox(key="nr_backend").set_value("local").run()
    assert not at.error and not at.button[0].disabled


def test_run_detail_names_the_cluster_job(workspace):
    cfg = resolve(RunConfig.from_dict({"data": {"dataset": "digits"}, "train": {"batch_size": 32},
                               "launch": {"backend": "slurm", "gpus": 1}})).to_dict()
    run_id, d = create_run(cfg, workspace)
    write_job(d, {"backend": "slurm", "job_id": "4242", "cluster": "slurm", "folder": str(d / "submitit")})
    write_status(d, {"status": "completed", "step": 10, "total_steps": 10, "placement": {
        "backend": "slurm", "hosts": ["gpu-n3"], "processes": 1, "devices": ["0"]}})
    at = open_page("../pages/run_detail.py")
    assert not at.exception
    assert "Runs on: slurm job 4242 · host gpu-n3 · 1 process · GPU 0" in [c.value for c in at.caption]
