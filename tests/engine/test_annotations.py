"""Run annotations (tags, note, archived) and disk usage on a real workspace: validation, roles, the
audit log, the records pages read, and byte counts checked against the files themselves."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.access.audit import audit_path, read_audit
from engine.access.policy import Identity, require_sign_in
from engine.config import RunConfig
from engine.errors import ConfigError, PermissionDeniedError, RunNotFoundError
from engine.store import (
    MetricsWriter,
    annotate,
    archive_run,
    create_run,
    dataset_bytes,
    disk_usage,
    format_bytes,
    get_run,
    list_runs,
    run_bytes,
    set_note,
    set_tags,
    tag_run,
)
from engine.store.annotations import ANNOTATIONS_FILE, MAX_NOTE_CHARS, MAX_TAG_CHARS
from engine.tasks import resolve

VIEWER = Identity("vera", "viewer", "password")
EDITOR = Identity("ed", "editor", "password")


def new_run(name: str = "r") -> tuple[str, Path]:
    return create_run(resolve(RunConfig.from_dict({"name": name, "train": {"steps": 20}})).to_dict())


def test_tags_note_and_archive_are_stored_with_the_run_and_config_is_untouched(workspace):
    run_id, d = new_run()
    config_before = (d / "config.json").read_bytes()
    assert (get_run(run_id).tags, get_run(run_id).note, get_run(run_id).archived) == ((), "", False)
    set_tags(run_id, [" baseline ", "ratio 0.75", "baseline", "é-ü 漢字"], actor=EDITOR)
    assert get_run(run_id).tags == ("baseline", "ratio 0.75", "é-ü 漢字")  # stripped, first of duplicates kept
    tag_run(run_id, add=["sweep"], remove=["ratio 0.75", "absent"], actor=EDITOR)
    set_note(run_id, "first look\nlooks fine", actor=EDITOR)
    archive_run(run_id, actor=EDITOR)
    rec = get_run(run_id)
    assert (rec.tags, rec.note, rec.archived) == (("baseline", "é-ü 漢字", "sweep"), "first look\nlooks fine", True)
    stored = json.loads((d / ANNOTATIONS_FILE).read_text())
    assert (stored["tags"], stored["note"], stored["archived"]) == (list(rec.tags), rec.note, True)
    archive_run(run_id, False, actor=EDITOR)
    set_note(run_id, "", actor=EDITOR)
    assert (get_run(run_id).archived, get_run(run_id).note, get_run(run_id).tags) == (False, "", rec.tags)
    assert (d / "config.json").read_bytes() == config_before
    assert [r.tags for r in list_runs()] == [rec.tags]


BAD_TAGS = [
    ("", "a tag cannot be empty"),
    ("   ", "a tag cannot be empty"),
    ("x" * (MAX_TAG_CHARS + 1), f"41 characters, at most {MAX_TAG_CHARS}"),
    ("a,b", "cannot hold a comma"),
    ("tab\there", "control character ('\\t')"),
    ("new\nline", "control character ('\\n')"),
    ("nul\x00", "control character ('\\x00')"),
    ("del\x7f", "control character ('\\x7f')"),
    ("zero\u200bwidth", "control character ('\\u200b')"),
    (3, "a tag is text, not int"),
]


@pytest.mark.parametrize(("tag", "message"), BAD_TAGS)
def test_a_bad_tag_is_refused_by_name_and_nothing_changes(workspace, tag, message):
    run_id, d = new_run()
    set_tags(run_id, ["kept"])
    before = (d / ANNOTATIONS_FILE).read_bytes()
    with pytest.raises(ConfigError) as e:
        tag_run(run_id, add=["fine", tag])
    assert message in str(e.value)
    assert (d / ANNOTATIONS_FILE).read_bytes() == before
    assert read_audit()[0].outcome == "failed" and message in read_audit()[0].details["reason"]


def test_bad_notes_and_tag_lists_are_refused(workspace):
    run_id, d = new_run()
    set_note(run_id, "n" * MAX_NOTE_CHARS)  # the limit itself is fine
    with pytest.raises(ConfigError, match=r"the note has 10,001 characters, at most 10,000"):
        set_note(run_id, "n" * (MAX_NOTE_CHARS + 1))
    with pytest.raises(ConfigError, match=r"the note is text, not int"):
        set_note(run_id, 5)
    with pytest.raises(ConfigError, match=r"give a list of tags, not one string"):
        set_tags(run_id, "baseline")
    with pytest.raises(ConfigError, match=r"51 tags: a run takes at most 50"):
        set_tags(run_id, [f"t{i}" for i in range(51)])
    assert get_run(run_id).note == "n" * MAX_NOTE_CHARS and get_run(run_id).tags == ()
    with pytest.raises(RunNotFoundError):
        set_tags("20990101-000000-abcdef", ["x"])


def test_viewers_nobody_and_demo_mode_are_refused_and_audited(workspace, monkeypatch):
    run_id, d = new_run()
    with pytest.raises(PermissionDeniedError, match=r"vera \(viewer\) may not tag, annotate or archive runs: that "
                                                    r"needs the editor role"):
        set_tags(run_id, ["x"], actor=VIEWER)
    with pytest.raises(PermissionDeniedError, match="may not tag, annotate or archive runs"):
        archive_run(run_id, actor=VIEWER)
    line = read_audit()[0]
    assert (line.user, line.action, line.target, line.outcome) == ("vera", "run.annotate", run_id, "refused")
    require_sign_in(True)  # a dashboard with sign-in, nobody signed in
    try:
        with pytest.raises(PermissionDeniedError, match="nobody is signed in: sign in to tag, annotate or archive runs"):
            set_note(run_id, "hello")
    finally:
        require_sign_in(False)
    monkeypatch.setenv("MASKLAB_MODE", "demo")
    n = len(audit_path().read_text().splitlines())
    with pytest.raises(PermissionDeniedError, match=r"demo mode \(MASKLAB_MODE=demo\): it cannot tag, annotate"):
        set_note(run_id, "hello", actor=EDITOR)  # even an editor (and the local admin)
    with pytest.raises(PermissionDeniedError, match="demo mode"):
        annotate(run_id, archived=True)
    assert len(audit_path().read_text().splitlines()) == n + 2  # demo mode writes nothing but its refusals
    assert not (d / ANNOTATIONS_FILE).exists()


def test_each_change_is_one_audit_line_with_what_it_set(workspace):
    run_id, _ = new_run()
    tag_run(run_id, add=["a", "b"], actor=EDITOR)
    set_note(run_id, "twelve chars", actor=EDITOR)
    archive_run(run_id, actor=EDITOR)
    lines = [(e.user, e.action, e.target, e.outcome, e.details) for e in read_audit()[:3]]
    common = {"tags": ["a", "b"]}
    assert lines == [
        ("ed", "run.annotate", run_id, "ok", {**common, "archived": True, "note_chars": 12}),
        ("ed", "run.annotate", run_id, "ok", {**common, "archived": False, "note_chars": 12}),
        ("ed", "run.annotate", run_id, "ok", {**common, "archived": False, "note_chars": 0}),
    ]


def test_a_damaged_annotations_file_is_a_warning_and_the_next_change_replaces_it(workspace):
    run_id, d = new_run()
    (d / ANNOTATIONS_FILE).write_text('{"tags": ["ok", "bad,one"]}')
    rec = get_run(run_id)
    assert rec.tags == () and any("bad,one" in w and ANNOTATIONS_FILE in w for w in rec.warnings)
    (d / ANNOTATIONS_FILE).write_text("{not json")
    assert any("is unreadable" in w for w in get_run(run_id).warnings)
    assert [r.run_id for r in list_runs()] == [run_id]  # still listed
    set_tags(run_id, ["fresh"])
    assert get_run(run_id).tags == ("fresh",) and get_run(run_id).warnings == ()


def _sizes_on_disk(folder: Path) -> int:
    """Independent count: every regular file's size (os.walk, links skipped)."""
    return sum(os.lstat(Path(root) / f).st_size for root, _, files in os.walk(folder) for f in files
               if not os.path.islink(Path(root) / f))


def test_disk_usage_equals_the_files_sizes(workspace, tmp_path):
    a, da = new_run("a")
    b, db = new_run("b")
    w = MetricsWriter(da, a, flush_interval=0, compact_every=1000)
    for s in range(1, 51):
        w.log(s, {"loss": 1.0 / s})
    w.close()
    (db / "blob.bin").write_bytes(b"\0" * 12_345)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x" * 1_000_000)
    os.symlink(outside, db / "link.bin")  # a link counts nothing (its target is not the run's)
    set_tags(a, ["t"])
    ds = workspace / "datasets" / "mine"
    ds.mkdir(parents=True)
    (ds / "data.npz").write_bytes(b"d" * 777)
    (ds / "meta.json").write_text("{}")
    (workspace / "datasets" / ".import-tmp").mkdir()
    (workspace / "datasets" / ".import-tmp" / "part").write_bytes(b"p" * 100)

    usage = disk_usage()
    assert usage.runs == {a: _sizes_on_disk(da), b: _sizes_on_disk(db)}
    assert run_bytes(a) == _sizes_on_disk(da) and run_bytes(b) == _sizes_on_disk(db)
    assert _sizes_on_disk(db) - (len((db / "config.json").read_bytes()) + len((db / "status.json").read_bytes())) == 12_345
    assert usage.datasets == {"mine": 779} and dataset_bytes("mine") == 779
    assert dataset_bytes("absent") == 0 and dataset_bytes("../runs") == 0
    assert usage.total == _sizes_on_disk(workspace)
    assert usage.other == _sizes_on_disk(workspace) - usage.runs_total - usage.datasets_total >= 100
    assert usage.runs_total == usage.runs[a] + usage.runs[b]


def test_format_bytes():
    assert [format_bytes(n) for n in (0, 999, 1000, 3_456, 12_000_000, 1_250_000_000)] == [
        "0 B", "999 B", "1.0 kB", "3.5 kB", "12.0 MB", "1.25 GB"]
