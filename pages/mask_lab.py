"""Mask lab: try every masking strategy on real data before training with it.

Pick a dataset and a strategy with its parameters (and the modality's grid: a patch size for
images, a tokenizer for text); the page shows the masks a run with these settings would use on its
fixed validation samples (the very functions the training loop calls), then statistics of a batch
of masks drawn on real train samples: the actual ratio per sample, the sizes of contiguous masked
regions, how often each position is masked, and how many masks per second the strategy draws.
Nothing here trains.

The settings live in the URL (the same ``key=value`` fields as New run's, plus ``n``, the batch for
statistics, and the modality view's own ``lab_*`` inputs, e.g. ``lab_attention``: the run whose
attention ranks the patches for the ``attention`` strategy), so a reload or a copied link reopens the
same lab; "Use in New run" opens New run with them. The controls and results come from the dataset
modality's view (``app.modalities``).
"""

from __future__ import annotations

import streamlit as st

from app.components import guarded
from app.components.datasets import dataset_infos
from app.components.masks import schedule_chart
from app.components.urlstate import PageState, dig, flatten, index_of, number, show_link_note, unflatten
from app.modalities import ui_for
from engine.api import RunConfig, ratio_at, resolve

DEFAULTS = RunConfig()

#: The config fields Mask lab sets (flattened prefixes); a link's other fields are New run's business.
LAB_FIELDS = ("dataset", "task", "masking.", "model.", "data.", "task_params.", "train.seed")

st.title("Mask lab")
url = PageState("mask_lab", ("n", "lab_*"), config=True)
infos = guarded(dataset_infos) or {}
if not infos:
    st.warning("No dataset available: import one on the Data page.")
    st.stop()
carried = url.config()
# what a link asked of the fields Mask lab sets, to say which were not taken (as New run does)
link = unflatten({k: v for k, v in flatten(carried).items() if k.startswith(LAB_FIELDS)})
link_params, link_note = dict(url.params), st.empty()
names = list(infos)
form, out = st.columns([1, 2.3], gap="large")
with form:
    dataset = st.selectbox(
        "Dataset", names, key="ml_dataset", index=index_of(names, dig(carried, "data.dataset")),
        format_func=lambda k: f"{k}  ({infos[k].modality}"
        + (f", {'x'.join(map(str, infos[k].image_shape))})" if infos[k].image_shape else ")"),
    )  # fmt: skip
info = infos[dataset]
ui = ui_for(info.modality)
if ui is None or ui.lab_controls is None or ui.lab_results is None:
    form.info(f"Mask lab does not support {info.modality} datasets yet.")
    st.stop()
if dig(carried, "data.dataset", dataset) != dataset:
    carried = {}  # another dataset than the URL's: start from the defaults
with form:
    controls = ui.lab_controls(info, carried, "ml")
    a, b = st.columns(2)
    seed = a.number_input("Seed", min_value=0, max_value=2**31 - 1, value=number(dig(carried, "train.seed"), DEFAULTS.train.seed, 0, 2**31 - 1, int),
                          key="ml_seed", help="fixes the masks (train.seed of a run)")  # fmt: skip
    with b:
        n = url.widget(st.number_input, "Batch for statistics", "n", default=256, cast=int, min_value=8, max_value=4096,
                       step=64, key="ml_n", help="masks drawn over this many real train samples")  # fmt: skip
lab = {**controls, "data": {"dataset": dataset, **controls.get("data", {})}, "train": {"seed": int(seed)}}
steps = number(dig(carried, "train.steps"), DEFAULTS.train.steps, 1, None, int)
if (controls.get("masking") or {}).get("schedule", "constant") != "constant":
    lab["train"]["steps"] = steps
url.put_config(lab)  # before the slow results: a reload meanwhile keeps the settings
if controls.get("masking") is None:
    st.stop()
cfg = guarded(lambda d: resolve(RunConfig.from_dict(d)), lab)  # the task's defaults (patch size...) filled in
with out:
    if cfg is not None:
        ui.lab_results(cfg, info, int(n), url.scope("lab_"))
        if cfg.masking.schedule != "constant":
            steps = st.columns([1, 2])[0].number_input("Run length (steps)", min_value=1, max_value=1_000_000,
                                                       value=steps, step=100, key="ml_steps",
                                                       help="train.steps of the run, for the schedule")  # fmt: skip
            st.altair_chart(schedule_chart(lambda s: ratio_at(cfg.masking, s, int(steps)), int(steps)), width="stretch")
if cfg is not None and cfg.masking.schedule != "constant":
    lab["train"]["steps"] = int(steps)
    url.put_config(lab)
show_link_note("ml", link, link_params, url.params, cfg.to_dict() if cfg is not None else lab, names, link_note)
with form:
    if st.button("Use in New run", type="primary", disabled=cfg is None, key="ml_use",
                 help="open New run with this dataset, task, grid, seed and masking"):  # fmt: skip
        st.switch_page("../pages/new_run.py", query_params={k: url.params[k] for k in flatten(lab)
                                                             if k in url.params})  # fmt: skip
    with st.expander("masking config"):
        st.json(cfg.masking.model_dump(mode="json") if cfg is not None else controls.get("masking"))
