"""New run's Sweep section: the form's config with one field varied over values, each value run
with several seeds, queued as one sweep that the Sweeps page plots.

The section reads the swept field (mask ratio, masking strategy, or any config field by dotted
path), its values and the seeds, validates every value as a launch would (:func:`engine.runner.sweep.plan_sweep`:
the run config's own validation, then the launcher's pre-flight check, each bad value named in
words), says how many runs it queues and their step budget, and launches through
:func:`engine.runner.sweep.submit_sweep`, the function ``python -m engine sweep`` calls (role check, audit,
queue cap). Its widgets live in the URL beside the form's config: ``sweep_on``, ``sweep_field``,
``sweep_values``, ``sweep_seeds_as`` (``count`` or ``list``), ``sweep_replicates``, ``sweep_seeds``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

import streamlit as st

from app.components.errors import guarded
from app.components.urlstate import PageState, set_flags
from engine.api import (
    METHOD_FIELD,
    Identity,
    MasklabError,
    RunConfig,
    counted,
    max_runs,
    methods_for,
    new_sweep_id,
    parse_seeds,
    parse_values,
    plan_sweep,
    queue_room,
    strategies_for,
    submit_sweep,
    workspace_root,
)

#: The URL parameters of the section (plain names: no dot, so they are not config fields).
URL_NAMES = ("sweep_on", "sweep_field", "sweep_values", "sweep_seeds_as", "sweep_replicates", "sweep_seeds")
OTHER = "other"
FIELDS = {"masking.ratio": "mask ratio (masking.ratio)", "masking.strategy": "masking strategy (masking.strategy)",
          METHOD_FIELD: "method (target, objective and masking together: MAE, data2vec, MaskFeat...)",
          OTHER: "another field, by dotted path"}
SEEDS_AS = {"count": "replicates: seeds 0 to k-1", "list": "these seeds"}


@dataclass
class SweepPlan:
    """What the section asks for. ``configs`` holds the runs (value by value, seed by seed) when
    every value passed validation and the queue has room for them all; else it is empty."""

    field: str
    values: list[Any]
    seeds: list[int]
    configs: list[RunConfig] = dc_field(default_factory=list)

    @property
    def ready(self) -> bool:
        return bool(self.configs)

    def words(self) -> str:
        """``masking.ratio = 0.25, 0.5 × seeds 0, 1``."""
        return f"{self.field} = {', '.join(map(str, self.values))} × seed{'s' if len(self.seeds) > 1 else ''} " \
               f"{', '.join(map(str, self.seeds))}"


def sweep_section(url: PageState, form: dict[str, Any], modality: str, base_ok: bool,
                  check: Callable[[RunConfig], Any]) -> SweepPlan | None:
    """The "Sweep" toggle and, when it is on, the field, values and seeds widgets, the count of runs
    and their step budget; None when the toggle is off.

    Args:
        url: New run's URL state (its names include :data:`URL_NAMES`).
        form: the form's partial run config, the sweep's base.
        modality: the dataset's modality (the strategies offered in the help line).
        base_ok: the form's own config validates; otherwise the values are not checked (the page
            already shows what is wrong with the form).
        check: the launcher's pre-flight check of one config (New run's cached ``check_run``).
    """
    on = url.widget(st.toggle, "Sweep", "sweep_on", default=False, cast=bool, key="nr_sw_on",
                    encode_as=lambda v: True if v else None,  # off: the URL of a single run stays as it was
                    help="queue one run per value of a config field and seed; the Sweeps page plots a result "
                         "against the value, with the mean and spread over seeds")  # fmt: skip
    if not on:
        return None
    prev = url.get("sweep_field", "masking.ratio", str)  # the field the URL's values belong to
    choice = st.selectbox("Swept field", list(FIELDS), index=list(FIELDS).index(prev if prev in FIELDS else OTHER),
                          format_func=FIELDS.get, key="nr_sw_field")  # fmt: skip
    field = choice
    if choice == OTHER:
        field = st.text_input("Field (dotted path)", value="" if prev in FIELDS else prev, placeholder="train.lr",
                              key="nr_sw_path").strip()  # fmt: skip
    url.put("sweep_field", field or None)
    methods = methods_for(form.get("task"))
    proposal = {"masking.ratio": "0.25, 0.5, 0.75, 0.9", METHOD_FIELD: ", ".join(methods),
                "masking.strategy": str((form.get("masking") or {}).get("strategy", ""))}.get(field, "")
    text = st.text_input("Values (comma-separated)", value=url.get("sweep_values", proposal, str) if field == prev
                         else proposal, key=f"nr_sw_values_{field}",
                         placeholder="e.g. 0.0005, 0.001, 0.002")  # fmt: skip
    url.put("sweep_values", text or None)
    if field == "masking.strategy":
        st.caption(f"Strategies for {modality} data: {', '.join(strategies_for(modality))}. Each strategy other "
                   "than the form's runs with its own default parameters.")
    if field == METHOD_FIELD:
        if not methods:
            st.error(f"Task {form.get('task')!r} has no methods to sweep; sweep a field instead.")
        st.caption("Each method keeps the form's data, mask ratio, model size and training, and sets its own "
                   "target, objective and masking: " + "; ".join(f"**{k}**: {v}" for k, v in methods.items()))
    seeds_as = url.widget(st.radio, "Seeds", "sweep_seeds_as", default="count", options=list(SEEDS_AS),
                          format_func=SEEDS_AS.get, horizontal=True, key="nr_sw_seeds_as")  # fmt: skip
    st.caption(f"Each run is the form above with {field or 'the field'} set to one value and its Seed (train.seed) "
               "to one of these seeds.")
    if seeds_as == "count":
        k = url.widget(st.number_input, "Replicates per value", "sweep_replicates", default=2, min_value=1,
                       max_value=100, step=1, key="nr_sw_replicates")  # fmt: skip
        seeds: list[int] | None = list(range(int(k)))
    else:
        listed = url.widget(st.text_input, "Seeds (comma-separated)", "sweep_seeds", default="0, 1", cast=str,
                            key="nr_sw_seeds")  # fmt: skip
        seeds = guarded(parse_seeds, listed)
    values = guarded(parse_values, text) if field else None
    if not field:
        st.error("Name the field to sweep, e.g. train.lr.")
    if values is None or seeds is None:
        return SweepPlan(field, values or [], seeds or [])
    plan = SweepPlan(field, values, seeds)
    if not base_ok:
        st.info("Fix the form above first: every run of the sweep starts from it.")
        return plan
    try:
        cfgs = plan_sweep(form, field, values, seeds, check=check)
    except MasklabError as e:
        for line in str(e).splitlines():
            st.error(line)
        return plan
    steps = sorted({c.train.steps for c in cfgs})
    each = f"{steps[0]:,}" if len(steps) == 1 else f"{steps[0]:,} to {steps[-1]:,}"
    st.caption(f"**{counted(len(cfgs), 'run')}** ({len(values)} value{'s' if len(values) > 1 else ''} × {len(seeds)} "
               f"seed{'s' if len(seeds) > 1 else ''}) · {each} steps each · **{sum(c.train.steps for c in cfgs):,} "
               f"steps in all** · {max_runs()} train at a time")  # fmt: skip
    room, cap = queue_room(workspace_root())
    if len(cfgs) > room:
        st.error(f"The queue has room for {room} more runs ({cap - room} waiting, MASKLAB_MAX_QUEUED={cap}): sweep "
                 "fewer values or seeds, or wait for queued runs to start.")
        return plan
    if seeds_as == "count":
        flags = [f"--over {shlex.quote(field + '=' + ','.join(map(str, values)))}", f"--seeds {len(seeds)}",
                 *(f"--set {shlex.quote(f)}" for f in set_flags(form))]
        with st.expander("As a command line"):
            st.code(" \\\n    ".join(["python -m engine sweep", *flags]), language="bash")
    plan.configs = cfgs
    return plan


def sweep_launch(plan: SweepPlan, form: dict[str, Any], actor: Identity | None) -> None:
    """The "Launch sweep" button (disabled until the plan is ready); after a launch, what was queued
    and a link to the Sweeps page with this sweep selected (``?sweep=<id>``)."""
    if plan.ready:
        st.caption(f"Queues {counted(len(plan.configs), 'run')} ({plan.words()}), "
                   f"{sum(c.train.steps for c in plan.configs):,} steps in all: see the Sweep section.")
    if st.button("Launch sweep", type="primary", disabled=not plan.ready, key="nr_sw_launch"):
        sid = new_sweep_id()
        ids = guarded(submit_sweep, form, plan.field, plan.values, plan.seeds, sweep_id=sid, actor=actor)
        if ids:
            total = sum(c.train.steps for c in plan.configs)
            st.session_state["nr_sweep_launched"] = (sid, ids, f"{plan.words()}, {total:,} steps in all")
    launched = st.session_state.get("nr_sweep_launched")
    if launched:
        sid, ids, what = launched
        st.success(f"Queued sweep **{sid}**: {counted(len(ids), 'run')} ({what}). They train in background processes, "
                   f"{max_runs()} at a time, and each is evaluated when it completes.")
        st.page_link("../pages/sweeps.py", label="Open this sweep on the Sweeps page", query_params={"sweep": sid})
        with st.expander("Queued run ids"):
            st.code("\n".join(ids), language=None)
