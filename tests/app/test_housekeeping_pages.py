"""Housekeeping in the dashboard (issue 9, point 5): tags, note and archive on Run detail, archived runs
on Runs, the tag facet of Compare, "Open this config in New run", disk space. AppTest on the real
engine and store; nothing mocked."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from streamlit.testing.v1 import AppTest

from engine.access.audit import read_audit
from engine.access.policy import require_sign_in
from engine.access.users import remove_user, set_user
from engine.config import RunConfig
from engine.data import load_dataset
from engine.store import archive_run, create_run, disk_usage, format_bytes, get_run, set_note, set_tags, write_status
from engine.tasks import resolve

ENTRY = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"
CFG = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2}, "train": {"steps": 50}}
CONTROLS = {"Save tags and note", "Archive", "Unarchive"}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv("MASKLAB_MODE", raising=False)
    yield
    require_sign_in(False)


def ended_run(name: str, **cfg) -> str:
    run_id, d = create_run(resolve(RunConfig.from_dict({**CFG, **cfg, "name": name})).to_dict())
    write_status(d, {"status": "completed", "step": 50, "total_steps": 50, "started_at": 1.0, "ended_at": 2.0})
    return run_id


def open_page(page: str, params: dict[str, str], at: AppTest | None = None) -> AppTest:
    at = at if at is not None else AppTest.from_file(str(ENTRY), default_timeout=120)
    if page != "runs":
        at.run().switch_page(f"../pages/{page}.py")
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def buttons(at: AppTest) -> set[str]:
    return {b.label for b in at.button} | {b.label for b in at.get("form_submit_button")}


def test_run_detail_saves_tags_and_note_and_archives(workspace):
    other = ended_run("other")
    set_tags(other, ["baseline"])
    run_id = ended_run("mine")
    at = open_page("run_detail", {"run": run_id})
    tags = at.multiselect(key=f"rd_notes_{run_id}_tags")
    assert tags.options == ["baseline"] and tags.value == []  # the workspace's tags are offered
    tags.select("baseline").select("my new tag")  # a new tag, typed
    at.text_area(key=f"rd_notes_{run_id}_note").input("why this run\nexists")
    at.get("form_submit_button")[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    rec = get_run(run_id)
    assert (rec.tags, rec.note, rec.archived) == (("baseline", "my new tag"), "why this run\nexists", False)

    next(b for b in at.button if b.label == "Archive").click().run()
    assert get_run(run_id).archived and "Unarchive" in buttons(at)
    assert any("This run is archived" in c.value for c in at.caption)
    next(b for b in at.button if b.label == "Unarchive").click().run()
    assert not get_run(run_id).archived and "Archive" in buttons(at)
    lines = [(e.user, e.action, e.target, e.outcome) for e in read_audit()[:3]]
    assert lines == [(f"local:{getpass.getuser()}", "run.annotate", run_id, "ok")] * 3


def test_a_bad_tag_from_the_page_is_an_error_box_and_nothing_is_saved(workspace):
    run_id = ended_run("mine")
    at = open_page("run_detail", {"run": run_id})
    at.multiselect(key=f"rd_notes_{run_id}_tags").select("a,b")
    at.get("form_submit_button")[0].click().run()
    assert [e.value for e in at.error] == ["tag 'a,b': a tag cannot hold a comma (commas separate tags); give each "
                                           "tag on its own"]
    assert get_run(run_id).tags == ()


def test_viewers_and_demo_mode_read_tags_and_note_without_controls(workspace, monkeypatch):
    run_id = ended_run("mine")
    set_tags(run_id, ["baseline", "sweep"])
    set_note(run_id, "the reference")
    set_user("vera", "viewer", "pw-v")
    at = AppTest.from_file(str(ENTRY), default_timeout=120).run()
    at.text_input(key="signin_name").input("vera")
    at.text_input(key="signin_password").input("pw-v")
    at.get("form_submit_button")[0].click().run()
    at = open_page("run_detail", {"run": run_id}, at)
    assert not buttons(at) & CONTROLS and not at.multiselect and not at.text_area
    assert "tags: baseline, sweep" in [c.value for c in at.caption]
    assert "the reference" in [m.value for m in at.markdown]
    assert not [p for p in at.get("page_link") if p.proto.label == "Open this config in New run"]  # viewers do not launch

    require_sign_in(False)  # the dashboard's gate set it in this process
    remove_user("vera")  # no sign-in any more: the local admin, but in demo mode
    monkeypatch.setenv("MASKLAB_MODE", "demo")
    at = open_page("run_detail", {"run": run_id})
    assert not buttons(at) & CONTROLS and not at.multiselect and "tags: baseline, sweep" in [c.value for c in at.caption]


def test_runs_hides_archived_runs_unless_shown_and_the_url_keeps_it(workspace):
    kept = ended_run("kept")
    old = ended_run("old")
    archive_run(old)
    at = open_page("runs", {})
    assert at.multiselect(key="runs_selected").options == [f"kept · {kept}"]
    assert any("1 run shown · 1 archived hidden" in c.value for c in at.caption)
    usage = disk_usage()
    assert any(f"runs take {format_bytes(usage.runs_total)} on disk" in c.value for c in at.caption)
    table = at.dataframe[0].value
    assert list(table["run id"]) == [kept] and list(table["disk"]) == [format_bytes(usage.runs[kept])]
    at.toggle(key="runs_archived").set_value(True).run()
    assert at.query_params["archived"] in ("true", ["true"])
    assert len(at.multiselect(key="runs_selected").options) == 2
    assert sorted(at.dataframe[0].value["run id"]) == sorted([kept, old])
    at = open_page("runs", {"archived": "true"})  # a copied link
    assert at.toggle(key="runs_archived").value is True and len(at.dataframe[0].value) == 2


def test_compare_filters_by_tag(workspace):
    a, b, c = ended_run("a"), ended_run("b"), ended_run("c")
    set_tags(a, ["sweep", "ratio"])
    set_tags(b, ["sweep"])
    set_tags(c, ["other"])
    at = open_page("compare", {"tag": "sweep"})
    assert at.multiselect(key="cmp_tag").options == ["other", "ratio", "sweep"]
    assert at.multiselect(key="cmp_tag").value == ["sweep"]
    assert sorted(at.multiselect(key="cmp_runs").options) == [f"a · {a}", f"b · {b}"]
    at.multiselect(key="cmp_tag").set_value(["ratio", "other"]).run()
    assert sorted(at.multiselect(key="cmp_runs").options) == [f"a · {a}", f"c · {c}"]


def test_open_this_config_in_new_run_fills_the_form(workspace):
    """Every field of the run's config comes back, those the form has widgets for and the others
    (weight decay, evaluation), with no warning; a hand-edited bad value is named and replaced."""
    run_id = ended_run("source", masking={"strategy": "block", "ratio": 0.6},
                       train={"steps": 77, "lr": 0.003, "seed": 5, "weight_decay": 0.2, "keep_checkpoints": 3,
                              "warmup_steps": 6, "checkpoint_interval": 70},
                       evaluation={"finetune_epochs": 2, "max_rows": 500})
    at = open_page("run_detail", {"run": run_id})
    link = next(p for p in at.get("page_link") if p.proto.label == "Open this config in New run")
    params = {k: v[0] for k, v in parse_qs(link.proto.query_string).items()}
    assert params["train.steps"] == "77" and params["masking.strategy"] == "block" and "name" not in params
    at = open_page("new_run", params)
    assert not at.error, [e.value for e in at.error]
    resolved = json.loads(at.json[0].value)
    source = get_run(run_id).config
    for section, field in (("masking", "strategy"), ("masking", "ratio"), ("model", "preset"), ("model", "patch_size"),
                           ("train", "steps"), ("train", "lr"), ("train", "seed"), ("data", "dataset")):
        assert resolved[section][field] == source[section][field], (section, field)
    assert resolved["name"] == ""
    for section, field in (("train", "warmup_steps"), ("train", "checkpoint_interval"), ("train", "weight_decay"),
                           ("train", "keep_checkpoints"), ("evaluation", "finetune_epochs"),
                           ("evaluation", "max_rows")):  # no widget on the form: carried
        assert resolved[section][field] == source[section][field], (section, field)
    assert not [w.value for w in at.warning if "not valid here" in w.value]
    at = open_page("new_run", {**params, "train.weight_decay": "-1"})  # a hand-edited link
    resolved = json.loads(at.json[0].value)
    assert resolved["train"]["weight_decay"] == RunConfig().train.weight_decay and resolved["evaluation"]["max_rows"] == 500
    assert [w.value for w in at.warning if "not valid here" in w.value] == [
        f"This link's train.weight_decay=-1 (must be at least 0; the form uses "
        f"{RunConfig().train.weight_decay:g}) was not valid here: the form shows its own value instead."]


def test_data_page_shows_the_datasets_disk_space(workspace):
    load_dataset("digits")  # registers the bundled set in the workspace
    at = open_page("data", {"dataset": "digits"})
    caption = next(c.value for c in at.caption if c.value.startswith("Source:"))
    files = workspace / "datasets" / "digits"
    stored = sum(f.stat().st_size for f in files.iterdir())
    assert stored > 100_000 and caption.endswith(f" · {format_bytes(stored)} on disk")
