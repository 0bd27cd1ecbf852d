"""New run says in words when a dataset has no validation split (its figures are then measured on
the training items, as every task does): a validation fraction of 0, or a single item."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

from engine.data import import_source
from engine.data.tabular import ImportOptions

ENTRY = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"


def _zip(path: Path, n: int) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for i in range(n):
            buf = io.BytesIO()
            Image.new("L", (8, 8), 40 * i).save(buf, "PNG")
            z.writestr(f"cats/{i}.png", buf.getvalue())
    return path


@pytest.mark.parametrize("n, val_fraction, held_out", [(4, 0.0, False), (1, 0.1, False), (10, 0.2, True)])
def test_new_run_warns_when_the_dataset_has_no_validation_split(workspace, tmp_path, n, val_fraction, held_out):
    info = import_source(_zip(tmp_path / "few.zip", n), "few", ImportOptions(val_fraction=val_fraction), image_size=8).dataset
    assert (info.n_val > 0) == held_out
    at = AppTest.from_file(str(ENTRY), default_timeout=120).run()
    at.switch_page("../pages/new_run.py")
    at.query_params["dataset"] = "few"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    notes = [w.value for w in at.warning if "has no validation split" in w.value]
    if held_out:
        assert notes == []
    else:
        items = f"{n} training item{'s' * (n != 1)}"
        assert notes == [f"'few' has no validation split ({items}): validation figures and baselines are measured on "
                         "the training items, so they show how well a run fits them, not how it generalises. Import it "
                         "again with a validation fraction above 0 for a held-out split."]
