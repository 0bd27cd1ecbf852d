"""The reconstruction matrix: the same validation inputs under the same masks (rows) reconstructed by
several runs, or by one run at several evaluation steps (columns), in one custom component.

Compare draws one matrix per sample kind (:func:`run_matrix`): one step control reaches every stored
evaluation step of every run (a slider over their union, a box to type a step, the left/right keys),
and a run without samples at that step shows its nearest earlier one and says so. Run detail draws
one run's evaluation steps side by side (:func:`step_matrix`). A page-level toggle switches every
cell between the reconstruction (visible patches pasted back), the original, before/after (a wipe
between the two, dragged once for the whole matrix) and the error map. Columns come a page at a time
(:data:`PER_PAGE`), and only the samples on screen are read and encoded; rows are the first
:data:`ROWS` fixed inputs. Whatever is left out is said under the matrix.

The cells come from the sample kind's view (``app.modalities.SampleView.cells``); the step, view and
page live in the page's URL (``mstep``, ``mview``, ``mpage``). The component runs in the page (no
iframe); every text it shows is set as text, and the only HTML it inserts is the text cells' markup,
escaped in Python (:func:`token_html`).
"""

from __future__ import annotations

import bisect
import hashlib
import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import streamlit as st

from app.components.errors import guarded
from app.modalities import sample_view
from engine.api import load_samples, sample_files

#: Columns a page of the matrix shows (runs on Compare, steps on Run detail).
PER_PAGE = 10
#: Fixed validation inputs (rows) the matrix shows.
ROWS = 6
#: The views of the page-level toggle: name -> button label.
VIEWS = {"recon": "reconstruction", "original": "original", "wipe": "before / after", "error": "error map"}


def union_steps(steps_by_run: Mapping[str, Sequence[int]]) -> list[int]:
    """Every stored evaluation step of any run, ascending (the step control's stops)."""
    return sorted({int(s) for steps in steps_by_run.values() for s in steps})


def shown_step(steps: Sequence[int], step: int) -> tuple[int | None, str]:
    """The step a run shows when the page is at ``step``: ``step`` itself when the run has samples
    there, else its nearest earlier one, else (nothing at or before ``step``) its first; with a note
    saying which ("" when exact). ``(None, "no samples")`` for a run without samples.

    Args:
        steps: the run's sample steps, ascending. step: the page's step.
    """
    if not steps:
        return None, "no samples yet"
    i = bisect.bisect_right(list(steps), step)
    if i and steps[i - 1] == step:
        return int(step), ""
    if i:
        return int(steps[i - 1]), f"no step {step}: its step {steps[i - 1]}"
    return int(steps[0]), f"nothing at or before step {step}: its first, step {steps[0]}"


def page_bounds(n: int, page: int, per_page: int = PER_PAGE) -> tuple[int, int, int, int]:
    """``(start, stop, page, pages)`` of ``n`` columns, ``per_page`` a page, ``page`` (0-based)
    clamped into range, so a link from a larger selection still opens a page that exists."""
    pages = max(1, -(-n // per_page))
    page = min(max(0, int(page)), pages - 1)
    return page * per_page, min(n, (page + 1) * per_page), page, pages


def digest(a: np.ndarray) -> str:
    """A short hash of an array's bytes and shape: which rows saw the same inputs and masks."""
    a = np.ascontiguousarray(a)
    return hashlib.blake2b(a.tobytes() + repr((a.shape, str(a.dtype))).encode(), digest_size=6).hexdigest()


def token_html(tokens: Sequence[str], mask: Sequence[bool], fill: Sequence[str] | None = None,
               right: Sequence[bool] | None = None) -> str:
    """One text row as escaped HTML: specials and padding dropped, ``##`` pieces glued; masked
    tokens marked (``<mark>``), written as ``fill[i]`` (a prediction) when given, and coloured
    by ``right[i]`` (class ``ok`` / ``bad``) when given."""
    out: list[str] = []
    for i, t in enumerate(tokens):
        t = str(t)
        if not t or t in ("[CLS]", "[SEP]", "[PAD]", "<pad>", "</s>"):
            continue
        word = str(fill[i]) if (fill is not None and mask[i]) else t
        glue = word.startswith("##")
        text = html.escape(word[2:] if glue else word)
        if mask[i]:
            cls = "" if right is None else (" class='ok'" if right[i] else " class='bad'")
            text = f"<mark{cls}>{text}</mark>"
        out.append(text if glue or not out else " " + text)
    return "".join(out)


# --------------------------------------------------------------------------- the component

_HTML = "<div class='mx'></div>"

_CSS = """
.mx{font-family:var(--st-font);font-size:13px;color:var(--st-text-color)}
.mx .bar{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:4px 0 8px}
.mx .bar input[type=range]{flex:1 1 240px;min-width:160px}
.mx .bar input[type=number]{width:90px;padding:3px;font:inherit}
.mx button{font:inherit;padding:3px 9px;border:1px solid var(--st-border-color);border-radius:6px;
  background:var(--st-secondary-background-color);color:inherit;cursor:pointer}
.mx button.on{background:var(--st-primary-color);color:#fff;border-color:var(--st-primary-color)}
.mx button:disabled{opacity:.4;cursor:default}
.mx .grid{display:grid;gap:4px;align-items:start;overflow-x:auto}
.mx .head{font-weight:600;font-size:12px;word-break:break-word}
.mx .sub{font-weight:400;opacity:.75;font-size:11px}
.mx .warn{color:#b45309}
.mx .rowlab{font-size:11px;opacity:.8;align-self:center;word-break:break-word}
.mx .cell{position:relative}
.mx .pic{position:relative;line-height:0}
.mx .cell img{width:100%;image-rendering:pixelated;display:block}
.mx .cell .top{position:absolute;left:0;top:0}
.mx .cell audio{width:100%;height:28px;margin-top:2px}
.mx .txt{line-height:1.4;font-size:12px;border:1px solid var(--st-border-color);padding:4px;border-radius:4px}
.mx mark{background:#fde68a;padding:0 2px}
.mx mark.ok{background:#bbf7d0}
.mx mark.bad{background:#fecaca}
.mx .note{font-size:12px;opacity:.8;margin-top:6px}
"""

_JS = r"""
export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  const root = parentElement.querySelector('.mx');
  if (!root || !data) return;
  root.replaceChildren();
  const el = (tag, props = {}, kids = []) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (k === 'text') e.textContent = v; else if (k === 'cls') e.className = v; else e.setAttribute(k, v);
    }
    for (const c of kids) e.append(c);
    return e;
  };
  const steps = data.steps || [];
  const send = (what) => setTriggerValue('action', what);
  const bar = el('div', { cls: 'bar' });
  if (steps.length) {
    const idx = Math.max(0, steps.indexOf(data.step));
    const slider = el('input', { type: 'range', min: 0, max: steps.length - 1, value: idx, step: 1,
                                 'aria-label': 'evaluation step' });
    slider.value = idx;
    const box = el('input', { type: 'number', value: data.step, 'aria-label': 'type a step' });
    box.value = data.step;
    const prev = el('button', { text: '◀', title: 'previous step (left arrow)' });
    const next = el('button', { text: '▶', title: 'next step (right arrow)' });
    prev.disabled = idx <= 0; next.disabled = idx >= steps.length - 1;
    slider.addEventListener('input', () => { box.value = steps[slider.value]; });
    slider.addEventListener('change', () => send({ step: steps[slider.value] }));
    box.addEventListener('change', () => send({ step: Number(box.value) }));
    prev.addEventListener('click', () => send({ step: steps[Math.max(0, idx - 1)] }));
    next.addEventListener('click', () => send({ step: steps[Math.min(steps.length - 1, idx + 1)] }));
    bar.append(el('span', { text: 'step' }), prev, slider, next, box,
               el('span', { cls: 'sub', text: `${steps.length} stored steps` }));
    if (window.__masklabMatrixKeys) document.removeEventListener('keydown', window.__masklabMatrixKeys);
    window.__masklabMatrixKeys = (ev) => {
      const t = ev.composedPath()[0] || ev.target;
      const tag = (t && t.tagName || '').toLowerCase();
      if (['input', 'textarea', 'select'].includes(tag) || (t && t.isContentEditable)) return;
      if (ev.key === 'ArrowLeft' && idx > 0) { ev.preventDefault(); send({ step: steps[idx - 1] }); }
      if (ev.key === 'ArrowRight' && idx < steps.length - 1) { ev.preventDefault(); send({ step: steps[idx + 1] }); }
    };
    document.addEventListener('keydown', window.__masklabMatrixKeys);
  }
  const views = el('div', { cls: 'bar' });
  for (const [name, label] of data.views) {
    const b = el('button', { text: label, cls: name === data.view ? 'on' : '' });
    b.addEventListener('click', () => send({ view: name }));
    views.append(b);
  }
  let wipe = null;
  if (data.view === 'wipe') {
    wipe = el('input', { type: 'range', min: 0, max: 100, value: 50, 'aria-label': 'wipe' });
    views.append(el('span', { text: 'original ◀' }), wipe, el('span', { text: '▶ reconstruction' }));
  }
  root.append(bar, views);
  if (data.pages > 1) {
    const pg = el('div', { cls: 'bar' });
    const a = el('button', { text: '◀ page' }), b = el('button', { text: 'page ▶' });
    a.disabled = data.page <= 0; b.disabled = data.page >= data.pages - 1;
    a.addEventListener('click', () => send({ page: data.page - 1 }));
    b.addEventListener('click', () => send({ page: data.page + 1 }));
    pg.append(a, el('span', { text: data.page_text }), b);
    root.append(pg);
  }
  const cols = data.columns;
  const grid = el('div', { cls: 'grid' });
  grid.style.gridTemplateColumns = `minmax(60px,90px) repeat(${cols.length}, minmax(${data.min_px}px, 200px))`;
  grid.append(el('div'));
  for (const c of cols) {
    grid.append(el('div', { cls: 'head' }, [
      el('div', { text: c.label }), el('div', { cls: 'sub', text: c.sub }),
      ...(c.note ? [el('div', { cls: 'sub warn', text: c.note })] : [])]));
  }
  const tops = [];
  for (let r = 0; r < data.row_labels.length; r++) {
    grid.append(el('div', { cls: 'rowlab', text: data.row_labels[r] }));
    for (const c of cols) {
      const cell = c.cells[r];
      const box = el('div', { cls: 'cell' });
      const pic = el('div', { cls: 'pic' });
      if (!cell) { grid.append(box); continue; }
      const v = data.view;
      if (cell.html_recon !== undefined) {
        const pick = v === 'original' ? [cell.html_original] : v === 'error' ? [cell.html_error]
          : v === 'wipe' ? [cell.html_original, cell.html_recon] : [cell.html_recon];
        for (const h of pick) { const d = el('div', { cls: 'txt' }); d.innerHTML = h; box.append(d); }
      } else if (v === 'wipe') {
        pic.append(el('img', { src: cell.original, alt: 'original' }));
        const top = el('img', { src: cell.recon, alt: 'reconstruction', cls: 'top' });
        top.style.clipPath = 'inset(0 0 0 50%)';
        tops.push(top); pic.append(top); box.append(pic);
      } else {
        pic.append(el('img', { src: cell[v] || cell.recon, alt: v })); box.append(pic);
      }
      const snd = v === 'original' ? cell.audio_original : cell.audio_recon;
      if (snd) box.append(el('audio', { controls: '', preload: 'none', src: snd }));
      if (cell.note) box.append(el('div', { cls: 'sub', text: cell.note }));
      grid.append(box);
    }
  }
  if (wipe) wipe.addEventListener('input', () => {
    for (const t of tops) t.style.clipPath = `inset(0 0 0 ${wipe.value}%)`;
  });
  root.append(grid);
  for (const n of data.notes) root.append(el('div', { cls: 'note', text: n }));
}
"""

_component = st.components.v2.component("masklab_recon_matrix", html=_HTML, css=_CSS, js=_JS)


@st.cache_data(max_entries=256, show_spinner=False)
def _cells(run_id: str, step: int, version: int, rows: int) -> tuple[str, list[dict], list[str], str] | None:
    """The sample kind, the first ``rows`` cells, the row labels (class names) and an input-and-mask
    digest of a run's samples at ``step`` (``version``: the file's mtime, so a resumed run's new
    samples are read again); None when the kind has no matrix view."""
    sample = load_samples(run_id, step)
    if sample is None:
        return None
    view = sample_view(sample.kind)
    if view is None or view.cells is None:
        return sample.kind, [], [], ""
    cells = view.cells(sample, rows)
    names = sample.meta.get("class_names", [])
    labels = [names[int(y)] if 0 <= int(y) < len(names) else str(int(y)) for y in sample.arrays.get("labels", [])][:len(cells)]
    key = next((k for k in ("images", "spec", "tokens") if k in sample.arrays), None)
    seen = digest(np.asarray(sample[key][:len(cells)]).astype(str if key == "tokens" else None)) if key else ""
    masks = digest(np.asarray(sample["mask"][:len(cells)])) if "mask" in sample.arrays else ""
    return sample.kind, cells, labels, seen + "/" + masks


def _state(url: Any, key: str, steps: Sequence[int], default_step: int | None) -> tuple[int | None, str, int]:
    """The matrix's step, view and page: the component's last action (a trigger, read before the
    component is drawn again) written into the URL, then the URL's values."""
    action: dict = {}
    for k in [k for k in st.session_state if k == key or str(k).startswith(f"{key}_")]:  # one component per kind
        got = st.session_state[k]
        action = (got.get("action") if hasattr(got, "get") else None) or action
    if "step" in action and steps:
        asked = int(action["step"])
        url.put("mstep", asked)
    if action.get("view") in VIEWS:
        url.put("mview", action["view"])
    if "page" in action:
        url.put("mpage", int(action["page"]))
    step = url.get("mstep", default_step, int) if steps else None
    view = url.get("mview", "recon", str)
    return step, view if view in VIEWS else "recon", url.get("mpage", 0, int)


def _mount(key: str, data: dict) -> None:
    _component(key=key, data=data, on_action_change=lambda: None, height="content")


def run_matrix(records: Sequence[Any], labels: Mapping[str, str], url: Any, key: str = "matrix",
               rows: int = ROWS, per_page: int = PER_PAGE) -> int:
    """Compare's matrix: columns are ``records`` (runs), rows their first ``rows`` fixed validation
    inputs, all at the page's step (:func:`shown_step` per run), ``per_page`` runs a page; one
    matrix per sample kind. ``url``: the page's :class:`~app.components.urlstate.PageState` (or a
    scope of it) keeping ``mstep``, ``mview`` and ``mpage``. Returns how many runs the matrix drew
    (0: none had samples, or none of a kind with a matrix view)."""
    files = {r.run_id: (guarded(sample_files, r.run_id) or {}) for r in records}
    with_samples = [r for r in records if files[r.run_id]]
    if not with_samples:
        st.caption("None of these runs has saved samples yet.")
        return 0
    steps = union_steps({r: f.keys() for r, f in files.items()})
    step, view, page = _state(url, key, steps, steps[-1])
    typed = None
    if step not in steps:  # a typed step between two stops: the nearest earlier stop (or the first)
        typed, step = step, shown_step(steps, step)[0]
    start, stop, page, pages = page_bounds(len(with_samples), page, per_page)
    on_page = with_samples[start:stop]
    columns, kinds, notes = [], {}, []
    for r in on_page:
        run_steps = sorted(files[r.run_id])
        at, note = shown_step(run_steps, step)
        got = guarded(_cells, r.run_id, at, files[r.run_id][at], rows)
        if got is None:
            continue
        kind, cells, row_labels, seen = got
        kinds.setdefault(kind, []).append(r.run_id)
        columns.append({"run": r.run_id, "kind": kind, "label": labels.get(r.run_id, r.run_id),
                        "sub": f"step {at}", "note": note, "cells": cells, "rows": row_labels, "seen": seen})
    left = [r for r in records if not files[r.run_id]]
    if left:
        notes.append(f"No samples yet: {', '.join(labels.get(r.run_id, r.run_id) for r in left)}.")
    drawn = 0
    for kind, ids in kinds.items():
        cols = [c for c in columns if c["kind"] == kind]
        if not cols[0]["cells"]:
            st.caption(f"No matrix view for {kind!r} samples ({len(ids)} run(s)): their latest samples are in the "
                       "grid below.")
            continue
        drawn += len(cols)
        first_in, first_mask = cols[0]["seen"].split("/")
        for c in cols[1:]:
            seen_in, seen_mask = c["seen"].split("/")
            other = "other inputs" if seen_in != first_in else "other masks" if seen_mask != first_mask else ""
            if other:
                c["note"] = (c["note"] + " · " if c["note"] else "") + other + " than the first column"
        n_rows = max(len(c["cells"]) for c in cols)
        kind_notes = list(notes)
        if typed is not None:
            kind_notes.insert(0, f"No run stored step {typed}: step {step} shown, the nearest stored step "
                                 f"{'before' if step < typed else 'after'} it.")
        if pages > 1:
            kind_notes.insert(0, f"Runs {start + 1}–{stop} of {len(with_samples)}, {per_page} a page: only this "
                                 "page's samples are read.")
        kind_notes.append(f"The first {n_rows} fixed validation inputs of each run, the same inputs and masks in "
                          "every column unless a column says otherwise (a run's masks follow its train.seed and "
                          "masking); the left/right arrow keys move the step.")
        _mount(f"{key}_{kind}", {
            "steps": steps, "step": step, "view": view, "views": list(VIEWS.items()), "page": page, "pages": pages,
            "page_text": f"runs {start + 1}–{stop} of {len(with_samples)}",
            "columns": [{k: c[k] for k in ("label", "sub", "note", "cells")} for c in cols],
            "row_labels": cols[0]["rows"] or [f"#{i + 1}" for i in range(n_rows)], "notes": kind_notes,
            "min_px": 72 if len(cols) > 6 else 96,
        })
    return drawn


def step_matrix(run: Any, url: Any, key: str = "smatrix", rows: int = ROWS, per_page: int = PER_PAGE) -> int:
    """Run detail's matrix: one run's evaluation steps as columns (``per_page`` a page, newest page
    first), rows its first ``rows`` fixed validation inputs. Returns how many steps were drawn."""
    files = guarded(sample_files, run.run_id) or {}
    steps = sorted(files)
    if len(steps) < 2:
        return 0
    _, view, page = _state(url, key, [], None)
    start, stop, page, pages = page_bounds(len(steps), url.get("mpage", (len(steps) - 1) // per_page, int), per_page)
    columns, row_labels = [], []
    for s in steps[start:stop]:
        got = guarded(_cells, run.run_id, s, files[s], rows)
        if got is None or not got[1]:
            continue
        columns.append({"label": f"step {s}", "sub": "", "note": "", "cells": got[1]})
        row_labels = row_labels or got[2]
    if not columns:
        return 0
    notes = [f"Steps {steps[start]}–{steps[stop - 1]}: {stop - start} of {len(steps)} stored evaluations, {per_page} "
             "a page." if pages > 1 else f"All {len(steps)} stored evaluations.",
             "The same fixed validation inputs and masks at every step."]
    _mount(key, {"steps": [], "step": None, "view": view, "views": list(VIEWS.items()), "page": page, "pages": pages,
                 "page_text": f"steps {steps[start]}–{steps[stop - 1]} ({page + 1} of {pages})", "columns": columns,
                 "row_labels": row_labels or [f"#{i + 1}" for i in range(len(columns[0]["cells"]))], "notes": notes,
                 "min_px": 72})
    return len(columns)
