"""Sweeps: one base config, one field varied over values, each value run with several seeds.

``sweep_configs(base, field, values, seeds)`` gives the run configs (validated, named
``<name>/<field>=<value>/seed=<seed>``, with ``sweep`` recording ``{id, field, value, seed}`` in the
run name's place for readers: :func:`sweep_of`); :func:`submit_sweep` queues them through
:func:`engine.launcher.submit` (first come, first served: the engine runs ``$MASKLAB_MAX_RUNS`` at a
time). :func:`sweep_table` reads the results back: one row per run with the swept value, the seed
and its latest evaluation's figures, for a "mask ratio vs linear-probe accuracy" plot with the
mean and spread over seeds (MAE's figure 5, He et al. 2022, on the user's own data).
"""

from __future__ import annotations

import copy
import re
import secrets
from collections.abc import Sequence
from typing import Any

from engine.config import RunConfig, apply_overrides
from engine.errors import ConfigError

_NAME = re.compile(r"^(?P<base>.*) sweep (?P<id>[0-9a-f]{6}) (?P<field>[\w.]+)=(?P<value>\S+) seed=(?P<seed>\d+)$")


def sweep_configs(base: dict[str, Any], field: str, values: Sequence[Any], seeds: Sequence[int] = (0,),
                  sweep_id: str | None = None) -> list[RunConfig]:
    """The run configs of a sweep of ``field`` (dotted, e.g. ``masking.ratio`` or
    ``masking.strategy``) over ``values``, each with every ``train.seed`` in ``seeds``; every
    other field as in ``base``. Runs are named ``<base name> sweep <id> <field>=<value> seed=<seed>``.

    Raises:
        ConfigError: no values or seeds, or a config that does not validate (naming the field and
            the value that broke it).
    """
    if not values or not seeds:
        raise ConfigError(f"a sweep of {field} needs at least one value and one seed")
    sid = sweep_id or secrets.token_hex(3)
    name = base.get("name") or "sweep"
    out = []
    for v in values:
        for s in seeds:
            d = apply_overrides(copy.deepcopy(base), [f"{field}={_text(v)}", f"train.seed={int(s)}"])
            d["name"] = f"{name} sweep {sid} {field}={_text(v)} seed={int(s)}"
            try:
                out.append(RunConfig.from_dict(d))
            except ConfigError as e:
                raise ConfigError(f"sweep value {field}={_text(v)}: {e}") from None
    return out


def _text(v: Any) -> str:
    return v if isinstance(v, str) else repr(v)


def sweep_of(name: str) -> dict[str, Any] | None:
    """``{id, field, value, seed}`` of a run name written by :func:`sweep_configs`, else None."""
    m = _NAME.match(name or "")
    if not m:
        return None
    import yaml  # the --set value parser (engine.config.apply_overrides): 0.5 -> float, true -> bool

    return {"id": m["id"], "field": m["field"], "value": yaml.safe_load(m["value"]), "seed": int(m["seed"]),
            "base": m["base"]}


def submit_sweep(base: dict[str, Any], field: str, values: Sequence[Any], seeds: Sequence[int] = (0,),
                 workspace=None) -> list[str]:
    """Queue every run of :func:`sweep_configs`; returns their run ids in order.

    Raises:
        ConfigError, DatasetError: as :func:`engine.launcher.submit`, for the first bad config,
            before any run is queued.
        QueueFullError: the queue filled up part way (the runs queued so far stay queued).
    """
    from engine.checks import check_run
    from engine.launcher import submit

    cfgs = sweep_configs(base, field, values, seeds)
    for c in cfgs:
        check_run(c, workspace)
    return [submit(c, workspace) for c in cfgs]


def sweep_table(sweep_id: str, workspace=None):
    """The runs of a sweep as a DataFrame: ``run_id, value, seed, status``, then the latest
    evaluation's ``probe_acc``, ``knn_acc`` (trained encoder), ``probe_acc/random_init``,
    ``knn_acc/random_init``, ``probe_acc/raw_input``, ``knn_acc/raw_input`` (NaN until evaluated)."""
    import pandas as pd

    from engine.store import list_runs
    from engine.store.evaluations import latest_evaluation

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
    return pd.DataFrame(rows).sort_values(["value", "seed"]).reset_index(drop=True) if rows else pd.DataFrame()
