"""Run detail and Compare show each run's median samples/s, MFU and peak memory (app/components/speed.py).

A copy of two shared runs (tiny digits MAE and SimMIM, trained on the CPU): the MAE's is made a GPU
run the way its worker would have written it (``mfu`` logged through the store's metrics writer,
the GPU and the peak its MFU is measured against in ``task.json``, the device and CUDA's peak
memory in its status); the SimMIM stays a CPU run, which has no MFU and says so.
"""

from __future__ import annotations

import pandas as pd
import pytest

from app.components.compare import MFU as MFU_COL
from app.components.compare import MFU_PEAK, eff_display
from engine.api import read_task_info
from engine.store import MetricsWriter, get_run, read_metrics, read_status, write_status
from engine.training.writers import RunInfoFile
from tests.app.pages import open_with

#: The MFU logged at steps 1..5: median 42%.
MFU = [0.40, 0.44, 0.42, 0.41, 0.43]
PEAK_BYTES = 3 * 2**30


def _as_gpu_run(ws, run_id: str) -> None:
    d = ws / "runs" / run_id
    w = MetricsWriter(d, run_id, flush_interval=0)
    for step, v in enumerate(MFU, start=1):
        w.log(step, {"mfu": v})
    w.close()
    RunInfoFile(d).write({**read_task_info(d), "device": "cuda:0", "gpu_name": "NVIDIA H200", "mfu_dtype": "bf16",
                          "mfu_peak_flops": 989e12})
    write_status(d, {**read_status(d), "device": "cuda:0", "peak_mem_bytes": PEAK_BYTES})


def _median_samples(run_id: str, ws) -> float:
    return float(read_metrics([run_id], ["throughput"], max_points=2000, workspace=ws)["value"].median())


@pytest.fixture(scope="module")
def two_runs(shared_runs, tmp_path_factory):
    """A copy of the shared digits MAE (made a GPU run: :func:`_as_gpu_run`) and SimMIM (a CPU run):
    ``(workspace, gpu run id, cpu run id)``."""
    ws, ids = shared_runs.copy("image_mae", "simmim", dest=tmp_path_factory.mktemp("speed") / "ws")
    _as_gpu_run(ws, ids["image_mae"])
    return ws, ids["image_mae"], ids["simmim"]


def test_run_detail_shows_samples_mfu_and_peak_memory(two_runs, monkeypatch):
    ws, gpu, cpu = two_runs
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    at = open_with("../pages/run_detail.py", {"run": gpu})
    figures = {m.label: m.value for m in at.metric}
    assert figures["MFU, median · bf16 peak 989 TFLOP/s"] == "42.0%"
    assert figures["peak memory · CUDA max allocated"] == "3.00 GiB"
    thr = _median_samples(gpu, ws)
    assert figures["throughput (samples/s), median"] == (f"{thr:,.0f}" if thr >= 100 else f"{thr:.3g}")
    at = open_with("../pages/run_detail.py", {"run": cpu})
    figures = {m.label: m.value for m in at.metric}
    assert figures["MFU, median"] == "—, CPU run"
    peak = get_run(cpu, workspace=ws).extra["peak_mem_bytes"]
    mib = peak / 2**20  # MiB below 1 GiB, GiB from there (this machine's peak is near 1 GiB: 1,102 MiB in one CI)
    assert figures["peak memory · private memory (CPU)"] == (f"{mib / 1024:.2f} GiB" if mib >= 1024 else f"{mib:.0f} MiB")


def test_compare_shows_mfu_with_its_peak_and_which_memory(two_runs, monkeypatch):
    ws, gpu, cpu = two_runs
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    at = open_with("../pages/compare.py", {"runs": f"{gpu},{cpu}"})
    (cost,) = [t.value for t in at.table if "MFU" in t.value.columns]
    names = {gpu: get_run(gpu, workspace=ws).name, cpu: get_run(cpu, workspace=ws).name}
    cost = cost.rename(index=lambda label: next(i for i, n in names.items() if n in label))
    assert cost.loc[gpu, "MFU"] == "42.0%" and cost.loc[gpu, "MFU peak"] == "bf16 peak 989 TFLOP/s"  # alone: no star
    assert cost.loc[cpu, "MFU"] == "—, CPU run" and cost.loc[cpu, "MFU peak"] == "–"
    peak = get_run(cpu, workspace=ws).extra["peak_mem_bytes"] / 2**20
    assert (cost.loc[gpu, "peak memory (MiB)"], cost.loc[cpu, "peak memory (MiB)"]) == (
        "3072 (CUDA)", f"{peak:.0f} (private)")  # two measures: neither starred
    assert cost.loc[gpu, "throughput (samples/s)"].removesuffix(" ★") == f"{_median_samples(gpu, ws):.0f}"


def test_training_cost_stars_mfu_and_memory_only_among_like_figures():
    eff = pd.DataFrame({"run": ["a", "b", "c"], "throughput (samples/s)": [10.0, 20.0, 5.0], MFU_COL: [0.3, 0.45, None],
                        MFU_PEAK: ["bf16 peak 989 TFLOP/s"] * 2 + ["CPU run"], "peak memory (MiB)": [100.0, 200.0, 50.0],
                        "memory": ["CUDA max allocated"] * 2 + ["private memory (CPU)"]})
    out = eff_display(eff)
    assert "memory" not in out and out["throughput (samples/s)"].tolist() == ["10", "20 ★", "5"]
    assert out[MFU_COL].tolist() == ["30.0%", "45.0% ★", "—, CPU run"]
    assert out[MFU_PEAK].tolist() == ["bf16 peak 989 TFLOP/s"] * 2 + ["–"]
    assert out["peak memory (MiB)"].tolist() == ["100 (CUDA)", "200 (CUDA)", "50 (private)"]  # two measures
    assert eff_display(eff.iloc[:2])["peak memory (MiB)"].tolist() == ["100 (CUDA) ★", "200 (CUDA)"]
    assert eff_display(eff.iloc[1:])[MFU_COL].tolist() == ["45.0%", "—, CPU run"]  # one MFU is not the best of any
