"""``python -m engine models import|list|show|export|delete`` and ``python -m engine predict``."""

from __future__ import annotations

import json
import sys

import numpy as np


def _floats3(text: str) -> list[float]:
    vals = [float(v) for v in text.split(",")]
    if len(vals) != 3:
        raise ValueError(f"{text!r}: give three numbers R,G,B")
    return vals


def add_parsers(sub) -> None:
    """Add ``models`` and ``predict`` to the CLI's subcommands."""
    m = sub.add_parser("models", help="pretrained models: import a published MAE or BERT checkpoint, list, delete")
    ms = m.add_subparsers(dest="models_cmd", required=True)
    mi = ms.add_parser("import", help="import a Hugging Face save_pretrained folder (ViTMAEForPreTraining, "
                       "ViTMAEModel, BertForMaskedLM), the MAE repository's .pth, or a Hub id (needs network)")
    mi.add_argument("path")
    mi.add_argument("--name", required=True)
    mi.add_argument("--num-heads", type=int, help="encoder heads of a .pth whose shapes match no released preset")
    mi.add_argument("--decoder-num-heads", type=int, help="decoder heads of such a .pth")
    mi.add_argument("--image-mean", type=_floats3, help="R,G,B mean of a .pth's inputs (ImageNet's by default)")
    mi.add_argument("--image-std", type=_floats3, help="R,G,B std of a .pth's inputs (ImageNet's by default)")
    ms.add_parser("list", help="imported models")
    mw = ms.add_parser("show", help="show an imported model on a dataset of its modality: a background run of 0 "
                       "steps (model.init_from) to open on Run detail, Compare and Presentation")
    mw.add_argument("name")
    mw.add_argument("--dataset", required=True)
    me = ms.add_parser("export", help="export a run's checkpoint or an imported model: --format hf writes a folder "
                       "that transformers loads (ViTMAEForPreTraining, or BertForMaskedLM with its tokenizer), "
                       "--format mae the MAE repository's .pth")
    me.add_argument("source", help="an imported model's name or a run id")
    me.add_argument("out_dir", help="a new (or empty) folder to write the export into")
    me.add_argument("--format", choices=("hf", "mae"), default="hf", dest="format",
                    help="hf: Hugging Face save_pretrained folder (default); mae: the MAE repository's .pth")
    me.add_argument("--step", type=int, help="a run's checkpoint step (the latest by default)")
    md = ms.add_parser("delete", help="delete an imported model")
    md.add_argument("name")
    p = sub.add_parser("predict", help="what the masking and fill-in boxes do, from the command line: a run's "
                       "checkpoint or an imported model")
    p.add_argument("source", help="a run id or an imported model's name")
    p.add_argument("--step", type=int, help="a run's checkpoint step (the latest by default)")
    p.add_argument("--images", help="float32 [B, C, H, W] in [0, 1] (.npy)")
    p.add_argument("--mask", help="bool [B, L], row-major patches, True = masked (.npy)")
    p.add_argument("--out", help="where to write the prediction, float32 [B, C, H, W] in [0, 1] (.npy)")
    p.add_argument("--text", help="a sentence with one or more [MASK]")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--json", action="store_true", help="print JSON (text)")


def cmd_models(args) -> int:
    from engine.pretrained.store import list_pretrained  # noqa: PLC0415 (the CLI's read-only commands start without torch)

    if args.models_cmd == "import":
        from engine.pretrained.manage import import_path  # noqa: PLC0415 (the CLI's read-only commands start without torch)

        opts = {k: getattr(args, k) for k in ("num_heads", "decoder_num_heads", "image_mean", "image_std")
                if getattr(args, k) is not None}
        info = import_path(args.path, args.name, opts)  # the role check and audit line of model.import
        print(f"imported {info.name}: {info.arch} ({info.modality}), {info.n_params:,} parameters  ({info.path})")
        for note in info.source.get("notes", []):
            print(f"note: {note}", file=sys.stderr)
        if info.source.get("ignored"):
            print(f"ignored tensors (heads masklab does not use): {', '.join(info.source['ignored'])}", file=sys.stderr)
        return 0
    if args.models_cmd == "list":
        for info in list_pretrained():
            print(f"{info.name}\t{info.arch}\t{info.modality}\t{info.n_params:,}\t{info.source.get('path', '')}")
        return 0
    if args.models_cmd == "show":
        from engine.pretrained.manage import show_pretrained  # noqa: PLC0415 (the CLI's read-only commands start without torch)

        print(show_pretrained(args.name, args.dataset))
        return 0
    if args.models_cmd == "export":
        from engine.pretrained.export import export_model  # noqa: PLC0415 (the CLI's read-only commands start without torch)

        rep = export_model(args.source, args.out_dir, args.format, args.step)
        print(f"exported {rep.what} ({rep.arch}) to {rep.path}: {', '.join(rep.files)}")
        for note in rep.notes:
            print(f"note: {note}", file=sys.stderr)
        return 0
    if args.models_cmd == "delete":
        from engine.pretrained.manage import delete_pretrained  # noqa: PLC0415 (the CLI's read-only commands start without torch)

        delete_pretrained(args.name)
        print(f"deleted {args.name}")
        return 0
    return 2


def cmd_predict(args) -> int:
    from engine.pretrained.predict import predict_images, predict_text  # noqa: PLC0415 (the CLI's read-only commands start without torch)

    if args.text is not None:
        out = predict_text(args.source, args.text, top_k=args.top_k, step=args.step)
        if args.json:
            print(json.dumps(out))
        else:
            for item in out:
                pairs = "  ".join(f"{t} {p:.3f}" for t, p in zip(item["tokens"], item["probs"]))
                print(f"[MASK] at {item['position']}: {pairs}")
        return 0
    if not (args.images and args.mask and args.out):
        print("error: give --text, or --images X.npy --mask M.npy --out Y.npy", file=sys.stderr)
        return 2
    images = np.load(args.images, allow_pickle=False)
    mask = np.load(args.mask, allow_pickle=False)
    pred = predict_images(args.source, images, mask, step=args.step)
    np.save(args.out, pred)
    print(f"wrote {args.out}: {pred.dtype} {list(pred.shape)}")
    return 0
