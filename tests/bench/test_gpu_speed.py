"""bench/gpu_speed.py on the CPU at its tiny sizes: every path the GPU run takes (the batch search
past an out-of-memory try, the FLOP count, the floor, both sides' timing, the data feeding, the JSON
and the table last) runs, and the run says it was on the CPU, where the targets do not apply."""

from __future__ import annotations

import json

import pytest
import torch

from engine.training.perf import count_step_flops
from tests.bench import load_bench

CPU = torch.device("cpu")


@pytest.mark.slow
def test_tiny_cpu_run_measures_both_sides_and_leaves_the_targets_to_the_gpu(tmp_path, monkeypatch, capsys):
    pytest.importorskip("transformers")  # the reference side (requirements-bench.txt)
    bench = load_bench("gpu_speed")
    real_try = bench.try_batch

    def out_of_memory_at_16(case, *args):
        if case.batch == 16:
            raise torch.OutOfMemoryError("simulated: CUDA out of memory")
        return real_try(case, *args)

    monkeypatch.setattr(bench, "try_batch", out_of_memory_at_16)
    assert bench.main(["--out", str(tmp_path), "--repeats", "1", "--steps", "1", "--warmup", "1",
                       "--data-batches", "2"]) == 0
    res = json.loads((tmp_path / "gpu_speed.json").read_text())
    assert res["cuda"] is False and res["size"] == "tiny" and res["mfu_peak_flops"] == res["matmul_flops"] > 0
    for name, ref in (("mae_vitb", "HF ViTMAEForPreTraining"), ("bert_base", "HF BertForMaskedLM")):
        r = res["cases"][name]
        assert "error" not in r, r["error"]
        assert [(t["batch"], t["fits"]) for t in r["batch_tries"]] == [(16, False), (8, True)]
        assert "simulated" in r["batch_tries"][0]["error"] and r["batch"] == 8
        assert r["sides"]["masklab"]["name"] == "masklab" and r["sides"]["hf"]["name"] == ref
        assert all(s["samples_s"] > 0 and s["mfu"] > 0 for s in r["sides"].values())
        assert r["ratio"] > 0 and r["compile"]["status"] == "off"  # no compile by default on the CPU
        # One count, masklab's, at the chosen batch: the same as counting a fresh model of that size.
        ml = bench.build_case(name, 8, "tiny", CPU).sides[0]
        assert r["flops_per_step"] == count_step_flops(lambda ml=ml: ml.loss(0)) > 0
        fl = r["floor"]
        assert fl["parts_s"]["matmul"] > 0 and fl["parts_s"]["attention"] > 0  # the recorded step replayed
        assert fl["floor_s"] == max(fl["recorded_floor_s"], fl["rate_floor_s"]) > 0
    assert res["cases"]["mae_vitb"]["targets"] == {"ratio": bench.NA, "mfu": bench.NA, "data": bench.NA}
    assert res["cases"]["bert_base"]["targets"] == {"ratio": bench.NA, "mfu": "-", "data": "-"}
    data = res["cases"]["mae_vitb"]["data"]
    assert 0 <= data["share"] <= 1 and data["share"] == pytest.approx(data["data_s"] / data["step_s"])
    log = (tmp_path / "gpu_speed.log").read_text()
    assert capsys.readouterr().out == log  # everything printed is in the log
    lines = log.splitlines()
    assert lines[0].startswith("CPU run: no CUDA device") and "CPU run: the targets are not applicable" in lines[-5]
    assert [ln.split()[0] for ln in lines[-3:]] == ["mae_vitb", "bert_base", "n/a:"]  # the table comes last
    assert lines[-3].split("|")[1].split() == ["n/a"] * 3 and lines[-2].split("|")[1].split() == ["n/a", "-", "-"]


@pytest.mark.parametrize("name", ["mae_vitb", "bert_base"])
def test_flops_counted_at_a_small_batch_scale_exactly_to_the_chosen_one(name, monkeypatch):
    """Out of memory while counting at the chosen batch, the script counts at the smallest batch and
    scales: a step's matmul work is linear in the batch (fixed visible patches / masked tokens a
    row), so the scaled count is the exact one, and the fallback is recorded."""
    pytest.importorskip("transformers")
    bench = load_bench("gpu_speed")
    env = bench.Env(CPU, bf16=False, deadline=float("inf"))
    case = bench.build_case(name, 16, "tiny", CPU)
    bench.try_batch(case, env, 0.8, True)  # each side's optimiser, one step
    exact = bench.count_flops(case, name, 4, "tiny", env, [])
    real, calls = bench.count_step_flops, []

    def out_of_memory_once(fn):
        calls.append(fn)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("simulated")
        return real(fn)

    monkeypatch.setattr(bench, "count_step_flops", out_of_memory_once)
    fallbacks = []
    assert bench.count_flops(case, name, 4, "tiny", env, fallbacks) == exact > 0
    assert len(calls) == 2 and fallbacks == ["FLOPs counted at batch 4 and scaled to 16 (out of memory at full batch)"]


def test_the_floor_replays_a_gpu_sized_step_in_groups_that_fit():
    """A step's recorded inputs can outgrow a GPU's memory: ``replay_seconds(max_bytes=...)`` cuts
    each category into consecutive groups under the cap (a call larger than the cap alone), in the
    step's order, every call once; broadcast operands (stride 0) are rebuilt with their strides."""
    floor = load_bench("throughput_floor")
    tt = floor.tt
    torch.manual_seed(0)
    case = tt.mae_case("mae_tiny", 8, 1, 28, 4, (64, 2, 2, 256), (32, 1, 2, 128), 0.75,
                       torch.Generator().manual_seed(0), CPU, hf=False)
    (side,) = case.sides
    side.opt = floor.adamw(floor.param_groups(side.model, 0.05), lr=1e-4, impl="fused")
    calls = floor.record_step(side)
    matmuls = [(f, a, k) for cat, f, a, k in calls if cat == "matmul"]

    def nbytes(item):
        return sum(x.nbytes for x in floor.tree_flatten(item[1:])[0] if isinstance(x, floor.Spec))

    cap = max(nbytes(m) for m in matmuls) * 2
    groups = list(floor._groups(matmuls, cap))
    assert len(groups) > 1 and [m for g in groups for m in g] == matmuls
    assert all(sum(nbytes(m) for m in g) <= cap for g in groups)
    parts = floor.replay_seconds(calls, repeats=1, max_bytes=cap)
    assert set(parts) == {"matmul", "attention", "gelu", "layer_norm", "adamw"} and all(v > 0 for v in parts.values())
    bias = floor.Spec(torch.zeros(2, 1, 1, 5).expand(2, 3, 5, 5))  # an attention bias, broadcast over heads and queries
    t = bias.make()
    assert t.shape == (2, 3, 5, 5) and t.stride() == (5, 0, 0, 1) and bias.nbytes == 2 * 5 * 4 and (t >= 0.1).all()
