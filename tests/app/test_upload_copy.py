"""The Data page's temporary copy of an upload (``/tmp/masklab-upload-*``) lives only while it is
needed (issue 37, "Smaller"): it goes when its import ends, and when the file is taken out of the
uploader. AppTest runs the page in this process against the real engine and a real import process."""

from __future__ import annotations

import os
import tempfile
import time

from streamlit.testing.v1 import AppTest

from tests.app.pages import ENTRY


def _data_page() -> AppTest:
    at = AppTest.from_file(str(ENTRY), default_timeout=60).run()
    return at.switch_page("../pages/data.py").run()


def test_the_uploads_copy_goes_when_its_import_ends_and_the_report_stays(workspace, stamps_zip, tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # the page's mkdtemp writes here
    at = _data_page()
    at.file_uploader[0].upload("stamps.zip", stamps_zip, "application/zip").run()
    (copy,) = tmp.glob("masklab-upload-*")
    assert (copy / "stamps.zip").read_bytes() == stamps_zip  # the import process reads it
    at.text_input(key="data_new_name").input("stamps").run()
    at.button(key="data_import").click().run()
    end = time.time() + 60
    while "data_job" in at.session_state and time.time() < end:
        time.sleep(0.3)
        at.run()
    assert "data_job" not in at.session_state, "the import did not end"
    at.run()  # a later rerun writes no new copy: the uploader was emptied with it
    assert not at.exception, [e.value for e in at.exception]
    assert list(tmp.glob("masklab-upload-*")) == []
    assert any("Imported 36 images" in w.value for w in at.warning), [w.value for w in at.warning]  # the report stays
    assert at.selectbox(key="data_ds").value == "stamps"


def test_the_uploads_copy_goes_when_the_file_is_taken_out(workspace, stamps_zip, tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    at = _data_page()
    at.file_uploader[0].upload("stamps.zip", stamps_zip, "application/zip").run()
    assert len(list(tmp.glob("masklab-upload-*"))) == 1
    at.file_uploader[0].clear().run()
    assert not at.exception and list(tmp.glob("masklab-upload-*")) == []


def test_a_copy_left_by_an_ended_session_goes_with_the_next_upload(workspace, stamps_zip, tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    stale, other = tmp / "masklab-upload-stale", tmp / "masklab-upload-other"  # a day old; another session's, now
    for d in (stale, other):
        d.mkdir()
        (d / "x.zip").write_bytes(b"PK")
    os.utime(stale, (time.time() - 2 * 86400,) * 2)
    at = _data_page()
    at.file_uploader[0].upload("stamps.zip", stamps_zip, "application/zip").run()
    assert not at.exception
    assert not stale.exists() and other.exists() and len(list(tmp.glob("masklab-upload-*"))) == 2
