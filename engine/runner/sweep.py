"""Sweeps: one base config, one field varied over values, each value run with several seeds.

``sweep_configs(base, field, values, seeds)`` gives the run configs (resolved once each, named
``<name> sweep <id> <field>=<value> seed=<seed>``; :func:`sweep_of` reads ``{id, field, value,
seed}`` back from the name); :func:`plan_sweep` adds the launcher's pre-flight check of every value;
:func:`submit_sweep` queues them through :func:`engine.runner.launcher.submit` (first come, first served:
the engine runs ``$MASKLAB_MAX_RUNS`` at a time), refusing a sweep that does not fit in the queue
before it queues anything. The CLI (``python -m engine sweep``) and New run's Sweep section call the
same functions. :func:`sweep_table` reads the results back: one row per run with the swept value, the
seed and its latest evaluation's figures, for a "mask ratio vs linear-probe accuracy" plot with the
mean and spread over seeds (MAE's figure 5, He et al. 2022, on the user's own data).
"""

from __future__ import annotations

import copy
import math
import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from engine.access.policy import Identity, authorize
from engine.config import RunConfig, apply_overrides
from engine.errors import ConfigError, MasklabError, QueueFullError
from engine.methods.catalog import METHOD_FIELD, apply_method
from engine.runner.launcher import submit
from engine.runner.queue import queue_room
from engine.store import list_runs
from engine.store.evaluations import latest_evaluation
from engine.workspace import workspace_root

_NAME = re.compile(r"^(?P<base>.*) sweep (?P<id>[0-9a-f]{6}) (?P<field>[\w.]+)=(?P<value>\S+) seed=(?P<seed>\d+)$")
_FIELD = re.compile(r"^\w+(\.\w+)*$")
#: Fields a sweep cannot vary: the seeds are the replicates, the name is the sweep's own.
NOT_SWEPT = {"train.seed": "the seeds are the sweep's replicates (give them as seeds)",
             "name": "a sweep names its runs itself"}


def new_sweep_id() -> str:
    """A fresh sweep id: 6 hex digits, as run names and the Sweeps page's URL carry it."""
    return secrets.token_hex(3)


def parse_values(text: str) -> list[Any]:
    """``"0.25, 0.5, 0.75"`` -> ``[0.25, 0.5, 0.75]``: comma-separated values, each read as a YAML
    scalar as ``--set`` reads it (``3`` int, ``true`` bool, ``block`` text), and ``1e-3`` as the float
    it means (YAML 1.1 would read it as text).

    Raises:
        ConfigError: no value, or one that is not a plain scalar (naming it).
    """
    out = []
    for raw in (v.strip() for v in text.split(",")):
        if not raw:
            continue
        v = _scalar(raw)
        if isinstance(v, (dict, list)) or v is None:
            raise ConfigError(f"sweep value {raw!r} is not a single number or word")
        out.append(v)
    if not out:
        raise ConfigError("a sweep needs at least one value, e.g. 0.25, 0.5, 0.75")
    return out


def _scalar(raw: str) -> Any:
    """A value as written in a sweep's run name or value list: YAML, then a number YAML 1.1 misses
    (``1e-05``, the ``repr`` of small floats) as a float; None for what YAML cannot read."""
    try:
        v = yaml.safe_load(raw)
    except yaml.YAMLError:
        return None
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return v
        return f if math.isfinite(f) else v
    return v


def parse_seeds(text: str) -> list[int]:
    """``"0, 3, 7"`` -> ``[0, 3, 7]``: the seed replicates of a sweep as a comma-separated list.

    Raises:
        ConfigError: no seed, a seed that is not a whole number from 0 to 2**31 - 1, or one listed twice
            (naming it).
    """
    out: list[int] = []
    for raw in (v.strip() for v in text.split(",")):
        if not raw:
            continue
        if not raw.isdigit() or int(raw) > 2**31 - 1:
            raise ConfigError(f"seed {raw!r} is not a whole number from 0 to 2147483647")
        if int(raw) in out:
            raise ConfigError(f"seed {int(raw)} is listed twice")
        out.append(int(raw))
    if not out:
        raise ConfigError("a sweep needs at least one seed, e.g. 0, 1")
    return out


def sweep_configs(base: dict[str, Any], field: str, values: Sequence[Any], seeds: Sequence[int] = (0,),
                  sweep_id: str | None = None) -> list[RunConfig]:
    """The run configs of a sweep of ``field`` (dotted, e.g. ``masking.ratio``, ``masking.strategy``
    or ``train.lr``, or ``method``: names of :mod:`engine.methods.catalog`) over ``values``, each with every ``train.seed`` in ``seeds``; every other field
    as in ``base`` (a partial or resolved run config). Each is resolved (:func:`engine.tasks.resolve`)
    here, once: that is the config its run stores. Runs are named ``<base name> sweep <id>
    <field>=<value> seed=<seed>``, value by value, seed by seed.

    A strategy sweep runs each strategy other than the base's with its own default parameters: the
    base's ``masking.params`` belong to the base's strategy.

    Raises:
        ConfigError: no values or seeds; a field that is not a dotted path or cannot be swept
            (:data:`NOT_SWEPT`); a seed or value listed twice; a value that is empty or has a space
            (the run name records it); values whose config does not validate or resolve. Every bad value is
            named, one line each (``sweep value masking.ratio=1.5: ... must be at most 1.0``).
    """
    field = field.strip()
    if not values or not seeds:
        raise ConfigError(f"a sweep of {field or 'a field'} needs at least one value and one seed")
    if not _FIELD.match(field):
        raise ConfigError(f"sweep field {field!r} is not a dotted config path such as masking.ratio or train.lr")
    if field in NOT_SWEPT:
        raise ConfigError(f"{field} cannot be swept: {NOT_SWEPT[field]}")
    if len(set(map(int, seeds))) < len(seeds):
        raise ConfigError(f"a seed is listed twice in {', '.join(map(str, seeds))}")
    sid = sweep_id or new_sweep_id()
    name = base.get("name") or "sweep"
    out, bad, seen = [], [], set()
    for v in values:
        text = _text(v)
        if text in seen:
            bad.append(f"sweep value {field}={text}: listed twice")
            continue
        seen.add(text)
        if not text or any(c.isspace() for c in text):
            bad.append(f"sweep value {field}={text!r}: a swept value cannot be empty or contain a space "
                       "(the run names record it)")
            continue
        try:
            out.extend(_config(base, field, v, int(s), f"{name} sweep {sid} {field}={text} seed={int(s)}") for s in seeds)
        except ConfigError as e:
            bad.append(f"sweep value {field}={text}: {e}")
    if bad:
        raise ConfigError("\n".join(bad))
    return out


def _config(base: dict[str, Any], field: str, value: Any, seed: int, name: str) -> RunConfig:
    d = copy.deepcopy(base)
    if field == METHOD_FIELD:  # a method sets several fields (engine.methods.catalog)
        try:
            d = apply_method(d, str(value))
        except KeyError as e:
            raise ConfigError(str(e.args[0])) from None
        d = apply_overrides(d, [f"train.seed={seed}"])
        d["name"] = name
        from engine.tasks import resolve  # noqa: PLC0415 (the tasks (torch) load when a config is resolved, not when the dashboard or CLI imports this)

        return resolve(RunConfig.from_dict(d))
    if field == "masking.strategy" and value != (d.get("masking") or {}).get("strategy"):
        (d.get("masking") or {}).pop("params", None)  # the base strategy's parameters
    d = apply_overrides(d, [f"{field}={_text(value)}", f"train.seed={seed}"])
    d["name"] = name
    from engine.tasks import resolve  # noqa: PLC0415 (the tasks (torch) load when a config is resolved, not when the dashboard or CLI imports this)

    return resolve(RunConfig.from_dict(d))


def _text(v: Any) -> str:
    return v if isinstance(v, str) else repr(v)


def plan_sweep(base: dict[str, Any], field: str, values: Sequence[Any], seeds: Sequence[int] = (0,),
               workspace=None, *, sweep_id: str | None = None,
               check: Callable[[RunConfig], Any] | None = None) -> list[RunConfig]:
    """:func:`sweep_configs`, then the launcher's pre-flight check (:func:`engine.tasks.checks.check_run`:
    the dataset exists, the patch tiles the image, the strategy applies...) of every value, so that
    a sweep is refused as a whole before anything is queued. The check does not depend on the seed,
    so it runs once per value. ``check`` replaces ``check_run`` (New run passes its cached one).

    Raises:
        ConfigError: as :func:`sweep_configs`, or values the check refuses (DatasetError's messages
            too), one line per bad value naming it.
    """
    if check is None:
        from engine.tasks.checks import check_run  # noqa: PLC0415 (the tasks (torch) load when a config is resolved, not when the dashboard or CLI imports this)

        def check(c: RunConfig) -> Any:
            return check_run(c, workspace)

    cfgs = sweep_configs(base, field, values, seeds, sweep_id)
    bad = []
    for k, v in enumerate(values):
        try:
            check(cfgs[k * len(seeds)])
        except MasklabError as e:
            bad.append(f"sweep value {field.strip()}={_text(v)}: {e}")
    if bad:
        raise ConfigError("\n".join(bad))
    return cfgs


def submit_sweep(base: dict[str, Any], field: str, values: Sequence[Any], seeds: Sequence[int] = (0,),
                 workspace=None, *, sweep_id: str | None = None, actor: Identity | None = None) -> list[str]:
    """Queue every run of :func:`plan_sweep` through :func:`engine.runner.launcher.submit` (each an audited
    launch by ``actor``); returns their run ids, value by value, seed by seed. The sweep's id is
    ``sweep_id`` (default: :func:`new_sweep_id`); :func:`sweep_of` of a run's name gives it back.

    Raises:
        PermissionDeniedError: ``actor`` (default :func:`engine.access.policy.current_identity`) may not
            launch runs, or demo mode; checked first (and audited), nothing is queued.
        ConfigError, DatasetError: a bad field, seed or value (every one named), before any run is queued.
        QueueFullError: the sweep has more runs than the queue has room for (``$MASKLAB_MAX_QUEUED``
            minus the runs waiting), before any run is queued; or another submitter filled the queue
            part way (the runs queued so far stay queued).
    """
    ws = workspace_root(workspace)
    authorize("run.submit", f"sweep of {field} on {(base.get('data') or {}).get('dataset')}", actor=actor, workspace=ws)
    cfgs = plan_sweep(base, field, values, seeds, ws, sweep_id=sweep_id)
    room, cap = queue_room(ws)
    if len(cfgs) > room:
        raise QueueFullError(
            f"this sweep is {len(cfgs)} runs but the queue has room for {room} ({cap - room} waiting, "
            f"MASKLAB_MAX_QUEUED={cap}); nothing was queued: sweep fewer values or seeds, wait for queued runs "
            f"to start, or raise MASKLAB_MAX_QUEUED where the dashboard and the CLI are started")
    return [submit(c, ws, actor=actor, resolved=True) for c in cfgs]


def sweep_of(name: str) -> dict[str, Any] | None:
    """``{id, field, value, seed}`` of a run name written by :func:`sweep_configs`, else None."""
    m = _NAME.match(name or "")
    if not m:
        return None
    return {"id": m["id"], "field": m["field"], "value": _scalar(m["value"]), "seed": int(m["seed"]),
            "base": m["base"]}


def sweep_table(sweep_id: str, workspace=None):
    """The runs of a sweep as a DataFrame: ``run_id, value, seed, status``, then the latest
    evaluation's ``probe_acc``, ``knn_acc`` (trained encoder), ``probe_acc/random_init``,
    ``knn_acc/random_init``, ``probe_acc/raw_input``, ``knn_acc/raw_input`` (NaN until evaluated)."""
    rows = []
    for r in list_runs(workspace):
        sw = sweep_of(r.name)
        if not sw or sw["id"] != sweep_id:
            continue
        ev = latest_evaluation(r.run_id, workspace)
        row = {"run_id": r.run_id, "field": sw["field"], "value": sw["value"], "seed": sw["seed"], "status": r.status}
        for enc, suffix in (("trained", ""), ("random_init", "/random_init"), ("raw_input", "/raw_input")):
            for k in ("probe_acc", "knn_acc"):
                row[k + suffix] = ev.representation.get(enc, {}).get(k) if ev else None
        rows.append(row)
    import pandas as pd  # noqa: PLC0415 (engine.store's docstring: the CLI and workers start without pandas)

    return pd.DataFrame(rows).sort_values(["value", "seed"]).reset_index(drop=True) if rows else pd.DataFrame()
