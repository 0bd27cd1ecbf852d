"""Models: import a published MAE or BERT checkpoint (an upload, a path on this machine or a Hugging
Face Hub id), look at what was imported, and show it on a dataset: a run of 0 steps
(``model.init_from``, ``train.steps: 0``) whose reconstructions, masking or fill-in box and
evaluation then live on Run detail, Compare and Presentation like any run's. The model shown is in
the URL (``?model=name``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from app.components import guarded
from app.components.access import actor, allowed, delete_panel
from app.components.datasets import dataset_infos
from app.components.errors import user_errors
from app.components.urlstate import PageState, index_of
from engine.api import (
    FOLDER_FILES,
    can,
    delete_pretrained,
    import_path,
    import_upload,
    list_pretrained,
    list_runs,
    show_pretrained,
)

st.title("Models")
st.caption("Published MAE and BERT checkpoints, imported exactly (transformers' `save_pretrained` folders, the MAE "
           "repository's `.pth`). Show one on a dataset to see its reconstructions, mask patches or fill in words "
           "and evaluate it, or start a run from it with `model.init_from`.")
url = PageState("models", ("model",))


def _floats(text: str, what: str) -> list[float] | None:
    if not text.strip():
        return None
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 3:
        raise ValueError(f"{what}: give three numbers separated by commas, e.g. 0.485,0.456,0.406")
    return values


def _import_panel() -> None:
    """Upload files, or give a path or Hub id; the options the MAE repository's ``.pth`` may need."""
    how = st.radio("From", ["Upload", "Path on this machine or Hub id"], horizontal=True, key="models_how")
    if how == "Upload":
        files = st.file_uploader(f"A `.pth` of the MAE repository, a `.zip` of a `save_pretrained` folder, or the "
                                 f"folder's files ({', '.join(FOLDER_FILES)})", accept_multiple_files=True,
                                 key="models_upload")
        source = None
    else:
        source = st.text_input("Folder or .pth on this machine, or a Hub id", key="models_path",
                               placeholder="/data/mae_visualize_vit_base.pth · facebook/vit-mae-base")
        files = []
    name = st.text_input("Model name", key="models_name", placeholder="e.g. mae-base")
    with st.expander("Options of a .pth (the shapes do not hold them)"):
        c = st.columns(4)
        heads = c[0].number_input("Encoder heads", 0, 64, 0, key="models_heads", help="0: the released preset's")
        dheads = c[1].number_input("Decoder heads", 0, 64, 0, key="models_dheads", help="0: the released preset's")
        mean = c[2].text_input("Image mean", key="models_mean", placeholder="ImageNet's")
        std = c[3].text_input("Image std", key="models_std", placeholder="ImageNet's")
    if not st.button("Import", type="primary", key="models_go", disabled=not (name and (files or source))):
        return
    try:
        options = {k: v for k, v in (("num_heads", int(heads) or None), ("decoder_num_heads", int(dheads) or None),
                                     ("image_mean", _floats(mean, "Image mean")),
                                     ("image_std", _floats(std, "Image std"))) if v is not None}
    except ValueError as e:
        st.error(str(e))
        return
    with st.spinner("Importing: reading and checking every tensor…"), user_errors():
        if files:
            info, skipped = import_upload([(f.name, f.getvalue()) for f in files], name.strip(), options,
                                          actor=actor())
        else:
            info, skipped = import_path(source.strip(), name.strip(), options, actor=actor()), []
        st.session_state["models_done"] = (info.name, skipped)
        st.session_state["models_pending"] = info.name
        st.rerun()


if "models_pending" in st.session_state:  # select the model just imported
    st.session_state["models_pick"] = st.session_state.pop("models_pending")
    url.put("model", st.session_state["models_pick"])

models = guarded(list_pretrained) or []
if can("model.import", actor()):
    with st.expander("Import a model", expanded=not models):
        _import_panel()
if done := st.session_state.pop("models_done", None):
    st.success(f"Imported **{done[0]}**." + (f" Left out of the upload: {'; '.join(done[1])}." if done[1] else ""))
if not models:
    st.info("No model imported yet. Import one above, or from a shell: "
            "`python -m engine models import PATH --name NAME`.")
    st.stop()

names = [m.name for m in models]
by_name = {m.name: m for m in models}
start = 0 if "models_pick" in st.session_state else index_of(names, url.get("model"))
name = st.selectbox("Model", names, index=start, key="models_pick",
                    format_func=lambda n: f"{n}  ({by_name[n].arch}, {by_name[n].modality}, "
                                          f"{by_name[n].n_params / 1e6:.1f} M parameters)")
url.put("model", name)
m = by_name[name]
src = m.source or {}
prep = m.preprocessing or {}
facts = {"architecture": m.arch, "modality": m.modality, "parameters": f"{m.n_params:,}",
         "source": f"{src.get('path', '')} ({src.get('format', '')})", "imported": m.created}
if m.modality == "image":
    cfg = m.arch_config
    facts.update({"input": f"{prep['size'][0]}x{prep['size'][1]} px, {prep['channels']} channel(s), "
                           f"patch {cfg['patch_size']}",
                  "normalisation": f"mean {prep['mean']}, std {prep['std']}",
                  "encoder": f"{cfg['embed_dim']} wide, {cfg['depth']} blocks, {cfg['num_heads']} heads",
                  "decoder": f"{cfg['decoder_embed_dim']} wide, {cfg['decoder_depth']} blocks, "
                             f"{cfg['decoder_num_heads']} heads",
                  "target": "per-patch normalised pixels (norm-pix)" if cfg.get("norm_pix_loss") else "pixels"})
else:
    facts.update({"tokenizer": f"{prep.get('tokenizer')} · {'lower-cased' if prep.get('lowercase') else 'cased'} · "
                               f"{prep.get('max_len')} positions",
                  "special tokens": ", ".join(f"{t} {prep['special'][r]}" for r, t in prep.get("special_tokens", {}).items())})
if src.get("fresh"):
    facts["initialised fresh"] = ", ".join(src["fresh"])
if src.get("ignored"):
    facts["ignored tensors"] = ", ".join(src["ignored"])
st.dataframe(pd.DataFrame({"": list(facts), "value": [str(v) for v in facts.values()]}), hide_index=True,
             use_container_width=True)
for note in src.get("notes", []):
    st.caption(note)

st.subheader("Show it on a dataset")
infos = guarded(dataset_infos) or {}
fits = [n for n, i in infos.items() if i.modality == m.modality]
runs = [r for r in (guarded(list_runs) or []) if ((r.config or {}).get("model") or {}).get("init_from") == name]
submit = allowed("run.submit", show_pretrained)
if not fits:
    st.info(f"No {m.modality} dataset in this workspace: import one on the Data page.")
elif submit is not None:
    c = st.columns([3, 1])
    dataset = c[0].selectbox("Dataset", fits, key="models_ds",
                             help="images are resized to the model's input and channels repeated or dropped, as "
                                  "the image import does; texts are tokenised with the model's own tokenizer")
    c[1].write("")
    if c[1].button("Show it", type="primary", key="models_show"):
        with user_errors():
            st.session_state["models_shown"] = submit(name, dataset)
    if rid := st.session_state.get("models_shown"):
        st.success(f"Run {rid} evaluates {name} on {dataset} without training it (0 steps), then its evaluation "
                   "job probes it next to a random init and the raw input.")
        st.page_link("../pages/run_detail.py", label="Open run detail", query_params={"run": rid})
if runs:
    st.markdown("**Runs from this model**")
    for r in runs[:20]:
        st.page_link("../pages/run_detail.py", label=f"{r.name or r.run_id} · {r.status} · "
                     f"step {r.step} / {r.total_steps}", query_params={"run": r.run_id})

remove = allowed("model.delete", delete_pretrained)
if remove is not None:
    delete_panel("model", f"Deletes **{name}** ({Path(str(m.path)).name}) for good. Runs started from it keep "
                 "their checkpoints and stay readable.", f"models_delete_{name}", lambda: remove(name),
                 lambda: (st.session_state.pop("models_pick", None), url.put("model", None)))
