"""State that survives a reload: the values that matter live in the page's URL (``st.query_params``).

One convention for every page: a widget's *default* is read from the URL and the value it returns
is written back, so a reload or a copied link reopens the same view, while a widget the user is
editing keeps its own state (a keyed widget's identity is its key: a changed default does not reset
it). Two shapes of parameter:

- plain names (``?runs=a,b&smoothing=0.6``): :meth:`PageState.widget` wraps one widget;
- a run config (``?dataset=digits&task=image_mim&masking.ratio=0.6&train.steps=300``): dotted keys,
  one per field of the config a form builds (:func:`flatten`), read back as a nested dict
  (:meth:`PageState.config`) that the form takes as its defaults. The same ``key=value`` pairs are
  the ``--set`` flags of ``python -m engine run`` (:func:`set_flags`).

Values are JSON when they parse as JSON (``0.6``, ``true``, ``[4, 8]``), else plain text.
Navigating away and back through the sidebar (which drops the query string) restores the page's
last state from ``st.session_state``; the URL, when it has any of the page's keys, wins.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

import streamlit as st
import yaml
from pydantic import BaseModel

from engine.api import RunConfig

#: The config key the URL shows as ``dataset`` (shared by Data, New run and Mask lab links).
DATASET = "data.dataset"


def encode(value: Any) -> str:
    """A URL value: text as it is, anything else as compact JSON (``0.75``, ``true``, ``[4,8]``)."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def decode(raw: str) -> Any:
    """Inverse of :func:`encode`: JSON when it parses, else the text itself."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"masking": {"ratio": 0.6, "params": {}}}`` -> ``{"masking.ratio": 0.6}`` (empty sections
    dropped; ``data.dataset`` becomes ``dataset``)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        elif v is not None:
            out["dataset" if key == DATASET else key] = v
    return out


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`flatten`: dotted keys -> nested dict (``dataset`` -> ``data.dataset``)."""
    out: dict[str, Any] = {}
    for key, v in flat.items():
        *parents, leaf = (DATASET if key == "dataset" else key).split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                break
        else:
            node[leaf] = v
    return out


def set_flags(d: Mapping[str, Any]) -> list[str]:
    """``--set`` arguments of ``python -m engine run`` for a (partial) config: ``key=value`` with
    values that YAML reads back as the same value (text quoted when it would read as another type)."""
    out = []
    for key, v in flatten(d).items():
        key = DATASET if key == "dataset" else key
        if isinstance(v, str):
            text = v if v and yaml.safe_load(v) == v and v.strip() == v else json.dumps(v)
        else:
            text = json.dumps(v, separators=(", ", ": "))
        out.append(f"{key}={text}")
    return out


class PageState:
    """The URL state of one page.

    Args:
        page: a name for the page's memory in ``st.session_state``.
        names: the plain parameters the page owns; a name ending in ``*`` owns every parameter that
            starts with it (``"box_*"``: an interactive box's own settings, :meth:`scope`);
            ``config=True`` adds every dotted key and ``dataset``.
        config: the page keeps a run config in its URL.

    On creation, when the URL holds none of the page's parameters (a sidebar click), the page's
    last state is put back into the URL; parameters of other pages are removed.
    """

    def __init__(self, page: str, names: tuple[str, ...] = (), *, config: bool = False):
        self.page, self.has_config = page, config
        self.names = {n for n in names if not n.endswith("*")}
        self.prefixes = tuple(n[:-1] for n in names if n.endswith("*"))
        self._memory_key = f"_url_state_{page}"
        current = {k: st.query_params[k] for k in st.query_params}
        own = {k: v for k, v in current.items() if self.owns(k)}
        remembered = st.session_state.get(self._memory_key) or {}
        if not own and remembered:
            own = dict(remembered)
        if own != current:
            st.query_params.from_dict(own)
        self.params: dict[str, str] = own
        st.session_state[self._memory_key] = dict(own)

    def owns(self, key: str) -> bool:
        """True for the page's plain names, and for dotted keys and ``dataset`` on a config page."""
        return (key in self.names or key.startswith(self.prefixes)
                or (self.has_config and ("." in key or key in ("dataset", "task", "name"))))

    def _config_key(self, key: str) -> bool:
        """A run config's key: owned, and neither a plain name nor under a scope's prefix."""
        return self.owns(key) and key not in self.names and not key.startswith(self.prefixes)

    def scope(self, prefix: str) -> Scope:
        """The parameters ``prefix + name`` of this page (``prefix + "*"`` among its names), read and
        written by plain ``name``: what a component that does not know the page keeps in the URL."""
        if not prefix.startswith(self.prefixes) or not prefix:
            raise ValueError(f"page {self.page!r}: no parameter prefix {prefix!r} among its names "
                             f"(declare {prefix + '*'!r})")
        return Scope(self, prefix)

    # ------------------------------------------------------------------ plain values

    def get(self, name: str, default: Any = None, cast: Callable[[Any], Any] | None = None) -> Any:
        """The URL's value of ``name`` (decoded, then ``cast``), or ``default`` when absent or when
        ``cast`` refuses it (a hand-edited URL never breaks the page)."""
        if name not in self.params:
            return default
        v = decode(self.params[name])
        try:
            return cast(v) if cast is not None else v
        except (TypeError, ValueError):
            return default

    def put(self, name: str, value: Any) -> None:
        """Write ``name`` (None removes it) to the URL and the page's memory."""
        if value is None:
            self.params.pop(name, None)
            if name in st.query_params:
                del st.query_params[name]
        else:
            raw = encode(value)
            self.params[name] = raw
            if st.query_params.get(name) != raw:
                st.query_params[name] = raw
        st.session_state[self._memory_key] = dict(self.params)

    def widget(self, widget: Callable[..., Any], label: str, name: str, *, default: Any,
               cast: Callable[[Any], Any] | None = None, encode_as: Callable[[Any], Any] | None = None,
               **kwargs: Any) -> Any:
        """Draw ``widget`` with its default from the URL, write its value back, return the value.

        The default goes where the widget takes it: ``index`` for ``selectbox``/``radio`` (a URL
        value not among ``options`` falls back to ``default``), ``default`` for ``multiselect`` and
        ``pills`` (values not among ``options`` dropped), the URL's text itself for ``text_input``
        and ``text_area``, ``value`` for the rest; a ``slider``'s or
        ``number_input``'s number is clamped to its ``min_value``/``max_value``, and one that is not a
        finite number falls back to ``default``. ``encode_as`` turns the value
        into what the URL keeps (e.g. a list into ``"a,b"``), ``cast`` reads it back.

        Example:
            smoothing = url.widget(st.slider, "EMA smoothing", "smoothing", default=0.6, cast=float,
                                   min_value=0.0, max_value=0.99, step=0.01, key="runs_smoothing")
        """
        v = self.get(name, default, cast)
        if widget in (st.text_input, st.text_area):  # text as it is typed: "1e3" stays "1e3", never 1000.0
            kwargs["value"] = self.params.get(name, default)
        elif widget in (st.selectbox, st.radio, st.sidebar.selectbox):
            options = list(kwargs["options"])
            kwargs["index"] = options.index(v) if v in options else (options.index(default) if default in options else 0)
        elif widget is st.multiselect or (widget is st.pills and kwargs.get("selection_mode") == "multi"):
            options = list(kwargs["options"])
            kwargs["default"] = [x for x in (v if isinstance(v, list) else []) if x in options]
        elif widget is st.pills:
            kwargs["default"] = v if v in list(kwargs["options"]) else default
        elif widget in (st.slider, st.number_input) and isinstance(default, (int, float)) \
                and not isinstance(default, bool):  # a hand-edited number: in range, or the default
            kwargs["value"] = number(v, default, kwargs.get("min_value"), kwargs.get("max_value"), type(default))
        else:
            kwargs["value"] = v
        out = widget(label, **kwargs)
        self.put(name, encode_as(out) if encode_as is not None else out)
        return out

    # ------------------------------------------------------------------ run configs

    def config(self) -> dict[str, Any]:
        """The run config in the URL as a nested dict (only the fields present)."""
        return unflatten({k: decode(v) for k, v in self.params.items() if self._config_key(k)})

    def put_config(self, d: Mapping[str, Any]) -> None:
        """Make the URL's config keys exactly those of ``d`` (:func:`flatten`): new values written,
        keys of fields the form no longer has (another strategy's parameters) removed."""
        flat = flatten(d)
        for key in [k for k in self.params if self._config_key(k) and k not in flat]:
            self.put(key, None)
        for key, v in flat.items():
            self.put(key, v)


class Scope:
    """Parameters ``prefix + name`` of a :class:`PageState` (:meth:`PageState.scope`), with the same
    :meth:`get`, :meth:`put` and :meth:`widget` by plain ``name``, and :meth:`clear`."""

    def __init__(self, state: PageState, prefix: str):
        self.state, self.prefix = state, prefix

    def get(self, name: str, default: Any = None, cast: Callable[[Any], Any] | None = None) -> Any:
        """:meth:`PageState.get` of ``prefix + name``."""
        return self.state.get(self.prefix + name, default, cast)

    def put(self, name: str, value: Any) -> None:
        """:meth:`PageState.put` of ``prefix + name``."""
        self.state.put(self.prefix + name, value)

    def widget(self, widget: Callable[..., Any], label: str, name: str, **kwargs: Any) -> Any:
        """:meth:`PageState.widget` of ``prefix + name``."""
        return self.state.widget(widget, label, self.prefix + name, **kwargs)

    def clear(self) -> None:
        """Remove every parameter of the scope from the URL (another run's box settings)."""
        for key in [k for k in self.state.params if k.startswith(self.prefix)]:
            self.state.put(key, None)


def dig(d: Mapping[str, Any] | None, dotted: str, default: Any = None) -> Any:
    """``dig(cfg, "model.preset", "tiny")``: a nested value, or ``default`` when a part is missing."""
    node: Any = d or {}
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def number(value: Any, default: float, lo: float | None = None, hi: float | None = None,
           cast: Callable[[Any], Any] = float) -> Any:
    """``value`` (from a URL or a carried config) as a widget's starting number: ``cast(value)``
    clamped to ``[lo, hi]``, or ``default`` when it is missing, not a finite number, or not
    castable (``"abc"``, a list, ``nan``). A hand-edited link never raises in a page.

    Example: ``number("abc", 300, 1, 10**6, int) == 300``; ``number("7e9", 300, 1, 10**6, int) == 10**6``.
    """
    try:
        if isinstance(value, bool) or value is None:
            raise TypeError
        x = float(value)
        if not math.isfinite(x):
            raise ValueError
    except (TypeError, ValueError):
        return default
    if lo is not None:
        x = max(x, lo)
    if hi is not None:
        x = min(x, hi)
    return cast(x)


#: Sections whose carried fields the form keeps when it has no widget for them. The others (masking,
#: model, objective, launch) the form defines whole: a field there that the form leaves out belonged
#: to another choice (another strategy's parameters, a loss mix, a back-end) and is dropped.
CARRIED = ("train.", "evaluation.", "task_params.", "data.", "model.init_from", "model.init_step")


def with_carried(form: dict[str, Any], carried: Mapping[str, Any], validate: Callable[[dict], Any]) -> dict[str, Any]:
    """The form's config (``form``, nested) plus every field of ``carried`` (a link's or a run's
    config) that the form has no widget for (``train.weight_decay``, ``evaluation.*``, a task's own
    parameters...), so that opening a run's config and launching it keeps them. A carried field is
    kept when the config still passes ``validate`` with it (e.g. ``RunConfig.from_dict``; any
    exception refuses it); only fields under :data:`CARRIED` are, and no strategy parameters
    (``*params.*``: they belong to the strategy the form shows). Returns a new nested dict; the form's
    own values win."""
    have = flatten(form)
    extra = {k: v for k, v in flatten(carried).items()
             if k not in have and k.startswith(CARRIED) and "params." not in k.split(".", 1)[-1]}

    def merged(fields: Mapping[str, Any]) -> dict[str, Any]:
        return unflatten({**fields, **have})

    def ok(fields: Mapping[str, Any]) -> bool:
        try:
            validate(merged(fields))
            return True
        except Exception:  # noqa: BLE001 - any refusal: the field is left out (link_not_taken names it)
            return False

    if not extra or ok(extra):
        return merged(extra) if extra else form
    kept: dict[str, Any] = {}
    for k, v in extra.items():  # one by one: a hand-edited link may hold one bad value among good ones
        if ok({**kept, k: v}):
            kept[k] = v
    return merged(kept)


def link_not_taken(link: Mapping[str, Any], form: Mapping[str, Any], datasets: list[str]) -> str | None:
    """What a link's config (``link``, from the URL) asked for that the form (``form``) does not use,
    in words, or None when the form took all of it. A dataset not among ``datasets`` is named alone
    (the form then starts from the first dataset's proposals); otherwise each field whose value the
    form replaced is listed as ``field=value`` with the reason (:func:`_why_not`)."""
    asked = flatten(link)
    if not asked:
        return None
    ds = asked.get("dataset", asked.get(DATASET))
    if ds is not None and ds not in datasets:
        return f"This link's dataset {str(ds)!r} is not in this workspace: the form shows another dataset's defaults."
    used = flatten(form)
    lost = [f"{k}={v} ({_why_not(k, v, used)})" for k, v in asked.items()
            if k != "name" and used.get(k, _MISSING) != v]
    if not lost:
        return None
    one = len(lost) == 1
    return (f"This link's {'; '.join(lost)} {'was' if one else 'were'} not valid here: the form shows its own "
            f"value{'' if one else 's'} instead.")


def _why_not(key: str, value: Any, used: Mapping[str, Any]) -> str:
    """Why the form did not take ``key=value`` from a link, given the config it uses (flat ``used``)."""
    task = used.get("task", "this")
    if key == "masking.strategy":
        from engine.api import GRID_KINDS, MASKING_REGISTRY  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

        s = MASKING_REGISTRY.get(str(value))
        if s is None:
            return "no masking strategy has this name"
        dims = " or ".join(f"{d}-D" for d in s.grid_dims)
        what = " or ".join(GRID_KINDS[k].summary.split(" [")[0] for k in s.grids or ()) or "any units"
        return f"it masks {what} on {dims} grids; the {task} task does not offer it"
    if key not in used:
        if ".params." in key:
            return f"not a parameter of {used.get(key.split('.params.')[0] + '.strategy', 'the strategy shown')}"
        return f"not a field of the {task} task"
    have = used[key]
    if isinstance(have, (int, float)) and not isinstance(have, bool):
        try:
            x = float(value)
        except (TypeError, ValueError):
            return f"not a number; the form uses {have:g}"
        if not math.isfinite(x):
            return f"not a finite number; the form uses {have:g}"
        allowed = _allowed_range(key, used)
        if allowed and not allowed[0](x):
            return f"must be {allowed[1]}; the form uses {have:g}"
        return f"not offered by this form; the form uses {have:g}"
    return f"not an option here; the form uses {have}"


def field_bounds(field: Any) -> dict[str, float | None]:
    """``ge``/``gt``/``le``/``lt`` of a pydantic field (from ``FieldInfo.metadata``; None where unset)."""
    out: dict[str, float | None] = {"ge": None, "gt": None, "le": None, "lt": None}
    for m in field.metadata:
        for k in out:
            v = getattr(m, k, None)
            if v is not None:
                out[k] = v
    return out


def _allowed_range(key: str, used: Mapping[str, Any]) -> tuple[Callable[[float], bool], str] | None:
    """The bounds the run config itself sets on the number ``key`` (``masking.params.<p>`` from the
    strategy in ``used``): a test of a value and its words, e.g. "in [0, 1]"; None when it sets none."""
    *path, name = key.split(".")
    model: Any = RunConfig
    if path[-1:] == ["params"]:
        from engine.api import MASKING_REGISTRY  # noqa: PLC0415 (torch loads when a view draws masks or runs a checkpoint, not when a page imports this module)

        strategy = MASKING_REGISTRY.get(str(used.get(".".join(path[:-1] + ["strategy"]))))
        model, path = (strategy.params if strategy else None), []
    for part in path:  # down the nested sections (``X | None`` included)
        info = model.model_fields.get(part) if model else None
        kinds = (info.annotation, *getattr(info.annotation, "__args__", ())) if info else ()
        model = next((a for a in kinds if isinstance(a, type) and issubclass(a, BaseModel)), None)
    info = model.model_fields.get(name) if model else None
    if info is None:
        return None
    b = field_bounds(info)
    lo = (b["ge"], "[") if b["ge"] is not None else (b["gt"], "(")
    hi = (b["le"], "]") if b["le"] is not None else (b["lt"], ")")
    if lo[0] is None and hi[0] is None:
        return None

    def ok(x: float) -> bool:
        tests = ((b["ge"], operator.ge), (b["gt"], operator.gt), (b["le"], operator.le), (b["lt"], operator.lt))
        return all(v is None or op(x, v) for v, op in tests)

    if lo[0] is not None and hi[0] is not None:
        return ok, f"in {lo[1]}{lo[0]:g}, {hi[0]:g}{hi[1]}"
    if lo[0] is not None:
        return ok, f"{'at least' if lo[1] == '[' else 'above'} {lo[0]:g}"
    return ok, f"{'at most' if hi[1] == ']' else 'below'} {hi[0]:g}"


_MISSING = object()


def show_link_note(key: str, link: Mapping[str, Any], link_params: Mapping[str, str], url_params: Mapping[str, str],
                   used: Mapping[str, Any], datasets: list[str], slot: Any) -> None:
    """The :func:`link_not_taken` warning of a page that was opened with a link, in ``slot`` (an
    ``st.empty`` above the form). ``link``/``link_params``: the link's config and URL parameters as
    the page found them; ``url_params``: the URL after the page wrote its widgets; ``used``: the
    config the page's settings make. Worked out once per opened link (a rerun is no new link), and
    shown until a setting changes the URL. ``key`` prefixes its ``st.session_state`` entries."""
    if st.session_state.get(f"{key}_link_seen") != dict(link_params):
        st.session_state[f"{key}_link_note"] = (link_not_taken(link, used, datasets), dict(url_params))
    st.session_state[f"{key}_link_seen"] = dict(url_params)
    note, for_params = st.session_state.get(f"{key}_link_note") or (None, None)
    if note and for_params == dict(url_params):
        slot.warning(note)


def index_of(options: list, value: Any, fallback: int = 0) -> int:
    """Index of a carried default ``value`` in ``options``, else ``fallback`` (for ``index=``)."""
    return options.index(value) if value in options else fallback
