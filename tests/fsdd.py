"""Real FSDD subsets for tests (../shared/data/fsdd, read its README): a zip of some clips with a
manifest of their label and speaker, imported like any user's upload."""

from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path


def subset_zip(shared_data: Path, out: Path, labels: str, speakers: tuple[str, ...], takes: int) -> Path:
    """Write ``out``: the FSDD clips of the digits in ``labels`` (e.g. ``"0123"``) by ``speakers``,
    takes ``0 .. takes - 1`` each, under ``set/`` with ``set/manifest.csv`` (``path,label,speaker``).
    Returns ``out``."""
    root = shared_data / "fsdd"
    with open(root / "manifest.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["label"] in labels and r["speaker"] in speakers
                and int(r["index"]) < takes]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("set/manifest.csv", "path,label,speaker\n" + "".join(f"{r['path']},{r['label']},{r['speaker']}\n" for r in rows))
        for r in rows:
            z.write(root / r["path"], f"set/{r['path']}")
    out.write_bytes(buf.getvalue())
    return out
