"""Command line on the same engine as the dashboard.

    python -m engine run [CONFIG] [--set key=value ...]    train in the foreground (progress bar)
    python -m engine submit [CONFIG] [--set key=value ...] train in the background; prints the run id
    python -m engine runs [--all] [--json]                 runs with status, latest metrics, errors, tags, disk
                                                           space (archived runs only with --all)
    python -m engine tag RUN_ID TAG... [--remove]          add tags to a run (or remove them)
    python -m engine note RUN_ID TEXT                      set a run's note ("" clears it, - reads stdin)
    python -m engine archive RUN_ID [--unarchive]          hide a run from run lists (or show it again)
    python -m engine cancel RUN_ID
    python -m engine resume RUN_ID [--set key=value ...]   continue from the latest checkpoint (background)
    python -m engine log RUN_ID [--bytes N]                the end of a background run's worker log
    python -m engine doctor [--repair] [--json]            check the workspace; repair what can be
    python -m engine data add PATH [--name NAME]           import images (.zip/folder), text
                                                           (.txt, .csv, .tsv, .jsonl, .zip of .txt) or
                                                           audio (.wav/.flac/.ogg, .zip/folder of them)
                [--name-encoding ENC] [--fill COLOUR] [--text-column C] [--label-column C] ...
                [--image-size N] [--geometry crop|stretch|pad] [--pad-fill edge|mean|COLOUR]
                [--file-column C] [--group-column C] [--sample-rate HZ]   (audio: manifest, pipeline rate)
    python -m engine data inspect PATH                     what `data add` would do (columns, classes)
    python -m engine data list
    python -m engine data delete NAME                      delete an imported dataset
    python -m engine delete RUN_ID                         delete an ended run (its folder)
    python -m engine export-runs RUN_ID... OUT.zip [--checkpoints latest|all|none]   runs as one zip
    python -m engine import-runs ARCHIVE.zip               import them (a run already here is refused)
    python -m engine audit [--limit N] [--json]            who did what, newest first
    python -m engine users list | add NAME --role R | remove NAME | email EMAIL --role R|none

The CLI acts as the local admin (``local:<OS user>`` in the audit log); ``MASKLAB_MODE=demo``
refuses every write here too (``doctor --repair`` included), each refusal an audit line. Writes
outside the workspace only (``export-runs``, ``models export``, ``predict --out``) are reads of it.

Exit codes: 0 success; 1 a run failed or diverged, an import refused a file or had to guess the
encoding of its member names, or doctor left problems unresolved; 2 a usage or input error.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from pathlib import Path

from tqdm import tqdm

from engine.access.policy import authorize, authorized
from engine.access.users import load_users, remove_user, set_email_role, set_user, users_path
from engine.api import (
    CHECKPOINT_CHOICES,
    archive_run,
    cancel,
    delete_dataset,
    delete_run,
    disk_usage,
    evaluate,
    evaluation_job,
    export_runs,
    format_bytes,
    get_run,
    import_runs,
    import_source,
    inspect_source,
    job_state,
    list_datasets,
    list_runs,
    proposed_rate,
    rates_text,
    read_audit,
    read_evaluations,
    read_log,
    reads_option,
    set_note,
    tag_run,
)
from engine.config import load_config, parse_eval_budget
from engine.data.dataset import counted
from engine.data.tabular import import_options
from engine.errors import ConfigError, MasklabError, NothingImportedError, RunNotFoundError
from engine.pretrained.cli import add_parsers as add_pretrained_parsers
from engine.pretrained.cli import cmd_models, cmd_predict
from engine.runner.doctor import check_workspace
from engine.runner.launcher import resume, submit
from engine.runner.sweep import new_sweep_id, parse_values, submit_sweep
from engine.runner.torchrun import join
from engine.runner.worker import AUTO_EVAL_ENV, execute_run
from engine.store import create_run, run_dir
from engine.store.paths import CONFIG_FILE, malformed_run_id, runs_root
from engine.workspace import atomic_write_bytes


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine", description="masklab engine")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, help_ in (("run", "train in the foreground"), ("submit", "train in a background process")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("config", nargs="?", default=None,
                       help="YAML run config, e.g. configs/mae-digits.yaml (none: the defaults, then --set)")
        s.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a field, e.g. --set train.steps=200 (repeatable)")
    ex = sub.add_parser("export-runs", help="write runs to a zip another workspace imports (config, metrics as "
                        "Parquet, evaluations, samples, annotations, checkpoints)")
    ex.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    ex.add_argument("out", metavar="OUT.zip")
    ex.add_argument("--checkpoints", choices=CHECKPOINT_CHOICES, default="latest",
                    help="the newest complete checkpoint (default), all kept ones, or none")
    im = sub.add_parser("import-runs", help="import the runs of an export-runs zip (a run already here is refused)")
    im.add_argument("archive", metavar="ARCHIVE.zip")
    r = sub.add_parser("runs", help="list runs (not the archived ones unless --all)")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.add_argument("--all", action="store_true", help="archived runs too")
    tg = sub.add_parser("tag", help="add tags to a run (--remove: remove them)")
    tg.add_argument("run_id")
    tg.add_argument("tags", nargs="+", metavar="TAG", help="up to 40 characters each, no comma")
    tg.add_argument("--remove", action="store_true", help="remove these tags instead")
    nt = sub.add_parser("note", help="set a run's note")
    nt.add_argument("run_id")
    nt.add_argument("text", help='the note (up to 10,000 characters; "" clears it; - reads standard input)')
    ar = sub.add_parser("archive", help="archive a run: hidden from run lists, not deleted (--unarchive: shown again)")
    ar.add_argument("run_id")
    ar.add_argument("--unarchive", action="store_true", help="show it in run lists again")
    c = sub.add_parser("cancel", help="cancel a queued or running run, or the evaluation of an ended one (exits 1 "
                       "if neither was active)")
    c.add_argument("run_id")
    rs = sub.add_parser("resume", help="continue a failed, cancelled, diverged or interrupted run from its latest "
                        "checkpoint, in a background process")
    rs.add_argument("run_id")
    rs.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="change a field from the checkpoint on, e.g. --set train.lr=5e-4 --set train.steps=2000 "
                    "(not the model, task, data or seed)")
    jn = sub.add_parser("join", help="train another node of a multi-node run (launch.nnodes > 1) with the node that "
                        "holds it; start it on that node after the submit or resume, in the foreground")
    jn.add_argument("run_id")
    jn.add_argument("--node-rank", type=int, required=True, help="this node's rank (not the holder's launch.node_rank)")
    sw = sub.add_parser("sweep", help="queue one run per value of a config field and seed (e.g. mask ratio vs "
                        "linear-probe accuracy); the engine runs MASKLAB_MAX_RUNS at a time")
    sw.add_argument("config", nargs="?", default=None, help="YAML run config (none: the defaults, then --set)")
    sw.add_argument("--over", required=True, metavar="FIELD=V1,V2,...",
                    help="the swept field and its values, e.g. masking.ratio=0.25,0.5,0.75,0.9, or the method: "
                         "method=mae,data2vec,maskfeat (engine/tasks/methods.json)")
    sw.add_argument("--seeds", type=int, default=1, help="replicates per value: train.seed 0..N-1")
    sw.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ev = sub.add_parser("evaluate", help="evaluate a saved checkpoint of an ended run (probe, kNN, k-means next to "
                        "a random-init encoder and the raw input), in a background process")
    ev.add_argument("run_id")
    ev.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest kept)")
    ev.add_argument("--foreground", action="store_true", help="run here and print the figures")
    ev.add_argument("--budget", default="run",
                    help="share of the checkpoint's training time the evaluation may spend, or 'full' (no limit; "
                         "default: the run's evaluation.budget, 0.5); probes always run, the fine-tune takes what is "
                         "left")
    lg = sub.add_parser("log", help="print the end of a background run's worker log")
    lg.add_argument("run_id")
    lg.add_argument("--bytes", type=int, default=64_000, help="at most this many bytes from the end")
    jb = sub.add_parser("job", help="a cluster run's job (ray, slurm): its id and state; records a run whose job "
                        "ended without its worker")
    jb.add_argument("run_id")
    dr = sub.add_parser("doctor", help="check the workspace: stale temporary files, dead runs, damaged files")
    dr.add_argument("--repair", action="store_true", help="repair what can be repaired (runs whose worker is gone)")
    dr.add_argument("--json", action="store_true", help="machine-readable output")
    d = sub.add_parser("data", help="datasets").add_subparsers(dest="data_cmd", required=True)
    a = d.add_parser("add", help="import images (.zip or folder of PNG/JPEG/WebP/BMP/TIFF/GIF, labels = sub-folder "
                     "names), text (.txt, .csv, .tsv, .jsonl, .zip of .txt files) or audio (.wav/.flac/.ogg, "
                     ".zip or folder of them; labels = sub-folders or a manifest table)")
    i = d.add_parser("inspect", help="show what `data add` would import: modality, columns and roles, classes")
    for sp in (a, i):
        sp.add_argument("path")
        for role, like in (("file", "file/path/audio..."), ("text", "longest text"),
                           ("label", "label/class/category..."), ("group", "group/speaker/author...")):
            sp.add_argument(f"--{role}-column", default=None, metavar="COLUMN",
                            help=f"{role} column of a table (default: detected, {like}; '' for none)")
        sp.add_argument("--min-chars", type=int, default=None, help="drop shorter documents (characters)")
        sp.add_argument("--max-chars", type=int, default=None, help="drop longer documents (characters)")
        sp.add_argument("--val-fraction", type=float, default=0.1)
        sp.add_argument("--seed", type=int, default=0)
        sp.add_argument("--name-encoding", default=None, metavar="ENC",
                        help="encoding of zip member names not marked as UTF-8, e.g. cp437, cp1252, cp932 "
                        "(default: detected; the report says which)")
        sp.add_argument("--sample-rate", type=int, default=None, metavar="HZ",
                        help="audio: resample every clip to this rate (default: the clips' recorded rate rounded up to "
                        "8000, 16000, 22050, 44100 or 48000 Hz, at most 16000, as the Data page proposes)")
    a.add_argument("--name", default=None)
    a.add_argument("--image-size", type=int, default=None, metavar="N",
                   help="images: side in pixels of the square images stored (default: the images' own size "
                   "when they all share it, else 64)")
    a.add_argument("--geometry", choices=["crop", "stretch", "pad"], default="crop",
                   help="images: how a non-square image becomes square: centre crop (default), stretch, or pad")
    a.add_argument("--pad-fill", default="edge", metavar="edge|mean|COLOUR",
                   help="images, with --geometry pad: repeat the edge pixels (default), the image's mean "
                   "colour, or a colour (a name or #rrggbb)")
    a.add_argument("--fill", default="white", metavar="COLOUR",
                   help="images: colour under transparent pixels: a name or #rrggbb (default white)")
    a.add_argument("--overwrite", action="store_true", help="replace an existing dataset of that name")
    d.add_parser("list", help="list datasets")
    dd = d.add_parser("delete", help="delete an imported dataset")
    dd.add_argument("name")
    rm = sub.add_parser("delete", help="delete an ended run (config, metrics, checkpoints, samples, log)")
    rm.add_argument("run_id")
    au = sub.add_parser("audit", help="the audit log: who launched, cancelled, deleted or imported what, and when")
    au.add_argument("--limit", type=int, default=50, help="the newest N lines (0: all)")
    au.add_argument("--json", action="store_true", help="one JSON object per line")
    u = sub.add_parser("users", help="the users file (dashboard sign-in)").add_subparsers(dest="users_cmd", required=True)
    u.add_parser("list", help="users and e-mails with their roles")
    ua = u.add_parser("add", help="add a password user or change its role/password")
    ua.add_argument("name")
    ua.add_argument("--role", required=True, choices=["viewer", "editor", "admin"])
    ua.add_argument("--password-stdin", action="store_true", help="read the password from standard input "
                    "(default: asked twice on the terminal; with --role alone an existing user keeps it)")
    ur = u.add_parser("remove", help="remove a password user")
    ur.add_argument("name")
    ue = u.add_parser("email", help="role of an e-mail signing in through an identity provider")
    ue.add_argument("email")
    ue.add_argument("--role", required=True, choices=["viewer", "editor", "admin", "none"])
    add_pretrained_parsers(sub)
    return p


def cmd_run(args) -> int:
    authorize("run.submit", args.config or "foreground run")  # demo mode refuses a foreground run too; audited
    cfg = load_config(args.config, args.overrides)  # a bad config is refused before torch is imported

    from engine.tasks import resolve  # noqa: PLC0415 (the CLI's read-only commands start without torch)
    from engine.tasks.checks import check_run  # noqa: PLC0415 (the CLI's read-only commands start without torch)

    cfg = resolve(cfg)  # once: the run trains the stored config as it is
    check_run(cfg)
    with authorized("run.submit", cfg.name or "foreground run") as audit:  # audited, with how it ended
        run_id, d = create_run(cfg.to_dict())
        audit.update(target=run_id, foreground=True)
        return _train_foreground(cfg, run_id, d, audit)


def _train_foreground(cfg, run_id: str, d, audit: dict) -> int:
    """Train the created run ``run_id`` (folder ``d``) in this process with a progress bar; the run's
    final status goes in its audit line (``audit``)."""
    print(f"run {run_id}  ({d})", flush=True)
    if cfg.train.max_restarts:
        print("note: train.max_restarts applies to background runs (submit); a foreground run is not restarted "
              f"(resume it with python -m engine resume {run_id})", file=sys.stderr)
    bar = tqdm(total=cfg.train.steps, unit="step", dynamic_ncols=True)

    auto_eval = cfg.evaluation.auto and os.environ.get(AUTO_EVAL_ENV, "1") != "0"

    def on_step(step: int) -> None:
        bar.n = step
        bar.refresh()
        if step == cfg.train.steps and auto_eval and not bar.disable:  # the bar's rate stops at training's end
            bar.close()
            bar.disable = True
            print("training done; evaluating the final checkpoint (linear probe, kNN, k-means, fine-tune: "
                  "minutes on a CPU; Ctrl-C stops it)", file=sys.stderr, flush=True)

    try:
        status = execute_run(d, on_step=on_step)
    except KeyboardInterrupt:  # recorded as cancelled by execute_run
        bar.close()
        audit["status"] = "cancelled"
        print(f"cancelled (Ctrl-C) at step {get_run(run_id).step}", file=sys.stderr)
        return 130
    bar.close()
    audit["status"] = status
    rec = get_run(run_id)
    line = f"{status}: step {rec.step}/{rec.total_steps}"
    for k in ("loss", "val_loss"):
        if k in rec.latest:
            line += f"  {k} {rec.latest[k]:.5f}"
    print(line)
    if rec.error:
        print(f"error: {rec.error}", file=sys.stderr)
    return 1 if status in ("failed", "diverged") else 0


def cmd_submit(args) -> int:
    cfg = load_config(args.config, args.overrides)  # a bad config is refused before torch is imported

    print(submit(cfg))
    return 0


def cmd_resume(args) -> int:
    step = resume(args.run_id, args.overrides)
    print(f"resuming {args.run_id} from step {step} in the background "
          f"(python -m engine runs; python -m engine log {args.run_id})")
    return 0


def cmd_join(args) -> int:
    with authorized("run.submit", args.run_id) as audit:  # it trains: as a foreground run, an editor's action
        audit.update(join=True, node_rank=args.node_rank)
        audit["exit"] = rc = join(run_dir(args.run_id), args.node_rank)
    return rc


def cmd_sweep(args) -> int:
    if "=" not in args.over:
        raise ConfigError(f"--over {args.over!r}: expected FIELD=V1,V2,..., e.g. masking.ratio=0.25,0.5,0.75,0.9")
    field, raw = args.over.split("=", 1)
    values = parse_values(raw)
    base = load_config(args.config, args.overrides).to_dict()
    sid = new_sweep_id()
    ids = submit_sweep(base, field.strip(), values, list(range(max(1, args.seeds))), sweep_id=sid)
    print(f"sweep {sid}: {counted(len(ids), 'run')} queued ({field} in {values}, {args.seeds} seed(s)); see the "
          "Sweeps page")
    for r in ids:
        print(r)
    return 0


def cmd_evaluate(args) -> int:
    if not args.foreground:
        step = evaluate(args.run_id, args.step, budget=args.budget)
        print(f"evaluating step {step} of {args.run_id} in the background (python -m engine log {args.run_id})")
        return 0
    from engine.eval.job import run_job  # noqa: PLC0415 (the CLI's read-only commands start without torch)

    rec = get_run(args.run_id)
    with authorized("run.evaluate", args.run_id) as audit:  # demo mode and viewers are refused; audited
        rc = run_job(rec.path, args.step, parse_eval_budget(args.budget))
        job = evaluation_job(args.run_id) or {}
        audit.update(foreground=True, step=job.get("step"), status=job.get("status"))
    if rc not in (0, 3):
        print(f"error: {job.get('error') or 'the run is locked by another process'}", file=sys.stderr)
        return 2
    if rc == 3:
        print(f"cancelled: {job.get('error')}; finished: {', '.join(job.get('phases_done') or ()) or 'nothing'}",
              file=sys.stderr)
        return 1
    ev = next(e for e in read_evaluations(args.run_id)[0] if e.step == job.get("step"))
    print(f"step {ev.step}: {ev.rows['train']} train / {ev.rows['val']} val rows, {ev.seconds:.1f} s")
    for enc, figs in ev.representation.items():
        print(f"  {enc:12} " + "  ".join(f"{k} {v:.4f}" for k, v in figs.items()))
    print("  reconstruction " + "  ".join(f"{k} {v:.4f}" for k, v in ev.reconstruction.items()))
    for enc, figs in ev.downstream.items():
        print(f"  fine-tune {enc:12} val acc {figs['finetune_acc']:.4f}  ({figs['finetune_steps']:.0f} steps)")
    for name, figs in ev.quality.items():
        print(f"  quality {name:14} " + "  ".join(f"{k} {v:.4f}" for k, v in figs.items() if k not in ("rows", "cells")))
    if ev.cost:
        print(f"  cost {ev.cost['flops_per_step'] / 1e9:.3f} GFLOPs per training step (batch {ev.cost['batch_size']:.0f})")
    for note in ev.notes:
        print(f"  note: {note}")
    return 0


def cmd_runs(args) -> int:
    every = list_runs()
    runs = [r for r in every if args.all or not r.archived]
    usage = disk_usage()
    if args.json:
        print(json.dumps([{
            "run_id": r.run_id, "name": r.name, "status": r.status, "step": r.step,
            "total_steps": r.total_steps, "created_at": r.created_at, "duration_s": r.duration_s,
            "error": r.error, "latest": r.latest, "warnings": list(r.warnings), "tags": list(r.tags),
            "note": r.note, "archived": r.archived, "disk_bytes": usage.runs.get(r.run_id, 0)} for r in runs], indent=2))
        return 0
    hidden = len(every) - len(runs)
    if not runs:
        print("no runs yet" if not hidden else f"no runs to show: {hidden} archived (--all shows them)")
        return 0
    print(f"{'run id':24} {'name':18} {'status':11} {'step':>12} {'loss':>9} {'val_loss':>9} {'time':>7} {'disk':>9}")
    for r in runs:
        loss = r.latest.get("loss")
        val = r.latest.get("val_loss")
        dur = f"{r.duration_s:.0f}s" if r.duration_s is not None else "-"
        print(f"{r.run_id:24} {r.name[:18]:18} {r.status:11} {f'{r.step}/{r.total_steps}':>12} "
              f"{'-' if loss is None else f'{loss:.4f}':>9} {'-' if val is None else f'{val:.4f}':>9} {dur:>7} "
              f"{format_bytes(usage.runs.get(r.run_id, 0)):>9}")
        if r.tags or r.archived:
            print("    " + "  ".join((["archived"] if r.archived else []) + ([f"tags: {', '.join(r.tags)}"] if r.tags else [])))
        if r.error and r.status in ("failed", "diverged", "interrupted"):
            print(f"    {r.status}: {r.error}")
        for w in r.warnings:
            print(f"    warning: {w}")
    print(f"disk: runs {format_bytes(usage.runs_total)}, datasets {format_bytes(usage.datasets_total)}, "
          f"workspace {format_bytes(usage.total)}" + (f"; {hidden} archived run(s) not shown (--all)" if hidden else ""))
    return 0


def cmd_tag(args) -> int:
    done = tag_run(args.run_id, remove=args.tags) if args.remove else tag_run(args.run_id, add=args.tags)
    print(f"{args.run_id}: tags {', '.join(done.tags) or '(none)'}")
    return 0


def cmd_note(args) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    done = set_note(args.run_id, text)
    print(f"{args.run_id}: note {'cleared' if not done.note else f'saved ({len(done.note):,} characters)'}")
    return 0


def cmd_archive(args) -> int:
    archive_run(args.run_id, not args.unarchive)
    print(f"{'unarchived' if args.unarchive else 'archived'} run {args.run_id}")
    return 0


def cmd_cancel(args) -> int:
    if cancel(args.run_id):
        print(f"cancel requested for {args.run_id}")
        return 0
    # like kill(1) on a process that is gone: nothing was cancelled, which a script must be able to see
    print(f"{args.run_id} has already ended ({get_run(args.run_id).status}) and no evaluation of it is running; "
          "nothing to cancel", file=sys.stderr)
    return 1


def cmd_log(args) -> int:
    text = read_log(args.run_id, max_bytes=args.bytes)
    if text is None:
        print(f"{args.run_id} has no worker log: it ran in the foreground (python -m engine run)", file=sys.stderr)
        return 0
    sys.stdout.write(text)
    return 0


def cmd_job(args) -> int:
    state = job_state(args.run_id)
    if state is None:
        print(f"{args.run_id} runs on this machine's processes (launch.backend=local): it has no cluster job")
        return 0
    print(f"{state.backend} job {state.job_id}: {state.state}" + (f" ({state.reason})" if state.reason else ""))
    print(f"run {args.run_id}: {get_run(args.run_id).status}")
    return 0


def cmd_doctor(args) -> int:
    report = check_workspace(repair=args.repair)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print("\n".join(report.lines()))
        if report.unresolved and not args.repair and any(f.state == "repairable" for f in report.unresolved):
            print("run `python -m engine doctor --repair` to repair what can be repaired")
    return 1 if report.unresolved else 0


def _import_options(args):
    return import_options(
        file_column=args.file_column, text_column=args.text_column, label_column=args.label_column,
        group_column=args.group_column, min_chars=args.min_chars, max_chars=args.max_chars,
        val_fraction=args.val_fraction, seed=args.seed, name_encoding=args.name_encoding,
        sample_rate=args.sample_rate,
    )  # fmt: skip


def _audio_rate(plan, chosen: int | None) -> tuple[int, str]:
    """The pipeline rate (Hz) an audio import of ``plan`` uses, and the line that says why:
    ``chosen`` (``--sample-rate``), else the Data page's proposal from the clips' headers
    (:func:`engine.data.audio.proposed_rate`)."""
    heard = f"clips {rates_text(plan.sample_rates)}" if plan.sample_rates else "no clip header could be read"
    if chosen is not None:
        return chosen, f"sample rate: {chosen:,} Hz (--sample-rate; {heard})"
    rate = proposed_rate(plan.sample_rates)
    return rate, f"sample rate: {rate:,} Hz ({heard}; --sample-rate HZ chooses another)"


def _print_plan(plan, sample_rate: int | None = None) -> None:
    """``data inspect``'s report of ``plan``; ``sample_rate``: the ``--sample-rate`` given, if any."""
    print(f"{plan.source}: {plan.modality} ({plan.kind}), {plan.n_items} rows kept, "
          f"{len(plan.rejected)} rejected, {len(plan.skipped)} skipped")
    if reads_option(plan.modality, "sample_rate"):
        print(_audio_rate(plan, sample_rate)[1])
    for note in plan.notes:
        print(f"  {note}")
    if plan.roles is not None:
        print(f"columns: {', '.join(plan.columns)}")
        print(f"roles: {plan.roles.describe()}")
    if plan.cleaning:
        print("cleaning: " + ", ".join(f"{k} {v}" for k, v in plan.cleaning.items()))
    print(f"classes ({len(plan.class_names)}): " + ", ".join(f"{c} {n}" for c, n in plan.label_counts.items()))
    for row in plan.preview:
        print("  | " + "  ".join(f"{k}={v!r}" for k, v in row.items()))
    for where, reason in plan.rejected:
        print(f"rejected {where}: {reason}")


def cmd_export_runs(args) -> int:
    ids = [resolve_run_id(r) for r in args.run_ids]
    data = export_runs(ids, args.checkpoints)
    out = Path(args.out)
    atomic_write_bytes(out, data, what=f"the export {out}")
    print(f"wrote {out} ({format_bytes(len(data))}): {len(ids)} run(s), checkpoints: {args.checkpoints}")
    return 0


def cmd_import_runs(args) -> int:
    report = import_runs(args.archive)
    for run_id in report.imported:
        print(f"imported run {run_id}")
    for run_id, why in report.refused:
        print(f"refused run {run_id}: {why}", file=sys.stderr)
    if report.tokenizers:
        print(f"tokenizer(s) added: {', '.join(report.tokenizers)}")
    return 0 if report.imported or not report.refused else 1


def cmd_delete(args) -> int:
    delete_run(args.run_id)
    print(f"deleted run {args.run_id}")
    return 0


def cmd_audit(args) -> int:
    for e in reversed(read_audit(limit=args.limit or None)):
        if args.json:
            print(json.dumps({**e.details, **{k: v for k, v in vars(e).items() if k != "details"}}))
            continue
        why = f"  ({e.details['reason']})" if "reason" in e.details else ""
        print(f"{e.time}  {e.user} ({e.role})  {e.action} {e.target}  {e.outcome}{why}")
    return 0


def cmd_users(args) -> int:
    if args.users_cmd == "list":
        users = load_users()
        print(f"{users_path()}: {len(users.users)} users, {len(users.emails)} e-mails"
              + (f", default role {users.default_role}" if users.default_role else ""))
        for name, entry in sorted(users.users.items()):
            print(f"  {name:24} {entry.role}")
        for email, role in sorted(users.emails.items()):
            print(f"  {email:24} {role}  (identity provider)")
        return 0
    if args.users_cmd == "add":
        password = None
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        elif sys.stdin.isatty():
            password = getpass.getpass(f"password for {args.name} (empty: keep the current one): ") or None
            if password is not None and getpass.getpass("again: ") != password:
                print("error: the passwords differ", file=sys.stderr)
                return 2
        who = set_user(args.name, args.role, password)
        print(f"{who.name}: {who.role}")
        return 0
    if args.users_cmd == "remove":
        print(f"removed {args.name}" if remove_user(args.name) else f"no user {args.name}")
        return 0
    set_email_role(args.email, None if args.role == "none" else args.role)
    print(f"{args.email}: {args.role}")
    return 0


def cmd_data(args) -> int:
    if args.data_cmd == "delete":
        delete_dataset(args.name)
        print(f"deleted dataset {args.name}")
        return 0

    if args.data_cmd == "list":
        for info in list_datasets():
            if info.image_shape is not None:
                shape = "x".join(map(str, info.image_shape))
            elif "sample_rate" in info.stats:
                shape = f"{info.stats['sample_rate']} Hz"
            else:
                shape = f"~{info.stats.get('chars_mean', 0):.0f} chars" if "chars_mean" in info.stats else "-"
            print(f"{info.name:20} {info.modality:6} {shape:12}  train {info.n_train:6}  val {info.n_val:6}"
                  f"  classes {len(info.class_names):3}  {info.source}")
        return 0
    if args.data_cmd == "inspect":
        _print_plan(inspect_source(args.path, _import_options(args)), args.sample_rate)
        return 0
    options = _import_options(args)
    if args.sample_rate is None:  # audio: the clips' own rate, as the Data page proposes
        plan = inspect_source(args.path, options)
        if reads_option(plan.modality, "sample_rate"):
            rate, line = _audio_rate(plan, None)
            options = options.model_copy(update={"sample_rate": rate})
            print(line)
    report = import_source(args.path, args.name, options, image_size=args.image_size,
                           overwrite=args.overwrite, fill=args.fill, geometry=args.geometry, pad_fill=args.pad_fill)
    print(report.summary())
    names = getattr(report, "names", None)
    return 1 if report.rejected or (names is not None and names.ambiguous) else 0


def resolve_run_id(text: str, workspace=None) -> str:
    """A run id as typed: a whole id, or the short form the dashboard shows (its end, e.g. ``9a2343``
    of ``20261202-071953-9a2343``) when exactly one run's id ends with it; otherwise ``text`` as it
    is (the command then says "no run").

    Raises:
        RunNotFoundError: several runs' ids end with ``text`` (the message lists them).
    """
    root = runs_root(workspace)
    if malformed_run_id(text) or (root / text / CONFIG_FILE).exists():
        return text
    found = sorted(p.name for p in root.iterdir() if p.name.endswith(text) and (p / CONFIG_FILE).exists())
    if len(found) > 1:
        raise RunNotFoundError(f"{text!r} is the end of {len(found)} run ids ({', '.join(found[:5])}); give more of the id")
    return found[0] if found else text


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code. Commands on one run take its id or the short form
    the dashboard shows (:func:`resolve_run_id`), except ``delete``, which wants the whole id."""
    args = _parser().parse_args(argv)
    handler = {"run": cmd_run, "submit": cmd_submit, "runs": cmd_runs, "cancel": cmd_cancel, "resume": cmd_resume,
               "join": cmd_join,
               "evaluate": cmd_evaluate, "sweep": cmd_sweep, "log": cmd_log, "job": cmd_job, "doctor": cmd_doctor, "data": cmd_data, "delete": cmd_delete, "audit": cmd_audit,
               "users": cmd_users, "tag": cmd_tag, "note": cmd_note, "archive": cmd_archive,
               "models": cmd_models, "predict": cmd_predict, "export-runs": cmd_export_runs,
               "import-runs": cmd_import_runs}
    try:
        if getattr(args, "run_id", None) and args.cmd != "delete":
            args.run_id = resolve_run_id(args.run_id)
        return handler[args.cmd](args)
    except MasklabError as e:
        print(f"error: {e}", file=sys.stderr)
        for where, reason in e.rejected if isinstance(e, NothingImportedError) else ():  # each refused file
            print(f"  refused {where}: {reason}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `python -m engine runs | head`
        sys.stderr.close()
        return 0
