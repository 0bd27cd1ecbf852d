"""Masking controls and mask statistics for the New run and Mask lab pages.

Everything here is generic over :data:`engine.masking.MASKING_REGISTRY`: the strategy list comes
from :func:`engine.masking.strategies_for`, and :func:`params_form` builds one widget per field of a
strategy's pydantic parameter model from its type, constraints, default and description. A new
strategy shows up with its form without a change here. Validation stays with the engine
(``MaskingConfig`` / ``MaskingStrategy.parse_params``); the pages show its messages with
:func:`app.components.guarded`.

Pydantic field -> widget:
    ``int`` / ``float``           ``st.number_input``, bounds from ``ge``/``le`` (``gt``/``lt``: the
                                  next int; for floats the bound itself, which the model rejects)
    ``Literal[...]``              ``st.selectbox`` of the choices
    ``bool``                      ``st.checkbox``
    ``str``                       ``st.text_input``
    ``list[int]`` / ``list[float]`` (or tuple)  ``st.text_input`` of comma-separated values
    ``X | None``                  a "set <name>" checkbox, then X's widget (an empty disabled box while unset)
                                  (``Literal[...] | None``: a selectbox with a "None" choice)
    anything else                 ``st.text_input`` parsed as YAML
"""

from __future__ import annotations

import json
import math
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st
import yaml

from app.components.urlstate import field_bounds, number
from engine.api import (
    ConfigError,
    MaskingConfig,
    MaskingStrategy,
    MasklabError,
    MaskStats,
    get_masking,
    grid_shape,
    identical_masks_warning,
    load_dataset,
    representative,
    strategies_for,
    workspace_root,
)

#: Range of the mask-ratio sliders: 0 (nothing to predict) and 1 (nothing visible) make no run.
RATIO_RANGE = (0.05, 0.95)
_NONE = "None"


# --------------------------------------------------------------------------- patch grid helpers


def patch_sizes(h: int, w: int) -> list[int]:
    """Patch sizes that tile an ``h x w`` image (``grid_shape`` accepts them)."""
    out = []
    for p in range(1, min(h, w) + 1):
        try:
            grid_shape((h, w), p)
        except ConfigError:
            continue
        out.append(p)
    return out


def default_patch(sizes: list[int], h: int) -> int:
    """The config default when it fits with at most 8 patches a side (8x8 digits: P=2), else the
    size whose grid side is closest to 8 (28x28: P=4, 7x7 patches), which keeps CPU runs short."""
    from engine.api import DEFAULT_IMAGE_PATCH as p0  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    if p0 in sizes and h // p0 <= 8:
        return p0
    return min(sizes, key=lambda p: (abs(h // p - 8), p))


def patch_label(p: int, h: int, w: int) -> str:
    """``"2 px  →  4x4 = 16 patches"`` for the patch-size selectbox."""
    n = (h // p) * (w // p)
    return f"{p} px  →  {h // p}x{w // p} = {n} patch" + ("es" if n != 1 else "")


@st.cache_data(max_entries=32, ttl=900, show_spinner=False)
def _refused_sizes(workspace: str, dataset: str, version: str, masking_json: str, sizes: tuple[int, ...]) -> dict:
    """``patch size -> the pre-flight's reason`` for the sizes ``engine.tasks.checks.check_run`` refuses with
    this masking (``{}`` when the masking itself is invalid: its own error is shown elsewhere).
    ``workspace`` and ``version`` are cache keys."""
    from engine.api import RunConfig, check_run, resolve  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    masking = json.loads(masking_json)
    refused = {}
    for p in sizes:
        try:
            cfg = resolve(RunConfig.from_dict({"data": {"dataset": dataset}, "masking": masking,
                                               "model": {"patch_size": p}}))
        except ConfigError:
            return {}
        try:
            check_run(cfg)
        except MasklabError as e:
            refused[p] = str(e)
    return refused


def patch_select(info: Any, masking: dict[str, Any] | None, key: str, carried: int | None = None) -> int:
    """The patch-size select: only the sizes that tile the images *and* that the launcher's
    pre-flight accepts with ``masking`` (e.g. one 8x8 patch with random masking would mask
    everything: not offered). When no size passes, every tiling size is offered and the page shows
    the refusal. Returns the chosen size."""
    c, h, w = info.image_shape
    tiling = patch_sizes(h, w)
    refused = {}
    if masking is not None:
        refused = _refused_sizes(str(workspace_root()), info.name, info.created_at,
                                 json.dumps(masking, sort_keys=True), tuple(tiling))  # fmt: skip
    sizes = [p for p in tiling if p not in refused] or tiling
    p0 = carried if carried in sizes else default_patch(sizes, h)
    help_ = "Sizes that tile the images and that this masking can train with."
    if refused and len(sizes) < len(tiling):
        help_ += " Not offered: " + "; ".join(f"{p} px ({why.split(': ', 1)[-1]})" for p, why in refused.items())
    patch = st.selectbox("Patch size", sizes, index=sizes.index(p0), key=f"{key}_patch_{h}x{w}",
                         format_func=lambda p: patch_label(p, h, w), help=help_)  # fmt: skip
    if refused and len(sizes) < len(tiling):
        st.caption(f"Not offered with this masking: {', '.join(f'{p} px' for p in refused)} (see the help).")
    identical_masks_note(masking, (h // patch, w // patch))
    return int(patch)


def identical_masks_note(masking: dict[str, Any] | None, grid: tuple[int, ...]) -> str | None:
    """``st.warning`` when ``masking`` (a ``masking`` config dict) would give every sample the same
    mask on ``grid`` (the grid without the batch, e.g. ``(7, 7)`` patches):
    :func:`engine.masking.identical_masks_warning`. Settings the engine rejects are the form's
    business (it says why), so they give no note here. Returns the warning shown, or None."""
    if not masking or not masking.get("strategy"):
        return None
    ratio = masking.get("ratio", MaskingConfig.model_fields["ratio"].default)
    try:
        msg = _identical_masks(str(masking["strategy"]), json.dumps(masking.get("params") or {}, sort_keys=True),
                               tuple(int(g) for g in grid), float(ratio))
    except (MasklabError, ValueError, TypeError):
        return None
    if msg:
        st.warning(msg)
    return msg


@st.cache_data(max_entries=64, show_spinner=False)
def _identical_masks(strategy: str, params_json: str, grid: tuple[int, ...], ratio: float) -> str | None:
    """:func:`identical_masks_warning` (256 draws, up to a few tenths of a second on a large grid),
    once per setting."""
    return identical_masks_warning(strategy, json.loads(params_json) or None, grid, ratio)


# --------------------------------------------------------------------------- errors


def guarded_mask(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Like :func:`app.components.guarded` for drawing masks: an engine error or a ``ValueError``
    (a strategy rejecting a grid its parameters do not fit) becomes ``st.error``; returns None."""
    try:
        return fn(*args, **kwargs)
    except (MasklabError, ValueError) as e:
        st.error(str(e))
        return None


# --------------------------------------------------------------------------- the parameter form


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> ``(X, True)``; anything else -> ``(tp, False)``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), True
    return tp, False


def _strip_annotated(tp: Any) -> Any:
    """``Annotated[int, Ge(2)]`` (a constrained list item) -> ``int``."""
    return typing.get_args(tp)[0] if typing.get_origin(tp) is typing.Annotated else tp


def _unset_value(tp: Any, b: dict[str, float | None]) -> Any:
    """The starting value of an optional number when its "set" box is ticked: 1 when allowed,
    else the nearest allowed value."""
    if tp not in (int, float):
        return None
    lo, hi = _limits(b, tp is int)
    v = 1
    if lo is not None and (v < lo or (b["gt"] is not None and v <= b["gt"])):
        v = lo + (_float_step(lo, hi, None) if tp is float and b["gt"] is not None else 0)
    if hi is not None and v > hi:
        v = hi
    return tp(v)


def _limits(b: dict[str, float | None], is_int: bool) -> tuple[float | None, float | None]:
    """Inclusive widget limits. Exclusive int bounds become the next int; exclusive float bounds
    stay the bound itself (the widget cannot express "> 0"; the model rejects exactly 0 with a
    message naming the field)."""
    lo, hi = b["ge"], b["le"]
    if b["gt"] is not None:
        lo = (math.floor(b["gt"]) + 1) if is_int else b["gt"]
    if b["lt"] is not None:
        hi = (math.ceil(b["lt"]) - 1) if is_int else b["lt"]
    return lo, hi


def _float_step(lo: float | None, hi: float | None, default: float | None) -> float:
    """A round step: about 1/100 of a bounded range, else a tenth of the default's magnitude."""
    if lo is not None and hi is not None and hi > lo:
        span = hi - lo
    elif default:
        span = abs(float(default)) * 10
    else:
        span = 10.0
    return 10.0 ** math.floor(math.log10(span / 100)) if span > 0 else 0.01


def _constraint_text(b: dict[str, float | None]) -> str:
    parts = [f"{sym} {b[k]}" for k, sym in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")) if b[k] is not None]
    return ", ".join(parts)


def _help(field: Any, default: Any, b: dict[str, float | None], optional: bool) -> str:
    bits = [field.description or ""]
    rule = _constraint_text(b)
    extra = ", ".join(x for x in (rule, f"default {default!r}") if x)
    if extra:
        bits.append(f"({extra})")
    if optional:
        bits.append("Unset = None.")
    return " ".join(x for x in bits if x).strip()


def _parse_list(raw: str, elem: Any) -> list[Any]:
    """``"4, 8,16"``, ``"[4, 8, 16]"`` or ``"4 8 16"`` -> ``[4, 8, 16]`` with ``elem`` (int/float)
    applied where it parses; an item that does not parse stays a string, so the model's error names
    the field and the item."""
    out: list[Any] = []
    raw = raw.strip().removeprefix("[").removesuffix("]")
    for item in re.split(r"[,;\s]+", raw):
        item = item.strip()
        if not item:
            continue
        try:
            out.append(elem(item) if elem in (int, float) else yaml.safe_load(item))
        except (TypeError, ValueError, yaml.YAMLError):
            out.append(item)
    return out


def _number_widget(label: str, tp: type, value: Any, b: dict, help_: str, key: str) -> Any:
    is_int = tp is int
    lo, hi = _limits(b, is_int)
    if is_int:
        v = number(value, int(lo if lo is not None else 0), lo, hi, int)
        return st.number_input(
            label, min_value=None if lo is None else int(lo), max_value=None if hi is None else int(hi),
            value=v, step=1, help=help_, key=key,
        )  # fmt: skip
    v = number(value, float(lo if lo is not None else 0.0), lo, hi)
    step = _float_step(lo, hi, v)
    # enough decimals for the step and for the value itself (a default p = 0.065 must not read 0.07)
    shown = len(f"{v:.8f}".rstrip("0").partition(".")[2])
    decimals = min(8, max(2, shown, -math.floor(math.log10(step)) if step < 1 else 2))
    return st.number_input(
        label, min_value=None if lo is None else float(lo), max_value=None if hi is None else float(hi),
        value=v, step=step, format=f"%.{decimals}f", help=help_, key=key,
    )  # fmt: skip


def _field_widget(name: str, tp: Any, value: Any, b: dict, help_: str, key: str) -> Any:
    """One widget for a (non-optional) type; returns its value in the model's terms."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        options = list(typing.get_args(tp))
        index = options.index(value) if value in options else 0
        return st.selectbox(name, options, index=index, help=help_, key=key)
    if tp is bool:
        return st.checkbox(name, value=bool(value), help=help_, key=key)
    if tp in (int, float):
        return _number_widget(name, tp, value, b, help_, key)
    if tp is str:
        return st.text_input(name, value="" if value is None else str(value), help=help_, key=key)
    if origin in (list, tuple, set, frozenset):
        args = [_strip_annotated(a) for a in typing.get_args(tp) if a is not Ellipsis]
        elem = args[0] if len(args) == 1 or (args and all(a is args[0] for a in args)) else None
        text = ", ".join(str(v) for v in (value or []))
        raw = st.text_input(name, value=text, help=f"{help_} Comma-separated values.".strip(), key=key)  # fmt: skip
        return _parse_list(raw, elem)
    raw = st.text_input(name, value=yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("..."),
                        help=f"{help_} YAML value.".strip(), key=key)  # fmt: skip
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw  # the model's message names the field


def params_form(strategy: MaskingStrategy, key_prefix: str, values: dict[str, Any] | None = None) -> dict[str, Any]:
    """A widget per field of ``strategy.params`` (see the module docstring for the mapping).

    Labels are the field names (so an error ``masking.params.<field>: ...`` points at its widget),
    helps are the field descriptions with their constraints and defaults.

    Args:
        strategy: the registered strategy.
        key_prefix: widget keys are ``f"{key_prefix}_{strategy.name}_{field}"`` (each strategy keeps
            its own values when the user switches back and forth).
        values: initial values (e.g. carried over from another page); missing fields use the defaults.

    Returns:
        ``{field: value}`` for every field, unvalidated (pass it as ``masking.params``).
    """
    values = values or {}
    out: dict[str, Any] = {}
    for name, field in strategy.params.model_fields.items():
        default = field.get_default(call_default_factory=True)
        value = values.get(name, default)
        tp, optional = _unwrap_optional(field.annotation)
        b = field_bounds(field)
        help_ = _help(field, default, b, optional)
        key = f"{key_prefix}_{strategy.name}_{name}"
        if optional and typing.get_origin(tp) is Literal:
            options = [_NONE, *typing.get_args(tp)]
            index = options.index(value) if value in options else 0
            choice = st.selectbox(name, options, index=index, help=help_, key=key)
            out[name] = None if choice == _NONE else choice
        elif optional:
            is_set = st.checkbox(f"set {name}", value=value is not None, key=f"{key}__set",
                                 help=f"Unchecked: {name} = None. {field.description or ''}".strip())  # fmt: skip
            if is_set:
                shown = value if value is not None else _unset_value(tp, b)
                out[name] = _field_widget(name, tp, shown, b, help_, key)
            else:  # an empty, disabled box: no made-up number that reads like a real limit
                st.text_input(name, value="", placeholder="None", help=help_, key=f"{key}__unset", disabled=True)
                out[name] = None
        else:
            out[name] = _field_widget(name, tp, value, b, help_, key)
    return out


# --------------------------------------------------------------------------- masking controls


def _schedules() -> list[str]:
    return list(typing.get_args(MaskingConfig.model_fields["schedule"].annotation))


def _strategy_note(s: MaskingStrategy) -> str:
    bits = [s.summary] if s.summary else []
    bits.append("exact count per sample" if s.exact else "count varies per sample")
    bits.append("budget = mask ratio" if s.uses_ratio else "budget set by its parameters (ignores the ratio)")
    computed = [n for n in s.needs if n != "attention"]
    if computed:
        bits.append("computes " + ", ".join(computed) + " from the inputs")
    if "attention" in s.needs:  # no model's attention in a form: previews rank random scores (the views say so)
        bits.append("ranks positions by a model's attention (random scores where no model gives it)")
    return " · ".join(bits)


def masking_controls(
    modality: str, grid_dims: int, key_prefix: str, defaults: dict[str, Any] | None = None,
    names: list[str] | None = None,
) -> dict[str, Any] | None:
    """Strategy, ratio, schedule and parameter widgets; returns a ``masking`` config dict.

    - strategy: selectbox of :func:`strategies_for(modality, grid_dims) <engine.masking.strategies_for>`
      shown with its summary;
    - ratio slider (only for strategies with ``uses_ratio``), schedule selectbox and a final-ratio
      slider for a ramp;
    - :func:`params_form` for the strategy's own parameters.

    Args:
        modality: ``"image"``, ``"text"``, ...
        grid_dims: dims of the mask grid (2 for an image patch grid).
        key_prefix: prefix of every widget key.
        defaults: a (partial) ``masking`` dict to start from (``MaskingConfig`` defaults otherwise).
        names: offer only these strategies (e.g. the one-segment strategies of span completion).

    Returns:
        ``{"strategy", "ratio", "params", "schedule", "final_ratio"}`` (unvalidated), or None (with a
        warning) when no strategy is registered for the modality.
    """
    base = MaskingConfig.model_fields
    d = {k: f.get_default(call_default_factory=True) for k, f in base.items()}
    d.update(defaults or {})
    names = [n for n in strategies_for(modality, grid_dims) if names is None or n in names]
    if not names:
        st.warning(f"No masking strategy is registered for {modality} ({grid_dims}-D grids).")
        return None
    index = names.index(d["strategy"]) if d["strategy"] in names else 0
    name = st.selectbox(
        "Masking strategy", names, index=index, key=f"{key_prefix}_strategy",
        help="Registered strategies for this data: engine.masking.MASKING_REGISTRY. What each does is written "
             "under the box.",
    )  # the summary goes under the box: inside the option it was cut off
    strategy = get_masking(name)
    st.markdown(f":small[:gray[{_strategy_note(strategy)}]]")
    if "attention" in strategy.needs and modality != "image":  # images: the preview says where its attention comes from
        st.caption(f"Attention: no masklab model gives {modality} attention, so the previews and runs rank random "
                   "scores (a uniform random mask of the exact count). Mask lab shows a checkpoint's attention on images.")
    ratio = number(d["ratio"], base["ratio"].default)
    schedule, final = "constant", None
    if strategy.uses_ratio:
        lo, hi = RATIO_RANGE
        ratio = st.slider(
            "Mask ratio", lo, hi, number(ratio, ratio, lo, hi), 0.05, key=f"{key_prefix}_ratio",
            help=f"fraction of the (eligible) positions hidden; {base['ratio'].description}",
        )  # fmt: skip
        schedules = _schedules()
        schedule = st.selectbox(
            "Ratio schedule", schedules, index=schedules.index(d["schedule"]) if d["schedule"] in schedules else 0,
            key=f"{key_prefix}_schedule", help="constant, or a ramp from the mask ratio to the final ratio over the run",
        )  # fmt: skip
        if schedule != "constant":
            f0 = d["final_ratio"] if d["final_ratio"] is not None else ratio
            final = st.slider(
                "Final mask ratio", lo, hi, number(f0, ratio, lo, hi), 0.05, key=f"{key_prefix}_final_ratio",
                help=base["final_ratio"].description,
            )  # fmt: skip
    carried = d["params"] if name == d["strategy"] and isinstance(d["params"], dict) else None
    params = params_form(strategy, key_prefix, carried)
    return {"strategy": name, "ratio": float(ratio), "params": params, "schedule": schedule,
            "final_ratio": None if final is None else float(final)}  # fmt: skip


# --------------------------------------------------------------------------- real batches


def train_batch(info: Any, n: int) -> np.ndarray:
    """:func:`train_images` of dataset ``info`` in the current workspace (cached)."""
    return train_images(str(workspace_root()), info.name, info.created_at, int(n))


@st.cache_data(max_entries=4, ttl=900, show_spinner="Loading images…")
def train_images(workspace: str, name: str, version: str, n: int) -> np.ndarray:
    """``n`` train images of ``name`` (:func:`engine.data.representative`: class by class; all
    when there are fewer), float32 ``[n, C, H, W]`` in [0, 1] like ``ImageDataset.tensors``.
    ``workspace`` and ``version`` are cache keys only. Raises ``engine.errors.DatasetError``."""
    ds = load_dataset(name)
    idx = ds.indices("train")
    if len(idx) == 0:
        idx = np.arange(len(ds))
    idx = idx[representative(ds.labels[idx], n)]
    return np.ascontiguousarray(ds.images[idx].transpose(0, 3, 1, 2), dtype=np.float32) / np.float32(255.0)


# --------------------------------------------------------------------------- statistics panel


def _hist_frame(values: np.ndarray, edges: np.ndarray) -> pd.DataFrame:
    counts, edges = np.histogram(values, bins=edges)
    return pd.DataFrame({"lo": edges[:-1], "hi": edges[1:], "count": counts})


#: At most this many non-empty bins: :func:`ratio_hist_chart` draws bars of a fixed width (px) at the
#: bins' mean ratios, since a bin of 1/50 or 1/n of the axis is a hairline when every sample has (almost)
#: the same ratio, as an exact strategy gives.
FEW_RATIO_BINS, FEW_BAR_PX = 5, 14


def ratio_hist_chart(ratio: np.ndarray, n_positions: int, height: int = 240) -> alt.Chart:
    """Bars of samples per actual mask ratio, over [0, 1]; one bar per possible count ``k / n``
    when the grid is small (``n <= 100``), else 50 equal bins. When at most
    :data:`FEW_RATIO_BINS` bins hold samples, each is a :data:`FEW_BAR_PX`-px bar at the mean ratio
    of its samples (the tooltip keeps the bin's range)."""
    if 0 < n_positions <= 100:
        edges = (np.arange(n_positions + 2) - 0.5) / n_positions
    else:
        edges = np.linspace(0.0, 1.0, 51)
    df = _hist_frame(ratio, edges)
    sums, _ = np.histogram(ratio, bins=edges, weights=ratio)
    df = df.assign(mid=sums / np.maximum(df["count"], 1)).query("count > 0")  # mean ratio of each bin
    scale, axis = alt.Scale(domain=[0, 1]), alt.Axis(format=".1f")
    chart = alt.Chart(df, title="Mask ratio per sample")
    if len(df) <= FEW_RATIO_BINS:
        chart = chart.mark_bar(size=FEW_BAR_PX).encode(x=alt.X("mid:Q", title="masked fraction", scale=scale, axis=axis))
    else:
        chart = chart.mark_bar().encode(x=alt.X("lo:Q", bin="binned", title="masked fraction", scale=scale, axis=axis),
                                        x2="hi:Q")
    return (
        chart
        .encode(
            y=alt.Y("count:Q", title="samples (count)", axis=alt.Axis(format="d", tickMinStep=1)),
            tooltip=[alt.Tooltip("lo:Q", format=".3f", title="from"), alt.Tooltip("hi:Q", format=".3f", title="to"),
                     alt.Tooltip("count:Q", title="samples")],  # fmt: skip
        )
        .properties(height=height)
    )


def region_hist_chart(sizes: np.ndarray, height: int = 240) -> alt.Chart:
    """Bars of contiguous masked regions per size (positions); integer bins, at most ~40 bars, a
    linear count axis (both axes labelled with their unit)."""
    top = int(sizes.max()) if sizes.size else 1
    width = max(1, math.ceil(top / 40))
    edges = np.arange(1, top + width + 1, width) - 0.5
    df = _hist_frame(sizes, edges).query("count > 0")
    return (
        alt.Chart(df, title="Masked regions by size")
        .mark_bar()
        .encode(
            x=alt.X("lo:Q", bin="binned", title="region size (positions)",
                    scale=alt.Scale(domain=[0.5, float(edges[-1])], nice=False), axis=alt.Axis(format="d", tickMinStep=1)),  # fmt: skip
            x2="hi:Q",
            y=alt.Y("count:Q", title="regions (count)", axis=alt.Axis(format="d", tickMinStep=1)),
            tooltip=[alt.Tooltip("lo:Q", format=".1f", title="from"), alt.Tooltip("hi:Q", format=".1f", title="to"),
                     alt.Tooltip("count:Q", title="regions")],  # fmt: skip
        )
        .properties(height=height)
    )


#: Widest plot area of :func:`frequency_heatmap` (px), axes and legend not counted.
MAX_HEATMAP_WIDTH = 240


def frequency_heatmap(frequency: np.ndarray, height: int = 180, spectrogram: bool = False) -> alt.Chart:
    """Rect chart of the fraction of samples masking each grid cell (last two grid axes; a 1-D
    grid is one row, leading axes of a 3-D grid are averaged), square cells, colour scale [0, 1] with
    its legend under the plot; at most :data:`MAX_HEATMAP_WIDTH` px wide. ``spectrogram``: the rows
    are mel bands, drawn low at the bottom as the spectrograms are."""
    f = np.asarray(frequency, dtype=float)
    if f.ndim == 1:  # a sequence: bars per position read better than a one-row strip
        df = pd.DataFrame({"position": np.arange(f.size), "frequency": f})
        return (
            alt.Chart(df, title="Masking frequency per position")
            .mark_bar()
            .encode(x=alt.X("position:Q", title="position in the sequence"),
                    y=alt.Y("frequency:Q", title="masked", scale=alt.Scale(domain=[0, 1])),
                    tooltip=["position:Q", alt.Tooltip("frequency:Q", format=".3f")])
            .properties(height=height)
        )
    while f.ndim > 2:
        f = f.mean(axis=0)
    rows, cols = np.indices(f.shape)
    df = pd.DataFrame({"row": rows.ravel(), "col": cols.ravel(), "frequency": f.ravel()})
    n_rows, n_cols = max(1, f.shape[0]), max(1, f.shape[1])
    # Square cells, the plot at most MAX_HEATMAP_WIDTH px wide and the legend under it: the chart sits
    # in half of Mask lab's results column, and a wider one ran over the explanation beside it.
    cell = max(1, min(height // n_rows, MAX_HEATMAP_WIDTH // n_cols))
    plot_w, plot_h = cell * n_cols, (cell * n_rows if n_rows > 1 else 40)  # a 1-D grid: one readable strip
    few_cols, few_rows = n_cols <= 16, n_rows <= 16  # label every line of a small grid only
    return (
        alt.Chart(df, title="Masking frequency per position")
        .mark_rect()
        .encode(
            x=alt.X("col:O", title="time column" if spectrogram else "column",
                    axis=alt.Axis(labelAngle=0, labels=few_cols, ticks=few_cols)),
            y=alt.Y("row:O", title="mel band (low at the bottom)" if spectrogram else "row",
                    sort="descending" if spectrogram else "ascending", axis=alt.Axis(labels=few_rows, ticks=few_rows)),
            color=alt.Color("frequency:Q", title="masked", scale=alt.Scale(domain=[0, 1], scheme="viridis"),
                            legend=alt.Legend(orient="bottom", direction="horizontal", gradientLength=min(plot_w, 160))),
            tooltip=["row:O", "col:O", alt.Tooltip("frequency:Q", format=".3f")],
        )
        # "pad": width/height are the plot's own; axes, title and legend come on top (Streamlit's
        # default "fit" would squeeze them into the size and shrink the cells).
        .properties(width=plot_w, height=plot_h, autosize=alt.AutoSizeParams(type="pad", contains="padding"))
    )


def lab_statistics(res: tuple[MaskStats, float | None, str | None] | None, about: Callable[[MaskStats], str],
                   spectrogram: bool = False, strategy: str | None = None) -> None:
    """Mask lab's statistics of one modality: ``res`` is ``(stats, masks/s, problem)`` from its
    cached statistics function, or None when that failed (``guarded`` has said why). A problem (what
    pre-flight would refuse, in words) shows as a warning, then too many samples with nothing masked
    (:func:`unmasked_note` of ``strategy``), ``about(stats)`` as the caption (what the masks were
    drawn over, and how many samples have nothing masked when some but few do), then
    :func:`mask_stats_panel`. Every mask of the batch the same (a stochastic strategy with nothing
    left to draw) is a warning too (:func:`identical_batch_note`; on an image patch grid
    :func:`patch_select` says it in the form, for New run and Mask lab alike)."""
    if res is None:
        return
    stats, rate, problem = res
    empty = int((stats.ratio == 0).sum())
    note = None if problem else unmasked_note(stats.ratio, strategy=strategy)
    if problem:
        st.warning(f"A run with these settings would be refused: {problem}")
    elif note is not None:
        st.warning(note)
    same = identical_batch_note(stats, strategy) if not problem and (spectrogram or len(stats.grid) != 2) else None
    if same:
        st.warning(same)
    few = f" {empty} of {stats.batch_size} have nothing masked." if empty and note is None and not problem else ""
    st.caption(about(stats) + few)
    mask_stats_panel(stats, rate, spectrogram)


#: Batch from which positions masked in every sample are called a fixed part rather than chance
#: (a position masked with probability 0.95 is free in some of 256 masks but for 2e-6).
FIXED_PART_BATCH = 256


def identical_batch_note(stats: MaskStats, strategy: str | None) -> str | None:
    """The words for a batch whose masks are all the same (every position of ``stats.frequency``
    masked in all samples or in none), or that masks some positions in all of at least
    :data:`FIXED_PART_BATCH` samples; else None. Rule-based strategies (``stochastic`` False) are the
    same for every sample by design and get None."""
    f, B = stats.frequency, stats.batch_size
    if B < 2 or f.size == 0 or (strategy is not None and not get_masking(strategy).stochastic):
        return None
    k, n = int((f == 1.0).sum()), int(f.size)
    fix = "Change the ratio or the parameters until the masks vary."
    if np.isin(f, (0.0, 1.0)).all():
        return (f"Every sample gets the same mask: all {B} masks of this batch hide the same {k} of {n} positions, "
                f"so training would see one fixed mask. {fix}")
    if k and B >= FIXED_PART_BATCH:
        return (f"A fixed part: {k} of {n} positions are masked in all {B} masks of this batch, so training would "
                f"never show them to the encoder. {fix}")
    return None


#: Share of samples whose mask hides nothing above which Mask lab warns: such samples train nothing
#: (the loss covers the masked positions only), which pre-flight lets pass as long as one is masked.
UNMASKED_WARN = 0.1


def widen_advice(strategy: str | None) -> str:
    """How to mask something in every sample with ``strategy``, from its registered parameters:
    SpecAugment's time bands (``T``, ``p``) are at most p x the clip's own frames (Park et al. 2019),
    so on short clips only p or shorter patches help; frequency bands (``F``) need one patch row of
    mel bins at least; other strategies a larger ratio, or wider parameters when the ratio is unused."""
    from engine.api import MASKING_REGISTRY  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

    s = MASKING_REGISTRY.get(strategy or "")
    if s is None:
        return "raise the mask ratio or widen the strategy's parameters"
    fields = s.params.model_fields
    spec = [("each time band is at most p x the clip's own frames (and at most T), so on short clips a larger T "
             "changes nothing: raise p or use patches of fewer frames") if {"T", "p"} <= set(fields) else "",
            "raise F to the mel bins of one patch row at least" if "F" in fields else ""]
    if any(spec):
        return "; or ".join(a for a in spec if a)
    return "raise the mask ratio or use smaller patches" if s.uses_ratio else \
        "widen the strategy's parameters or use smaller patches"


def unmasked_note(masked: np.ndarray, what: str = "samples", effect: str = "they train nothing",
                  strategy: str | None = None) -> str | None:
    """A warning when more than :data:`UNMASKED_WARN` of the samples have nothing masked (e.g.
    SpecAugment's time bands, bounded by p x the clip's length, on short clips), else None.

    Args:
        masked: masked positions (or share) per sample, ``[N]``; Mask lab passes ``MaskStats.ratio``,
            New run the counts of its previewed samples.
        what: how the samples are named (``"samples"``, ``"previewed clips"``).
        effect: what that costs (a paired run's texts still train when its spectrograms do not).
        strategy: the masking strategy, for the advice (:func:`widen_advice`).
    """
    n = len(masked)
    empty = int((np.asarray(masked) == 0).sum())
    if not n or empty <= UNMASKED_WARN * n:
        return None
    return (f"{empty} of {n} {what} have nothing masked, so {effect} (the loss covers masked positions only): "
            f"{widen_advice(strategy)}.")


def mask_stats_panel(stats: MaskStats, masks_per_s: float | None, spectrogram: bool = False) -> None:
    """Metrics (mean ratio, regions, masks/s) and the three charts of a :class:`MaskStats`:
    the ratio and region-size histograms side by side, the positional heatmap under them."""
    n_pos = int(np.prod(stats.grid))
    has = stats.batch_size > 0
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Mean mask ratio", f"{stats.ratio.mean():.3f}" if has else "–",
              help=f"over {stats.batch_size} samples; sd {stats.ratio.std():.3f}" if has else None)  # fmt: skip
    m2.metric("Regions per sample", f"{stats.regions_per_sample.mean():.1f}" if has else "–",
              help="contiguous masked regions (4-connected on a 2-D grid)")  # fmt: skip
    m3.metric("Mean region size", f"{stats.region_sizes.mean():.1f}" if stats.region_sizes.size else "–",
              help=f"positions per region, of {n_pos} in the grid")  # fmt: skip
    m4.metric("Masks / s", f"{masks_per_s:,.0f}" if masks_per_s is not None else "–",
              help="masks (rows) per second drawing this batch shape on the CPU: draw_mask plus the side inputs a run computes for every batch (e.g. superpixels)")  # fmt: skip
    c1, c2 = st.columns(2)
    c1.altair_chart(ratio_hist_chart(stats.ratio, n_pos), width="stretch")
    c2.altair_chart(region_hist_chart(stats.region_sizes), width="stretch")
    c3, c4 = st.columns(2)
    c3.altair_chart(frequency_heatmap(stats.frequency, spectrogram=spectrogram),
                    width="stretch" if len(stats.grid) == 1 else "content")
    c4.markdown(
        ":small[:gray[**Mask ratio per sample**: how far each mask is from the configured ratio (one bar for an "
        "exact strategy). **Masked regions**: sizes of 4-connected masked areas; many of size 1 = scattered "
        "patches, a few large ones = blocks. **Frequency**: share of the masks hiding each position; a uniform "
        "strategy is flat, a spatial bias shows as a pattern.]]"
    )


def schedule_chart(ratio_of_step: Callable[[int], float], total_steps: int, height: int = 220) -> alt.Chart:
    """Line of the mask ratio over ``total_steps`` (at most 200 points)."""
    steps = np.unique(np.linspace(0, max(0, total_steps - 1), num=min(200, max(1, total_steps))).round().astype(int))
    df = pd.DataFrame({"step": steps, "ratio": [ratio_of_step(int(s)) for s in steps]})
    return (
        alt.Chart(df, title="Mask ratio over training")
        .mark_line()
        .encode(x=alt.X("step:Q", title="step"), y=alt.Y("ratio:Q", title="mask ratio", scale=alt.Scale(domain=[0, 1])),
                tooltip=["step:Q", alt.Tooltip("ratio:Q", format=".3f")])  # fmt: skip
        .properties(height=height)
    )
