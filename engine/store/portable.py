"""Portable runs: saved runs as one zip that another workspace imports (``python -m engine
export-runs`` / ``import-runs``, the Runs page's buttons).

The archive holds, per run, ``runs/<id>/`` with its config, status, task record, annotations,
metrics (the store's own Parquet files: columns ``run_id`` string, ``key`` string, ``step`` int64,
``value`` float64, ``wall_time`` float64 unix seconds; one row per logged point, readable by DuckDB
``read_parquet('runs/*/metrics/*.parquet')`` or ``pandas.read_parquet`` as they are), evaluations,
reconstruction samples and the checkpoints asked for (``latest``, ``all`` or ``none``); the
tokenizer a text run reads with (``tokenizers/<id>/``); and ``masklab-runs.json``, the manifest:
every file's size and SHA-256, where and when the runs were exported.

An import is checked as an upload is, before anything is written: a zip, the manifest present and
every member listed in it with its size and hash, names only of the layout above (no ``..``, no
absolute path, nothing else), each member under its kind's size cap and not a compression bomb, each
file readable as its format (JSON objects, the metrics schema, samples without pickles, whole
checkpoints), no run still active. A run whose id is already in the workspace is refused by name and
never overwritten; the others are published one folder at a time (a reader sees a whole run or
none), each with ``imported.json`` saying where it came from.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import socket
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from engine.access.policy import Identity, authorized
from engine.errors import DamagedFileError, MasklabError, RunActiveError
from engine.messages import describe_error
from engine.store.annotations import ANNOTATIONS_FILE
from engine.store.checkpoints import checkpoint_complete, checkpoint_problem, list_checkpoints
from engine.store.metrics import COLUMNS
from engine.store.paths import CONFIG_FILE, malformed_run_id, note_write, run_dirs, runs_root
from engine.store.runs import ACTIVE, read_status
from engine.store.samples import read_sample_file
from engine.workspace import atomic_write_json, publish_folder, workspace_root

MANIFEST = "masklab-runs.json"
FORMAT = 1
IMPORTED_FILE = "imported.json"
CHECKPOINT_CHOICES = ("latest", "all", "none")

#: Largest size of one member by kind (bytes), and of the whole archive unpacked.
CAPS = {".json": 16 * 2**20, ".parquet": 1024 * 2**20, ".npz": 512 * 2**20, ".safetensors": 1536 * 2**20,
        ".pt": 3 * 1024 * 2**20}
MAX_TOTAL = 16 * 1024 * 2**20
#: A member unpacking to more than this many times its packed size (and over 1 MB) is a bomb.
MAX_RATIO = 200

_RUN_FILE = re.compile(
    r"runs/(?P<run>[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127})/(?P<rel>config\.json|status\.json|task\.json|annotations\.json"
    r"|metrics/[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}\.parquet|samples/recon-\d{7}\.npz|evaluation/step-\d{7}\.(?:json|npz)"
    r"|checkpoints/step-\d{7}/(?:model\.safetensors|manifest\.json|state\.pt))")
_TOKENIZER_FILE = re.compile(r"tokenizers/(?P<tok>[A-Za-z0-9_-]{1,64})/(?:tokenizer\.json|meta\.json)")
#: The run folder's files an export takes (the worker's lock, log, queue and job files stay behind).
_TOP_FILES = (CONFIG_FILE, "status.json", "task.json", ANNOTATIONS_FILE)


class PortableRunsError(MasklabError):
    """An export or import refused; the message names the archive (or run) and the problem."""


@dataclass
class ImportReport:
    """What :func:`import_runs` did: the runs imported and those refused, each with its reason."""

    imported: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    tokenizers: list[str] = field(default_factory=list)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _run_files(d: Path, checkpoints: str) -> list[Path]:
    """The files of run folder ``d`` an export takes (see the module docstring), sorted."""
    files = [d / n for n in _TOP_FILES if (d / n).is_file()]
    files += sorted((d / "metrics").glob("*.parquet")) + sorted((d / "samples").glob("recon-*.npz"))
    files += sorted(p for p in (d / "evaluation").glob("step-*") if p.suffix in (".json", ".npz"))
    kept = [p for p in list_checkpoints(d) if checkpoint_complete(p)]
    chosen = {"all": kept, "latest": kept[-1:], "none": []}[checkpoints]
    for ck in chosen:
        files += [ck / n for n in ("model.safetensors", "manifest.json", "state.pt") if (ck / n).is_file()]
    return files


def export_runs(run_ids: Sequence[str], checkpoints: str = "latest", workspace=None) -> bytes:
    """The runs ``run_ids`` as one zip (the layout of the module docstring), in memory.

    Args:
        checkpoints: ``latest`` (the newest complete checkpoint), ``all`` (every complete one) or ``none``.

    Raises:
        RunNotFoundError: an unknown run. RunActiveError: a run is queued or running (its files
        are still being written). PortableRunsError: ``checkpoints`` is not one of the choices.
    """
    if checkpoints not in CHECKPOINT_CHOICES:
        raise PortableRunsError(f"checkpoints {checkpoints!r}: choose one of {', '.join(CHECKPOINT_CHOICES)}")
    ws = workspace_root(workspace)
    dirs = run_dirs(list(dict.fromkeys(run_ids)), ws)
    buf = io.BytesIO()
    manifest: dict[str, Any] = {"format": FORMAT, "exported_at": time.time(), "host": socket.gethostname(),
                                "workspace": str(ws), "checkpoints": checkpoints, "runs": [], "tokenizers": [],
                                "files": {}}
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        def add(name: str, path: Path) -> None:
            data = path.read_bytes()
            manifest["files"][name] = {"size": len(data), "sha256": _sha256(data)}
            z.writestr(name, data, compress_type=zipfile.ZIP_STORED if path.suffix in (".npz", ".parquet", ".safetensors")
                       else zipfile.ZIP_DEFLATED)

        for d in dirs:
            if read_status(d).get("status") in ACTIVE:
                raise RunActiveError(f"run {d.name} is {read_status(d).get('status')}: export it when it has ended")
            for p in _run_files(d, checkpoints):
                add(f"runs/{d.name}/{p.relative_to(d).as_posix()}", p)
            manifest["runs"].append(d.name)
            tok = _tokenizer_id(d)
            tok_dir = ws / "tokenizers" / tok if tok else None
            if tok_dir is not None and tok_dir.is_dir() and tok not in manifest["tokenizers"]:
                for n in ("tokenizer.json", "meta.json"):
                    if (tok_dir / n).is_file():
                        add(f"tokenizers/{tok}/{n}", tok_dir / n)
                manifest["tokenizers"].append(tok)
        z.writestr(MANIFEST, json.dumps(manifest, indent=1))
    return buf.getvalue()


def _tokenizer_id(d: Path) -> str | None:
    try:
        tok = json.loads((d / "task.json").read_text(encoding="utf-8")).get("tokenizer_id")
    except (OSError, ValueError, AttributeError):
        return None
    return tok if isinstance(tok, str) and _TOKENIZER_FILE.fullmatch(f"tokenizers/{tok}/meta.json") else None


def _check_member(archive: str, info: zipfile.ZipInfo, listed: dict[str, Any]) -> str | None:
    """Why a member is refused (None: it is fine as far as its name and sizes tell)."""
    name = info.filename
    if name.startswith("/") or "\\" in name or ".." in name.split("/") or not (
            _RUN_FILE.fullmatch(name) or _TOKENIZER_FILE.fullmatch(name)):
        return f"{name!r} is not a file of the masklab runs layout"
    if name not in listed:
        return f"{name!r} is not listed in {MANIFEST}"
    cap = CAPS.get(Path(name).suffix)
    if cap is None or info.file_size > cap:
        return f"{name!r} unpacks to {info.file_size:,} bytes, over the {cap or 0:,} a {Path(name).suffix} file may have"
    if info.file_size > 2**20 and info.file_size > MAX_RATIO * max(1, info.compress_size):
        return f"{name!r} unpacks to {info.file_size // max(1, info.compress_size)} times its packed size (a zip bomb?)"
    if info.file_size != listed[name].get("size"):
        return f"{name!r} has {info.file_size:,} bytes, {MANIFEST} says {listed[name].get('size')}"
    return None


def _read_manifest(archive: str, z: zipfile.ZipFile) -> dict[str, Any]:
    try:
        info = z.getinfo(MANIFEST)
    except KeyError:
        raise PortableRunsError(f"{archive}: no {MANIFEST}; not an export of masklab runs") from None
    if info.file_size > CAPS[".json"]:
        raise PortableRunsError(f"{archive}: {MANIFEST} is {info.file_size:,} bytes, over {CAPS['.json']:,}")
    try:
        manifest = json.loads(z.read(MANIFEST))
    except (ValueError, zipfile.BadZipFile, OSError) as e:
        raise PortableRunsError(f"{archive}: {MANIFEST} is unreadable ({describe_error(e)})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict) or not isinstance(manifest.get("runs"), list):
        raise PortableRunsError(f"{archive}: {MANIFEST} is not a masklab runs manifest")
    if int(manifest.get("format", 0)) > FORMAT:
        raise PortableRunsError(f"{archive}: written by a newer masklab (format {manifest['format']}, this one reads {FORMAT})")
    return manifest


def _check_format(path: Path, name: str) -> str | None:
    """Why an unpacked file is not what its name says (None: it reads as its format)."""
    try:
        if path.suffix == ".json":
            obj = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(obj, dict):
                return f"{name!r} is JSON but not an object"
        elif path.suffix == ".parquet":
            missing = [c for c in COLUMNS if c not in pq.read_schema(path).names]
            if missing:
                return f"{name!r} is not a metrics file (no column {', '.join(missing)})"
        elif path.suffix == ".npz" and "/samples/" in name:
            read_sample_file(path)
        elif path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                list(z.files)
    except DamagedFileError as e:
        return str(e)
    except Exception as e:  # any reader's refusal: the file is not what its name says
        return f"{name!r} is not a readable {path.suffix} file ({describe_error(e)})"
    return None


def import_runs(archive: str | Path, workspace=None, *, actor: Identity | None = None) -> ImportReport:
    """Import the runs of an :func:`export_runs` zip into the workspace.

    The archive as a whole is refused (nothing written) when it is not a zip, has no manifest, or
    any member fails a check of the module docstring. A run already in the workspace (the same id)
    or still active is refused by name, the others imported. Each imported run gets ``imported.json``:
    the archive's name and SHA-256, where, when and on which host it was exported, and when it was
    imported.

    Raises:
        PortableRunsError: the archive is refused (the message names it and the first problem).
        PermissionDeniedError: the actor may not import runs (``run.import``: editors).
    """
    path = Path(archive)
    ws = workspace_root(workspace)
    with authorized("run.import", path.name, actor=actor, workspace=ws) as entry:
        report = _import(path, ws)
        entry.update(imported=report.imported, refused=[r for r, _ in report.refused])
    return report


def _import(path: Path, ws: Path) -> ImportReport:
    name = path.name
    if not zipfile.is_zipfile(path):
        raise PortableRunsError(f"{name}: not a zip archive")
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            digest.update(chunk)
    report = ImportReport()
    root = runs_root(ws)
    with zipfile.ZipFile(path) as z:
        manifest = _read_manifest(name, z)
        listed = manifest["files"]
        infos = [i for i in z.infolist() if i.filename != MANIFEST and not i.is_dir()]  # a re-zipped folder's entries
        for info in infos:
            why = _check_member(name, info, listed)
            if why:
                raise PortableRunsError(f"{name}: {why}; nothing imported")
        missing = sorted(set(listed) - {i.filename for i in infos})
        if missing:
            raise PortableRunsError(f"{name}: {MANIFEST} lists {missing[0]!r}, which the archive lacks; nothing imported")
        total = sum(i.file_size for i in infos)
        if total > MAX_TOTAL or total > shutil.disk_usage(root).free - 2**30:
            raise PortableRunsError(f"{name}: unpacks to {total:,} bytes, more than this workspace can take; nothing imported")
        by_run: dict[str, list[zipfile.ZipInfo]] = {}
        tokenizers: dict[str, list[zipfile.ZipInfo]] = {}
        for info in infos:
            m = _RUN_FILE.fullmatch(info.filename)
            if m:
                by_run.setdefault(m["run"], []).append(info)
            else:
                tokenizers.setdefault(_TOKENIZER_FILE.fullmatch(info.filename)["tok"], []).append(info)
        scratch = Path(tempfile.mkdtemp(prefix=".import-", dir=root))
        try:
            # unpack and check everything before the first run is published
            for info in infos:
                target = scratch / info.filename
                target.parent.mkdir(parents=True, exist_ok=True)
                data = z.read(info)
                if _sha256(data) != listed[info.filename].get("sha256"):
                    raise PortableRunsError(f"{name}: {info.filename!r} does not match its SHA-256 in {MANIFEST}; "
                                            "nothing imported")
                target.write_bytes(data)
                why = _check_format(target, info.filename)
                if why:
                    raise PortableRunsError(f"{name}: {why}; nothing imported")
            for run_id in by_run:
                d = scratch / "runs" / run_id
                if malformed_run_id(run_id) or not (d / CONFIG_FILE).is_file():
                    raise PortableRunsError(f"{name}: run {run_id!r} has no {CONFIG_FILE}; nothing imported")
                for ck in list_checkpoints(d):
                    why = checkpoint_problem(ck)
                    if why:
                        raise PortableRunsError(f"{name}: run {run_id}'s checkpoint {ck.name}: {why}; nothing imported")
            provenance = {"archive": name, "archive_sha256": digest.hexdigest(), "exported_at": manifest.get("exported_at"),
                          "exported_from": {"host": manifest.get("host"), "workspace": manifest.get("workspace")},
                          "imported_at": time.time(), "checkpoints": manifest.get("checkpoints")}
            for run_id in by_run:
                src = scratch / "runs" / run_id
                status = json.loads((src / "status.json").read_text(encoding="utf-8")).get("status") \
                    if (src / "status.json").is_file() else None
                if status in ACTIVE:
                    report.refused.append((run_id, f"it was {status} when exported"))
                    continue
                if (root / run_id).exists():
                    report.refused.append((run_id, "a run with this id is already in this workspace (never overwritten)"))
                    continue

                def fill(tmp: Path, src: Path = src) -> None:
                    for p in src.iterdir():
                        shutil.move(str(p), tmp / p.name)
                    atomic_write_json(tmp / IMPORTED_FILE, provenance)

                if publish_folder(root / run_id, fill, marker=CONFIG_FILE):
                    note_write(root / run_id)
                    report.imported.append(run_id)
                else:
                    report.refused.append((run_id, "a run with this id appeared in this workspace meanwhile"))
            for tok, members in tokenizers.items():
                target = ws / "tokenizers" / tok
                if target.exists():
                    continue  # the id is a hash of the tokenizer: the same one is already here

                def fill_tok(tmp: Path, tok: str = tok) -> None:
                    for p in (scratch / "tokenizers" / tok).iterdir():
                        shutil.move(str(p), tmp / p.name)

                if publish_folder(target, fill_tok, marker="tokenizer.json"):
                    report.tokenizers.append(tok)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return report


def read_provenance(d: Path) -> dict[str, Any] | None:
    """The run folder's ``imported.json`` (where an imported run came from), None for a run made here
    or an unreadable file."""
    try:
        obj = json.loads((Path(d) / IMPORTED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None
