"""Resume: a run continues from its latest checkpoint exactly as if it had never stopped; a real
divergence ends ``diverged`` and resumes with a lower learning rate; what a resume may change.

The in-process cases stop a run by a cancel request or by an exception in the worker's step
callback (the worker records ``cancelled`` / ``failed`` after writing what it logged), then resume it
with the same functions the launcher uses. The acceptance cases (slow) kill a background worker
with SIGKILL and resume it through the command line. Every run here uses one torch thread: an
interrupted and an uninterrupted run must use the same thread count for bit-identical results.
"""

from __future__ import annotations

import math
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from engine.config import RunConfig
from engine.data import import_source, load_dataset
from engine.errors import ConfigError, DatasetError, ResumeError, RunLockedError
from engine.runner.launcher import cancel, resume, submit
from engine.runner.queue import enqueue
from engine.runner.resume import frozen_changes, prepare_resume, resume_config
from engine.runner.worker import execute_run
from engine.store import (
    CANCEL_FILE,
    HOLD_FILE,
    RunLock,
    create_run,
    get_run,
    latest_checkpoint_step,
    list_checkpoints,
    load_weights,
    read_config_history,
    read_status,
    run_alive,
    sample_steps,
    signal_holder,
    write_status,
)
from engine.store.metrics import read_run_table
from engine.tasks import resolve
from engine.training.schedule import lr_at
from tests.cli import engine_main
from tests.engine.procs import pids_with_args
from tests.engine.procs import wait_until as _wait
from tests.plugins import ema_task

REPO = Path(__file__).resolve().parents[2]
IMAGE = {"name": "img", "data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
         "train": {"steps": 12, "batch_size": 32, "eval_interval": 4, "checkpoint_interval": 4, "warmup_steps": 2,
                   "seed": 3, "device": "cpu", "num_threads": 1}}
TEXT = {"name": "txt", "task": "text_mlm", "data": {"dataset": "trec-slice", "tokenizer": {"vocab_size": 400, "max_len": 32}},
        "masking": {"ratio": 0.15}, "model": {"preset": "tiny"},
        "train": {"steps": 12, "batch_size": 16, "eval_interval": 4, "checkpoint_interval": 4, "warmup_steps": 2,
                  "seed": 5, "device": "cpu", "num_threads": 1}}
#: AdamW multiplies each weight matrix by (1 - lr * weight_decay) per step: past lr = 2 that factor is
#: below -1 and the weights grow until the loss overflows (on CPU: NaN at step 16, every time).
DIVERGES = {"name": "diverges", "data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
            "train": {"steps": 40, "batch_size": 32, "eval_interval": 4, "checkpoint_interval": 4, "warmup_steps": 20,
                      "lr": 10.0, "weight_decay": 1.0, "device": "cpu", "num_threads": 1, "keep_checkpoints": 2}}
KEYS = ("loss", "lr", "mask_ratio", "val_loss")


def with_train(cfg: dict, **train) -> dict:
    return {**cfg, "train": {**cfg["train"], **train}}


def new_run(cfg: dict) -> tuple[str, Path]:
    return create_run(resolve(RunConfig.from_dict(cfg)).to_dict())


def crash_at(step: int):
    """A worker step callback that raises after ``step`` (the run ends ``failed``, resumable)."""
    def on_step(s: int) -> None:
        if s == step:
            raise RuntimeError(f"simulated crash after step {s}")
    return on_step


def cancel_at(d: Path, step: int):
    """A worker step callback that asks the run to stop after ``step`` (ends ``cancelled``)."""
    def on_step(s: int) -> None:
        if s == step:
            (d / CANCEL_FILE).touch()
    return on_step


@pytest.mark.parametrize("then", ["release", "cancel"])
def test_a_held_run_waits_between_steps_until_released_or_cancelled(workspace, one_thread, then):
    """The ``hold`` marker, made after step 3, stops the worker before its next step for as long as
    it exists (the browser tests hold their live runs this way); removing it lets the run go on to
    the end, a cancel ends it ``cancelled`` without removing it."""
    run_id, d = new_run(IMAGE)
    seen: list[int] = []

    def on_step(s: int) -> None:
        seen.append(s)
        if s == 3:
            (d / HOLD_FILE).touch()

    out: list[str] = []
    worker = threading.Thread(target=lambda: out.append(execute_run(d, on_step=on_step)))
    worker.start()
    try:
        _wait(lambda: 3 in seen, 60, "step 3")
        time.sleep(0.5)  # five polls of the marker
        assert seen[-1] in (3, 4) and worker.is_alive()  # at most the step under way when it appeared
        assert get_run(run_id).status == "running"
        held_at = seen[-1]
        time.sleep(0.3)
        assert seen[-1] == held_at
    finally:
        if then == "release":
            (d / HOLD_FILE).unlink()
        else:
            (d / CANCEL_FILE).touch()
        worker.join(120)
    assert not worker.is_alive()
    assert out == (["completed"] if then == "release" else ["cancelled"])
    assert get_run(run_id).step == (12 if then == "release" else held_at)


def rows(run_id: str, key: str) -> list[tuple[int, float]]:
    """Every stored row of ``key`` (duplicates kept), by step."""
    t = read_run_table(get_run(run_id).path, [key])[0]
    return sorted(zip(t.column("step").to_pylist(), t.column("value").to_pylist()))


def assert_same_run(resumed: str, reference: str, keys=KEYS) -> None:
    """One stored row per step and key, equal (bit for bit on CPU) to the uninterrupted run's."""
    for key in keys:
        got, want = rows(resumed, key), rows(reference, key)
        steps = [s for s, _ in got]
        assert len(steps) == len(set(steps)), f"{key}: duplicate steps {steps}"
        assert got == want, key


@pytest.fixture
def trec_slice(workspace, shared_data) -> str:
    """The first 300 questions of TREC as a text dataset ``trec-slice``."""
    lines = (shared_data / "trec" / "train.tsv").read_text(encoding="utf-8").splitlines()[:301]
    path = workspace.parent / "trec-slice.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    import_source(path, "trec-slice")
    return "trec-slice"


@pytest.mark.parametrize("how", ["crash", "cancel"])
def test_resumed_image_run_equals_an_uninterrupted_one(workspace, one_thread, how):
    """Stopped after step 10 (checkpoint at 8, steps 9-10 logged: dropped on resume) or cancelled
    after step 6 (a checkpoint of step 6 is written), then resumed: every metric row equals the
    uninterrupted run's, once per step, and the samples are those of the same steps."""
    reference, _ = new_run(IMAGE)
    assert execute_run(get_run(reference).path) == "completed"
    run_id, d = new_run(IMAGE)
    stop = crash_at(10) if how == "crash" else cancel_at(d, 6)
    assert execute_run(d, on_step=stop) == ("failed" if how == "crash" else "cancelled")
    assert max(s for s, _ in rows(run_id, "loss")) == (10 if how == "crash" else 6)
    first = get_run(run_id)
    first_leg = first.ended_at - first.started_at
    assert prepare_resume(d) == (8 if how == "crash" else 6)
    assert not (d / CANCEL_FILE).exists()
    st, at = read_status(d), (8 if how == "crash" else 6)
    assert (st["status"], st["resume_from"], st["step"], st.get("pid")) == ("queued", at, at, None)
    assert st["prior_s"] == first_leg  # the first leg's seconds, kept for the run's duration
    assert execute_run(d) == "completed"
    rec = get_run(run_id)
    assert rec.step == 12 and rec.extra["resume_from"] == (8 if how == "crash" else 6)
    # the duration adds both legs and leaves out the pause between them
    assert rec.started_at >= first.ended_at and rec.duration_s == pytest.approx(first_leg + rec.ended_at - rec.started_at)
    assert_same_run(run_id, reference)
    assert sample_steps(run_id) == sample_steps(reference) == [0, 4, 8, 12]
    assert torch.equal(load_weights(list_checkpoints(rec.path)[-1])["decoder_pred.weight"],
                       load_weights(list_checkpoints(get_run(reference).path)[-1])["decoder_pred.weight"])
    history = read_config_history(d)
    assert [(h["step"], h["changed"]) for h in history] == [(0, {}), (8 if how == "crash" else 6, {})]


def test_resumed_text_mlm_run_equals_an_uninterrupted_one(workspace, one_thread, trec_slice):
    """BERT MLM draws extra randomness from the mask generator (ensure_one_masked, the 80/10/10
    replacement): a resume restores it, so the resumed run is bit-identical too."""
    reference, _ = new_run(TEXT)
    assert execute_run(get_run(reference).path) == "completed", get_run(reference).error
    run_id, d = new_run(TEXT)
    assert execute_run(d, on_step=crash_at(6)) == "failed"
    assert prepare_resume(d) == 4
    assert execute_run(d) == "completed", get_run(run_id).error
    assert_same_run(run_id, reference, KEYS + ("val_top1", "val_top5"))


def test_resumed_data2vec_text_run_with_a_contrastive_term_equals_an_uninterrupted_one(workspace, one_thread, trec_slice):
    """text_mlm's latent target with a contrastive term: the EMA teacher comes back with the model's
    weights (frozen parameters, saved, out of the optimiser) and the second view's masks from the
    restored generator, so the resumed run is bit-identical, teacher targets included."""
    cfg = {**TEXT, "task_params": {"target": "latent", "ema_decay": 0.9, "ema_decay_end": 0.99, "ema_anneal_steps": 12},
           "objective": {"terms": [{"loss": "mse", "weight": 1.0}, {"loss": "contrastive", "weight": 0.1}]}}
    reference, _ = new_run(cfg)
    assert execute_run(get_run(reference).path) == "completed", get_run(reference).error
    run_id, d = new_run(cfg)
    assert execute_run(d, on_step=crash_at(6)) == "failed"
    assert prepare_resume(d) == 4
    assert execute_run(d) == "completed", get_run(run_id).error
    assert_same_run(run_id, reference, KEYS + ("val_top1", "target_std", "val_target_std", "loss/readout",
                                               "loss/contrastive"))


def test_task_state_and_the_global_rng_are_restored(workspace, one_thread, monkeypatch):
    """A task with an EMA teacher (Task.state_dict) that adds noise from the global torch RNG: the
    resumed run's teacher val loss equals the uninterrupted one; without the state hook it does not."""
    cfg = {"task": "toy_pixels_ema", "masking": {"strategy": "random", "ratio": 0.5},
           "train": {"steps": 12, "batch_size": 64, "eval_interval": 4, "checkpoint_interval": 4, "lr": 3e-3,
                     "warmup_steps": 2, "device": "cpu", "num_threads": 1}}
    reference, _ = new_run(cfg)
    assert execute_run(get_run(reference).path) == "completed", get_run(reference).error
    run_id, d = new_run(cfg)
    assert execute_run(d, on_step=crash_at(6)) == "failed"
    prepare_resume(d)
    assert execute_run(d) == "completed"
    assert_same_run(run_id, reference, ("loss", "val_loss", "ema_updates"))
    assert rows(run_id, "ema_updates")[-1] == (12, 12.0)

    lost, d = new_run(cfg)  # the control: a task whose state is not restored is caught by the test
    execute_run(d, on_step=crash_at(6))
    prepare_resume(d)
    monkeypatch.setattr(ema_task.EMAPixelTask, "load_state_dict", lambda self, state: None)
    assert execute_run(d) == "completed"
    assert rows(lost, "val_loss")[-1] != rows(reference, "val_loss")[-1]
    assert rows(lost, "ema_updates")[-1] == (12, 8.0)  # counted from 0 again after step 4


def test_what_a_resume_may_change_and_what_it_refuses(workspace, one_thread):
    """Frozen fields, steps not past the checkpoint, a completed run, a run without a checkpoint and
    a live run are refused with a message that says why; a refusal changes nothing."""
    run_id, d = new_run(IMAGE)
    execute_run(d, on_step=crash_at(6))
    before = {f: (d / f).read_bytes() for f in ("config.json", "status.json")}
    for override, field in (("model.preset=small", "model.preset"), ("data.dataset=fashion-mnist", "data.dataset"),
                            ("model.patch_size=4", "model.patch_size"), ("train.seed=7", "train.seed"),
                            ("task_params.x=1", "task_params"), ("train.steps=4", "train.steps"),
                            ("train.lr=-1", "train.lr")):
        with pytest.raises((ConfigError, DatasetError), match=field):
            resume(run_id, [override])
    with pytest.raises(ConfigError, match=r"model.preset: a resume cannot change it \('tiny' -> 'small'\): the "
                                          r"checkpoint's weights belong to the run's model"):
        resume_config(get_run(run_id).config, ["model.preset=small"], 4)
    old = get_run(run_id).config
    assert frozen_changes(old, {**old, "task": "text_mlm", "name": "renamed"}) == {"task": ["image_mim", "text_mlm"]}
    # a run stored before its task had parameters (task_params {}) resumes with a change elsewhere, and a
    # change of a method parameter is refused by name
    before_params = {**old, "task_params": {}}
    assert resume_config(before_params, ["train.steps=40"], 4).train.steps == 40
    with pytest.raises(ConfigError, match=r"task_params\.target: a resume cannot change it \('pixel' -> 'hog'\)"):
        resume_config(before_params, ["task_params.target=hog"], 4)
    with RunLock(d):  # as if its worker were alive
        with pytest.raises(RunLockedError, match="held by another live process"):
            resume(run_id)
    assert {f: (d / f).read_bytes() for f in before} == before and not (d / "config_history.json").exists()

    done, dd = new_run(IMAGE)
    execute_run(dd)
    with pytest.raises(ResumeError, match="is completed; only failed, cancelled, diverged, interrupted runs"):
        resume(done)
    early, de = new_run(IMAGE)
    execute_run(de, on_step=crash_at(2))
    with pytest.raises(ResumeError, match="no complete checkpoint"):
        resume(early)
    assert get_run(early).status == "failed"

    # Allowed: schedule, length, intervals, threads, masking; recorded in the history at the checkpoint's step.
    new = resume_config(get_run(run_id).config, ["train.lr=0.0005", "train.steps=20", "masking.ratio=0.5"], 4)
    prepare_resume(d, lambda old, step: new.to_dict())
    assert read_config_history(d)[-1] == {"step": 4, "config": new.to_dict(), "changed": {
        "masking.ratio": [0.75, 0.5], "train.lr": [0.0015, 0.0005], "train.steps": [12, 20]}}
    assert get_run(run_id).total_steps == 20
    assert execute_run(d) == "completed" and get_run(run_id).step == 20
    lr = dict(rows(run_id, "lr"))  # logged at step s: the rate of update s, lr_at(s - 1)
    assert lr[4] == lr_at(3, base_lr=0.0015, min_lr=0.0, warmup_steps=2, total_steps=12)  # the old schedule
    assert lr[5] == lr_at(4, base_lr=0.0005, min_lr=0.0, warmup_steps=2, total_steps=20)  # the new one


def test_a_run_killed_while_queued_resumes_without_waiting_for_itself(workspace, one_thread):
    """A worker that died while waiting for a slot leaves its queue ticket behind: a resume removes
    it, and a worker that still finds an older ticket of its own run does not wait for itself."""
    run_id, d = new_run(IMAGE)
    execute_run(d, on_step=crash_at(6))
    write_status(d, {**read_status(d), "status": "queued", "pid": 4_000_000, "queued_at": 1.0})  # its worker died
    stale = enqueue(workspace, d)
    assert stale.name == f"{10**6:020d}-{run_id}" and get_run(run_id).status == "interrupted"
    prepare_resume(d)
    assert not stale.exists()
    stale.touch()  # as if left behind after the resume
    result: list[str] = []
    worker = threading.Thread(target=lambda: result.append(execute_run(d)))
    worker.start()
    worker.join(120)
    if worker.is_alive():
        (d / CANCEL_FILE).touch()
        worker.join()
    assert result == ["completed"] and not stale.exists()


def test_cli_resume_refusals_are_one_line_errors(workspace, one_thread):
    run_id, d = new_run(IMAGE)
    execute_run(d, on_step=crash_at(6))
    for args, message in (([run_id, "--set", "model.preset=small"],
                           "error: model.preset: a resume cannot change it ('tiny' -> 'small')"),
                          (["no-such-run"], "error: no run 'no-such-run'")):
        out = engine_main("resume", *args)
        assert out.returncode == 2 and out.stderr.startswith(message) and "Traceback" not in out.stderr, out.stderr


def test_a_changed_dataset_is_refused(workspace, one_thread, tmp_path):
    """Resuming on other data than the run started with would silently train on it: refused."""
    lines = ["text\tlabel"] + [f"question number {i} about {w}\t{w}" for i, w in
                                enumerate(["cats", "dogs", "birds", "fish"] * 15)]
    src = tmp_path / "q.tsv"
    src.write_text("\n".join(lines) + "\n")
    import_source(src, "qs")
    cfg = {**TEXT, "data": {"dataset": "qs", "tokenizer": {"vocab_size": 100, "max_len": 16}}}
    run_id, d = new_run(cfg)
    execute_run(d, on_step=crash_at(6))
    src.write_text("\n".join(lines[:-5]) + "\n")
    import_source(src, "qs", overwrite=True)
    with pytest.raises(DatasetError, match="its dataset changed since the run started"):
        resume(run_id)


@pytest.mark.slow
def test_a_real_divergence_ends_diverged_and_resumes_with_a_lower_lr(workspace, one_thread):
    """Acceptance: lr 10 with weight decay 1 truly overflows (no mock): the run ends ``diverged`` at
    that step, no checkpoint of it is written, the last good one is kept, and
    ``python -m engine resume ID --set train.lr=...`` continues it to the end; the config history
    shows the change at the checkpoint's step."""
    run_id, d = new_run(DIVERGES)
    assert execute_run(d) == "diverged"
    rec = get_run(run_id)
    assert rec.status == "diverged" and rec.is_resumable
    assert rec.error == f"loss became nan at step {rec.step + 1}; lower train.lr (now 10.0) or check the data"
    bad = rec.step + 1
    assert rows(run_id, "loss")[-1][0] == rec.step and all(math.isfinite(v) for _, v in rows(run_id, "loss"))
    kept = latest_checkpoint_step(run_id)
    assert kept is not None and kept < bad and all(int(p.name[5:]) < bad for p in list_checkpoints(d))
    assert all(bool(torch.isfinite(w).all()) for w in load_weights(list_checkpoints(d)[-1]).values())

    out = subprocess.run([sys.executable, "-m", "engine", "resume", run_id, "--set", "train.lr=0.001"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"resuming {run_id} from step {kept} in the background")
    _wait(lambda: not get_run(run_id).is_active, 300, "the resumed run to end")
    rec = get_run(run_id)
    assert rec.status == "completed", (rec.error, (d / "worker.log").read_text()[-3000:])
    assert rec.step == 40 and all(math.isfinite(v) for _, v in rows(run_id, "loss"))
    assert [s for s, _ in rows(run_id, "loss")] == list(range(1, 41))
    history = read_config_history(d)
    assert [(h["step"], h["changed"]) for h in history] == [(0, {}), (kept, {"train.lr": [10.0, 0.001]})]
    assert rec.config["train"]["lr"] == 0.001


def test_weights_that_blow_up_in_a_step_with_a_finite_loss_are_never_checkpointed(workspace, one_thread):
    """The same real divergence with a checkpoint every step: step n's loss is finite (computed
    before its update) but its update leaves NaN weights. That step's checkpoint is refused, so the
    newest kept checkpoint (step n - 1) is a good one. (n was 15 with PyTorch's per-tensor AdamW,
    14 with the fused one: the rounding of the updates decides which step overflows.)"""
    run_id, d = new_run(with_train(DIVERGES, checkpoint_interval=1))
    assert execute_run(d) == "diverged"
    rec = get_run(run_id)
    m = re.match(r"the weights became NaN or infinite at step (\d+) \(", rec.error)
    assert m, rec.error
    n = int(m.group(1))
    assert rec.error.endswith("no checkpoint of this step was written; lower train.lr (now 10.0) or check the data")
    assert [p.name for p in list_checkpoints(d)] == [f"step-{n - 2:07d}", f"step-{n - 1:07d}"]
    assert all(bool(torch.isfinite(w).all()) for w in load_weights(list_checkpoints(d)[-1]).values())
    assert rows(run_id, "loss")[-1][0] == n and math.isfinite(rows(run_id, "loss")[-1][1])


def _kill_after(run_id: str, step: int) -> int:
    """SIGKILL the run's worker (the holder of its lock) once its checkpoint of ``step`` exists; returns
    the step its latest complete checkpoint had at that moment."""
    d = get_run(run_id).path
    _wait(lambda: (latest_checkpoint_step(run_id) or 0) >= step, 300, f"checkpoint {step}", poll=0.02)
    assert signal_holder(d, signal.SIGKILL) is not None
    _wait(lambda: not run_alive(d), 30, "the kernel to drop the lock")
    return latest_checkpoint_step(run_id)


LONG_IMAGE = with_train(IMAGE, steps=120, eval_interval=10, checkpoint_interval=10)
LONG_TEXT = with_train(TEXT, steps=80, eval_interval=10, checkpoint_interval=10)


@pytest.mark.slow
@pytest.mark.parametrize("modality", ["image", "text"])
def test_kill_9_after_the_second_checkpoint_then_resume(workspace, one_thread, request, modality):
    """Acceptance: a background run is killed with SIGKILL after its second checkpoint, shown
    interrupted, resumed with ``python -m engine resume``: it reaches its last step, has exactly one
    row per step and key, and its final val loss equals an uninterrupted run's (same config, seed
    and thread count) to 1e-6 relative (on CPU it is bit-identical)."""
    if modality == "text":
        request.getfixturevalue("trec_slice")
    cfg = LONG_IMAGE if modality == "image" else LONG_TEXT
    load_dataset(cfg["data"]["dataset"])
    run_id = submit(resolve(RunConfig.from_dict(cfg)))
    killed_at = _kill_after(run_id, 20)
    rec = get_run(run_id)
    assert rec.status == "interrupted" and rec.is_resumable and killed_at < cfg["train"]["steps"]
    out = subprocess.run([sys.executable, "-m", "engine", "resume", run_id], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    _wait(lambda: not get_run(run_id).is_active, 600, "the resumed run to end")
    rec = get_run(run_id)
    assert rec.status == "completed" and rec.step == cfg["train"]["steps"], rec.error

    reference, _ = new_run(cfg)
    assert execute_run(get_run(reference).path) == "completed"
    keys = KEYS + (("val_top1",) if modality == "text" else ())
    for key in keys:
        steps = [s for s, _ in rows(run_id, key)]
        assert steps == sorted(set(steps)) == [s for s, _ in rows(reference, key)], key
    final, want = rows(run_id, "val_loss")[-1], rows(reference, "val_loss")[-1]
    assert final[0] == want[0] == cfg["train"]["steps"]
    assert final[1] == pytest.approx(want[1], rel=1e-6)
    assert_same_run(run_id, reference, keys)  # bit-identical, in fact


def _supervisors(run_dir: Path) -> list[int]:
    """PIDs of restart supervisors of ``run_dir`` (``python -m engine.runner.worker RUN_DIR`` without --once)."""
    return pids_with_args(b"engine.runner.worker", without=b"--once", suffix=run_dir.name.encode())


@pytest.mark.slow
def test_restart_policy_resumes_a_killed_worker_until_its_budget_is_spent(workspace, one_thread):
    """``train.max_restarts=1``: the first SIGKILL is followed by an automatic resume from the last
    checkpoint (history entry, ``restarts`` 1); the second leaves the run interrupted and the
    supervisor gone, with the reason in the log. A restarted run trains on to the same result."""
    cfg = with_train(LONG_IMAGE, steps=100, max_restarts=1)
    load_dataset("digits")
    run_id = submit(resolve(RunConfig.from_dict(cfg)))
    d = get_run(run_id).path
    _wait(lambda: _supervisors(d) != [], 30, "the supervisor")
    first = _kill_after(run_id, 20)
    _wait(lambda: get_run(run_id).extra.get("restarts") == 1 and run_alive(d), 60, "the restart")
    assert [h["step"] for h in read_config_history(d)] == [0, first]
    second = _kill_after(run_id, first + 20)
    _wait(lambda: _supervisors(d) == [], 30, "the supervisor to give up")
    rec = get_run(run_id)
    assert rec.status == "interrupted" and rec.extra["restarts"] == 1
    log = (d / "worker.log").read_text()
    assert f"restart 1/1 from step {first}" in log and "no restart left (train.max_restarts=1)" in log
    steps = [s for s, _ in rows(run_id, "loss")]
    assert len(steps) == len(set(steps)) and steps[: second] == list(range(1, second + 1))

    # Resumed by hand, it completes and equals a run that was never killed.
    assert resume(run_id) == second
    _wait(lambda: not get_run(run_id).is_active, 600, "the resumed run to end")
    assert get_run(run_id).status == "completed"
    reference, _ = new_run(cfg)
    assert execute_run(get_run(reference).path) == "completed"
    assert_same_run(run_id, reference)


@pytest.mark.slow
def test_a_cancelled_supervised_run_is_not_restarted(workspace):
    cfg = with_train(IMAGE, steps=100_000, eval_interval=1000, checkpoint_interval=1000, max_restarts=3)
    load_dataset("digits")
    run_id = submit(resolve(RunConfig.from_dict(cfg)))
    d = get_run(run_id).path
    _wait(lambda: get_run(run_id).step > 0, 120, "the run to train")

    assert cancel(run_id) is True
    _wait(lambda: _supervisors(d) == [] and not run_alive(d), 60, "the supervisor and worker to exit")
    rec = get_run(run_id)
    assert rec.status == "cancelled" and "restarts" not in rec.extra
    assert "restart" not in (d / "worker.log").read_text()
