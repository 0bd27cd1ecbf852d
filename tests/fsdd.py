"""Real FSDD subsets for tests (../shared/data/fsdd, read its README): a zip of some clips with a
manifest of their label and speaker, imported like any user's upload."""

from __future__ import annotations

import csv
import io
import zipfile
from collections.abc import Callable
from pathlib import Path

#: FSDD's labels are the spoken digit; its README: "the text transcript is simply the digit's word".
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def subset_zip(shared_data: Path, out: Path, labels: str, speakers: tuple[str, ...], takes: int,
               transcript: Callable[[dict], str] | None = None) -> Path:
    """Write ``out``: the FSDD clips of the digits in ``labels`` (e.g. ``"0123"``) by ``speakers``,
    takes ``0 .. takes - 1`` each, under ``set/`` with ``set/manifest.csv`` (``path,label,speaker``,
    and a ``words`` column of ``transcript(row)`` when given, ``row`` the FSDD manifest's).
    Returns ``out``."""
    root = shared_data / "fsdd"
    with open(root / "manifest.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["label"] in labels and r["speaker"] in speakers
                and int(r["index"]) < takes]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        words = (lambda r: f",{transcript(r)}") if transcript else (lambda r: "")
        z.writestr("set/manifest.csv", "path,label,speaker" + (",words" if transcript else "") + "\n"
                   + "".join(f"{r['path']},{r['label']},{r['speaker']}{words(r)}\n" for r in rows))
        for r in rows:
            z.write(root / r["path"], f"set/{r['path']}")
    out.write_bytes(buf.getvalue())
    return out
