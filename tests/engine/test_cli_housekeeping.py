"""`python -m engine tag | note | archive` and `runs [--all]` as a user types them, through
:func:`engine.cli.main` in the test's process (tests/cli.py), on a temporary workspace, checked
against the store."""

from __future__ import annotations

import getpass
import json

from engine.config import RunConfig
from engine.store import create_run, disk_usage, format_bytes, get_run
from engine.tasks import resolve
from tests.cli import engine_main as engine_cli


def test_tag_note_archive_and_the_run_list(workspace):
    kept, _ = create_run(resolve(RunConfig.from_dict({"name": "kept", "train": {"steps": 10}})).to_dict())
    old, _ = create_run(resolve(RunConfig.from_dict({"name": "old", "train": {"steps": 10}})).to_dict())

    out = engine_cli("tag", kept, "baseline", "ratio 0.75", "digits")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{kept}: tags baseline, ratio 0.75, digits"
    out = engine_cli("tag", kept, "digits", "--remove")
    assert out.returncode == 0 and get_run(kept).tags == ("baseline", "ratio 0.75")
    out = engine_cli("note", kept, "the reference run")
    assert out.returncode == 0 and out.stdout.strip() == f"{kept}: note saved (17 characters)"
    out = engine_cli("note", old, "-", stdin="from stdin\nsecond line\n")
    assert out.returncode == 0 and get_run(old).note == "from stdin\nsecond line\n"
    out = engine_cli("archive", old)
    assert out.returncode == 0 and out.stdout.strip() == f"archived run {old}" and get_run(old).archived

    listed = engine_cli("runs")
    assert listed.returncode == 0, listed.stderr
    assert kept in listed.stdout and old not in listed.stdout
    assert "tags: baseline, ratio 0.75" in listed.stdout
    usage = disk_usage()
    assert f"{format_bytes(usage.runs[kept]):>9}" in listed.stdout.splitlines()[1]
    assert listed.stdout.splitlines()[-1] == (f"disk: runs {format_bytes(usage.runs_total)}, datasets "
                                              f"{format_bytes(usage.datasets_total)}, workspace "
                                              f"{format_bytes(usage.total)}; 1 archived run(s) not shown (--all)")
    every = engine_cli("runs", "--all")
    assert old in every.stdout and "archived" in every.stdout
    rows = {r["run_id"]: r for r in json.loads(engine_cli("runs", "--json", "--all").stdout)}
    assert (rows[old]["archived"], rows[old]["note"], rows[kept]["tags"]) == (
        True, "from stdin\nsecond line\n", ["baseline", "ratio 0.75"])
    assert rows[kept]["disk_bytes"] == disk_usage().runs[kept]
    assert [r["run_id"] for r in json.loads(engine_cli("runs", "--json").stdout)] == [kept]

    out = engine_cli("archive", old, "--unarchive")
    assert out.returncode == 0 and not get_run(old).archived
    audit = [json.loads(line) for line in engine_cli("audit", "--json").stdout.splitlines()]
    annotated = [(a["user"], a["target"]) for a in audit if a["action"] == "run.annotate" and a["outcome"] == "ok"]
    assert len(annotated) == 6 and set(annotated) == {(f"local:{getpass.getuser()}", kept),
                                                      (f"local:{getpass.getuser()}", old)}


def test_refusals_are_clear_errors_with_exit_code_2(workspace):
    run_id, d = create_run(resolve(RunConfig.from_dict({"train": {"steps": 10}})).to_dict())
    out = engine_cli("tag", run_id, "fine", "a,b")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "error: tag 'a,b': a tag cannot hold a comma" in out.stderr and get_run(run_id).tags == ()
    out = engine_cli("note", run_id, "x" * 10_001)
    assert out.returncode == 2 and "the note has 10,001 characters, at most 10,000" in out.stderr
    out = engine_cli("tag", "20990101-000000-abcdef", "x")
    assert out.returncode == 2 and "no run '20990101-000000-abcdef'" in out.stderr
    out = engine_cli("archive", run_id, env={"MASKLAB_MODE": "demo"})
    assert out.returncode == 2 and "demo mode (MASKLAB_MODE=demo): it cannot tag, annotate or archive runs" in out.stderr
    assert not get_run(run_id).archived and not (d / "annotations.json").exists()
    assert engine_cli("runs").stdout.startswith("run id")
    engine_cli("archive", run_id)
    assert engine_cli("runs").stdout.strip() == "no runs to show: 1 archived (--all shows them)"
