"""``python -m engine models export`` (issue 33, export): masklab's models as transformers and the MAE
repository read them.

One workspace for the module: a tiny MAE trained 3 steps on the bundled ``digits`` (8x8 grey, 2x2
patches, norm-pix), two exact-BERT (``bert_hf``) runs of 3 steps on the first 400 TREC questions
(a WordPiece and a character tokenizer), and imported checkpoints made by transformers
(:mod:`tests.pretrained_image_checkpoints`, :mod:`tests.pretrained_text_checkpoints`): a
``ViTMAEForPreTraining`` folder, the same kind of model as an MAE ``.pth``, a ``BertForMaskedLM``
with ``tokenizer.json`` and a ``BertForPreTraining`` with ``vocab.txt``. What an export must give:
transformers' own output equal to masklab's (float32 on the CPU, to :data:`TOL`), an imported
checkpoint's tensors back bit for bit, a ``.pth`` that re-imports to the same predictions, and
refusals that say why and write nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from engine.cli import main as cli_main
from engine.config import RunConfig
from engine.eval.inference import load_model
from engine.models import BERT_HF_PRESETS, MODEL_REGISTRY
from engine.models.mae import MaskedAutoencoderViT
from engine.pretrained.export import EXPORTS, REFUSED, export_model
from engine.pretrained.exporters.image import check_exportable
from engine.pretrained.image import build_mae_vit
from engine.pretrained.importers import import_model
from engine.pretrained.manage import view_config
from engine.pretrained.predict import predict_images, predict_text
from engine.pretrained.store import PretrainedError, PretrainedModel, get_pretrained, save_pretrained
from engine.store import create_run
from engine.tasks.text.inference import tokenizer_of
from tests.pretrained_image_checkpoints import (
    MEAN,
    STD,
    hf_model,
    hf_prediction,
    mae_state_dict,
    save_hf_folder,
    save_mae_pth,
)
from tests.pretrained_text_checkpoints import make_checkpoint
from tests.runs import import_dataset
from tests.stamps import completed_run

transformers = pytest.importorskip("transformers")

TOL = 1e-5
ROOT = Path(__file__).resolve().parents[2]
SHORT = {"batch_size": 32, "device": "cpu", "num_threads": 1, "warmup_steps": 1, "steps": 3, "eval_interval": 3,
         "checkpoint_interval": 3}
MAE_RUN = {"name": "export-mae", "data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
           "objective": {"norm_pix_loss": True}, "train": SHORT}
#: The smallest exact-BERT preset (width, then depth).
BERT_PRESET = min(BERT_HF_PRESETS, key=lambda p: (BERT_HF_PRESETS[p]["embed_dim"], BERT_HF_PRESETS[p]["depth"]))


def bert_run_config(kind: str) -> dict:
    return {"name": f"export-bert-{kind}", "task": "text_mlm",
            "data": {"dataset": "trec", "tokenizer": {"kind": kind, "vocab_size": 300, "max_len": 32}},
            "model": {"arch": "bert_hf", "preset": BERT_PRESET}, "masking": {"strategy": "random", "ratio": 0.15},
            "train": {**SHORT, "batch_size": 8}}


class Lab:
    """The module's workspace: its runs (trained on first use) and imported checkpoints."""

    def __init__(self, root: Path, shared_data: Path):
        self.root, self.ws = root, root / "workspace"
        self.ws.mkdir()
        import_dataset("trec400", self.ws, shared_data)
        rows = (shared_data / "trec" / "train.tsv").read_text(encoding="utf-8").splitlines()
        #: Real TREC questions the runs never trained on (rows 401-405), and one with a [MASK].
        self.sentences = [r.split("\t")[2] for r in rows[401:406]]
        words = self.sentences[1].split()
        self.sentences.append(" ".join(words[:1] + ["[MASK]"] + words[2:]))  # early: a char run reads 30 characters
        self.hf_vitmae = hf_model(seed=0)  # 32x32 RGB, 8x8 patches, pixels (no norm-pix)
        import_model(str(save_hf_folder(self.hf_vitmae, root / "vitmae")), "vitmae", workspace=self.ws)
        normpix = hf_model(seed=1, image_size=64, patch_size=16, num_hidden_layers=3, norm_pix_loss=True)
        self.pth = save_mae_pth(mae_state_dict(normpix), root / "normpix.pth")
        import_model(str(self.pth), "pth", {"num_heads": 4, "decoder_num_heads": 4}, workspace=self.ws)
        self.bert_dirs = {
            "mlm-json": make_checkpoint(root / "mlm-json", tokenizer="json", layout="shuffled", seed=3),
            "pretraining-vocab": make_checkpoint(root / "pretraining-vocab", arch="BertForPreTraining",
                                                 tokenizer="vocab", lowercase=False, layout="bertbase", seed=4),
        }
        for name, folder in self.bert_dirs.items():
            import_model(str(folder), name, workspace=self.ws)
        self._runs: dict[str, str] = {}

    def run(self, kind: str) -> str:
        """Run id of ``mae``, ``bert-wordpiece``, ``bert-char`` or ``view`` (the imported ViTMAE shown on digits, 0 steps)."""
        if kind not in self._runs:
            if kind == "mae":
                cfg = MAE_RUN
            elif kind == "view":
                cfg = view_config("vitmae", "digits", self.ws)
            else:
                cfg = bert_run_config(kind.split("-")[1])
            self._runs[kind] = completed_run(cfg, self.ws, evaluate=False)
        return self._runs[kind]

    def out(self, name: str) -> Path:
        return self.root / "exports" / name


@pytest.fixture(scope="module")
def lab(tmp_path_factory, shared_data) -> Lab:
    return Lab(tmp_path_factory.mktemp("export"), shared_data)


def image_inputs(C: int, side: int, L: int, n_masked: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Images ``[3, C, side, side]`` in [0, 1] and a mask ``[3, L]`` of ``n_masked`` patches per row (transformers
    keeps the same count in every row), each row its own patches."""
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(3, C, side, side, generator=g)
    mask = torch.zeros(3, L, dtype=torch.bool)
    for b in range(3):
        mask[b, torch.randperm(L, generator=g)[:n_masked]] = True
    return images, mask


def load_vitmae(folder: Path):
    model, info = transformers.ViTMAEForPreTraining.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return model.eval()


def load_bert(folder: Path):
    model, info = transformers.BertForMaskedLM.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return model.eval()


def leftovers(parent: Path) -> list[str]:
    """What a refused export may have left beside ``OUT_DIR`` (nothing, not even a temporary folder)."""
    return sorted(p.name for p in parent.iterdir()) if parent.is_dir() else []


# --- 1. transformers' output equals masklab's ------------------------------------------------------


def test_mae_run_exports_to_vitmae_predicting_as_masklab(lab):
    """A masklab MAE run: transformers' prediction of every patch (norm-pix undone with each input
    patch's mean and std) equals ``predict_images`` of the run, for masks of 12, 0 and 5 of 16
    patches; the positional embeddings are written (transformers would zero a missing decoder one)."""
    run = lab.run("mae")
    rep = export_model(run, lab.out("mae-hf"), workspace=lab.ws)
    model = load_model(run, workspace=lab.ws).model
    assert rep.step == 3 and rep.files == ["config.json", "masklab_export.json", "model.safetensors",
                                           "preprocessor_config.json"]
    cfg = json.loads((rep.path / "config.json").read_text())
    assert (cfg["image_size"], cfg["patch_size"], cfg["num_channels"], cfg["norm_pix_loss"]) == (8, 2, 1, True)
    assert cfg["num_attention_heads"] == model.blocks[0].attn.num_heads
    prep = json.loads((rep.path / "preprocessor_config.json").read_text())
    assert (prep["image_mean"], prep["image_std"], prep["rescale_factor"]) == ([0.0], [1.0], 1 / 255)
    hf = load_vitmae(rep.path)
    assert torch.equal(hf.decoder.decoder_pos_embed, model.decoder_pos_embed)
    assert torch.equal(hf.vit.embeddings.position_embeddings, model.pos_embed)
    for n_masked in (12, 0, 5):
        images, mask = image_inputs(1, 8, 16, n_masked, seed=n_masked)
        want = hf_prediction(hf, images, mask, [0.0], [1.0]).numpy()
        got = predict_images(run, images.numpy(), mask.numpy(), workspace=lab.ws)
        assert float(np.abs(got - want).max()) < TOL
    with torch.no_grad():  # the comparison would see positions that were not written
        hf.decoder.decoder_pos_embed.zero_()
    assert float(np.abs(hf_prediction(hf, images, mask, [0.0], [1.0]).numpy() - got).max()) > 100 * TOL


def test_run_started_from_an_imported_mae_exports_its_processor(lab):
    """A run that shows an imported ViTMAE on digits (0 steps): ``preprocessor_config.json`` has the
    model's mean and std, and transformers' prediction with them equals the run's."""
    run = lab.run("view")
    rep = export_model(run, lab.out("view-hf"), workspace=lab.ws)
    prep = json.loads((rep.path / "preprocessor_config.json").read_text())
    assert prep["image_mean"] == pytest.approx(MEAN) and prep["image_std"] == pytest.approx(STD)
    hf = load_vitmae(rep.path)
    images, mask = image_inputs(3, 32, 16, 12)
    want = hf_prediction(hf, images, mask, MEAN, STD).numpy()
    assert float(np.abs(predict_images(run, images.numpy(), mask.numpy(), workspace=lab.ws) - want).max()) < TOL


@pytest.mark.parametrize("kind", ["wordpiece", "char"])
def test_bert_run_exports_to_bert_for_masked_lm(lab, kind):
    """An exact-BERT run: AutoTokenizer gives the run tokenizer's ids on real questions, and
    BertForMaskedLM's logits and probabilities at every real token equal masklab's (``predict_text``'s
    top-k included); the comparison tells the tanh GELU from the exact one."""
    run = lab.run(f"bert-{kind}")
    rep = export_model(run, lab.out(f"bert-{kind}"), workspace=lab.ws)
    loaded = load_model(run, workspace=lab.ws)
    ours = tokenizer_of(loaded, lab.ws)
    tok = transformers.AutoTokenizer.from_pretrained(rep.path)
    # BERT's pipeline loads as BertTokenizer; the character one as the file itself (PreTrainedTokenizerFast)
    assert type(tok) is (transformers.BertTokenizer if kind == "wordpiece" else transformers.PreTrainedTokenizerFast)
    enc = tok(lab.sentences, return_tensors="pt", padding=True, truncation=True)  # to model_max_length, as masklab
    assert enc["input_ids"].tolist() == ours.encode_batch(lab.sentences).input_ids.tolist()
    assert tok.mask_token_id == ours.mask_id and tok.pad_token_id == ours.pad_id
    hf = load_bert(rep.path)
    real = enc["attention_mask"].bool()
    with torch.no_grad():
        want = hf(**enc).logits
        got = loaded.model.logits(enc["input_ids"], real)
    assert float((want - got)[real].abs().max()) < TOL
    assert float((want.softmax(-1) - got.softmax(-1))[real].abs().max()) < TOL
    text = lab.sentences[-1]
    probs = want[-1].softmax(-1)
    for item in predict_text(run, text, top_k=5, workspace=lab.ws):
        ref = probs[item["position"]].topk(5)
        assert item["tokens"] == tok.convert_ids_to_tokens(ref.indices.tolist())
        assert max(abs(a - b) for a, b in zip(item["probs"], ref.values.tolist())) < TOL
    tanh = transformers.BertForMaskedLM.from_pretrained(rep.path, hidden_act="gelu_new").eval()
    with torch.no_grad():
        assert float((tanh(**enc).logits - got)[real].abs().max()) > 2 * TOL


# --- 2. an imported checkpoint comes back bit for bit ------------------------------------------------


def test_imported_vitmae_folder_comes_back_bit_for_bit(lab):
    """Every tensor of the transformers folder is in the export, equal bit for bit. transformers 5
    saves the decoder's layers as ``decoder.decoder_encoder.layer.N``; the export writes the Hub's
    ``decoder.decoder_layers.N`` (what transformers 4 and 5 both load): the one renaming compared."""
    rep = export_model("vitmae", lab.out("vitmae"), workspace=lab.ws)
    original = load_file(lab.root / "vitmae" / "model.safetensors")
    original = {k.replace("decoder.decoder_encoder.layer.", "decoder.decoder_layers."): v for k, v in original.items()}
    exported = load_file(rep.path / "model.safetensors")
    assert sorted(exported) == sorted(original)
    assert all(torch.equal(exported[k], original[k]) for k in original)
    hf = load_vitmae(rep.path)
    want = lab.hf_vitmae.state_dict()
    assert all(torch.equal(t, want[k]) for k, t in hf.state_dict().items())
    cfg = json.loads((rep.path / "config.json").read_text())
    orig_cfg = json.loads((lab.root / "vitmae" / "config.json").read_text())
    assert {k: cfg[k] for k in cfg if k != "mask_ratio"} == {k: orig_cfg[k] for k in cfg if k != "mask_ratio"}
    processor = transformers.AutoImageProcessor.from_pretrained(rep.path)
    pixels = np.random.default_rng(0).integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    got = processor(images=pixels, return_tensors="pt")["pixel_values"]
    x = torch.from_numpy(pixels).permute(2, 0, 1)[None].float() / 255
    ref = (x - torch.tensor(MEAN).reshape(1, 3, 1, 1)) / torch.tensor(STD).reshape(1, 3, 1, 1)
    assert float((got - ref).abs().max()) < TOL


def test_imported_mae_pth_comes_back_bit_for_bit(lab):
    rep = export_model("pth", lab.out("pth"), "mae", workspace=lab.ws)
    original = torch.load(lab.pth, map_location="cpu", weights_only=True)["model"]
    exported = torch.load(rep.path / "checkpoint.pth", map_location="cpu", weights_only=True)
    assert list(exported) == ["model"] and sorted(exported["model"]) == sorted(original)
    assert all(torch.equal(exported["model"][k], original[k]) for k in original)
    assert rep.import_options["num_heads"] == 4 and rep.import_options["decoder_num_heads"] == 4


@pytest.mark.parametrize("name", ["mlm-json", "pretraining-vocab"])
def test_imported_bert_comes_back_bit_for_bit(lab, name):
    """Every tensor of the transformers folder but the heads masklab ignores (the pooler, the
    next-sentence head) is in the export bit for bit; the one more is the tied decoder weight, equal
    to the word embeddings. transformers reads the export as the original, tokenizer included."""
    folder = lab.bert_dirs[name]
    rep = export_model(name, lab.out(name), workspace=lab.ws)
    ignored = set(get_pretrained(name, lab.ws).source["ignored"])
    assert (name == "pretraining-vocab") == any("pooler" in k for k in ignored)
    original = {k: v for k, v in load_file(folder / "model.safetensors").items() if k not in ignored}
    exported = load_file(rep.path / "model.safetensors")
    assert sorted(set(exported) - set(original)) == ["cls.predictions.decoder.weight"]
    assert all(torch.equal(exported[k], original[k]) for k in original)
    assert torch.equal(exported["cls.predictions.decoder.weight"], exported["bert.embeddings.word_embeddings.weight"])
    assert ((rep.path / "vocab.txt").is_file()) == (name == "pretraining-vocab")
    texts = ["What is the capital of [MASK] ?", "Paris is a big [MASK] , [MASK] Café !"]
    tok, ref_tok = (transformers.AutoTokenizer.from_pretrained(f) for f in (rep.path, folder))
    enc = tok(texts, return_tensors="pt", padding=True)
    assert enc["input_ids"].tolist() == ref_tok(texts, return_tensors="pt", padding=True)["input_ids"].tolist()
    ref = getattr(transformers, json.loads((folder / "config.json").read_text())["architectures"][0])
    with torch.no_grad():
        out = ref.from_pretrained(folder).eval()(**enc)
        want = out.logits if hasattr(out, "logits") else out.prediction_logits
        assert torch.equal(load_bert(rep.path)(**enc).logits, want)


# --- 3. the MAE repository's .pth re-imports to the same predictions -------------------------------


def test_mae_run_pth_reimports_to_the_same_predictions(lab):
    run = lab.run("mae")
    rep = export_model(run, lab.out("mae-pth"), "mae", workspace=lab.ws)
    assert rep.files == ["checkpoint.pth", "masklab_export.json"]
    model = load_model(run, workspace=lab.ws).model
    sd = torch.load(rep.path / "checkpoint.pth", map_location="cpu", weights_only=True)["model"]
    assert torch.equal(sd["pos_embed"], model.pos_embed) and torch.equal(sd["decoder_pos_embed"], model.decoder_pos_embed)
    assert torch.equal(sd["patch_embed.proj.weight"], model.patch_embed.weight)
    assert torch.equal(sd["blocks.0.attn.qkv.weight"], model.blocks[0].attn.qkv.weight)
    assert rep.import_options == {"num_heads": model.blocks[0].attn.num_heads,
                                  "decoder_num_heads": model.decoder_blocks[0].attn.num_heads}
    assert any("--num-heads" in n for n in rep.notes)
    import_model(str(rep.path / "checkpoint.pth"), "mae-back", rep.import_options, workspace=lab.ws)
    images, mask = image_inputs(1, 8, 16, 12)
    mask[0, :3] = ~mask[0, :3]  # rows of different counts: masklab's predictions take them
    back = predict_images("mae-back", images.numpy(), mask.numpy(), workspace=lab.ws)
    assert float(np.abs(back - predict_images(run, images.numpy(), mask.numpy(), workspace=lab.ws)).max()) < TOL


# --- 4. refusals: why, and nothing written ----------------------------------------------------------

#: A task of each architecture, to make a run record of it (no training: refusals come before weights).
TASK_OF = {"bert": "text_mlm", "bert_hf": "text_mlm", "simmim_vit": "image_mim", "mae_vit": "image_mim",
           "t5_span": "text_span", "audio_mae_vit": "audio_mae", "frame_transformer": "audio_frames",
           "m3ae": "paired", "flava": "paired"}


@pytest.mark.parametrize("arch", sorted(MODEL_REGISTRY))
def test_every_arch_is_exported_or_refused_with_why(arch, tmp_path):
    """Every registered architecture is exportable or refused with its reason; a run record of a
    refused one is refused before its (absent) weights are read, and nothing is written."""
    assert (arch in EXPORTS) != (arch in REFUSED)
    if arch in EXPORTS:
        return
    ws = tmp_path / "ws"
    run_id, _ = create_run(RunConfig.from_dict({"task": TASK_OF[arch], "model": {"arch": arch}}).to_dict(), ws)
    out = tmp_path / "exports" / "out"
    with pytest.raises(PretrainedError, match=rf"run {run_id} \(model.arch {arch}\) cannot be exported") as e:
        export_model(run_id, out, workspace=ws)
    assert REFUSED[arch][:40] in str(e.value)
    assert not out.exists() and leftovers(out.parent) == []


def test_rectangular_patches_and_non_square_grids_are_refused(lab, tmp_path):
    kw = dict(in_chans=1, embed_dim=16, depth=1, num_heads=2, decoder_embed_dim=8, decoder_depth=1, decoder_num_heads=2)
    with pytest.raises(PretrainedError, match="rectangular 2x4 patches"):
        check_exportable(MaskedAutoencoderViT(img_size=(8, 16), patch_size=(2, 4), **kw), "m")
    with pytest.raises(PretrainedError, match=r"a 2x4 patch grid \(8x16 pixels\)"):
        check_exportable(MaskedAutoencoderViT(img_size=(8, 16), patch_size=4, **kw), "m")
    with pytest.raises(PretrainedError, match="not an image MAE"):
        check_exportable(torch.nn.Linear(2, 2), "m")
    # an imported model of a non-square grid is refused once loaded: still nothing written
    arch_config = {"img_size": [8, 16], "in_chans": 1, "patch_size": 4, "embed_dim": 16, "depth": 1, "num_heads": 2,
                   "decoder_embed_dim": 8, "decoder_depth": 1, "decoder_num_heads": 2, "mlp_hidden_dim": 32,
                   "decoder_mlp_hidden_dim": 16, "layer_norm_eps": 1e-6, "norm_pix_loss": False}
    info = PretrainedModel(name="wide", arch="mae_vit", modality="image", arch_config=arch_config,
                           preprocessing={"size": [8, 16], "channels": 1, "mean": [0.0], "std": [1.0]},
                           source={"path": "made here", "format": "hf"})
    ws = tmp_path / "ws"
    save_pretrained(info, build_mae_vit(arch_config).state_dict(), workspace=ws)
    out = tmp_path / "exports" / "wide"
    with pytest.raises(PretrainedError, match="imported model wide: a 2x4 patch grid"):
        export_model("wide", out, workspace=ws)
    assert not out.exists() and leftovers(out.parent) == []


def test_out_dir_and_source_refusals(lab, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(PretrainedError, match="exists and is not empty"):
        export_model("vitmae", full, workspace=lab.ws)
    assert [p.name for p in full.iterdir()] == ["keep.txt"] and (full / "keep.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    with pytest.raises(PretrainedError, match="exists and is not a folder"):
        export_model("vitmae", tmp_path / "file", workspace=lab.ws)
    cases = [(("mlm-json", "mae"), {}, r"--format mae .* holds image MAEs only; export it with --format hf"),
             (("vitmae", "hf"), {"step": 3}, "imported model: it has no checkpoint steps"),
             (("nope", "hf"), {}, "no imported model or run named 'nope'"),
             (("vitmae", "onnx"), {}, "--format 'onnx': masklab exports hf, mae")]
    for (source, fmt), kw, match in cases:
        out = tmp_path / "exports" / "x"
        with pytest.raises(PretrainedError, match=match):
            export_model(source, out, fmt, workspace=lab.ws, **kw)
        assert not out.exists() and leftovers(out.parent) == []
    empty = tmp_path / "empty"
    empty.mkdir()
    rep = export_model("vitmae", empty, workspace=lab.ws)  # an empty folder is taken
    assert rep.path == empty and (empty / "config.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]  # the temporary folder was renamed


# --- the command line -------------------------------------------------------------------------------


def test_cli_exports_without_importing_transformers(lab, tmp_path, monkeypatch, capsys):
    """``python -m engine models export`` in a fresh process: both formats and a text run, and
    ``transformers`` never imported; a refusal exits 2 with the reason."""
    runs = {kind: lab.run(kind) for kind in ("mae", "bert-wordpiece")}
    out = tmp_path / "cli"
    code = (
        "import sys\n"
        "from engine.cli import main\n"
        f"assert main(['models', 'export', {runs['mae']!r}, {str(out / 'hf')!r}]) == 0\n"
        f"assert main(['models', 'export', {runs['mae']!r}, {str(out / 'pth')!r}, '--format', 'mae', '--step', '3']) == 0\n"
        f"assert main(['models', 'export', {runs['bert-wordpiece']!r}, {str(out / 'bert')!r}]) == 0\n"
        "print('transformers loaded:', sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))\n"
    )
    env = {**os.environ, "MASKLAB_WORKSPACE": str(lab.ws), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "transformers loaded: []" in proc.stdout
    assert f"exported run {runs['mae']} at step 3 (mae_vit) to {out / 'pth'}" in proc.stdout
    assert "note: to import it back: python -m engine models import" in proc.stderr
    assert (out / "hf" / "model.safetensors").is_file() and (out / "bert" / "tokenizer.json").is_file()
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(lab.ws))
    assert cli_main(["models", "export", "mlm-json", str(tmp_path / "no"), "--format", "mae"]) == 2
    assert "error: imported model mlm-json (model.arch bert_hf): --format mae" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()
