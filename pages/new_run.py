"""New run: pick a dataset and a task, configure masking, model and training, preview the run's own
masks on real samples, launch.

The modality's fields and preview come from its view (``app.modalities``); the preview calls the
engine function the run itself calls for its samples, so it shows the run's masks. Launching only
calls ``engine.launcher.submit``, which starts a background worker process and returns at once.
"""

from __future__ import annotations

import json

import streamlit as st

from app.components import guarded
from app.components.datasets import dataset_infos
from app.components.masks import HANDOFF_KEY
from app.modalities import TRAIN_DEFAULTS, ui_for
from engine.checks import check_run
from engine.config import RunConfig
from engine.launcher import submit
from engine.tasks import get_task, tasks_for


@st.cache_data(max_entries=32, ttl=60, show_spinner=False)
def preflight(cfg_json: str) -> str:
    """``engine.checks.check_run`` of a config (JSON), cached for a minute: with superpixels or a
    new tokenizer it takes a second or more. Errors are not cached."""
    return check_run(RunConfig.from_dict(json.loads(cfg_json))).name


st.title("New run")
infos = guarded(dataset_infos) or {}
if not infos:
    st.warning("No dataset available: import one on the Data page.")
    st.stop()

# Settings sent by Mask lab ("Use in New run"). Widgets are created with them as defaults under keys
# suffixed by the hand-off's generation, so a new hand-off gets fresh widgets while reruns keep edits.
if st.query_params.get("dataset") in infos and "nr_dataset" not in st.session_state:
    st.session_state["nr_dataset"] = st.query_params["dataset"]  # a shared link opens the same dataset
handoff = st.session_state.get(HANDOFF_KEY) or {}
gen = int(handoff.get("gen", 0))
if handoff and st.session_state.get("nr_handoff_gen") != gen:
    st.session_state["nr_handoff_gen"] = gen
    if handoff.get("dataset") in infos:
        st.session_state["nr_dataset"] = handoff["dataset"]

form, preview = st.columns([1, 2], gap="large")
with form:
    dataset = st.selectbox("Dataset", list(infos), key="nr_dataset",
                           format_func=lambda n: f"{n}  ({infos[n].modality})" if n in infos else n)
    info = infos[dataset]
    st.query_params["dataset"] = dataset
    ui = ui_for(info.modality)
    tasks = tasks_for(info.modality)
    if ui is None or not tasks:
        st.info(f"No task trains on {info.modality} datasets yet.")
        st.stop()
    carried = handoff if handoff.get("dataset") == dataset else {}
    task = st.selectbox("Task", tasks, key=f"nr_task_{info.modality}_{gen}",
                        index=tasks.index(carried["task"]) if carried.get("task") in tasks else 0,
                        format_func=lambda t: f"{t}: {get_task(t).summary}")
    fields = ui.run_fields(info, task, f"nr_m{gen}", carried)
    t = {**RunConfig().train.model_dump(), **TRAIN_DEFAULTS.get(task, {})}
    a, b = st.columns(2)
    steps = a.number_input("Steps", min_value=1, max_value=1_000_000, value=int(t["steps"]), step=100, key=f"nr_steps_{task}")
    batch = b.number_input("Batch size", min_value=1, max_value=65536, value=int(t["batch_size"]), step=16, key=f"nr_batch_{task}")
    lr = a.number_input("Learning rate", min_value=1e-6, max_value=10.0, value=float(t["lr"]), step=1e-4, format="%.5f",
                        key=f"nr_lr_{task}")
    seed = b.number_input("Seed", min_value=0, max_value=2**31 - 1, value=int(carried.get("seed", t["seed"])),
                          help="also fixes the preview masks", key=f"nr_seed_{gen}")
    eval_every = a.number_input("Eval interval (steps)", min_value=1, max_value=1_000_000, value=int(t["eval_interval"]),
                                key=f"nr_eval_{task}")
    run_name = b.text_input("Run name", placeholder="optional", max_chars=200)

cfg_dict = {
    "name": run_name.strip(), **fields, "data": {"dataset": dataset, **fields.get("data", {})},
    "train": {
        "steps": int(steps), "batch_size": int(batch), "lr": float(lr), "seed": int(seed),
        "eval_interval": int(eval_every), "warmup_steps": min(int(t["warmup_steps"]), int(steps) // 10),
    },
}  # fmt: skip
cfg = guarded(RunConfig.from_dict, cfg_dict) if fields.get("masking") is not None else None

with preview:
    st.subheader("Mask preview")
    if cfg is not None:
        ui.mask_preview(cfg, info)
    st.divider()
    # The launcher's own pre-flight check, run before the click, so a config it would refuse is
    # explained here and Launch stays disabled.
    ready = cfg is not None and guarded(preflight, json.dumps(cfg.to_dict(), sort_keys=True)) is not None
    if st.button("Launch", type="primary", disabled=not ready):
        run_id = guarded(submit, cfg)
        if run_id is not None:
            st.session_state["nr_launched"] = run_id
    launched = st.session_state.get("nr_launched")
    if launched:
        st.success(f"Launched run **{launched}**: it trains in a background process.")
        l1, l2 = st.columns(2)
        with l1:
            st.page_link("../pages/run_detail.py", label="Open run detail", icon="🔍", query_params={"run": launched})
        with l2:
            st.page_link("../pages/runs.py", label="Compare runs", icon="📈")
    with st.expander("Resolved config"):
        st.json(cfg.to_dict() if cfg is not None else cfg_dict)
