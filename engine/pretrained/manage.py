"""What the dashboard does with imported models: import one from an upload, a path or a Hub id,
show it on a dataset (a run of 0 steps, :func:`view_config`), delete it.
Each write checks the actor's role and is audited (``model.import``, ``model.delete``, and
``run.submit`` for a view), as every other write of the dashboard.

Uploads follow the data import's refusal rules (:mod:`engine.data.archive`): a member whose name
leaves the archive, a link, an encrypted or damaged member, one over the size limit or compressed
past the ratio limit is refused, naming the file and the member; files a checkpoint folder does not
need (a README, ``pytorch_model.bin`` beside the safetensors) are skipped and listed.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from engine.access.policy import Identity, authorize, authorized
from engine.errors import ConfigError, DatasetError
from engine.pretrained.registry import PretrainedError
from engine.pretrained.store import PretrainedModel, get_pretrained, models_root
from engine.workspace import workspace_root

#: The files of a ``save_pretrained`` folder that masklab reads; an upload's other files are skipped.
FOLDER_FILES = ("config.json", "model.safetensors", "preprocessor_config.json", "tokenizer.json", "vocab.txt",
                "tokenizer_config.json", "special_tokens_map.json")
#: Single-file checkpoints (the MAE repository's layout).
PTH_SUFFIXES = (".pth", ".pt")
#: The largest member of an uploaded checkpoint (a ViT-H/14 MAE with its decoder is about 2.6 GB).
MAX_MODEL_BYTES = 4 * 2**30


def stage_upload(files: list[tuple[str, bytes]], dest: Path) -> tuple[Path, list[str]]:
    """Lay out uploaded files as the importer reads them, under ``dest`` (files a checkpoint does not
    need, such as a README, are skipped and listed).

    Args:
        files: ``(file name, content)`` of each uploaded file: one ``.pth``; one ``.zip`` of a
            ``save_pretrained`` folder (or of one ``.pth``); or the folder's files themselves.
        dest: an empty scratch folder.

    Returns:
        ``(path, skipped)``: the checkpoint to import (a folder or a ``.pth``) and the files left
        out, each ``"name: why"``.

    Raises:
        PretrainedError: nothing to import, a refused member (naming the file and why), files of
            several checkpoints at once.
    """
    from engine.data.archive import Members, decode_names, size_problem, unsafe_path  # noqa: PLC0415 (charset detection loads only for an upload)
    from engine.data.limits import ImportLimits  # noqa: PLC0415 (with the archive reader)

    if not files:
        raise PretrainedError("no file uploaded: give a .pth, a .zip of a save_pretrained folder, or its files")
    names = [PurePosixPath(n).name for n, _ in files]
    if len(files) == 1 and names[0].lower().endswith(PTH_SUFFIXES):
        out = dest / names[0]
        out.write_bytes(files[0][1])
        return out, []
    skipped: list[str] = []
    folder = dest / "checkpoint"
    folder.mkdir()
    if len(files) == 1 and names[0].lower().endswith(".zip"):
        archive = dest / names[0]
        archive.write_bytes(files[0][1])
        limits = ImportLimits.from_env().model_copy(update={"max_member_bytes": MAX_MODEL_BYTES})
        try:
            with Members(archive, names[0], limits) as ms:
                decode_names(ms.members)
                wanted = []
                for m in ms.members:
                    why = unsafe_path(m.name) or m.problem
                    if why:
                        raise PretrainedError(f"{names[0]}: {m.name}: {why}")
                    base = PurePosixPath(m.name).name
                    if base.lower().endswith(PTH_SUFFIXES) or base in FOLDER_FILES:
                        if (why := size_problem(m, limits)) is not None:
                            raise PretrainedError(f"{names[0]}: {m.name}: {why}")
                        wanted.append((m, base))
                    elif not m.name.endswith("/"):
                        skipped.append(f"{m.name}: not a file of a checkpoint masklab reads")
                bases = [b for _, b in wanted]
                if len(set(bases)) != len(bases):
                    raise PretrainedError(f"{names[0]}: holds more than one checkpoint ({', '.join(sorted(bases))}); "
                                          "upload one at a time")
                pth = [(m, b) for m, b in wanted if b.lower().endswith(PTH_SUFFIXES)]
                if pth and len(wanted) == 1:
                    out = dest / pth[0][1]
                    out.write_bytes(_read(pth[0][0], names[0]))
                    return out, skipped
                for m, b in wanted:
                    (folder / b).write_bytes(_read(m, names[0]))
        except DatasetError as e:
            raise PretrainedError(str(e)) from None
    else:
        for (n, data), base in zip(files, names):
            if base.lower().endswith(PTH_SUFFIXES + (".zip",)):
                raise PretrainedError(f"{n}: upload a .pth or a .zip alone, not with other files")
            if base not in FOLDER_FILES:  # a README, .gitattributes, masklab_export.json...
                skipped.append(f"{n}: not a file of a checkpoint masklab reads")
                continue
            if (folder / base).exists():
                raise PretrainedError(f"{n}: uploaded twice")
            (folder / base).write_bytes(data)
    if not (folder / "config.json").is_file():
        raise PretrainedError("the upload has no config.json: give every file of the save_pretrained folder "
                              "(config.json, model.safetensors, and the processor or tokenizer files), or its .zip")
    return folder, skipped


def _read(member, label: str) -> bytes:
    from engine.data.archive import read_problem  # noqa: PLC0415 (with the archive reader)

    try:
        return member.read()
    except Exception as e:  # noqa: BLE001 (zipfile raises many kinds; read_problem names each)
        raise PretrainedError(f"{label}: {member.name}: {read_problem(e)}") from None


def import_upload(files: list[tuple[str, bytes]], name: str, options: dict[str, Any] | None = None, workspace=None,
                  *, actor: Identity | None = None) -> tuple[PretrainedModel, list[str]]:
    """Import uploaded checkpoint files as the model ``name`` (:func:`stage_upload`, then
    :func:`engine.pretrained.importers.import_model`); the scratch copy is removed either way.

    Returns:
        ``(model, skipped)``: the imported model's record and the upload's files left out.

    Raises:
        PretrainedError: refused (nothing registered). PermissionDeniedError: not an editor.
    """
    from engine.pretrained.importers import import_model  # noqa: PLC0415 (torch loads with an import, not with the page)

    ws = workspace_root(workspace)
    with authorized("model.import", name, actor=actor, workspace=ws):
        scratch = Path(tempfile.mkdtemp(prefix=".upload-", dir=models_root(ws).parent))
        try:
            path, skipped = stage_upload(files, scratch)
            # the record names what was uploaded, not the scratch copy (removed below)
            opts = {**(options or {}), "source_path": "upload: " + ", ".join(n for n, _ in files)}
            return import_model(str(path), name, opts, ws), skipped
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def import_path(path: str, name: str, options: dict[str, Any] | None = None, workspace=None,
                *, actor: Identity | None = None) -> PretrainedModel:
    """Import a folder or ``.pth`` on this machine, or a Hub id (:func:`engine.pretrained.importers.import_model`),
    as the model ``name``, with the actor's role checked and audited.

    Raises:
        PretrainedError: refused (nothing registered). PermissionDeniedError: not an editor.
    """
    from engine.pretrained.importers import import_model  # noqa: PLC0415 (torch loads with an import, not with the page)

    ws = workspace_root(workspace)
    with authorized("model.import", name, actor=actor, workspace=ws):
        return import_model(path, name, options, ws)


def delete_pretrained(name: str, workspace=None, *, actor: Identity | None = None) -> None:
    """Delete the imported model ``name`` (admins). Runs started from it keep working: each keeps
    its architecture and its own checkpoint.

    Raises:
        PretrainedError: no such model. PermissionDeniedError: not an admin.
    """
    ws = workspace_root(workspace)
    with authorized("model.delete", name, actor=actor, workspace=ws):
        info = get_pretrained(name, ws)
        gone = info.path.with_name(f".deleting-{info.path.name}")
        info.path.rename(gone)  # one step: readers see the whole model or none
        shutil.rmtree(gone, ignore_errors=True)


def view_config(name: str, dataset: str, workspace=None) -> dict[str, Any]:
    """The run config that shows the imported model ``name`` on ``dataset`` without training it:
    the task that trains its architecture (``Task.init_from_arch``), ``model.init_from``, what the
    task's ``init_view`` sets (its masking and the fields the model fixes), ``train.steps`` 0. A dict
    for :meth:`engine.config.RunConfig.from_dict`.

    Raises:
        ConfigError: no such model, or no task trains its architecture.
    """
    from engine.pretrained.runs import record  # noqa: PLC0415 (torch loads with a run, not with the page)
    from engine.tasks import TASK_REGISTRY  # noqa: PLC0415 (as above)

    try:
        info = get_pretrained(name, workspace)
    except PretrainedError as e:
        raise ConfigError(f"model.init_from: {e}") from None
    tasks = [t for t in TASK_REGISTRY.values() if t.init_from_arch == info.arch and t.trains_on(info.modality)]
    if not tasks:
        raise ConfigError(f"model.init_from: no task trains {info.arch} models ({name}); it cannot be shown on a dataset")
    rec = record(info)
    cfg: dict[str, Any] = {"name": f"{name} on {dataset}", "task": tasks[0].name, "data": {"dataset": dataset},
                           "model": {"arch": info.arch, "init_from": name},
                           "train": {"steps": 0, "batch_size": 32, "num_vis": 8}}
    for section, fields in tasks[0].init_view(rec).items():
        cfg[section] = {**cfg.get(section, {}), **fields}
    return cfg


def fixed_by_source(cfg: dict[str, Any], workspace=None) -> dict[str, Any]:
    """The fields of a run config (a dict) that its ``model.init_from`` fixes, with the source's
    values: for an imported architecture (an imported model, or a run that started from one), what
    its task's ``init_view`` sets apart from the masking (e.g. an MAE's patch size and norm-pix
    setting, a BERT's positions); ``{}`` for a fork of masklab's own architectures. A partial run
    config, for New run to put over its form.

    Raises:
        ConfigError: no such source or task.
    """
    from engine.config import RunConfig  # noqa: PLC0415 (pydantic loads only where a run is made)
    from engine.pretrained.runs import resolve_init  # noqa: PLC0415 (torch loads with a run, not with the page)
    from engine.tasks import get_task, resolve  # noqa: PLC0415 (as above)

    run_cfg = RunConfig.from_dict(cfg)
    if not run_cfg.model.init_from:
        return {}
    rec = resolve_init(run_cfg, workspace).record
    if rec is None:
        return {}
    view = get_task(resolve(run_cfg).task).init_view(rec)
    return {k: v for k, v in view.items() if k != "masking"}


def source_input_shape(cfg: Any, workspace=None) -> tuple[int, int, int] | None:
    """The ``(C, H, W)`` images a run's ``model.init_from`` takes when it is an imported image
    architecture (an imported model, or a run that started from one): New run's mask preview draws
    the dataset's images fitted to it, as the run will. None for a fork of masklab's own architectures,
    a text model or no ``init_from``.

    Raises:
        ConfigError: no such source.
    """
    from engine.pretrained.runs import input_shape, resolve_init  # noqa: PLC0415 (torch loads with a run, not with the page)

    if not cfg.model.init_from:
        return None
    rec = resolve_init(cfg, workspace).record
    if rec is None or "in_chans" not in (rec.get("arch_config") or {}):
        return None
    return input_shape(rec)


def show_pretrained(name: str, dataset: str, workspace=None, *, actor: Identity | None = None) -> str:
    """Submit the run that shows the imported model ``name`` on ``dataset`` without training it
    (:func:`engine.pretrained.runs.view_config`); returns its run id.

    Raises:
        PermissionDeniedError: ``actor`` may not launch runs, or demo mode; checked (and audited) first.
        ConfigError: no such model, or a dataset of another modality. Whatever
            :func:`engine.runner.launcher.submit` raises.
    """
    from engine.config import RunConfig  # noqa: PLC0415 (the config loads pydantic only where a run is made)
    from engine.runner.launcher import submit  # noqa: PLC0415 (the launcher loads with a run, not with the page)

    authorize("run.submit", f"{name} on {dataset}", actor=actor, workspace=workspace)  # before the model is read
    return submit(RunConfig.from_dict(view_config(name, dataset, workspace)), workspace, actor=actor)
