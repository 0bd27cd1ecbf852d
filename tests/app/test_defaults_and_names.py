"""Pages that open on something to see and name what they show (issue 41, points 1 to 3 and 6), in
AppTest on the session's shared runs (tests/runs.py) of four modalities copied into one workspace:
an image MAE, an MLM text run (not evaluated), an audio MAE and an image-text pair run.

- Runs plots the runs that have points, queued or running first, and refreshes only while a run is
  queued or running;
- Presentation without ``?run=`` opens the most recent completed and evaluated run, or says there is
  none;
- loss curves of different kinds (MSE, cross-entropy, a weighted sum) get a panel each;
- no raw metric key (``val_caption_acc``, ``knn_acc/random_init``) on any page's text, tables or charts.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from streamlit.runtime.forward_msg_queue import ForwardMsgQueue
from streamlit.testing.v1 import AppTest

from app.components.quality import loss_groups
from engine.config import RunConfig
from engine.store import create_run, list_runs, read_metrics, write_status
from engine.store.evaluations import latest_evaluation
from engine.tasks import resolve
from tests.app.pages import ENTRY, open_with

REPO = Path(__file__).resolve().parents[2]
KINDS = ("image_mae", "text_mlm", "audio_mae", "paired_image_text")


@pytest.fixture(scope="module")
def ws(tmp_path_factory, shared_runs):
    """``(workspace, {kind: run id})``: a writable copy of the four shared runs, as $MASKLAB_WORKSPACE."""
    ws, ids = shared_runs.copy(*KINDS, dest=tmp_path_factory.mktemp("names") / "workspace")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(ws))
        yield ws, ids


@pytest.fixture
def auto_reruns(monkeypatch) -> list[float]:
    """The refresh intervals (s) that the pages opened in the test scheduled (``st.fragment(run_every=)``)."""
    seen: list[float] = []
    enqueue = ForwardMsgQueue.enqueue

    def record(self, msg):
        if msg.WhichOneof("type") == "auto_rerun":
            seen.append(msg.auto_rerun.interval)
        return enqueue(self, msg)

    monkeypatch.setattr(ForwardMsgQueue, "enqueue", record)
    return seen


def open_runs(params: dict[str, str], seen: list[float] | None = None) -> AppTest:
    """Runs (the default page) opened by a link with ``params``; ``seen`` (:func:`auto_reruns`)
    then holds only what that page view scheduled."""
    at = AppTest.from_file(str(ENTRY), default_timeout=120)  # Runs is the default page
    at.query_params.update(params)
    if seen is not None:
        seen.clear()
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.exception or at.error]
    return at


def chart_frames(at: AppTest) -> list[tuple[dict, list]]:
    """``(spec, [data frames])`` of every Vega-Lite chart on the page."""
    return [(json.loads(c.proto.spec), [pa.ipc.open_stream(d.data.data).read_pandas() for d in c.proto.datasets])
            for c in at.get("vega_lite_chart")]


def y_titles(spec: dict) -> list[str]:
    return [layer["encoding"]["y"]["title"] for layer in spec.get("layer", []) if "title" in layer["encoding"].get("y", {})]


def loss_charts(at: AppTest) -> list[tuple[str, set[str]]]:
    """``(y title, run ids)`` of every chart that plots a loss."""
    out = []
    for spec, frames in chart_frames(at):
        keys = set().union(*(set(f["key"]) for f in frames if "key" in f))
        if keys and keys <= {"loss", "val_loss"}:
            out.append((y_titles(spec)[0], set().union(*(set(f["run_id"]) for f in frames if "run_id" in f))))  # not the baselines' rules
    return out


def test_runs_plots_the_runs_with_points_running_first_and_refreshes_only_while_one_runs(ws, auto_reruns):
    workspace, ids = ws
    at = open_runs({}, auto_reruns)
    # every run has points: the first three of the run list, newest first (the shared runs are trained
    # in the order tests first ask for them)
    assert at.multiselect(key="runs_selected").value == [r.run_id for r in list_runs()][:3]
    assert auto_reruns == []  # every run has ended: nothing refreshes
    assert any("no refresh" in c.value for c in at.caption)

    queued, qdir = create_run(resolve(RunConfig.from_dict({"name": "waiting"})).to_dict(), workspace)  # no points yet
    image_dir = workspace / "runs" / ids["image_mae"]
    status = json.loads((image_dir / "status.json").read_text())
    holder = subprocess.Popen([sys.executable, "-c", (  # a live worker: it holds the image run's lock
        "import sys, time; from engine.store import RunLock; l = RunLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); time.sleep(600)"), str(image_dir)], cwd=REPO, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        write_status(image_dir, {**status, "status": "running", "pid": holder.pid})
        at = open_runs({}, auto_reruns)
        chosen = at.multiselect(key="runs_selected").value
        # the running run first, then the run list's order (newest first) of the runs with points
        rest = [r.run_id for r in list_runs() if r.run_id not in (ids["image_mae"], queued)]
        assert chosen == [ids["image_mae"], *rest[:2]], chosen
        assert queued not in chosen  # the newest run has no points: not plotted by default
        assert auto_reruns == [2.0, 2.0]  # the run table and the charts (a plotted run is running)
        open_runs({"runs": ids["audio_mae"]}, auto_reruns)  # the queued run is listed, not plotted
        assert auto_reruns == [2.0]
    finally:
        holder.kill()
        holder.wait()
        write_status(image_dir, status)
        write_status(qdir, {"status": "cancelled", "step": 0, "total_steps": 1})
    open_runs({}, auto_reruns)
    assert auto_reruns == []


def test_different_kinds_of_loss_get_a_panel_each(ws):
    _, ids = ws
    image, text, pair = ids["image_mae"], ids["text_mlm"], ids["paired_image_text"]
    for page in ("runs", "compare"):
        params = {"runs": f"{image},{text},{pair}"}
        at = open_runs(params) if page == "runs" else open_with("../pages/compare.py", params)
        panels = loss_charts(at)
        assert sorted(panels) == sorted([
            ("MSE (masked units)", {image}), ("cross-entropy (nats/token)", {text}),
            ("weighted loss: 0.5 x InfoNCE + 0.5 x cross-entropy + 1 x MSE", {pair})]), (page, panels)  # fmt: skip
        assert any(c.value.startswith("3 kinds of loss: one panel each") for c in at.caption), page
    at = open_runs({"runs": f"{image},{ids['audio_mae']}"})  # two MSEs, of pixels and of log-mel cells
    assert sorted(loss_charts(at)) == [("MSE (masked units) · audio", {ids["audio_mae"]}),
                                       ("MSE (masked units) · image", {image})]
    at = open_with("../pages/run_detail.py", {"run": text})
    assert [t for t, _ in loss_charts(at)] == ["cross-entropy (nats/token)"]


def test_runs_of_one_kind_of_loss_share_an_axis():
    cfg = {k: resolve(RunConfig.from_dict(c)).to_dict() for k, c in (
        ("a", {"name": "a"}), ("b", {"name": "b", "train": {"lr": 0.01}}), ("norm", {"objective": {"norm_pix_loss": True}}),
        ("text", {"task": "text_mlm", "data": {"dataset": "fortunes"}}),
        ("text2", {"task": "text_mlm", "data": {"dataset": "fortunes"}, "masking": {"ratio": 0.3}}))}  # fmt: skip
    assert loss_groups(list(cfg), cfg) == [("MSE (masked units) · image", ["a", "b"]),
                                           ("MSE (masked units) · image · normalised per patch", ["norm"]),
                                           ("cross-entropy (nats/token)", ["text", "text2"])]


def test_presentation_opens_the_latest_completed_and_evaluated_run(ws):
    workspace, ids = ws
    newer, d = create_run(resolve(RunConfig.from_dict({"name": "just launched"})).to_dict(), workspace)  # step 0
    try:
        at = open_with("../pages/present.py", {})
        assert [r.run_id for r in list_runs()][0] == newer
        evaluated = [k for k in ids if latest_evaluation(ids[k]) is not None]
        assert sorted(evaluated) == ["audio_mae", "image_mae", "paired_image_text"]  # text runs are not evaluated
        newest = next(k for r in list_runs() for k in evaluated if ids[k] == r.run_id)  # the list is newest first
        assert at.title[0].value == {"audio_mae": "fsdd-eval", "image_mae": "digits-mae", "paired_image_text": "pairs"}[newest]
        assert [c.value for c in at.caption][0] == "The most recent completed and evaluated run."
        assert not any("?run=" in c.value for c in at.caption)
    finally:
        write_status(d, {"status": "cancelled", "step": 0, "total_steps": 1})


def test_presentation_says_when_no_run_is_completed_and_evaluated(workspace, shared_runs):
    shared_runs.copy("text_mlm", dest=workspace)  # completed, never evaluated
    create_run(resolve(RunConfig.from_dict({"name": "queued"})).to_dict())
    at = open_with("../pages/present.py", {})
    assert [i.value for i in at.info] == [
        "No completed and evaluated run yet: this page shows the most recent one once a run has completed and its "
        "evaluation (linear probe, kNN) is stored. The Present link of Run detail or Compare shows any run."]
    assert [t.value for t in at.title] == ["Presentation"] and not at.subheader and not at.metric


def test_a_step_0_headline_is_not_compared_with_the_baselines():
    def page():
        from app.components.present import show_key_metrics  # noqa: PLC0415 (AppTest runs the function's source alone)

        n = {"metric": "val_loss", "better": "min", "title": "val loss", "value": 0.9, "baseline": "mean image",
             "baseline_value": 0.1, "eval_step": None}
        for step in (0, 20):
            show_key_metrics({**n, "step": step})

    at = AppTest.from_function(page).run()
    assert [(m.label, m.delta) for m in at.metric if m.label.startswith("val loss")] == [
        ("val loss @ step 0", ""), ("val loss @ step 20", "+0.8000 vs baseline")]


#: Figures of an evaluation (``Evaluation.representation`` / ``downstream``), as sweeps name them.
EVAL_KEYS = ("probe_acc", "knn_acc", "kmeans_nmi", "kmeans_ari", "finetune_acc")


def shown_text(at: AppTest) -> list[str]:
    """Everything a reader sees: headings, text, captions, boxes, tile labels, table headers and
    row names, chart axis titles and legend names (not tooltips)."""
    out = [el.value for kind in ("title", "header", "subheader", "markdown", "caption", "info", "warning", "success")
           for el in at.get(kind)]  # fmt: skip
    out += [m.label for m in at.metric]
    for t in list(at.dataframe) + list(at.table):
        df = t.value
        out += [str(c) for c in df.columns] + [str(df.index.name or "")] + [str(i) for i in df.index]
    for spec, frames in chart_frames(at):
        out += re.findall(r'"title": "([^"]*)"', json.dumps(spec))
        out += [str(v) for f in frames for c in ("metric", "run") if c in f for v in set(f[c])]
    return out


def test_no_raw_metric_key_on_any_page(ws):
    _, ids = ws
    runs = list(ids.values())
    logged = set(read_metrics(runs, None, max_points=2)["key"])
    keys = {k for k in logged | {f"{k}/{e}" for k in EVAL_KEYS for e in ("random_init", "raw_input")} | set(EVAL_KEYS)
            if "_" in k or "/" in k}  # fmt: skip
    assert {"val_caption_acc", "val_top1", "val_spec_mse", "knn_acc/random_init"} <= keys
    raw = re.compile(r"(?<![\w/])(" + "|".join(sorted(map(re.escape, keys), key=len, reverse=True)) + r")(?![\w/])")
    pages = [("runs", {}), ("runs", {"runs": ",".join(runs)}), ("compare", {"runs": ",".join(runs)}), ("present", {}),
             ("present", {"runs": ",".join(runs)})]
    pages += [(p, {"run": r}) for r in runs for p in ("run_detail", "present")]
    found = []
    for page, params in pages:
        at = open_runs(params) if page == "runs" else open_with(f"../pages/{page}.py", params)
        found += [(page, params, t) for t in shown_text(at) if raw.search(t)]
    assert not found, found
