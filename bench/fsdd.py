"""The Free Spoken Digit Dataset in ../shared/data/fsdd (read its README): its manifest's rows, and
zips of real subsets with their manifest, imported like any user's upload. Shared by the audio
benchmarks and the tests; nothing here is bundled with masklab."""

from __future__ import annotations

import csv
import io
import zipfile
from collections.abc import Callable
from pathlib import Path

#: FSDD's labels are the spoken digit; its README: "the text transcript is simply the digit's word".
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def manifest_rows(root: Path, labels: str | None = None, speakers: tuple[str, ...] | None = None,
                  takes: int | None = None) -> list[dict[str, str]]:
    """Rows of ``root/manifest.csv`` (``path, label, speaker, index, ...``), in its order, keeping
    the digits in ``labels`` (e.g. ``"0123"``), the ``speakers`` and the takes ``0 .. takes - 1``
    (None: all of each)."""
    with open(Path(root) / "manifest.csv", newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f)
                if (labels is None or r["label"] in labels) and (speakers is None or r["speaker"] in speakers)
                and (takes is None or int(r["index"]) < takes)]


def subset_zip(shared_data: Path, out: Path, labels: str, speakers: tuple[str, ...] | None, takes: int | None,
               transcript: Callable[[dict], str] | None = None) -> Path:
    """Write ``out``: the FSDD clips of :func:`manifest_rows` (``labels``, ``speakers``, ``takes``)
    under ``set/`` with ``set/manifest.csv`` (``path,label,speaker``, and a ``words`` column of
    ``transcript(row)`` when given, ``row`` the FSDD manifest's). Returns ``out``."""
    root = Path(shared_data) / "fsdd"
    rows = manifest_rows(root, labels, speakers, takes)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        words = (lambda r: f",{transcript(r)}") if transcript else (lambda r: "")
        z.writestr("set/manifest.csv", "path,label,speaker" + (",words" if transcript else "") + "\n"
                   + "".join(f"{r['path']},{r['label']},{r['speaker']}{words(r)}\n" for r in rows))
        for r in rows:
            z.write(root / r["path"], f"set/{r['path']}")
    out.write_bytes(buf.getvalue())
    return out
