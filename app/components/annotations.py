"""Run housekeeping on the pages: tags, note and archive of a run, and the link that opens its config
in New run. The engine writes (:mod:`engine.store.annotations`, checked and audited there); this
module only draws the controls, and only for a session that may use them."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.components.access import actor, allowed
from app.components.errors import user_errors
from app.components.urlstate import encode, flatten
from engine.api import annotate, can


def new_run_params(config: dict[str, Any]) -> dict[str, str]:
    """The URL parameters of New run for a run's resolved ``config``: one per field
    (:func:`app.components.urlstate.flatten`), the name left out (a new run gets its own)."""
    return {k: encode(v) for k, v in flatten(config).items() if k != "name"}


def open_in_new_run(rec: Any) -> None:
    """A link "Open this config in New run" (sessions that may launch runs): New run's form filled
    with the run's dataset, task, masking, model and training fields."""
    if can("run.submit", actor()):
        c = st.columns(2)
        c[0].page_link("../pages/new_run.py", label="Open this config in New run", query_params=new_run_params(rec.config))
        if rec.step > 0 or rec.status == "completed":  # a fork: this run's latest checkpoint, then New run's changes
            fork = {**new_run_params(rec.config), "model.init_from": rec.run_id}
            fork.pop("model.init_step", None)
            c[1].page_link("../pages/new_run.py", label="Fork this run in New run", query_params=fork,
                           help="a new run that starts from this run's latest checkpoint, with the data, masking, "
                                "objective or schedule you change (model.init_from)")


def annotations_panel(rec: Any, known_tags: list[str]) -> None:
    """Tags (pick from ``known_tags`` or type new ones) and a note with Save, and Archive/Unarchive,
    for a session that may annotate runs; others read the tags and the note."""
    save = allowed("run.annotate", annotate)
    if save is None:
        if rec.tags or rec.note or rec.archived:
            st.caption(" · ".join(["**archived**"] * rec.archived + [f"tags: {', '.join(rec.tags)}"] * bool(rec.tags)))
            if rec.note:
                st.markdown(rec.note)
        return
    st.subheader("Tags and note")
    key = f"rd_notes_{rec.run_id}"
    with st.form(key, border=False):
        tags = st.multiselect("Tags", sorted(set(known_tags) | set(rec.tags)), default=list(rec.tags),
                              accept_new_options=True, key=f"{key}_tags", placeholder="pick or type a tag",
                              help="up to 40 characters each, no comma")  # fmt: skip
        note = st.text_area("Note", value=rec.note, key=f"{key}_note", max_chars=10_000, height=100,
                            placeholder="what this run is for, what you saw")  # fmt: skip
        if st.form_submit_button("Save tags and note"):
            with user_errors():
                save(rec.run_id, tags=tags, note=note)
                st.toast("Tags and note saved")
    label, help_ = (("Unarchive", "show this run in Runs again") if rec.archived else
                    ("Archive", "hide this run from Runs and `python -m engine runs` (nothing is deleted)"))
    if st.button(label, key=f"{key}_archive", help=help_):
        with user_errors():
            save(rec.run_id, archived=not rec.archived)
            st.rerun()
    if rec.archived:
        st.caption("This run is archived: Runs shows it only with **Show archived**.")
