"""``python -m engine models export SOURCE OUT_DIR --format hf|mae`` (issue 33): a run's checkpoint or
an imported model in the layout ``transformers`` or the MAE repository reads.

``SOURCE`` is an imported model's name (``models/<name>/``, looked up first) or a run id (its
checkpoint at ``step``, the latest by default). What each architecture becomes
(:mod:`engine.pretrained.exporters`)::

    arch      --format hf                                              --format mae
    mae_vit   ViTMAEForPreTraining folder: config.json,                the MAE repository's .pth
              model.safetensors, preprocessor_config.json              ({"model": state_dict})
    bert_hf   BertForMaskedLM folder: config.json, model.safetensors,  refused (not an image MAE)
              tokenizer.json, tokenizer_config.json, special_tokens_map.json

Any other architecture (masklab's pre-LN ``bert``, ``simmim_vit``, ``t5_span``, the audio and
paired models) is refused before any weight is read, saying why (:data:`REFUSED`); so are an MAE
with rectangular patches or a non-square patch grid (once loaded), an imported model given a
``step``, and an ``OUT_DIR`` that exists and is not empty. Every export also holds
``masklab_export.json`` (what was exported, from which run and step, the notes). The files are
written into a hidden temporary folder beside ``OUT_DIR`` and renamed into place at the end
(:func:`engine.workspace.publish_folder`): a refused or failed export leaves no ``OUT_DIR``.

An image model's input statistics (``preprocessor_config.json``'s ``image_mean`` / ``image_std``):
a masklab run reads pixels in [0, 1] as they are (mean 0, std 1 per channel); an imported model,
its recorded preprocessing; a run started from an imported model, that model's ``input_mean`` /
``input_std``. ``transformers`` is never imported here: the files are written by hand.

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners"; Devlin et al. 2019, BERT.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.errors import RunNotFoundError
from engine.pretrained.store import MODEL_FILE, PretrainedError, get_pretrained, list_pretrained, models_root
from engine.workspace import publish_folder

#: ``--format`` -> what it writes.
FORMATS = {"hf": "a Hugging Face save_pretrained folder", "mae": "the MAE repository's .pth"}
#: Architectures masklab exports, and their formats.
EXPORTS = {"mae_vit": ("hf", "mae"), "bert_hf": ("hf",)}
#: Why each other registered architecture is refused.
REFUSED = {
    "bert": "masklab's own pre-LN BERT (a final LayerNorm, no embedding LayerNorm, no token types, eps 1e-6) "
            "computes something BertForMaskedLM cannot; train with model.arch bert_hf (BERT exactly as "
            "published) to export a text model",
    "simmim_vit": "SimMIM runs one encoder over every patch with mask tokens and a linear pixel head; "
                  "ViTMAEForPreTraining (an encoder of the visible patches and a decoder) cannot hold it",
    "t5_span": "the T5-style span infiller is an encoder-decoder that writes spans; neither "
               "BertForMaskedLM nor ViTMAE can hold it",
    "audio_mae_vit": "AudioMAE reads spectrograms (mel bins x frames: a non-square patch grid, often rectangular "
                     "patches); transformers' ViTMAE takes square images cut into square patches",
    "frame_transformer": "the frame Transformer masks spectrogram frames (and may predict a teacher's "
                         "features); transformers' ViTMAE and BertForMaskedLM cannot hold it",
    "m3ae": "M3AE is a paired image-text model (one encoder over patches and tokens, two heads); "
            "transformers has no class that holds it",
    "flava": "the FLAVA-style model is a paired image-text model (three encoders, two heads); "
             "transformers has no class that holds it",
}
#: The provenance file every export holds.
EXPORT_FILE = "masklab_export.json"


@dataclass
class ExportReport:
    """What :func:`export_model` wrote.

    Attributes:
        path: ``OUT_DIR``. format: ``"hf"`` or ``"mae"``. what: the source in words
            (``run ID at step N`` / ``imported model NAME``). arch: its architecture.
        step: the run's checkpoint step (None for an imported model).
        files: the files written, sorted.
        notes: what the format cannot carry, or how to read the export back.
        import_options: ``--format mae``: the options :func:`engine.pretrained.importers.import_model`
            needs to read the ``.pth`` back as this model (head counts, mean, std); ``{}`` otherwise.
    """

    path: Path
    format: str
    what: str
    arch: str
    step: int | None
    files: list[str]
    notes: list[str] = field(default_factory=list)
    import_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Source:
    """A resolved ``SOURCE``: ``kind`` ``"model"`` (``info``) or ``"run"`` (``config``), before any weight is read."""

    kind: str
    name: str
    arch: str
    what: str
    info: Any = None
    config: Any = None


def export_model(source: str, out_dir: str | Path, fmt: str = "hf", step: int | None = None,
                 workspace=None) -> ExportReport:
    """Export the imported model or run ``source`` to the new folder ``out_dir`` in format ``fmt``.

    Args:
        source: an imported model's name, else a run id.
        out_dir: a folder that does not exist yet (or is empty); its parent is created if needed.
        fmt: ``"hf"`` (``ViTMAEForPreTraining`` / ``BertForMaskedLM`` folder) or ``"mae"`` (the MAE
            repository's ``.pth``, image MAEs only).
        step: a run's checkpoint step (the latest when None); an imported model has none.

    Returns:
        An :class:`ExportReport`.

    Raises:
        PretrainedError: an unknown format or source, ``out_dir`` not empty, an architecture or
            model the format cannot express (saying why), ``step`` for an imported model; nothing
            is written then.
        InferenceError: the run keeps no checkpoint (at ``step``).

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners"; Devlin et al. 2019, BERT.
    """
    if fmt not in FORMATS:
        raise PretrainedError(f"--format {fmt!r}: masklab exports {', '.join(FORMATS)} "
                              f"({'; '.join(f'{k}: {v}' for k, v in FORMATS.items())})")
    out = Path(out_dir).expanduser()
    check_out_dir(out)
    src = _resolve(source, step, workspace)
    check_arch(src.arch, fmt, src.what)
    if src.arch == "mae_vit":
        files, notes, options, step = _image_files(src, fmt, step, workspace)
    else:
        files, notes, options, step = _text_files(src, step, workspace)
    if fmt == "mae" and options:
        flags = _import_flags(options)
        if flags:
            notes.append(f"to import it back: python -m engine models import {out / next(iter(files))} --name NAME "
                         f"{flags}")
    what = src.what if step is None else f"{src.what} at step {step}"
    record = {"source": {"kind": src.kind, "name": src.name, "step": step}, "arch": src.arch, "format": fmt,
              "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "notes": notes,
              "import_options": options}
    files[EXPORT_FILE] = (json.dumps(record, indent=2) + "\n").encode("utf-8")
    _publish(out, files)
    return ExportReport(out, fmt, what, src.arch, step, sorted(files), notes, options)


def check_out_dir(out: Path) -> None:
    """Refuse an ``out`` that exists and is not an empty folder (an export never writes over files).

    Raises:
        PretrainedError: naming ``out`` and what is there.
    """
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise PretrainedError(f"{out}: exists and is not a folder; give a new folder to export into")
    if out.is_dir() and any(out.iterdir()):
        raise PretrainedError(f"{out}: exists and is not empty; give a new (or empty) folder to export into "
                              "(an export never writes over files)")


def check_arch(arch: str, fmt: str, what: str) -> None:
    """Refuse an architecture ``fmt`` cannot express, saying why (:data:`REFUSED`).

    Raises:
        PretrainedError: naming ``what``, its ``arch`` and the reason.
    """
    if arch not in EXPORTS:
        why = REFUSED.get(arch, f"masklab has no exporter for {arch!r}")
        raise PretrainedError(f"{what} (model.arch {arch}) cannot be exported: {why}. masklab exports "
                              "mae_vit (--format hf or mae) and bert_hf (--format hf)")
    if fmt not in EXPORTS[arch]:
        raise PretrainedError(f"{what} (model.arch {arch}): --format {fmt} ({FORMATS[fmt]}) holds image MAEs only; "
                              f"export it with --format {' or '.join(EXPORTS[arch])}")


def _resolve(source: str, step: int | None, workspace) -> _Source:
    """The imported model or run ``source``, its architecture read from its record or config (no weights)."""
    from engine.config import RunConfig  # noqa: PLC0415 (a run's config: only when SOURCE is a run)
    from engine.store import get_run  # noqa: PLC0415 (as above)

    if (models_root(workspace) / source / MODEL_FILE).is_file():
        info = get_pretrained(source, workspace)
        if step is not None:
            raise PretrainedError(f"{source} is an imported model: it has no checkpoint steps (--step is for runs)")
        return _Source("model", source, info.arch, f"imported model {source}", info=info)
    try:
        rec = get_run(source, workspace)
    except RunNotFoundError:
        known = ", ".join(m.name for m in list_pretrained(workspace)) or "none"
        raise PretrainedError(f"no imported model or run named {source!r} (imported models: {known})") from None
    cfg = RunConfig.from_dict(rec.config)
    return _Source("run", source, cfg.model.arch, f"run {source}", config=cfg)


def _image_files(src: _Source, fmt: str, step: int | None,
                 workspace) -> tuple[dict[str, bytes], list[str], dict[str, Any], int | None]:
    """``(files, notes, import options, step)`` of an image MAE."""
    from engine.pretrained.exporters.image import (  # noqa: PLC0415 (torch and the MAE load only when an image model is exported)
        PTH_FILE,
        check_exportable,
        mae_pth_file,
        vitmae_files,
    )

    if src.kind == "model":
        from engine.pretrained.store import load_pretrained  # noqa: PLC0415 (torch loads only when weights are read)

        model, info = load_pretrained(src.name, workspace)
        mean, std = list(info.preprocessing["mean"]), list(info.preprocessing["std"])
        ratio = 0.75  # MAE's; an imported record keeps no masking ratio
    else:
        from engine.eval.inference import load_model  # noqa: PLC0415 (loads the run's task code and torch)

        loaded = load_model(src.name, step, workspace)
        model, step = loaded.model, loaded.step
        C = int(getattr(model, "in_chans", 1))
        if getattr(model, "input_norm", False):  # a run started from an imported model: its processor's
            mean, std = model.input_mean.flatten().tolist(), model.input_std.flatten().tolist()
        else:  # masklab's own run reads pixels in [0, 1] as they are
            mean, std = [0.0] * C, [1.0] * C
        ratio = float(loaded.cfg.masking.ratio)
    check_exportable(model, src.what)
    if fmt == "hf":
        return vitmae_files(model, mean, std, ratio), [], {}, step
    data, options, notes = mae_pth_file(model, mean, std)
    return {PTH_FILE: data}, notes, options, step


def _text_files(src: _Source, step: int | None,
                workspace) -> tuple[dict[str, bytes], list[str], dict[str, Any], int | None]:
    """``(files, notes, {}, step)`` of an exact BERT and its tokenizer."""
    from engine.pretrained.exporters.text import (  # noqa: PLC0415 (torch and the BERT load only when a text model is exported)
        BERT_TOKENIZER,
        TokenizerExport,
        bert_files,
        tokenizer_export,
    )

    if src.kind == "model":
        from engine.pretrained.store import load_pretrained  # noqa: PLC0415 (torch loads only when weights are read)

        model, info = load_pretrained(src.name, workspace)
        prep = info.preprocessing
        name = prep["tokenizer"]
        try:
            data = (info.path / name).read_bytes()
        except OSError as e:
            raise PretrainedError(f"{info.path / name}: the imported model's tokenizer cannot be read ({e})") from e
        flags = dict(lowercase=bool(prep["lowercase"]), strip_accents=prep.get("strip_accents"),
                     tokenize_chinese_chars=bool(prep.get("tokenize_chinese_chars", True)))
        if name == "tokenizer.json":
            tok = replace(tokenizer_export(data.decode("utf-8"), prep["special_tokens"], prep["max_len"]),
                          files={name: data})
            if tok.tokenizer_class == BERT_TOKENIZER:  # the recorded flags win, as in transformers 5
                tok = replace(tok, **flags)
        else:  # vocab.txt: BertTokenizer builds BERT's pipeline from it
            tok = TokenizerExport({name: data}, dict(prep["special_tokens"]), int(prep["max_len"]), BERT_TOKENIZER,
                                  **flags)
        pad_id = int(prep["special"]["pad"])
    else:
        from engine.eval.inference import load_model  # noqa: PLC0415 (loads the run's task code and torch)
        from engine.tasks.text.inference import tokenizer_of  # noqa: PLC0415 (the run's tokenizer: text runs only)
        from engine.text.tokenizer import SPECIAL_ROLES, SPECIAL_TOKENS  # noqa: PLC0415 (as above)

        loaded = load_model(src.name, step, workspace)
        model, step = loaded.model, loaded.step
        rt = tokenizer_of(loaded, workspace)
        specials = rt.special_tokens or dict(zip(SPECIAL_ROLES, SPECIAL_TOKENS))
        tok = tokenizer_export(rt.to_str(), specials, int(loaded.cfg.data.tokenizer.max_len))
        pad_id = int(rt.pad_id)
    return bert_files(model, tok, pad_id), [], {}, step


def _import_flags(options: dict[str, Any]) -> str:
    """The ``python -m engine models import`` flags of importer ``options`` (``--image-mean`` takes 3 values)."""
    flags = []
    for key, flag in (("num_heads", "--num-heads"), ("decoder_num_heads", "--decoder-num-heads")):
        if key in options:
            flags.append(f"{flag} {options[key]}")
    for key, flag in (("image_mean", "--image-mean"), ("image_std", "--image-std")):
        if key in options and len(options[key]) == 3:
            flags.append(f"{flag} {','.join(f'{v:g}' for v in options[key])}")
    return " ".join(flags)


def _publish(out: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` into a temporary folder beside ``out`` and rename it to ``out``.

    Raises:
        PretrainedError: ``out`` appeared meanwhile, or the folder cannot be written (nothing is left).
    """
    def fill(tmp: Path) -> None:
        for name, data in files.items():
            (tmp / name).write_bytes(data)

    marker = next(iter(files))
    try:
        done = publish_folder(out, fill, marker=marker)
    except OSError as e:
        if out.is_dir() and any(out.iterdir()):
            raise PretrainedError(f"{out}: appeared meanwhile and is not empty; nothing was exported") from e
        raise PretrainedError(f"{out}: the export cannot be written ({e}); nothing was exported") from e
    if not done:
        raise PretrainedError(f"{out}: another export wrote it meanwhile; nothing was exported")


def export_zip(source: str, fmt: str = "hf", step: int | None = None, workspace=None) -> bytes:
    """:func:`export_model` of ``source`` as one ``.zip`` (the dashboard's download): the export's
    files at the archive's top level, written in a scratch folder that is removed afterwards.

    Raises:
        PretrainedError: as :func:`export_model` (an architecture that cannot be exported...).
    """
    import io  # noqa: PLC0415 (only a download builds an archive)
    import shutil  # noqa: PLC0415 (as above)
    import tempfile  # noqa: PLC0415 (as above)
    import zipfile  # noqa: PLC0415 (as above)

    scratch = Path(tempfile.mkdtemp(prefix="masklab-export-"))
    try:
        out = scratch / "export"
        export_model(source, out, fmt, step, workspace)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:  # weights do not compress
            for f in sorted(out.iterdir()):
                z.write(f, f.name)
        return buf.getvalue()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
