"""New run's shared pieces: the training fields, the form as YAML and as a command line, and how
long the run should take here (:func:`estimate_line`, :mod:`engine.runner.estimate`).

The form is a partial run config (what :func:`engine.config.RunConfig.from_dict` takes). The URL
keeps it field by field (:mod:`app.components.urlstate`), the YAML download is the resolved config a
run would save, and the command is ``python -m engine run`` with one ``--set`` per form field: the
same ``key=value`` pairs as the URL, so a copied command trains exactly what the page would launch.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import streamlit as st
import yaml

from app.components.errors import guarded
from app.components.urlstate import dig, index_of, number, set_flags
from app.modalities import task_train_defaults
from engine.api import LAUNCH_BACKENDS, LaunchConfig, RunConfig, backend_unavailable, estimate_run, workspace_root


def train_fields(task: str, key: str, carried: dict, proposal: dict | None = None) -> dict[str, Any]:
    """Steps, batch size, learning rate, seed, eval interval: defaults from ``carried["train"]``
    (the URL) when the URL's task is this task, else ``proposal`` (New run passes
    :func:`app.modalities.train_defaults`: the dataset's measured recipe), else the task's
    ``train_defaults`` (:func:`app.modalities.task_train_defaults`), over ``TrainConfig``. Returns
    the ``train`` section (warm-up and checkpoint interval: a carried config's own at its own number
    of steps; else the carried or proposed one, at most a tenth of the run and at most the run's steps)."""
    t = {**RunConfig().train.model_dump(), **(task_train_defaults(task) if proposal is None else proposal)}
    c = {**t, **(dig(carried, "train") or {})}
    a, b = st.columns(2)
    steps = a.number_input("Steps", min_value=1, max_value=1_000_000, value=number(c["steps"], int(t["steps"]), 1, 1_000_000, int), step=100, key=f"{key}_steps_{task}")
    batch = b.number_input("Batch size", min_value=1, max_value=65536, value=number(c["batch_size"], int(t["batch_size"]), 1, 65536, int), step=16,
                           key=f"{key}_batch_{task}")  # fmt: skip
    lr = a.number_input("Learning rate", min_value=1e-6, max_value=10.0, value=number(c["lr"], float(t["lr"]), 1e-6, 10.0), step=1e-4, format="%g",
                        key=f"{key}_lr_{task}")  # fmt: skip
    seed = b.number_input("Seed", min_value=0, max_value=2**31 - 1, value=number(c["seed"], int(t["seed"]), 0, 2**31 - 1, int),
                          help="also fixes the preview masks", key=f"{key}_seed")  # fmt: skip
    every = a.number_input("Eval interval (steps)", min_value=1, max_value=1_000_000, value=number(c["eval_interval"], int(t["eval_interval"]), 1, 1_000_000, int),
                           key=f"{key}_eval_{task}")  # fmt: skip
    given = dig(carried, "train") or {}
    # A carried config at its own length is kept as it is (a rerun trains the same run); a proposal, or
    # a run made shorter here, gets its warm-up cut to a tenth of the run and its checkpoints within it.
    as_carried = number(given.get("steps"), None, 1, 1_000_000, int) == int(steps)
    warmup = number(c["warmup_steps"], int(t["warmup_steps"]), 0, 1_000_000, int)
    out = {"steps": int(steps), "batch_size": int(batch), "lr": float(lr), "seed": int(seed), "eval_interval": int(every),
           "warmup_steps": warmup if as_carried else min(warmup, int(steps) // 10)}
    if "checkpoint_interval" in {**(proposal or {}), **given}:
        every_ckpt = number(c["checkpoint_interval"], int(t["checkpoint_interval"]), 1, 1_000_000, int)
        out["checkpoint_interval"] = every_ckpt if as_carried else min(every_ckpt, int(steps))
    return out


def launch_fields(key: str, carried: dict) -> dict[str, Any]:
    """Processes per node, nodes, rendezvous endpoint, and the back-end with its few fields
    (``launch``, named as torchrun names them), in a collapsed expander; defaults from
    ``carried["launch"]`` (the URL). A back-end whose extra is not installed stays in the list,
    marked, and says why when picked (New run then keeps Launch disabled). Returns the ``launch``
    section, or ``{}`` for one local process (the default: the config stays without one)."""
    default = LaunchConfig().model_dump()
    c = {**default, **(dig(carried, "launch") or {})}
    why = {b: backend_unavailable(b) for b in LAUNCH_BACKENDS}
    with st.expander("Devices, nodes and back-end", expanded=c != default):
        backend = st.selectbox("Back-end", LAUNCH_BACKENDS, index=index_of(list(LAUNCH_BACKENDS), c["backend"]),
                               format_func=lambda n: BACKEND_LABELS[n] + (" (not installed)" if why[n] else ""),
                               help="launch.backend: where the run's worker executes", key=f"{key}_backend")  # fmt: skip
        a, b = st.columns(2)
        nproc = a.number_input("Processes per node", min_value=1, max_value=256,
                               value=number(c["nproc_per_node"], 1, 1, 256, int), help="launch.nproc_per_node: data-parallel processes (torchrun), one per GPU on a GPU "
                                    "machine; the batch size is the global batch, split over all of them",
                               key=f"{key}_nproc")  # fmt: skip
        launch: dict[str, Any] = {"nproc_per_node": int(nproc), "backend": backend}
        if backend == "local":
            nnodes = b.number_input("Nodes", min_value=1, max_value=1024, value=number(c["nnodes"], 1, 1, 1024, int),
                                    help="launch.nnodes: machines training the run together", key=f"{key}_nnodes")
            launch["nnodes"] = int(nnodes)
            if nnodes > 1:
                launch["rdzv_endpoint"] = st.text_input("Rendezvous endpoint", value=str(c["rdzv_endpoint"]), placeholder="node0:29400",
                                                       help="launch.rdzv_endpoint: host:port of the c10d rendezvous, reachable from "
                                                            "every node", key=f"{key}_rdzv").strip()  # fmt: skip
                st.caption("This machine is node 0; start each other node with `python -m engine join RUN_ID "
                           "--node-rank K` once the run is launched (and again after a resume).")
        elif why[backend]:
            st.error(f"The {backend} back-end cannot be used here: {why[backend]}.")
        else:
            launch.update(cluster_fields(backend, key, c, b))
    return {} if {**c, **launch} == default else {k: v for k, v in launch.items() if v not in ("", {})}


#: The back-ends as New run lists them.
BACKEND_LABELS = {"local": "local (this machine)", "ray": "ray (a Ray Job)", "slurm": "slurm (sbatch)"}


def cluster_fields(backend: str, key: str, c: dict, beside) -> dict[str, Any]:
    """The few fields of a cluster back-end: GPUs (in the column ``beside`` the processes), CPUs,
    memory, and Ray's address or Slurm's time limit, partition and account. Defaults from ``c``
    (the URL's launch section)."""
    gpus = beside.number_input("GPUs", min_value=0, max_value=64, value=number(c["gpus"], 0, 0, 64, int),
                               help="launch.gpus: GPUs the job asks for; the run sees them as CUDA_VISIBLE_DEVICES",
                               key=f"{key}_gpus")  # fmt: skip
    a, b = st.columns(2)
    cpus = a.number_input("CPUs", min_value=0, max_value=4096, value=number(c["cpus"], 0, 0, 4096, int),
                          help="launch.cpus: CPUs the job asks for (0: train.num_threads, else 1)", key=f"{key}_cpus")
    mem = b.number_input("Memory (GB)", min_value=0.0, max_value=65536.0, value=number(c["mem_gb"], 0.0, 0.0, 65536.0),
                         format="%g", help="launch.mem_gb: 0 leaves it to the cluster", key=f"{key}_mem")
    out: dict[str, Any] = {"cpus": int(cpus), "gpus": int(gpus), "mem_gb": float(mem)}
    if backend == "ray":
        out["ray_address"] = st.text_input("Ray address", value=str(c["ray_address"]), placeholder="$RAY_ADDRESS",
                                           help="launch.ray_address: the Ray dashboard, e.g. http://head-node:8265; "
                                                "empty: $RAY_ADDRESS where the dashboard runs", key=f"{key}_ray").strip()  # fmt: skip
    else:
        out["time_min"] = int(a.number_input("Time limit (min)", min_value=0, max_value=525_600,
                                             value=number(c["time_min"], 0, 0, 525_600, int),
                                             help="launch.time_min: sbatch --time (0: 24 h)", key=f"{key}_time"))
        out["slurm_partition"] = b.text_input("Partition", value=str(c["slurm_partition"]), placeholder="default",
                                              key=f"{key}_part").strip()  # fmt: skip
        out["slurm_account"] = a.text_input("Account", value=str(c["slurm_account"]), placeholder="none",
                                            key=f"{key}_acct").strip()  # fmt: skip
    st.caption("The cluster's nodes must share the workspace folder (and this checkout) with this machine: "
               "a worker that cannot write it fails at once, with the reason.")
    return out


def command_line(form: dict[str, Any]) -> str:
    """``python -m engine run --set k=v ...`` for the form's partial config, shell-quoted."""
    return " \\\n    ".join(["python -m engine run", *(f"--set {shlex.quote(f)}" for f in set_flags(form))])


def export_panel(form: dict[str, Any], cfg: Any) -> None:
    """The form as a YAML file (the resolved config: every default written out) and as the
    equivalent command line."""
    with st.expander("As YAML or a command line"):
        resolved = cfg.to_dict() if cfg is not None else form
        text = yaml.safe_dump(resolved, sort_keys=False)
        name = (form.get("name") or f"{form.get('task', 'run')}-{dig(form, 'data.dataset', '')}").replace(" ", "-")
        st.download_button("Download YAML", text, file_name=f"{name}.yaml", mime="application/x-yaml",
                           key="nr_yaml", disabled=cfg is None, on_click="ignore")  # fmt: skip
        st.caption(f"Run it with `python -m engine run {name}.yaml` (or `submit` to train in the background). "
                   "Or the same run without a file:")
        st.code(command_line(form), language="bash")


@st.cache_data(max_entries=32, ttl=30, show_spinner=False)
def estimate_from_runs(cfg_json: str, workspace: str) -> str | None:
    """:func:`engine.runner.estimate.estimate_run` of a resolved config (JSON) from the completed runs
    of its shape in ``workspace``, in words; None when there is none. Kept 30 s: a run that completes
    meanwhile counts."""
    est = estimate_run(RunConfig.from_dict(json.loads(cfg_json)), workspace, allow_timing=False)
    return None if est is None else est.text()


@st.cache_data(max_entries=16, ttl=3600, show_spinner=False)
def estimate_by_timing(cfg_json: str, workspace: str) -> str:
    """The same from a short timing (a few seconds: a child process trains a few steps), kept an hour
    per config. Errors are not cached."""
    return estimate_run(RunConfig.from_dict(json.loads(cfg_json)), workspace).text()


def estimate_line(cfg: RunConfig | None, key: str) -> None:
    """How long the run should take here, under Launch: from a completed run of the same shape when
    there is one, else behind an "Estimate time" button (a short timing, then kept per config)."""
    if cfg is None:
        return
    cfg_json = json.dumps(cfg.to_dict(), sort_keys=True)
    ws = str(workspace_root())
    text = guarded(estimate_from_runs, cfg_json, ws)
    if text is None and cfg_json in st.session_state.get(f"{key}_timed", ()):  # this tab asked to time it
        with st.spinner("Timing a few training steps..."):
            text = guarded(estimate_by_timing, cfg_json, ws)
    elif text is None:
        st.button("Estimate time", key=f"{key}_estimate", on_click=_time_it, args=(key, cfg_json),
                  help="trains a few steps of this config now (a few seconds) to time them")
    if text is not None:
        st.caption(text)


def _time_it(key: str, cfg_json: str) -> None:
    """"Estimate time"'s callback: remember that this tab asked to time ``cfg_json`` (before the
    rerun draws the page, so the rerun shows the timing instead of the button)."""
    st.session_state[f"{key}_timed"] = {*st.session_state.get(f"{key}_timed", ()), cfg_json}
