"""Every task trains on the GPU through the real launcher, worker and store, and two runs share it
(issue 39, points 1 and 2): the first of the two device runs, at most 5 minutes with its imports.

    nice -n 10 .venv/bin/python bench/gpu_tasks.py --out /tmp/gt --steps 20 --threads 1   # on a CPU

On the device (no network; the wheels it lacks travel in ``.whl/``, from ``bash bench/gpu_wheels.sh``),
with ``carry: [".whl"]``, 200 steps a task:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && PYTHONUNBUFFERED=1 python3 bench/gpu_tasks.py --out $OUT

In a fresh workspace (``MASKLAB_AUTO_EVAL=0``) with data the engine imports from the repository alone
(:func:`build_data`):

1. One run per task (:data:`TASKS`) through :func:`engine.api.submit` (``train.device=auto``; bf16
   autocast on CUDA), ``--max-runs`` at once; from the store: status, device, steps, loss of the first
   and last tenth of the steps (it must fall, from 50 steps on), NaN, validation figures, samples, peak
   memory (CUDA's max_memory_allocated on a GPU), samples/s. Then an evaluation job
   (:func:`engine.api.evaluate`): status, figures and whether its process held GPU memory (nvidia-smi).
2. ``MASKLAB_MAX_RUNS=2``, four runs at once: two train (both slots on the one GPU), never more; the
   third waits, then completes; the fourth is cancelled while it trains alone: nvidia-smi's processes
   and memory before, during and after (its process gone, the total back; a worker's own
   ``torch.cuda.memory_reserved`` is not readable from outside). On a CPU the memory part is skipped.

Writes ``--out`` (bench/results/) ``gpu_tasks.log`` (all it printed) and ``gpu_tasks.json`` (every figure,
device, torch version, date, whether it ran on the CPU); prints a table last. Every wait has a deadline
inside ``--budget-s``: a run not done by then is reported and cancelled. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import soundfile as sf
from PIL import Image
from sklearn.datasets import load_digits

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine import api  # noqa: E402

ME = api.local_admin()
RATE, CLIP_S = 8000, 0.5  # the synthetic clips: Hz, seconds
AUDIO = {"n_mels": 32, "clip_seconds": CLIP_S}
TOKENS = {"vocab_size": 1000, "max_len": 48}
#: task -> its run config less ``train``: tiny models, as the shared test runs (tests/runs.py).
TASKS: dict[str, dict] = {
    "image_mae": {"data": {"dataset": "digits"}, "model": {"arch": "mae_vit", "preset": "tiny", "patch_size": 2}},
    "simmim": {"data": {"dataset": "digits"}, "model": {"arch": "simmim_vit", "preset": "tiny", "patch_size": 2}, "objective": {"loss": "l1"}},
    "text_mlm": {"task": "text_mlm", "data": {"dataset": "docs-text", "tokenizer": TOKENS}, "masking": {"strategy": "random", "ratio": 0.15}},
    "text_span": {"task": "text_span", "data": {"dataset": "docs-text", "tokenizer": TOKENS}, "masking": {"strategy": "sentence_span"},
                  "task_params": {"decoder_input_mask": 1.0}},
    "audio_mae": {"task": "audio_mae", "data": {"dataset": "tones", "audio": AUDIO}},
    "audio_frames": {"task": "audio_frames", "data": {"dataset": "tones", "audio": AUDIO}},
    "paired": {"task": "paired", "data": {"dataset": "digit-captions", "tokenizer": {"vocab_size": 300, "max_len": 16}}},
}
EVALUATION = {"auto": False, "max_rows": 300, "tsne_max_rows": 0, "finetune_epochs": 1}
WORDS = "zero one two three four five six seven eight nine".split()
CAPTIONS = ("a handwritten {w}", "the digit {w}, written by hand", "a small scan of a {w}", "number {w} in ink",
            "a blurry {w} on a grid")
BATCH = 64  # rows a step, every run
FALL_FROM = 50  # steps from which "the loss falls" is judged
SLACK_MIB = 128  # nvidia-smi's total after the cancel may exceed the one before the runs by this much


def smi() -> dict | None:
    """nvidia-smi's view of GPU 0: ``{"name", "used_mib", "apps": {pid: MiB}}``; None without one."""
    def query(what: str) -> list[list[str]]:
        out = subprocess.run(["nvidia-smi", what, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=20, check=True).stdout
        return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    try:
        (name, used), *_ = query("--query-gpu=name,memory.used")
        apps = {int(p): float(m) for p, m in query("--query-compute-apps=pid,used_memory") if p.isdigit()}
    except (OSError, subprocess.SubprocessError, ValueError):  # no nvidia-smi (FileNotFoundError), no GPU
        return None
    return {"name": name, "used_mib": float(used), "apps": apps}


def sentences(limit: int) -> list[tuple[str, str]]:
    """Up to ``limit`` prose sentences (30-400 characters) of the repository's docs as ``(text, file)``,
    taken from the files in turn; code blocks, tables, headings and indented code left out."""
    per_file = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "bench" / "README.md"]:
        prose = re.sub(r"```.*?```", " ", path.read_text(encoding="utf-8"), flags=re.S)
        prose = " ".join(ln for ln in prose.splitlines() if not ln.lstrip().startswith(("|", "#", "    ")))
        found = re.split(r"(?<=[.!?;])\s+|\s+-\s+(?=\S)", " ".join(prose.split()))
        label = "bench" if path.parent.name == "bench" else path.stem.lower()
        per_file.append([(s, label) for s in found if 30 <= len(s) <= 400 and len(s.split()) >= 5])
    return [row for group in itertools.zip_longest(*per_file) for row in group if row][:limit]


def clip(kind: int, rng: np.random.Generator) -> np.ndarray:
    """One clip ``[RATE * CLIP_S]`` float32 in [-1, 1]: kind 0 a tone, 1 a rising chirp, 2 a falling
    chirp, 3 a two-tone chord; random pitch (250-1200 Hz) and level, 20 ms fades, a little noise."""
    t, f0 = np.arange(int(RATE * CLIP_S)) / RATE, rng.uniform(250, 1200)
    f1 = f0 * {1: 2.5, 2: 0.4}.get(kind, 1.0)
    x = np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * CLIP_S)))  # from f0 to f1 Hz (a tone when equal)
    if kind == 3:
        x = 0.5 * (x + np.sin(3 * np.pi * f0 * t))  # and a fifth above
    fade = np.minimum(1.0, np.minimum(t, CLIP_S - t) / 0.02)
    return (rng.uniform(0.3, 0.8) * x * fade + 0.01 * rng.standard_normal(len(t))).astype(np.float32)


def build_data(scratch: Path, n_texts: int = 400, n_clips: int = 240, n_pairs: int = 300) -> dict[str, int]:
    """Register ``digits`` and import ``docs-text``, ``tones`` and ``digit-captions`` (their sources
    written under ``scratch``) into the workspace; returns the rows accepted per dataset."""
    with open(scratch / "docs-text.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([("text", "label"), *sentences(n_texts)])
    rng, kinds = np.random.default_rng(0), ("tone", "rising", "falling", "chord")
    with zipfile.ZipFile(scratch / "tones.zip", "w") as z:
        for i in range(n_clips):
            wav = io.BytesIO()
            sf.write(wav, clip(i % 4, rng), RATE, format="WAV", subtype="PCM_16")
            z.writestr(f"tones/{kinds[i % 4]}/{i:04d}.wav", wav.getvalue())  # sub-folder = label
    digits = load_digits()
    with zipfile.ZipFile(scratch / "captions.zip", "w") as z:  # label = sub-folder, caption = same-stem .txt
        for i in range(n_pairs):
            png, word = io.BytesIO(), WORDS[int(digits.target[i])]
            Image.fromarray((digits.images[i] * (255 / 16)).astype(np.uint8)).save(png, format="PNG")
            z.writestr(f"digits/{word}/{i:04d}.png", png.getvalue())
            z.writestr(f"digits/{word}/{i:04d}.txt", CAPTIONS[i % len(CAPTIONS)].format(w=word))
    sources = {"docs-text": ("docs-text.csv", {"text_column": "text", "label_column": "label"}, {}),
               "tones": ("tones.zip", {"sample_rate": RATE}, {}), "digit-captions": ("captions.zip", {}, {"image_size": 16})}
    return {"digits": len(api.load_dataset("digits").labels), **{
        name: api.import_source(scratch / src, name, api.ImportOptions(val_fraction=0.2, **opts), actor=ME, **kw).accepted
        for name, (src, opts, kw) in sources.items()}}


def run_config(name: str, base: dict, steps: int, args) -> api.RunConfig:
    """``base`` with ``steps`` steps on ``train.device=auto`` (bf16 autocast on CUDA): validation and
    samples at steps 0, ``steps // 2`` and ``steps``. Raises ConfigError naming a bad field."""
    train = {"steps": steps, "batch_size": BATCH, "eval_interval": max(1, steps // 2), "checkpoint_interval": steps,
             "warmup_steps": min(20, steps // 10), "device": "auto", "amp": True, "num_vis": 4,
             "num_threads": args.threads}
    return api.RunConfig.from_dict({**base, "name": name, "train": train, "evaluation": EVALUATION})


def wait_runs(ids: list[str], deadline: float, what: str, say: Callable[[str], None], on_poll=lambda: None) -> list[str]:
    """Poll ``ids`` every 0.25 s (``on_poll()`` before each look) until none is queued or running, or
    until ``deadline`` (``time.monotonic``): then name those still active, cancel them and give them
    20 s to end. Returns the ids that missed the deadline."""
    on_poll()
    while (active := [r for r in map(api.get_run, ids) if r.is_active]) and time.monotonic() < deadline:
        time.sleep(0.25)
        on_poll()
    if not active:
        return []
    say(f"DEADLINE: {what}: {', '.join(f'{r.name} still {r.status} at step {r.step}' for r in active)}; cancelling")
    for r in active:
        api.cancel(r.run_id, actor=ME)
    end = time.monotonic() + 20
    while time.monotonic() < end and any(api.get_run(r.run_id).is_active for r in active):
        time.sleep(0.25)
    return [r.run_id for r in active]


def wait_gone(pid: int | None, seconds: float = 20.0) -> bool:
    """Wait until process ``pid`` has exited (its GPU memory goes with it), at most ``seconds``; True if gone."""
    end = time.monotonic() + seconds
    while pid and Path(f"/proc/{pid}").exists() and time.monotonic() < end:
        time.sleep(0.2)
    return not (pid and Path(f"/proc/{pid}").exists())


def summary(run_id: str, steps: int, cuda: bool, late: bool) -> dict:
    """One run's figures as the store holds them, with ``problems``: the checks it failed."""
    rec = api.get_run(run_id)
    series = {k: g.sort_values("step") for k, g in api.read_metrics([run_id], max_points=None).groupby("key")}
    loss = series["loss"].value.to_numpy() if "loss" in series else np.array([])
    w, val = max(1, len(loss) // 10), {k: g.value.to_numpy() for k, g in series.items() if k.startswith("val_")}
    speed = series["throughput"] if "throughput" in series else None
    peak, wanted = rec.extra.get("peak_mem_bytes"), "cuda" if cuda else "cpu"
    out = {"run_id": run_id, "status": rec.status, "error": rec.error, "late": late, "device": rec.extra.get("device"),
           "steps": rec.step, "loss_first": float(loss[:w].mean()) if len(loss) else None,
           "loss_last": float(loss[-w:].mean()) if len(loss) else None,
           "nan": rec.status == "diverged" or not all(np.isfinite(v).all() for v in [loss, *val.values()]),
           "val_keys": sorted(val), "val_points": len(val.get("val_loss", [])), "samples": len(api.sample_steps(run_id)),
           "peak_mib": None if peak is None else peak / 2**20, "amp": rec.config.get("train", {}).get("amp"),
           "samples_per_s": float(speed[speed.step > 1].value.median()) if speed is not None and len(speed) > 1 else None,
           "mfu": float(series["mfu"].value.median()) if "mfu" in series else None,
           "placement": rec.extra.get("placement"), "pid": rec.pid}
    out["loss_falls"] = bool(out["loss_last"] < out["loss_first"]) if len(loss) >= FALL_FROM else None
    out["problems"] = [msg for bad, msg in [
        (rec.status != "completed", f"status {rec.status}" + (f" ({rec.error})" if rec.error else "")),
        (not str(out["device"]).startswith(wanted), f"trained on {out['device']}, not {wanted}"),
        (rec.step != steps, f"{rec.step} of {steps} steps"), (out["nan"], "NaN"),
        (out["loss_falls"] is False, "the loss did not fall"), (out["val_points"] < 2, "no validation figures"),
        (not out["samples"], "no reconstruction samples"), (peak is None, "no peak memory")] if bad]
    return out


def evaluation(run_id: str, deadline: float, say: Callable[[str], None]) -> dict:
    """One evaluation job (:func:`engine.api.evaluate`, no budget) of ``run_id``: its state, the figures
    stored and, on a GPU, whether its process held GPU memory (its pid in nvidia-smi's list, or the
    total above the one before it)."""
    start = smi()
    api.evaluate(run_id, budget=None, actor=ME)
    seen, top, job = False, 0.0, {}
    while time.monotonic() < deadline:
        job, now = api.evaluation_job(run_id) or {}, smi()
        if now:
            seen, top = seen or job.get("pid") in now["apps"], max(top, now["used_mib"])
        if job.get("status") not in ("queued", "running"):
            break
        time.sleep(0.3)
    else:
        say(f"DEADLINE: the evaluation job of {run_id} is still {job.get('status')}; cancelling")
        api.cancel(run_id, actor=ME)
    wait_gone(job.get("pid"))  # the next check starts from an idle GPU
    ev = api.latest_evaluation(run_id)
    on_gpu = None if start is None else seen or top > start["used_mib"] + SLACK_MIB
    out = {"run_id": run_id, "status": job.get("status"), "error": job.get("error"), "on_gpu": on_gpu,
           "gpu_used_mib": None if start is None else [start["used_mib"], top],
           "representation": ev.representation if ev else {}, "reconstruction": ev.reconstruction if ev else {},
           "seconds": ev.seconds if ev else None}
    out["problems"] = [msg for bad, msg in [
        (out["status"] != "completed", f"job {out['status']}: {out['error']}"),
        (not (out["representation"].get("trained") and out["reconstruction"]), "figures missing"),
        (on_gpu is False, "its process never held GPU memory (it evaluated on the CPU)")] if bad]
    return out


def sharing(args, deadline: float, cuda: bool, say: Callable[[str], None]) -> dict:
    """Point 2 (the module docstring): four MAE runs on digits at ``MASKLAB_MAX_RUNS=2``."""
    os.environ["MASKLAB_MAX_RUNS"] = "2"
    before, mae = smi(), TASKS["image_mae"]
    ids = [api.submit(run_config(f"share-{c}", mae, n, args), actor=ME) for c, n in zip("abcd", [args.share_steps] * 3 + [10**6])]
    seen: dict[str, list[str]] = {i: [] for i in ids}  # the statuses each run went through, in order
    most, waited = [0], set()  # most running at once; the runs seen queued while two ran

    def poll() -> None:
        recs = [api.get_run(i) for i in ids]
        running = sum(r.status == "running" for r in recs)
        most[0] = max(most[0], running)
        for r in recs:
            seen[r.run_id] += [r.status] if seen[r.run_id][-1:] != [r.status] else []
            waited.update([r.run_id] if running == 2 and r.status == "queued" else [])

    late = wait_runs(ids[:3], deadline, "the three sharing runs", say, on_poll=poll)
    while time.monotonic() < deadline and ((r := api.get_run(ids[3])).status != "running" or r.step < 3):
        poll()
        time.sleep(0.25)
    pid, during = api.get_run(ids[3]).pid, smi()  # the fourth trains alone: its memory
    api.cancel(ids[3], actor=ME)
    late += wait_runs(ids[3:], deadline + 20, "the cancelled run", say, on_poll=poll)
    gone = wait_gone(pid)  # it exits once it has recorded its status
    time.sleep(1.0 if cuda else 0.0)  # the driver's figures settle
    after, recs = smi(), [api.get_run(i) for i in ids]
    devices = [((r.extra.get("placement") or {}).get("devices") or ["-"])[0] for r in recs[:2]]
    listed = during and pid in during["apps"]  # in a container nvidia-smi may list the host's pids: then unknown
    out = {"run_ids": ids, "statuses_seen": {r.name: seen[r.run_id] for r in recs}, "late": late,
           "most_running_at_once": most[0], "queued_while_two_ran": [r.name for r in recs if r.run_id in waited],
           "slot_devices": devices, "slot_trained_on": [r.extra.get("device") for r in recs[:2]],
           "queued_then_completed": ids[2] in waited and recs[2].status == "completed", "cancelled_status": recs[3].status,
           "cancelled_step": recs[3].step, "cancelled_pid": pid, "process_gone": gone,
           "pid_listed_during_after": [True, pid in after["apps"]] if listed and after else None,
           "memory": {"before": before, "during": during, "after": after}}
    out["memory_freed"] = None if not (before and during and after) else (  # it held memory, and it went
        after["used_mib"] <= before["used_mib"] + SLACK_MIB < during["used_mib"] and not (listed and pid in after["apps"]))
    out["problems"] = [msg for bad, msg in [
        *[(r.status != "completed", f"{r.name} {r.status}") for r in recs[:3]],
        (most[0] > 2, f"{most[0]} ran at once (MASKLAB_MAX_RUNS=2)"),
        (not out["queued_then_completed"], "the third run was not seen waiting while two ran, then completing"),
        (recs[3].status != "cancelled", f"the cancelled run is {recs[3].status}"),
        (not out["process_gone"], "the cancelled run's process is still alive"),
        (cuda and not all(str(d).startswith("cuda") for d in out["slot_trained_on"]), "the two runs were not on CUDA"),
        (cuda and len(set(devices)) != 1, f"the two slots got GPUs {devices}, not one"),
        (cuda and out["memory_freed"] is None, "nvidia-smi gave no reading"),
        (out["memory_freed"] is False, "the cancelled run's GPU memory was not freed")] if bad]
    return out


def table(result: dict, say: Callable[[str], None]) -> None:
    """The short table, printed last: a line per run, the evaluation, the sharing check, PASS/FAIL."""
    cpu, fmt = result["cpu_only"], lambda v, spec=".4g": "-" if v is None else format(v, spec)
    say("\nNO GPU: this ran on the CPU (the memory check was skipped; no timing target applies)" if cpu else "")
    say(f"{'task':13} {'device':7} {'steps':>5}  {'loss first -> last':20} NaN val smp {'peak MiB':>8} samples/s  status")
    for task, r in result["runs"].items():
        say(f"{task:13} {r['device'] or '-':7} {r['steps']:>5}  {fmt(r['loss_first']) + ' -> ' + fmt(r['loss_last']):20} "
            f"{'yes' if r['nan'] else 'no ':3} {r['val_points']:>3} {r['samples']:>3} {fmt(r['peak_mib'], '.1f'):>8} "
            f"{fmt(r['samples_per_s'], ',.0f'):>9}  {r['status']}{' (deadline)' if r['late'] else ''}")
    if ev := result.get("evaluation"):
        say(f"evaluation job of {ev['task']}: {ev['status']}; figures: {', '.join(ev['representation']) or 'none'}; "
            f"on the GPU: {'-' if ev['on_gpu'] is None else 'yes' if ev['on_gpu'] else 'no'}")
    if sh := result.get("sharing"):
        say(f"sharing: at most {sh['most_running_at_once']} running; waited while two ran: "
            f"{', '.join(sh['queued_while_two_ran']) or 'none'}; third completed after waiting: "
            f"{'yes' if sh['queued_then_completed'] else 'no'}; slot GPUs {'/'.join(sh['slot_devices'])}; "
            f"cancelled: {sh['cancelled_status']} at step {sh['cancelled_step']}")
        used = " / ".join(fmt(m and m["used_mib"], ".0f") for m in sh["memory"].values())
        say("memory: no GPU: memory check skipped" if cpu else f"memory: nvidia-smi MiB before / during / after the "
            f"cancel {used}; its pid listed during / after: {sh['pid_listed_during_after'] or 'unknown'}")
    for point, problems in result["checks"].items():
        say(f"{point}: {'PASS' if not problems else 'FAIL: ' + '; '.join(problems)}")
    say("NO GPU: ran on the CPU" if cpu else f"GPU: {result['device_name']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, of {', '.join(TASKS)}")
    ap.add_argument("--steps", type=int, default=200, help="steps of each task's run")
    ap.add_argument("--share-steps", type=int, default=200, help="steps of the sharing runs that complete")
    ap.add_argument("--max-runs", type=int, default=0, help="runs at once in point 1 (0: 4 on a GPU, else 2)")
    ap.add_argument("--threads", type=int, default=0, help="train.num_threads (0: the cores over the slots)")
    ap.add_argument("--no-eval", action="store_true", help="leave the evaluation job out (the CPU test's time)")
    ap.add_argument("--budget-s", type=float, default=0, help="every deadline inside it (0: 270 on a GPU, else 900)")
    args = ap.parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if unknown := sorted(set(tasks) - set(TASKS)):
        ap.error(f"--tasks: unknown {unknown}; known: {', '.join(TASKS)}")
    t0, gpu = time.monotonic(), smi()
    cuda, budget = gpu is not None, args.budget_s or (270.0 if gpu else 900.0)
    args.out.mkdir(parents=True, exist_ok=True)
    log = open(args.out / "gpu_tasks.log", "w", encoding="utf-8")  # noqa: SIM115 (closed at the end)

    def say(line: str = "") -> None:  # printed and logged at once: a killed script keeps its log
        print(line, flush=True)
        print(line, file=log, flush=True)

    scratch = Path(tempfile.mkdtemp(prefix="masklab-gpu-tasks-"))  # the sources imported, and the workspace
    ws = scratch / "workspace"
    os.environ.update(MASKLAB_WORKSPACE=str(ws), MASKLAB_AUTO_EVAL="0", MASKLAB_MAX_RUNS=str(args.max_runs or (4 if cuda else 2)))
    result: dict = {"cpu_only": not cuda, "device_name": gpu["name"] if gpu else "cpu",
                    "torch": importlib.metadata.version("torch"), "python": sys.version.split()[0],
                    "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "args": {k: str(v) for k, v in vars(args).items()}, "budget_s": budget, "runs": {},
                    "checks": {"point 1": [], "point 2": []}}
    say("NO GPU: this runs on the CPU; no timing target applies" if not cuda else f"GPU: {gpu['name']}")
    say(f"torch {result['torch']}, Python {result['python']}, workspace {ws}, budget {budget:.0f} s, "
        f"MASKLAB_MAX_RUNS={os.environ['MASKLAB_MAX_RUNS']}")
    point = "point 1"  # what an unexpected error stops
    try:
        result["datasets"] = build_data(scratch)
        say(f"datasets: {result['datasets']} [{time.monotonic() - t0:.0f} s]")
        ids = {t: api.submit(run_config(f"gpu-{t}", TASKS[t], args.steps, args), actor=ME) for t in tasks}
        late = wait_runs(list(ids.values()), t0 + 0.6 * budget, "the task runs", say)
        say(f"task runs ended [{time.monotonic() - t0:.0f} s]")
        for t, rid in ids.items():
            r = result["runs"][t] = summary(rid, args.steps, cuda, rid in late)
            result["checks"]["point 1"] += [f"{t}: {p}" for p in r["problems"]]
            if r["status"] != "completed":
                say(f"worker log of {t}:\n{api.read_log(rid, max_bytes=3000)}")
        done = [t for t in tasks if result["runs"][t]["status"] == "completed"]
        if done and not args.no_eval:
            ev = result["evaluation"] = {"task": done[0], **evaluation(ids[done[0]], t0 + 0.75 * budget, say)}
            result["checks"]["point 1"] += [f"evaluation: {p}" for p in ev["problems"]]
            say(f"evaluation of {done[0]}: {ev['status']} [{time.monotonic() - t0:.0f} s]")
        elif not done:
            result["checks"]["point 1"].append("no run completed: no evaluation job")
        point = "point 2"
        sh = result["sharing"] = sharing(args, t0 + budget - 35, cuda, say)  # 20 s more for the cancel
        result["checks"]["point 2"] += sh["problems"]
        say(f"sharing: statuses seen {sh['statuses_seen']} [{time.monotonic() - t0:.0f} s]")
    except Exception as e:  # noqa: BLE001 - reported in the log, the JSON and the table
        say(traceback.format_exc())
        result["error"] = f"{type(e).__name__}: {e}"
        result["checks"][point].append(f"stopped by {result['error']}")
    finally:  # nothing of ours keeps running: a run or evaluation job still active is cancelled
        for r in api.list_runs(ws) if ws.exists() else []:
            if r.is_active or (api.evaluation_job(r.run_id) or {}).get("status") in api.ACTIVE:
                api.cancel(r.run_id, actor=ME)
        wait_runs([r.run_id for r in api.list_runs(ws)] if ws.exists() else [], time.monotonic() + 20, "the end", say)
    result.update(seconds=round(time.monotonic() - t0, 1), passed=not any(result["checks"].values()))
    (args.out / "gpu_tasks.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    say(f"took {result['seconds']:.0f} s; wrote {args.out / 'gpu_tasks.json'}")
    table(result, say)
    log.close()
    shutil.rmtree(scratch, ignore_errors=True)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
