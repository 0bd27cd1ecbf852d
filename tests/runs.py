"""Trained runs shared by a whole test session: train once, read many times.

One short, completed run per task (:data:`SPECS`), in a workspace of its own with its dataset
imported from ../shared/data. Image, audio and paired runs are evaluated at their end (probes, kNN
and a one-epoch fine-tune on at most 300 rows); text runs are not: their linear probe on TF-IDF
features alone took 38 s here (tests/engine/test_evaluation.py evaluates a text run), but for the
unlabelled one, whose evaluation has no labels to probe (it skips what needs them and says so). A kind is
trained the first time a test asks for it, once per session (the pytest-xdist workers share the
folder; the first to ask trains it under a file lock), through the real worker code path
(:func:`engine.runner.worker.execute_run`).

Readers (page, view, compare and evaluation tests) open a shared workspace as it is: ``get(kind)``.
A test that writes (trains, resumes, imports, deletes, annotates), or wants several kinds in one
workspace, takes ``copy(*kinds, dest=...)`` into its own folder: a shared workspace is never changed
after its run completed.
"""

from __future__ import annotations

import fcntl
import shutil
from dataclasses import dataclass
from pathlib import Path

from bench.fsdd import WORDS, subset_zip
from engine.data import ImportOptions, import_source
from tests.stamps import completed_run, pairs_zip

#: Every shared run is evaluated at its end on this budget: enough rows for each probe to be scored,
#: the one-epoch fine-tune whole (no time budget: these runs train for a second or two).
EVALUATION = {"auto": True, "max_rows": 300, "tsne_max_rows": 0, "finetune_epochs": 1, "budget": None}
NO_EVALUATION = {**EVALUATION, "auto": False}
SHORT = {"batch_size": 32, "warmup_steps": 2, "device": "cpu", "num_threads": 1}
IMAGE = {"name": "digits-mae", "model": {"preset": "tiny", "patch_size": 2}, "evaluation": EVALUATION,
         "train": {**SHORT, "steps": 20, "eval_interval": 10, "checkpoint_interval": 20}}
AUDIO = {"n_mels": 32, "clip_seconds": 0.5}
#: Shared by the two audio-text page modules: the FSDD digit said, as its word.
PAIRED_AUDIO_VIS = 4
PAIRED_IMAGE_VIS = 4

#: kind -> (dataset, run config). Datasets: ``digits`` (bundled); ``trec400`` / ``trec300``: the first
#: 400 / 300 TREC questions; ``trec-notes``: the first 24 TREC questions as a plain ``.txt``, without
#: labels (its WordPiece tokenizer reaches far fewer ids than the 8,000 asked); ``d4`` / ``spoken3``: FSDD digits 0-3 of jackson and theo, 4 / 3 takes
#: each, split by speaker (``spoken3w`` with the word as each clip's transcript); ``pairs``: 12 Tux
#: Paint stamps of each of animals, food and vehicles with their captions, 16x16.
SPECS: dict[str, tuple[str, dict]] = {
    "image_mae": ("digits", IMAGE),
    "simmim": ("digits", {**IMAGE, "name": "digits-simmim", "model": {"arch": "simmim_vit", "preset": "tiny",
                                                                     "patch_size": 2},
                          "objective": {"loss": "l1"}}),
    "text_mlm": ("trec400", {
        "name": "trec-mlm", "task": "text_mlm", "evaluation": NO_EVALUATION,
        "data": {"dataset": "trec", "tokenizer": {"vocab_size": 500, "max_len": 48}}, "model": {"preset": "tiny"},
        "masking": {"strategy": "random", "ratio": 0.15},
        "train": {**SHORT, "batch_size": 8, "steps": 6, "eval_interval": 3, "checkpoint_interval": 6}}),
    "text_unlabelled": ("trec-notes", {
        "name": "notes-mlm", "task": "text_mlm", "evaluation": EVALUATION,
        "data": {"dataset": "notes", "tokenizer": {"vocab_size": 8000, "max_len": 32}}, "model": {"preset": "tiny"},
        "masking": {"strategy": "random", "ratio": 0.15},
        "train": {**SHORT, "batch_size": 8, "steps": 4, "eval_interval": 2, "checkpoint_interval": 4}}),
    "text_span": ("trec300", {
        "name": "span-views", "task": "text_span", "task_params": {"decoder_input_mask": 1.0}, "evaluation": NO_EVALUATION,
        "data": {"dataset": "trec", "tokenizer": {"vocab_size": 300, "max_len": 48}},
        "masking": {"strategy": "sentence_span"}, "model": {"preset": "tiny"},
        "train": {**SHORT, "steps": 6, "batch_size": 8, "eval_interval": 3, "checkpoint_interval": 6, "warmup_steps": 1}}),
    "audio_mae": ("d4", {
        "name": "fsdd-eval", "task": "audio_mae", "evaluation": EVALUATION, "model": {"preset": "tiny"},
        "data": {"dataset": "d4", "audio": AUDIO},
        "train": {**SHORT, "batch_size": 8, "steps": 6, "eval_interval": 3, "checkpoint_interval": 6, "num_vis": 2}}),
    "audio_frames": ("spoken3", {
        "name": "fsdd-frames", "task": "audio_frames", "evaluation": EVALUATION,
        "data": {"dataset": "spoken", "audio": AUDIO},
        "train": {**SHORT, "steps": 2, "batch_size": 4, "eval_interval": 2, "num_vis": 3, "warmup_steps": 0}}),
    "paired_image_text": ("pairs", {
        "name": "pairs", "task": "paired", "evaluation": EVALUATION, "model": {"preset": "tiny"},
        "data": {"dataset": "pairs", "tokenizer": {"vocab_size": 300, "max_len": 24}},
        "train": {**SHORT, "steps": 2, "batch_size": 8, "eval_interval": 2, "checkpoint_interval": 2,
                  "num_vis": PAIRED_IMAGE_VIS, "warmup_steps": 0}}),
    "paired_audio_text": ("spoken3w", {
        "name": "spoken-pairs", "task": "paired_audio", "evaluation": EVALUATION, "model": {"preset": "tiny", "patch_size": 4},
        "data": {"dataset": "spoken", "audio": AUDIO, "tokenizer": {"vocab_size": 100, "max_len": 8}},
        "train": {**SHORT, "steps": 2, "batch_size": 8, "eval_interval": 2, "checkpoint_interval": 2,
                  "num_vis": PAIRED_AUDIO_VIS, "warmup_steps": 0}}),
}
#: The Compare tests' four runs (AppTest and real browser): digits, tiny MAE, 12 steps, two seeds of
#: two mask ratios, so two seed groups; ``shared_runs.copy(*COMPARE_FOUR, dest=...)`` puts them in one
#: workspace (the bundled digits are imported nowhere, so they combine).
COMPARE_FOUR = {f"compare_r{ratio}_s{seed}": (ratio, seed) for ratio in (0.5, 0.75) for seed in (0, 1)}
SPECS.update({kind: ("digits", {**IMAGE, "name": f"r{ratio}-s{seed}", "masking": {"ratio": ratio},
                                "train": {**IMAGE["train"], "steps": 12, "eval_interval": 6, "checkpoint_interval": 12,
                                          "seed": seed}})
              for kind, (ratio, seed) in COMPARE_FOUR.items()})


@dataclass(frozen=True)
class TrainedRun:
    """A completed run: its workspace folder and run id."""

    workspace: Path
    run_id: str


def import_dataset(which: str, workspace: Path, shared_data: Path) -> None:
    """Import dataset ``which`` (see :data:`SPECS`) into ``workspace`` from ``shared_data``."""
    scratch = workspace.parent
    if which == "digits":
        return  # bundled
    if which == "trec-notes":
        rows = (shared_data / "trec" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:25]
        src = scratch / "notes.txt"
        src.write_text("\n".join(r.split("\t")[2] for r in rows) + "\n", encoding="utf-8")
        rep = import_source(src, "notes", ImportOptions(val_fraction=0.25), workspace=workspace)
    elif which.startswith("trec"):
        n = int(which[4:])
        rows = (shared_data / "trec" / "train.tsv").read_text(encoding="utf-8").splitlines()[: n + 1]
        src = scratch / f"{which}.tsv"
        src.write_text("\n".join(rows) + "\n", encoding="utf-8")
        rep = import_source(src, "trec", ImportOptions(label_column="label"), workspace=workspace)
    elif which in ("d4", "spoken3", "spoken3w"):
        takes = 4 if which == "d4" else 3
        words = {"transcript": lambda r: WORDS[int(r["label"])]} if which == "spoken3w" else {}
        z = subset_zip(shared_data, scratch / f"{which}.zip", "0123", ("jackson", "theo"), takes, **words)
        opts = ImportOptions(group_column="speaker", sample_rate=8000, val_fraction=0.5,
                             **({"text_column": "words"} if words else {}))
        rep = import_source(z, "d4" if which == "d4" else "spoken", opts, workspace=workspace)
        assert rep.accepted == 8 * takes, rep
    elif which == "pairs":
        z = pairs_zip(shared_data, scratch / "pairs.zip", per_class=dict.fromkeys(("animals", "food", "vehicles"), 12))
        rep = import_source(z, "pairs", ImportOptions(val_fraction=0.25), workspace=workspace, image_size=16,
                            geometry="pad")
        assert rep.accepted == 36, rep
    else:
        raise KeyError(which)
    assert rep.accepted > 0, rep


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


class SharedRuns:
    """The session's shared runs under ``root`` (see the module docstring)."""

    def __init__(self, root: Path, shared_data: Path):
        self.root, self.shared_data = root, shared_data
        self._runs: dict[str, TrainedRun] = {}
        self._files: dict[str, dict[str, tuple[int, int]]] = {}  # kind -> what its workspace held once trained

    def get(self, kind: str) -> TrainedRun:
        """The shared run of ``kind`` (a key of :data:`SPECS`), trained on first use. Read only.

        ``root`` may be shared by the session's pytest-xdist workers: the first to ask trains the run
        while holding ``<root>/<kind>.lock`` and then writes ``<kind>/run_id``; the others wait on the
        lock and read it. A worker that failed part-way leaves no ``run_id``; the next one starts over."""
        if kind not in self._runs:
            dataset, cfg = SPECS[kind]
            self.root.mkdir(parents=True, exist_ok=True)
            folder, done = self.root / kind, self.root / kind / "run_id"
            with open(self.root / f"{kind}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also on an exception
                if not done.is_file():
                    shutil.rmtree(folder, ignore_errors=True)
                    ws = folder / "workspace"
                    ws.mkdir(parents=True)
                    import_dataset(dataset, ws, self.shared_data)
                    done.write_text(completed_run(cfg, ws, evaluate=True), encoding="utf-8")
            self._runs[kind] = TrainedRun(folder / "workspace", done.read_text(encoding="utf-8"))
            self._files[kind] = _files(folder / "workspace")
        return self._runs[kind]

    def changed(self) -> list[str]:
        """The files of the shared workspaces that appeared, went or changed (size or mtime) since
        their runs completed: empty while every test kept to reading them."""
        out = []
        for kind, before in self._files.items():
            now = _files(self._runs[kind].workspace)
            out += [f"{kind}: {p}" for p in sorted(before.keys() | now.keys()) if before.get(p) != now.get(p)]
        return out

    def copy(self, *kinds: str, dest: Path) -> tuple[Path, dict[str, str]]:
        """A writable workspace at ``dest`` holding the runs (and datasets) of ``kinds``: ``(workspace,
        {kind: run id})``. Kinds whose datasets share a name must not be combined."""
        dest.mkdir(parents=True, exist_ok=True)
        ids = {}
        for kind in kinds:
            run = self.get(kind)
            shutil.copytree(run.workspace, dest, dirs_exist_ok=True, symlinks=True)
            ids[kind] = run.run_id
        return dest, ids
