"""State that survives a reload (issue 8, item 5): each page reads its widgets' defaults from the URL
and writes their values back; New run's form and the ``--set`` command are the same key=value pairs.
AppTest on the real engine (a fresh AppTest is a fresh browser session: only the URL carries over)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from app.components.run_form import command_line
from app.components.urlstate import decode, encode, flatten, set_flags, unflatten
from engine.config import RunConfig, apply_overrides
from engine.masking import strategies_for
from engine.store import CANCEL_FILE, MetricsWriter, create_run, write_status
from engine.tasks import resolve

ENTRY = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"


def open_with(page: str, params: dict[str, str]) -> AppTest:
    """A new session that opens ``page`` at a URL with ``params`` (what a reload or a link does)."""
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    if page != "../pages/runs.py":  # Runs is the default page: the first run is that page
        at.run().switch_page(page)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def url(at: AppTest) -> dict[str, str]:
    return {k: (v[0] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}


def test_values_and_configs_round_trip_through_the_url():
    form = {"name": "my run", "task": "image_mim", "data": {"dataset": "digits"},
            "masking": {"strategy": "block", "ratio": 0.6, "params": {"min_patches": 4}, "final_ratio": None},
            "train": {"steps": 300, "lr": 0.002, "deterministic": False}}  # fmt: skip
    flat = flatten(form)
    assert flat["dataset"] == "digits" and "masking.final_ratio" not in flat and flat["masking.params.min_patches"] == 4
    assert unflatten({k: decode(encode(v)) for k, v in flat.items()}) == {**form, "masking": {
        k: v for k, v in form["masking"].items() if v is not None}}
    for v in (0.6, 300, True, [4, 8], "block", "1e-3 as text"):
        assert decode(encode(v)) == (v if v != "1e-3 as text" else "1e-3 as text")
    # the --set flags read back by the CLI's own parser give the same config
    d = apply_overrides({}, set_flags(form))
    assert d == {**form, "masking": {k: v for k, v in form["masking"].items() if v is not None}}
    assert "--set 'name=my run'" in command_line(form) and "--set data.dataset=digits" in command_line(form)
    assert shlex.split(command_line(form).replace("\\\n", ""))[:3] == ["python", "-m", "engine"]


def test_new_run_form_is_restored_from_the_url_and_written_back(workspace):
    at = open_with("../pages/new_run.py", {"dataset": "digits", "task": "image_mim", "masking.strategy": "block",
                                           "masking.ratio": "0.6", "model.patch_size": "1", "model.preset": "small",
                                           "train.steps": "77", "train.lr": "0.003", "name": "from a link"})
    assert not at.error, [e.value for e in at.error]
    resolved = json.loads(at.json[0].value)
    assert resolved["masking"]["strategy"] == "block" and resolved["masking"]["ratio"] == 0.6
    assert resolved["model"]["patch_size"] == 1 and resolved["model"]["preset"] == "small"
    assert resolved["train"]["steps"] == 77 and resolved["train"]["lr"] == 0.003 and resolved["name"] == "from a link"
    # every field of the form is in the URL, and follows a change
    q = url(at)
    assert q["train.steps"] == "77" and q["masking.strategy"] == "block" and q["model.arch"] == "mae_vit"
    assert "masking.params.min_patches" in q
    at.number_input(key="nr_steps_image_mim").set_value(123).run()
    next(s for s in at.selectbox if s.label == "Masking strategy").set_value("random").run()
    q = url(at)
    assert q["train.steps"] == "123" and q["masking.strategy"] == "random"
    assert not any(k.startswith("masking.params.") for k in q)  # block's parameters left with it
    # a reload (a new session on that URL) shows the same form
    again = open_with("../pages/new_run.py", q)
    assert json.loads(again.json[0].value) == json.loads(at.json[0].value)


def test_new_run_yaml_and_command_train_the_same_config(workspace):
    at = open_with("../pages/new_run.py", {"dataset": "digits", "masking.ratio": "0.5", "train.steps": "40"})
    resolved = json.loads(at.json[0].value)
    code = next(c.value for c in at.code if c.value.startswith("python -m engine run"))
    args = shlex.split(code.replace("\\\n", ""))
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert resolve(RunConfig.from_dict(apply_overrides({}, sets))).to_dict() == resolved
    (button,) = [b for b in at.get("download_button") if "YAML" in b.proto.label]
    assert button.proto.label == "Download YAML"
    assert yaml.safe_load(yaml.safe_dump(resolved)) == resolved


def test_mask_lab_settings_come_from_the_url_and_go_to_new_run(workspace):
    at = open_with("../pages/mask_lab.py", {"dataset": "digits", "masking.strategy": "bernoulli", "masking.ratio": "0.5",
                                            "model.patch_size": "1", "train.seed": "7", "n": "64"})  # fmt: skip
    assert at.selectbox(key="ml_strategy").value == "bernoulli" and at.slider(key="ml_ratio").value == 0.5
    assert at.number_input(key="ml_seed").value == 7 and at.number_input(key="ml_n").value == 64
    assert any(c.value.startswith("64 masks of 8x8 patches (1x1 px each)") for c in at.caption)
    at.slider(key="ml_ratio").set_value(0.3).run()
    assert url(at)["masking.ratio"] == "0.3" and url(at)["n"] == "64"
    at.button(key="ml_use").click().run()
    assert at.title[0].value == "New run"
    resolved = json.loads(at.json[0].value)
    assert (resolved["masking"]["strategy"], resolved["masking"]["ratio"]) == ("bernoulli", 0.3)
    assert resolved["model"]["patch_size"] == 1 and resolved["train"]["seed"] == 7


def test_data_page_dataset_and_sidebar_memory(workspace):
    at = open_with("../pages/data.py", {"dataset": "fortunes"})
    assert at.selectbox(key="data_ds").value == "fortunes"
    at = open_with("../pages/new_run.py", {"dataset": "digits", "train.steps": "55"})
    at.switch_page("../pages/runs.py").run()  # the sidebar: the query string is dropped
    at.switch_page("../pages/new_run.py").run()
    assert url(at)["train.steps"] == "55" and at.number_input(key="nr_steps_image_mim").value == 55


def _finished(name: str, workspace=None) -> str:
    """A completed 20-step run with loss, lr, mask ratio, throughput and one val loss."""
    run_id, d = create_run(resolve(RunConfig.from_dict({"name": name, "train": {"steps": 20}})).to_dict(), workspace)
    w = MetricsWriter(d, run_id, flush_interval=0)
    for s in range(1, 21):
        w.log(s, {"loss": 1.0 / s, "lr": 1e-3, "mask_ratio": 0.75, "throughput": 50.0})
    w.log(20, {"val_loss": 0.4})
    w.close()
    write_status(d, {"status": "completed", "step": 20, "total_steps": 20, "started_at": 1.0, "ended_at": 3.0})
    return run_id


@pytest.mark.parametrize("page", ["runs", "run_detail"])
def test_runs_selection_smoothing_and_axes_come_from_the_url(workspace, page):
    a, b, c = (_finished(n) for n in "abc")
    if page == "runs":
        at = open_with("../pages/runs.py", {"runs": f"{a},{c}", "smoothing": "0.3", "x": "relative", "y": "log"})
        assert at.multiselect(key="runs_selected").value == [a, c] and at.slider(key="runs_smoothing").value == 0.3
        assert at.radio(key="runs_x").value == "relative" and at.checkbox(key="runs_logy").value is True
        assert len(at.get("vega_lite_chart")) == 4  # loss, throughput, learning rate, mask ratio
        at.slider(key="runs_smoothing").set_value(0.8).run()
        at.checkbox(key="runs_logy").uncheck().run()
        q = url(at)
        assert q["smoothing"] == "0.8" and q["runs"] == f"{a},{c}" and "y" not in q
    else:
        at = open_with("../pages/run_detail.py", {"run": b, "x": "wall"})
        assert at.selectbox(key="rd_run").value == b and at.radio(key="rd_x").value == "wall"
        assert any("loss @ step 20" == m.label for m in at.metric)  # every figure says its step
        assert url(at)["run"] == b


@pytest.mark.parametrize("bad", ["abc", "nan", "-7", "7e12"])
def test_plain_number_parameters_out_of_range_or_not_numbers_open_the_page(workspace, bad):
    """Every number a page keeps in its URL (smoothing sliders, the time-to-loss target, Mask lab's
    batch, seed and steps): a hand-edited value opens the page with the widget in range."""
    a, b = (_finished(n) for n in "ab")
    at = open_with("../pages/runs.py", {"runs": f"{a},{b}", "smoothing": bad})
    assert 0.0 <= at.slider(key="runs_smoothing").value <= 0.99
    cmp = open_with("../pages/compare.py", {"runs": f"{a},{b}", "smoothing": bad, "loss": bad})
    assert 0.0 <= cmp.slider(key="cmp_smoothing").value <= 0.99
    assert all(n.value >= 0 for n in cmp.number_input)
    lab = open_with("../pages/mask_lab.py", {"dataset": "digits", "n": bad, "train.seed": bad, "train.steps": bad})
    assert 8 <= lab.number_input(key="ml_n").value <= 4096


def test_cancel_asks_before_it_cancels(workspace):
    run_id, d = create_run(resolve(RunConfig.from_dict({"name": "waiting"})).to_dict())  # queued: active, no worker yet
    at = open_with("../pages/runs.py", {})
    at.button(key=f"runs_cancel_{run_id}").click().run()
    assert any(m.value.startswith("Cancel **waiting") for m in at.markdown)
    assert not (d / CANCEL_FILE).exists()  # asking cancels nothing
    at.button(key=f"runs_cancel_no_{run_id}").click().run()
    assert not any(m.value.startswith("Cancel **waiting") for m in at.markdown) and not (d / CANCEL_FILE).exists()
    at.button(key=f"runs_cancel_{run_id}").click().run()
    at.button(key=f"runs_cancel_yes_{run_id}").click().run()
    assert (d / CANCEL_FILE).exists()
    assert any(t.value.startswith(f"Cancelling {run_id}") for t in at.toast)


def test_cancelling_a_run_that_ended_meanwhile_says_nothing_was_cancelled(workspace):
    run_id, d = create_run(resolve(RunConfig.from_dict({"name": "finishing"})).to_dict())
    at = open_with("../pages/runs.py", {})
    at.button(key=f"runs_cancel_{run_id}").click().run()
    write_status(d, {"status": "completed", "step": 20, "total_steps": 20, "started_at": 1.0, "ended_at": 3.0})
    at.button(key=f"runs_cancel_yes_{run_id}").click().run()
    assert not (d / CANCEL_FILE).exists()
    assert any(t.value.startswith(f"{run_id} had already ended") for t in at.toast)


def test_text_forms_come_from_the_url(workspace):
    """The text views take the same URL fields: task, tokenizer, masking, preset, BERT's share."""
    at = open_with("../pages/new_run.py", {"dataset": "fortunes", "task": "text_mlm", "data.tokenizer.kind": "char",
                                           "data.tokenizer.max_len": "64", "masking.ratio": "0.2",
                                           "task_params.mask_share": "0.6", "train.steps": "30"})  # fmt: skip
    assert not at.error, [e.value for e in at.error]
    resolved = json.loads(at.json[0].value)
    assert resolved["task"] == "text_mlm" and resolved["data"]["tokenizer"]["kind"] == "char"
    assert resolved["data"]["tokenizer"]["max_len"] == 64 and resolved["masking"]["ratio"] == 0.2
    assert resolved["task_params"]["mask_share"] == 0.6 and resolved["train"]["steps"] == 30
    assert any("fixed validation texts of **fortunes** (chosen class by class)" in c.value for c in at.caption)
    lab = open_with("../pages/mask_lab.py", {"dataset": "fortunes", "task": "text_span", "data.tokenizer.kind": "char"})
    assert lab.selectbox(key="ml_task").value == "text_span" and lab.selectbox(key="ml_tok_kind").value == "char"
    assert url(lab)["masking.strategy"] == "sentence_span"
    # span completion: the decoder-input mask is proposed from its example config, and a link carries it
    span = open_with("../pages/new_run.py", {"dataset": "fortunes", "task": "text_span", "data.tokenizer.kind": "char"})
    assert span.slider(key="nr_m_decoder_input_mask").value == 1.0
    assert json.loads(span.json[0].value)["task_params"] == {"decoder_input_mask": 1.0}
    span = open_with("../pages/new_run.py", {"dataset": "fortunes", "task": "text_span", "data.tokenizer.kind": "char",
                                             "task_params.decoder_input_mask": "0.35"})
    assert json.loads(span.json[0].value)["task_params"] == {"decoder_input_mask": 0.35}


# Every number a New run link can carry, per modality: a value that is not a number, one that is
# not finite and one out of range must each open the form (no exception), with the field at a valid
# value and the link's value named in a warning.
NUMERIC_FIELDS = {
    "image": ("digits", "image_mim", ["train.steps", "train.batch_size", "train.lr", "train.seed",
                                      "train.eval_interval", "masking.ratio"]),
    "text": ("fortunes", "text_mlm", ["data.tokenizer.vocab_size", "data.tokenizer.max_len",
                                      "data.tokenizer.min_frequency", "task_params.mask_share", "train.steps"]),
}
BAD_VALUES = {"abc": None, "nan": None, "-5e9": "low", "7e12": "high"}


@pytest.mark.parametrize("modality", sorted(NUMERIC_FIELDS))
@pytest.mark.parametrize("bad", sorted(BAD_VALUES))
def test_new_run_link_with_bad_numbers_opens_and_says_what_it_did_not_take(workspace, modality, bad):
    dataset, task, fields = NUMERIC_FIELDS[modality]
    at = open_with("../pages/new_run.py", {"dataset": dataset, "task": task, **{f: bad for f in fields}})
    resolved = json.loads(at.json[0].value)
    resolve(RunConfig.from_dict(resolved))  # the form holds a valid config
    warned = " ".join(w.value for w in at.warning)
    assert "This link's" in warned
    for f in fields:
        if f == "data.tokenizer.min_frequency" and BAD_VALUES[bad] == "high":
            continue  # no upper limit: the form takes 7e12 as it is
        assert f"{f}={bad}" in warned or f"{f}={decode(bad)}" in warned, (f, warned)
    # once the user changes the form, the warning about the link goes
    at.number_input(key=f"nr_steps_{task}").set_value(42).run()
    assert not any("This link's" in w.value for w in at.warning)


def test_new_run_link_naming_an_unknown_dataset_says_so(workspace):
    at = open_with("../pages/new_run.py", {"dataset": "no-such-set", "train.steps": "20"})
    assert any("dataset 'no-such-set' is not in this workspace" in w.value for w in at.warning)


def test_a_link_the_form_takes_whole_gives_no_warning(workspace):
    at = open_with("../pages/new_run.py", {"dataset": "digits", "task": "image_mim", "train.steps": "77",
                                           "masking.ratio": "0.6"})
    assert not any("This link's" in w.value for w in at.warning)


def test_a_link_to_something_missing_or_out_of_range_says_so(workspace):
    """A link naming a dataset or run this workspace does not have, or a Mask lab value out of range,
    opens the page with a notice naming what was left out (as Run detail and New run do); a link
    whose values all hold says nothing, whatever else of a run config it carries."""
    a, b = (_finished(n) for n in "ab")
    data = open_with("../pages/data.py", {"dataset": "nope"})
    first = data.selectbox(key="data_ds").value
    assert [i.value for i in data.info if i.value.startswith("This link's")] == [
        f"This link's dataset 'nope' is not in this workspace: showing {first!r} instead."]
    cmp = open_with("../pages/compare.py", {"runs": f"bogus,{a},{b}"})
    assert [i.value for i in cmp.info if i.value.startswith("This link's")] == [
        "This link's run 'bogus' is not in this workspace (deleted, or from another workspace): left out."]
    assert cmp.multiselect(key="cmp_runs").value == [a, b]
    lab = open_with("../pages/mask_lab.py", {"dataset": "digits", "masking.strategy": "random", "masking.ratio": "7"})
    assert [w.value for w in lab.warning if "not valid here" in w.value] == [
        "This link's masking.ratio=7 (must be in [0, 1]; the form uses 0.95) was not valid here: "
        "the form shows its own value instead."]
    # within the config's bounds but not offered by the form (a patch that does not divide 8 px; a ratio
    # above the slider's end); a strategy parameter out of its own bounds
    lab = open_with("../pages/mask_lab.py", {"dataset": "digits", "masking.strategy": "block", "masking.ratio": "0.99",
                                             "model.patch_size": "3", "masking.params.min_patches": "0"})
    assert [w.value for w in lab.warning if "not valid here" in w.value] == [
        "This link's masking.ratio=0.99 (not offered by this form; the form uses 0.95); masking.params.min_patches=0 "
        "(must be at least 1; the form uses 1); model.patch_size=3 (not offered by this form; the form uses 2) were "
        "not valid here: the form shows its own values instead."]
    # each field left out gets its reason: a strategy of other grids, a parameter of another strategy (the form shows
    # its own, the first image strategy by name), not a number, not an option
    lab = open_with("../pages/mask_lab.py", {"dataset": "digits", "masking.strategy": "tube", "masking.params.T": "4",
                                             "model.patch_size": "abc", "model.arch": "nope"})
    assert [w.value for w in lab.warning if "not valid here" in w.value] == [
        "This link's masking.strategy=tube (it masks video tubes on 3-D grids; the image_mim task does not offer it); "
        f"masking.params.T=4 (not a parameter of {strategies_for('image', 2)[0]}); model.patch_size=abc (not a number; "
        "the form uses 2); "
        "model.arch=nope (not an option here; the form uses mae_vit) were not valid here: the form shows its own "
        "values instead."]
    fine = open_with("../pages/mask_lab.py", {"dataset": "digits", "masking.strategy": "block", "masking.ratio": "0.6",
                                              "train.lr": "0.01", "train.steps": "300"})
    assert not [w.value for w in fine.warning if "not valid here" in w.value]
