"""Fixtures of the UI tests: a real image archive to upload; and one scan of the installed
packages for Streamlit components per test process."""

from __future__ import annotations

import csv
import functools
import io
import zipfile
from pathlib import Path

import pytest
from streamlit.components.v2 import manifest_scanner

# Every new AppTest scans the metadata of every installed distribution for Streamlit components
# (0.1 to 0.3 s each on the 2-core machine, hundreds of times a session); a server does it once at
# start-up. The packages do not change during a session, so the first scan's answer serves all.
manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)

STAMP_CLASSES = ("animals", "food", "vehicles")  # real Tux Paint stamps (RGBA PNG, GPL-2), see ../shared


@pytest.fixture(scope="session")
def stamps_zip(shared_data) -> bytes:
    """A .zip of 36 real Tux Paint stamps in three class folders, plus one corrupt PNG (rejected)
    and a README (skipped, not an image)."""
    root = shared_data / "tuxpaint-stamps"
    with open(root / "captions.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for cls in STAMP_CLASSES:
            for r in [r for r in rows if r["category"] == cls][:12]:
                z.write(root / r["image"], f"stamps/{cls}/{Path(r['image']).name}")
        z.writestr("stamps/food/broken.png", b"\x89PNG\r\n\x1a\n but the rest is not a PNG")
        z.writestr("stamps/README.txt", "three classes of stamps\n")
    return buf.getvalue()
