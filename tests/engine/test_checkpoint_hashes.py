"""A checkpoint's manifest lists each file's SHA-256 and loading checks it: a file changed in place
(same size) is refused with a message naming it; a checkpoint written before hashes loads as before."""

from __future__ import annotations

import json

import pytest

from engine.errors import DamagedFileError
from engine.store.checkpoints import MANIFEST, STATE, WEIGHTS, latest_complete_checkpoint, load_checkpoint_state, load_weights
from engine.store.paths import run_dir


@pytest.fixture
def ckpt(shared_runs, tmp_path):
    ws, ids = shared_runs.copy("image_mae", dest=tmp_path / "ws")
    return latest_complete_checkpoint(run_dir(ids["image_mae"], ws))


@pytest.mark.parametrize("name,load", [(WEIGHTS, load_weights), (STATE, load_checkpoint_state)])
def test_a_file_changed_in_place_is_refused_on_load(ckpt, name, load):
    manifest = json.loads((ckpt / MANIFEST).read_text())
    assert set(manifest["sha256"]) == {WEIGHTS, STATE} and manifest["files"][name] == (ckpt / name).stat().st_size
    assert load(ckpt)  # whole: loads
    data = bytearray((ckpt / name).read_bytes())
    data[-9] ^= 0x01  # one bit, the size unchanged: the manifest's sizes alone would not see it
    (ckpt / name).write_bytes(bytes(data))
    with pytest.raises(DamagedFileError, match=f"{name}: its SHA-256 differs from the one its manifest lists"):
        load(ckpt)


def test_a_checkpoint_written_before_hashes_still_loads(ckpt):
    manifest = json.loads((ckpt / MANIFEST).read_text())
    del manifest["sha256"]
    (ckpt / MANIFEST).write_text(json.dumps(manifest))
    assert load_weights(ckpt) and load_checkpoint_state(ckpt)["step"] == manifest["step"]
