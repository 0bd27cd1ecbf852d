"""Data larger than memory: a training process's peak private memory against the dataset's size.

Generates random-pixel image datasets (32x32x3 uint8, 10 classes, 5% val; random pixels are fine
for a memory test only), or with ``--modality audio`` noise clips (1 s at 8 kHz, int16, amplitudes
varying per clip; the size counts PCM bytes), of each size in a temporary workspace, registered through
``engine.data.storage.save_dataset`` as imports are (the pixels are written in chunks to a scratch
``.npy`` and copied file to file, so the 2 GB set is never held in memory), then trains each for a
few steps through the real worker path (``python -m engine.runner.worker RUN_DIR`` in a subprocess: the
pre-flight check, ``fit``, baselines and evaluation at step 0 and at the end, a checkpoint).

Reported per size: the worker's **peak private memory** as masklab defines it everywhere
(:mod:`engine.runner.resources`: the high-water of ``RssAnon``, which the worker samples after every step
and records as ``status.json``'s ``peak_mem_bytes``), and, as a cross-check, the highest
``RssAnon`` this script saw polling the worker's ``/proc/<pid>/status`` every 20 ms (it also sees
the start-up, before the first step). The target (issue 15): the largest set's figure within 10%
of the smallest's, i.e. memory grows with the batch, not with the dataset. The files are deleted
at the end (``--keep`` keeps them).

    python bench/data_memory.py                       # 0.5 GB and 2 GB, 5 steps each
    python bench/data_memory.py --sizes-mb 50 200 --steps 3
    python bench/data_memory.py --modality audio      # audio_mae: log-mel frames kept in <workspace>/features

An audio run's first start computes every clip's log-mel frames into ``<workspace>/features`` (clip by
clip, written through a memory map) and trains on windows read from that map; its peak private
memory covers that computation too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from engine.config import RunConfig
from engine.data.audio import audio_stats
from engine.data.dataset import AudioDataset, DatasetInfo, ImageDataset, TextDataset, seeded_split
from engine.data.storage import save_dataset, utc_now
from engine.store import create_run, get_run
from engine.store.runs import read_status
from engine.tasks import resolve
from engine.tasks.image.recipe import recipe_for

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHAPE = (32, 32, 3)  # H, W, C: 3,072 bytes an image
N_CLASSES = 10
CHUNK_ROWS = 32_768  # rows generated at a time (~100 MB)


def make_image_dataset(workspace: Path, name: str, size_bytes: int, seed: int = 0) -> int:
    """Register a random-pixel image dataset of about ``size_bytes`` of pixels as ``name`` in
    ``workspace`` (``SHAPE`` images, labels uniform over ``N_CLASSES``, a seeded 5% val split);
    return its number of rows. Memory: one chunk of ``CHUNK_ROWS`` images at a time."""
    H, W, C = SHAPE
    n = max(2 * N_CLASSES, size_bytes // (H * W * C))
    rng = np.random.default_rng(seed)
    scratch = workspace / f".scratch-{name}.npy"
    try:
        images = np.lib.format.open_memmap(scratch, mode="w+", dtype=np.uint8, shape=(n, H, W, C))
        for i in range(0, n, CHUNK_ROWS):
            k = min(CHUNK_ROWS, n - i)
            images[i : i + k] = rng.integers(0, 256, size=(k, H, W, C), dtype=np.uint8)
            images.flush()
        labels = rng.integers(0, N_CLASSES, size=n).astype(np.int64)
        split = seeded_split(labels, 0.05, seed)
        info = DatasetInfo(name=name, modality="image", source="bench:random-pixels", image_shape=(C, H, W),
                           class_names=tuple(f"c{k}" for k in range(N_CLASSES)), n_train=int((split == 0).sum()),
                           n_val=int((split == 1).sum()), created_at=utc_now(),
                           description=f"random pixels, {n:,} images (bench/data_memory.py)")
        save_dataset(ImageDataset(info, images, labels, split), workspace)
        del images
    finally:
        scratch.unlink(missing_ok=True)
    return n


AUDIO_RATE, AUDIO_SECONDS = 8000, 1.0


def make_audio_dataset(workspace: Path, name: str, size_bytes: int, seed: int = 0) -> int:
    """Register an audio dataset of about ``size_bytes`` of int16 PCM as ``name``: 1 s noise clips
    at :data:`AUDIO_RATE` Hz, each with its own amplitude (so frames differ in level), labels uniform
    over ``N_CLASSES``, a seeded 5% val split; return its number of clips. Memory: one chunk of
    clips at a time (the PCM goes through a scratch ``.npy`` map, as for images)."""
    clip = int(AUDIO_RATE * AUDIO_SECONDS)
    n = max(2 * N_CLASSES, size_bytes // (2 * clip))
    rng = np.random.default_rng(seed)
    scratch = workspace / f".scratch-{name}.npy"
    try:
        pcm = np.lib.format.open_memmap(scratch, mode="w+", dtype=np.int16, shape=(n * clip,))
        chunk = max(1, CHUNK_ROWS * 3072 // (2 * clip))  # about the image chunk's bytes
        for i in range(0, n, chunk):
            k = min(chunk, n - i)
            amp = rng.uniform(300, 12000, size=(k, 1))
            pcm[i * clip : (i + k) * clip] = (rng.standard_normal((k, clip)) * amp).clip(-32767, 32767).astype(np.int16).ravel()
            pcm.flush()
        offsets = np.arange(n + 1, dtype=np.int64) * clip
        labels = rng.integers(0, N_CLASSES, size=n).astype(np.int64)
        split = seeded_split(labels, 0.05, seed)
        info = DatasetInfo(name=name, modality="audio", source="bench:noise-clips", image_shape=None,
                           class_names=tuple(f"c{k}" for k in range(N_CLASSES)), n_train=int((split == 0).sum()),
                           n_val=int((split == 1).sum()), created_at=utc_now(),
                           stats=audio_stats(np.full(n, clip), AUDIO_RATE),
                           description=f"noise, {n:,} clips of {AUDIO_SECONDS:g} s (bench/data_memory.py)")
        save_dataset(AudioDataset(info, pcm, offsets, np.array([AUDIO_RATE], np.int64), labels, split), workspace)
        del pcm
    finally:
        scratch.unlink(missing_ok=True)
    return n


def make_text_dataset(workspace: Path, name: str, size_bytes: int, seed: int = 0, sentences: tuple[int, int] = (1, 3),
                      sentence_words: tuple[int, int] = (6, 30)) -> int:
    """Register a text dataset of about ``size_bytes`` of UTF-8 as ``name``: ``sentences`` (low, high,
    inclusive) sentences a text of ``sentence_words`` words each, drawn from 5,000 random lower-case
    pseudo-words (Zipf-like frequencies), labels uniform over ``N_CLASSES``, a seeded 5% val split;
    return its number of texts. Memory: one chunk of texts at a time (the bytes go through a scratch
    ``.npy`` map)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = np.array(["".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(5000)])
    p = 1.0 / np.arange(1, len(words) + 1)
    p /= p.sum()
    scratch = workspace / f".scratch-{name}.npy"
    data = np.lib.format.open_memmap(scratch, mode="w+", dtype=np.uint8, shape=(int(size_bytes),))
    offsets, used = [0], 0
    try:
        while used < size_bytes:
            # 20,000 texts at a time, every word of them drawn in one call
            per_text = rng.integers(sentences[0], sentences[1] + 1, size=20_000)
            lengths = rng.integers(sentence_words[0], sentence_words[1] + 1, size=int(per_text.sum()))  # words per sentence
            drawn = words[rng.choice(len(words), int(lengths.sum()), p=p)]
            said = [" ".join(s) + "." for s in np.split(drawn, np.cumsum(lengths)[:-1])]
            cut = np.cumsum(per_text)[:-1]
            chunk = [" ".join(t) for t in np.split(np.array(said, dtype=object), cut)]
            blob = "\n".join(chunk).encode()  # one buffer, then cut at the texts' ends
            ends = np.cumsum([len(t.encode()) + 1 for t in chunk]) - 1
            keep = int(np.searchsorted(ends, size_bytes - used, side="right"))
            if keep == 0:
                break
            starts = np.concatenate([[0], ends[:-1] + 1])[:keep]
            for a, b in zip(starts, ends[:keep]):
                data[used : used + (b - a)] = np.frombuffer(blob[a:b], np.uint8)
                used += int(b - a)
                offsets.append(used)
        data.flush()
        n = len(offsets) - 1
        labels = rng.integers(0, N_CLASSES, size=n).astype(np.int64)
        split = seeded_split(labels, 0.05, seed)
        info = DatasetInfo(name=name, modality="text", source="bench:random-words", image_shape=None,
                           class_names=tuple(f"c{k}" for k in range(N_CLASSES)), n_train=int((split == 0).sum()),
                           n_val=int((split == 1).sum()), created_at=utc_now(),
                           description=f"random words, {n:,} texts (bench/data_memory.py)")
        save_dataset(TextDataset(info, data[:used], np.asarray(offsets, np.int64), labels, split), workspace)
        del data
    finally:
        scratch.unlink(missing_ok=True)
    return n


#: ``make_text_dataset``'s shape for ``--short-texts``: one sentence of 2 to 6 words a text.
SHORT_TEXTS = {"sentences": (1, 1), "sentence_words": (2, 6)}


def run_config(name: str, steps: int, batch: int, modality: str = "image") -> dict:
    """The run: New run's proposal for 32x32 images (``recipe_for``), ``steps`` steps of ``batch``,
    evaluated (baselines, val loss, samples) at step 0 and at the end, one checkpoint, 1 thread.
    ``modality="audio"``: ``audio_mae`` with its defaults (64 mel bins, 1 s windows, tiny, 8x8
    patches, random masking at 0.8), the same steps, batch and evaluation."""
    if modality == "text":
        return {"name": f"mem-{name}", "task": "text_mlm", "data": {"dataset": name},
                "train": {"steps": steps, "batch_size": batch, "warmup_steps": 0, "eval_interval": steps,
                          "checkpoint_interval": steps, "num_threads": 1, "seed": 0}}  # fmt: skip
    if modality == "audio":
        return {"name": f"mem-{name}", "task": "audio_mae", "data": {"dataset": name},
                "train": {"steps": steps, "batch_size": batch, "warmup_steps": 0, "eval_interval": steps,
                          "checkpoint_interval": steps, "num_threads": 1, "seed": 0}}  # fmt: skip

    r = recipe_for((SHAPE[2], SHAPE[0], SHAPE[1]))
    r["train"].update(steps=steps, batch_size=batch, warmup_steps=0, eval_interval=steps, checkpoint_interval=steps,
                      num_threads=1, seed=0)
    return {"name": f"mem-{name}", "task": "image_mim", "data": {"dataset": name},
            "masking": {"strategy": "random", "ratio": 0.75}, **r}


def _rss_anon(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def train_peak(workspace: Path, name: str, steps: int = 5, batch: int = 64, modality: str = "image") -> dict:
    """Train dataset ``name`` for ``steps`` steps in a worker subprocess; return ``{"status",
    "peak_mem_bytes"`` (the worker's own figure), ``"polled_peak_bytes"`` (this script's poll),
    ``"seconds"``, ``"run_id"}``. Raises RuntimeError when the run does not complete."""
    cfg = resolve(RunConfig.from_dict(run_config(name, steps, batch, modality)))
    run_id, run_dir = create_run(cfg.to_dict(), workspace)
    env = {**os.environ, "MASKLAB_WORKSPACE": str(workspace), "MASKLAB_AUTO_EVAL": "0",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "engine.runner.worker", str(run_dir)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    polled = [0]

    def poll() -> None:
        while proc.poll() is None:
            polled[0] = max(polled[0], _rss_anon(proc.pid) or 0)
            time.sleep(0.02)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    rc = proc.wait()
    t.join()
    seconds = time.perf_counter() - t0
    rec = get_run(run_id, workspace)
    if rec.status != "completed":
        log = (Path(run_dir) / "worker.log")
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(f"run {run_id} on {name} ended {rec.status} (exit {rc}): {rec.error}\n{tail}")

    return {"status": rec.status, "peak_mem_bytes": int(read_status(Path(run_dir))["peak_mem_bytes"]),
            "polled_peak_bytes": polled[0], "seconds": seconds, "run_id": run_id}


def measure(sizes_mb: list[float], steps: int, batch: int, root: Path | None = None, keep: bool = False,
            modality: str = "image", short_texts: bool = False) -> list[dict]:
    """Generate, register and train one dataset per size (MB of pixels, PCM or UTF-8, 10**6 bytes) in
    a fresh temporary workspace under ``root``; return one row per size: ``size_mb``, ``rows``,
    ``disk_bytes`` (the registered folder), ``peak_mem_bytes``, ``polled_peak_bytes``, ``seconds``.
    ``short_texts``: texts of one sentence of 2 to 6 words (:data:`SHORT_TEXTS`): many more rows a
    MB, each encoded to the same ``max_len`` columns as a long one. The workspace is deleted at the
    end unless ``keep``."""
    ws = Path(tempfile.mkdtemp(prefix="masklab-datamem-", dir=root)) / "workspace"
    ws.mkdir(parents=True)
    os.environ["MASKLAB_WORKSPACE"] = str(ws)
    rows = []
    try:
        for mb in sizes_mb:
            name = f"random-{int(mb)}mb"
            if modality == "text":
                n = make_text_dataset(ws, name, int(mb * 1e6), **(SHORT_TEXTS if short_texts else {}))
            else:
                n = (make_audio_dataset if modality == "audio" else make_image_dataset)(ws, name, int(mb * 1e6))
            folder = ws / "datasets" / name
            disk = sum(p.stat().st_size for p in folder.iterdir())
            out = train_peak(ws, name, steps, batch, modality)
            derived = [ws / "features", ws / "encoded", ws / "tokenizers"]  # what the run derived from the data
            out["features_bytes"] = sum(p.stat().st_size for d in derived if d.exists() for p in d.rglob("*") if p.is_file())
            rows.append({"size_mb": mb, "rows": n, "disk_bytes": disk, **out})
            shutil.rmtree(folder)  # free the disk before the next size
            for d in derived:
                shutil.rmtree(d, ignore_errors=True)
    finally:
        if not keep:
            shutil.rmtree(ws.parent, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[500, 2000], help="dataset sizes, MB of pixels")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--root", type=Path, default=None, help="where the temporary workspace goes (default: $TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the workspace (its path is printed)")
    p.add_argument("--modality", choices=("image", "audio", "text"), default="image")
    p.add_argument("--short-texts", action="store_true", help="text: one sentence of 2 to 6 words a text")
    args = p.parse_args(argv)
    rows = measure(args.sizes_mb, args.steps, args.batch, args.root, args.keep, args.modality, args.short_texts)
    mib = 2**20
    if args.modality == "text":
        print(f"text_mlm (bert tiny, WordPiece 8,000, 128 tokens), random-word texts, batch {args.batch}, "
              f"{args.steps} steps, 1 thread, worker subprocess (tokenizer trained and split encoded at its start)")
    elif args.modality == "audio":
        print(f"audio_mae (tiny, 64 mel bins, 8x8 patches), {AUDIO_SECONDS:g} s noise clips at {AUDIO_RATE} Hz, "
              f"batch {args.batch}, {args.steps} steps, 1 thread, worker subprocess (features computed at its start)")
    else:
        print(f"image_mim (mae_vit tiny, patch 4), {SHAPE[0]}x{SHAPE[1]}x{SHAPE[2]} random pixels, batch {args.batch}, "
              f"{args.steps} steps, 1 thread, worker subprocess")
    what = {"audio": "clips", "text": "texts"}.get(args.modality, "images")
    print(f"  {'dataset':>10} {what:>10} {'on disk':>10} {'derived':>10} {'peak private (worker)':>22} {'polled RssAnon':>15} {'wall':>7}")
    for r in rows:
        print(f"  {r['size_mb']:>8.0f}MB {r['rows']:>10,} {r['disk_bytes'] / mib:>8.0f}Mi {r['features_bytes'] / mib:>8.0f}Mi"
              f" {r['peak_mem_bytes'] / mib:>20.1f}Mi {r['polled_peak_bytes'] / mib:>13.1f}Mi {r['seconds']:>6.1f}s")
    first, last = rows[0], rows[-1]
    ratio = last["peak_mem_bytes"] / first["peak_mem_bytes"]
    polled = last["polled_peak_bytes"] / max(first["polled_peak_bytes"], 1)
    print(f"  ratio {last['size_mb']:.0f} MB / {first['size_mb']:.0f} MB: {ratio:.3f} (worker), {polled:.3f} (polled); "
          f"target <= 1.10: {'met' if ratio <= 1.10 else 'NOT met'}")
    return 0 if ratio <= 1.10 else 1


if __name__ == "__main__":
    sys.exit(main())
