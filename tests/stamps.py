"""Real Tux Paint image-caption pairs for tests (../shared/data/tuxpaint-stamps, read its README): a
zip of some stamps with a ``captions.csv`` (image, caption, category), imported like any user's
upload, and a short real run on them."""

from __future__ import annotations

import csv
import io
import os
import zipfile
from pathlib import Path

from engine.config import RunConfig
from engine.runner.worker import execute_run
from engine.store import create_run, get_run
from engine.tasks import resolve


def pairs_zip(shared_data: Path, out: Path, n: int | None = None, per_class: dict[str, int] | None = None) -> Path:
    """Write ``out``: the first ``n`` stamps of the captions table (all when None), or the first
    ``per_class[c]`` stamps of each category ``c``, with their English captions in ``captions.csv``
    (``image,caption,category``; the images under ``images/``). Returns ``out``."""
    root = shared_data / "tuxpaint-stamps"
    with open(root / "captions.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if per_class is not None:
        rows = [r for c, k in per_class.items() for r in [r for r in rows if r["category"] == c][:k]]
    rows = rows[:n]
    table = io.StringIO()
    w = csv.writer(table, lineterminator="\n")
    w.writerow(["image", "caption", "category"])
    with zipfile.ZipFile(out, "w") as z:
        for r in rows:
            w.writerow([r["image"], r["caption_en"], r["category"]])
            z.write(root / r["image"], r["image"])
        z.writestr("captions.csv", table.getvalue())
    return out


def completed_run(cfg: dict, ws: Path, *, evaluate: bool | None = None) -> str:
    """Create a run of ``cfg`` (a run config dict) in workspace ``ws`` and train it to the end in this
    process through the real worker (:func:`engine.runner.worker.execute_run`); returns its id. ``evaluate``:
    True or False sets ``$MASKLAB_AUTO_EVAL`` for the run (evaluated at its end when ``cfg`` asks for
    it, as by default), None leaves the environment's. Raises AssertionError with the run's error when
    it does not complete."""
    env = {"MASKLAB_WORKSPACE": str(ws), **({} if evaluate is None else {"MASKLAB_AUTO_EVAL": str(int(evaluate))})}
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        run_id, folder = create_run(resolve(RunConfig.from_dict(cfg)).to_dict(), ws)
        assert execute_run(folder) == "completed", get_run(run_id, ws).error
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
    return run_id
