"""New run: pick a dataset and a task, configure masking, model and training, preview the run's own
masks on real samples, launch, or take the form away as YAML or as a command line.

The form lives in the URL (``?dataset=digits&task=image_mim&masking.ratio=0.6&train.steps=300``,
one parameter per field: :mod:`app.components.urlstate`), so a reload or a copied link reopens it;
Mask lab's "Use in New run" opens this page with its settings in the URL. The modality's fields and
preview come from its view (``app.modalities``); the preview calls the engine function the run
itself calls for its samples, so it shows the run's masks. Launching only calls
``engine.runner.launcher.submit``, which starts a background worker process and returns at once. The Sweep
section (:mod:`app.components.sweep_form`) queues the form once per value of a field and seed
instead, through ``engine.runner.sweep.submit_sweep``, and links to the Sweeps page. Under Launch:
how long the run should take here (``engine.runner.estimate``: from a completed run of its shape, or a
short timing behind "Estimate time"). Under the launch settings: the GPUs here (:mod:`app.components.gpus`).
"""

from __future__ import annotations

import json

import streamlit as st

from app.components import guarded
from app.components.access import actor
from app.components.datasets import dataset_infos
from app.components.gpus import gpu_panel
from app.components.run_form import estimate_line, export_panel, launch_fields, train_fields
from app.components.sweep_form import URL_NAMES, sweep_launch, sweep_section
from app.components.urlstate import PageState, dig, flatten, index_of, show_link_note, unflatten, with_carried
from app.modalities import train_defaults, ui_for
from engine.api import (
    RunConfig,
    check_run,
    fixed_by_source,
    get_masking,
    get_run,
    get_task,
    no_validation_note,
    resolve,
    submit,
    tasks_for,
)
from engine.api import backend_unavailable as unavailable


@st.cache_data(max_entries=32, ttl=60, show_spinner=False)
def preflight(cfg_json: str) -> str:
    """``engine.tasks.checks.check_run`` of a resolved config (JSON), cached for a minute: with superpixels or a
    new tokenizer it takes a second or more. Errors are not cached."""
    return check_run(RunConfig.from_dict(json.loads(cfg_json))).name


def complete(d: dict) -> RunConfig:
    """The form's config with its task's defaults filled in (:func:`engine.tasks.resolve`), for the
    preview, the pre-flight and the Resolved config panel; Launch's ``submit`` resolves it itself."""
    return resolve(RunConfig.from_dict(d))


st.title("New run")
url = PageState("new_run", URL_NAMES, config=True)
infos = guarded(dataset_infos) or {}
if not infos:
    st.warning("No dataset available: import one on the Data page.")
    st.stop()
carried = url.config()  # the form as the URL has it (partial run config)
link, link_params = carried, dict(url.params)  # to tell the user which of a link's values were not taken
link_note = st.empty()

form, preview = st.columns([1, 2], gap="large")
with form:
    names = list(infos)
    dataset = st.selectbox("Dataset", names, key="nr_dataset", index=index_of(names, dig(carried, "data.dataset")),
                           format_func=lambda n: f"{n}  ({infos[n].modality})" if n in infos else n)
    info = infos[dataset]
    ui = ui_for(info.modality)
    if (note := no_validation_note(info)) is not None:
        st.warning(note)
    tasks = tasks_for(info.modality)
    if ui is None or ui.run_fields is None or not tasks:
        st.info(f"No task trains on {info.modality} datasets yet.")
        st.stop()
    if dig(carried, "data.dataset", dataset) != dataset:
        carried = {}  # another dataset than the URL's: the form's proposals for it
    task = st.selectbox("Task", tasks, key=f"nr_task_{info.modality}", index=index_of(tasks, carried.get("task")))
    st.caption(get_task(task).summary)  # under the box: inside an option it is cut off
    if carried.get("task", task) != task:
        carried = {}  # another task than the URL's: its proposals
    fields = ui.run_fields(info, task, "nr_m", carried)
    train = train_fields(task, "nr", carried, train_defaults(task, info))
    launch = launch_fields("nr", carried)
    gpu_panel()  # this machine's GPUs, their memory and the runs holding them
    run_name = st.text_input("Run name", value=str(carried.get("name", "")), placeholder="optional", max_chars=200,
                             key="nr_name")  # fmt: skip

cfg_dict = {"name": run_name.strip(), **fields, "data": {"dataset": dataset, **fields.get("data", {})}, "train": train,
            **({"launch": launch} if launch else {})}
if fields.get("masking") is not None:  # the carried fields the form has no widget for (weight decay, evaluation...)
    cfg_dict = with_carried(cfg_dict, carried, complete)
fixed = {}
if source := dig(cfg_dict, "model.init_from"):  # an imported architecture fixes some fields: its values win
    fixed = flatten(guarded(fixed_by_source, cfg_dict) or {})
    cfg_dict = unflatten({**flatten(cfg_dict), **fixed})
url.put_config(cfg_dict)
if source:
    step = dig(cfg_dict, "model.init_step")
    st.info(f"Starts from **{source}**" + (f" at its step {step} checkpoint" if step is not None else "")
            + " (model.init_from): the weights that fit are loaded, the rest initialised; Run detail lists both."
            + (" Its architecture fixes " + ", ".join(f"{k} = {v}" for k, v in fixed.items())
               + " (the form's value of those is not used)." if fixed else ""))
cfg = guarded(complete, cfg_dict) if fields.get("masking") is not None else None

with preview:
    st.subheader("Mask preview")
    if cfg is not None and ui.mask_preview is not None:
        ui.mask_preview(cfg, info)
    st.divider()
    # The launcher's own pre-flight check, run before the click, so a config it would refuse is
    # explained here and Launch stays disabled.
    ready = (cfg is not None and not unavailable(cfg.launch.backend)  # launch_fields says why
             and guarded(preflight, json.dumps(cfg.to_dict(), sort_keys=True)) is not None)
with form:  # under the run's own fields; every run of a sweep starts from them
    sweep = sweep_section(url, cfg_dict, info.modality, ready,
                          lambda c: preflight(json.dumps(c.to_dict(), sort_keys=True)))
# after every widget has written the URL, so that a rerun is not taken for a new link; against the
# config the run would get (its defaults filled in: a link's default value is taken)
show_link_note("nr", link, link_params, url.params, cfg.to_dict() if cfg is not None else cfg_dict, names, link_note)
with preview:
    if sweep is not None:
        sweep_launch(sweep, cfg_dict, actor())
    elif st.button("Launch", type="primary", disabled=not ready):
        run_id = guarded(submit, cfg, actor=actor())
        if run_id is not None:  # what was launched, in words: a field left red keeps its last valid value
            t, m = cfg.train, cfg.masking
            st.session_state["nr_launched"] = run_id
            ratio = f" at ratio {m.ratio:g}" if get_masking(m.strategy).uses_ratio else " (its parameters set the budget)"
            st.session_state["nr_launched_what"] = (f"{cfg.data.dataset}, {t.steps:,} steps x batch {t.batch_size}, "
                                                    f"lr {t.lr:g}, {m.strategy} masking{ratio}")
    if sweep is None:  # under Launch: how long it should take here, from a run of its shape or a short timing
        estimate_line(cfg if ready else None, "nr")
    launched = st.session_state.get("nr_launched")
    if launched and sweep is None:
        status = getattr(guarded(get_run, launched), "status", "queued")  # what it is doing now, in words
        doing = {"queued": "it is queued, and trains in a background process (or a cluster job) when a place is free",
                 "running": "it trains in a background process (or a cluster job)"}.get(status, f"it is {status}")
        st.success(f"Launched run **{launched}** ({st.session_state.get('nr_launched_what', '')}): {doing}.")
        l1, l2 = st.columns(2)
        with l1:
            st.page_link("../pages/run_detail.py", label="Open run detail", query_params={"run": launched})
        with l2:
            st.page_link("../pages/runs.py", label="Compare runs")
    export_panel(cfg_dict, cfg)
    with st.expander("Resolved config"):
        st.json(cfg.to_dict() if cfg is not None else cfg_dict)
