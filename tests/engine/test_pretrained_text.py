"""Imported BERT (issue 32, text half): masklab's ``bert_hf`` predicts what ``transformers`` predicts.

Every checkpoint here is made by ``transformers`` from a small random ``BertConfig`` (64 wide, 2
layers, 4 heads, MLP 128) whose weights are moved off their initialisation (``+ 0.02 * randn`` on
every parameter, so that zero biases and unit LayerNorms check nothing by accident). The init is
wider than BERT's (``initializer_range`` 0.2, not 0.02): at 0.02 the predictions are nearly uniform
and exact GELU against its tanh approximation moved them by 2e-6, under the tolerance; at 0.2 by
1e-4 to 2e-4, and :func:`test_the_comparison_tells_activation_and_eps_apart` checks that margin. Saved with
``save_pretrained`` beside a tokenizer made from a vocabulary the test writes, with the special
tokens at non-zero ids: bert-base's layout (``[PAD]`` 0, ``[UNK]`` 100, ``[CLS]`` 101, ``[SEP]``
102, ``[MASK]`` 103) or a shuffled one (``[UNK]`` 3, ``[CLS]`` 5, ``[SEP]`` 6, ``[MASK]`` 7).
masklab's probabilities are compared with ``softmax(logits)`` of the same ``transformers`` model on
the ids of ``transformers``' own tokenizer, float32 on the CPU, to :data:`TOL` max absolute.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.cli import main as cli_main
from engine.eval.inference import InferenceError, load_model
from engine.models import MODEL_REGISTRY, HFBertMLM
from engine.pretrained import PretrainedError, list_pretrained, load_pretrained
from engine.pretrained.importers import import_model
from engine.pretrained.predict_text import predict_text
from engine.pretrained.text import load_text_tokenizer
from engine.tasks.text.inference import fill_in, tokenizer_of
from engine.text.tokenizer import TextTokenizer
from tests.pretrained_text_checkpoints import make_checkpoint

transformers = pytest.importorskip("transformers")

TOL = 1e-5
TEXTS = ["What is the capital of [MASK] ?", "the cat [MASK] on the Mat .", "Paris is a big [MASK] , [MASK] Café !"]


def hf_model(folder: Path):
    """The checkpoint as ``transformers`` loads it (the reference), and its tokenizer."""
    config = json.loads((folder / "config.json").read_text())
    model = getattr(transformers, config["architectures"][0]).from_pretrained(folder).eval()
    return model, transformers.AutoTokenizer.from_pretrained(folder)


def hf_probs(model, enc) -> torch.Tensor:
    with torch.no_grad():
        out = model(**enc)
    logits = out.logits if hasattr(out, "logits") else out.prediction_logits
    return logits.float().softmax(-1)  # (B, L, V)


CASES = {  # name: make_checkpoint arguments
    "json-gelu": dict(tokenizer="json", hidden_act="gelu", eps=1e-12, lowercase=True, layout="shuffled"),
    "vocab-gelu_new": dict(tokenizer="vocab", hidden_act="gelu_new", eps=1e-3, lowercase=True, layout="bertbase"),
    "json-cased-gelu_new-bertbase": dict(tokenizer="json", hidden_act="gelu_new", eps=1e-7, lowercase=False,
                                         layout="bertbase"),
    "vocab-cased-gelu": dict(tokenizer="vocab", hidden_act="gelu", eps=1e-12, lowercase=False, layout="shuffled"),
}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """Each case of :data:`CASES` made by transformers and imported into one workspace: name -> folder."""
    root = tmp_path_factory.mktemp("bert")
    ws = root / "workspace"
    folders = {}
    for i, (name, kw) in enumerate(CASES.items()):
        folders[name] = make_checkpoint(root / name, seed=i, **kw)
        import_model(str(folders[name]), name, workspace=ws)
    return ws, folders


@pytest.mark.parametrize("case", list(CASES))
def test_predict_text_equals_transformers(imported, case):
    """predict_text: same tokenization as transformers' tokenizer, [MASK] positions, top-k tokens, and
    probabilities equal to transformers' softmax over the whole vocabulary (to 1e-5)."""
    ws, folders = imported
    model, tok = hf_model(folders[case])
    for text in TEXTS:
        out = predict_text(case, text, top_k=5, workspace=ws)
        enc = tok([text], return_tensors="pt")
        ours = load_text_tokenizer(load_pretrained(case, ws)[1]).encode_batch([text])
        assert ours.input_ids.tolist() == enc["input_ids"].tolist()
        probs = hf_probs(model, enc)[0]
        where = (enc["input_ids"][0] == tok.mask_token_id).nonzero()[:, 0].tolist()
        assert [o["position"] for o in out] == where and where
        for o in out:
            ref = probs[o["position"]].topk(5)
            assert o["tokens"] == tok.convert_ids_to_tokens(ref.indices.tolist())
            assert max(abs(a - b) for a, b in zip(o["probs"], ref.values.tolist())) < TOL


def test_the_comparison_tells_activation_and_eps_apart(imported):
    """The checkpoints are sensitive enough: transformers' own model with the other GELU or BERT's
    default eps (1e-12 instead of the config's 1e-3) is more than 10 x TOL away from masklab's,
    which is within TOL of the config as saved."""
    ws, folders = imported
    folder = folders["vocab-gelu_new"]
    ours, _ = load_pretrained("vocab-gelu_new", ws)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    enc = tok(TEXTS, return_tensors="pt", padding=True)
    real = enc["attention_mask"].bool()
    with torch.no_grad():
        got = ours.logits(enc["input_ids"], enc["attention_mask"]).softmax(-1)
    for change, far in (({}, False), ({"hidden_act": "gelu"}, True), ({"layer_norm_eps": 1e-12}, True)):
        model = transformers.BertForMaskedLM.from_pretrained(folder, **change).eval()
        diff = (hf_probs(model, enc) - got)[real].abs().max().item()
        assert (diff > 10 * TOL) if far else (diff < TOL), (change, diff)


def test_model_on_a_padded_batch_equals_transformers(imported):
    """The model directly, on a padded batch with token types: every real position's probabilities
    (logits), the masked positions (forward), the final hidden states and the probe features."""
    ws, folders = imported
    for case in ("json-gelu", "vocab-gelu_new"):
        hf, tok = hf_model(folders[case])
        ours, _ = load_pretrained(case, ws)
        enc = tok(TEXTS + ["hello"], return_tensors="pt", padding=True)
        gen = torch.Generator().manual_seed(1)
        types = torch.randint(0, 2, enc["input_ids"].shape, generator=gen) * enc["attention_mask"]
        enc["token_type_ids"] = types
        ids, attn = enc["input_ids"], enc["attention_mask"]
        real = attn.bool()
        assert not bool(real.all())  # the batch has padding
        ref = hf_probs(hf, enc)
        with torch.no_grad():
            got = ours.logits(ids, attn, types).softmax(-1)
            diff = (got - ref)[real].abs().max().item()
            assert diff < TOL, diff
            mlm = real & (torch.rand(ids.shape, generator=gen) < 0.5)
            at = ours(ids, attn, mlm, token_type_ids=types).softmax(-1)
            assert (at - ref[mlm]).abs().max().item() < TOL
            base = getattr(hf, "bert", hf)
            hidden = base(**enc).last_hidden_state
            assert (ours.forward_encoder(ids, attn, types) - hidden)[real].abs().max().item() < TOL
            mean = (hidden * attn[..., None]).sum(1) / attn.sum(1, keepdim=True)
            feats = ours.features(ids, attn)  # no token types: all sentence A
            hidden_a = base(input_ids=ids, attention_mask=attn).last_hidden_state
            assert (feats - (hidden_a * attn[..., None]).sum(1) / attn.sum(1, keepdim=True)).abs().max() < TOL
            assert mean.shape == feats.shape


def test_record_has_the_preprocessing(imported):
    """Special tokens at their own ids, lower-casing, max_len and the tokenizer file travel with the model."""
    ws, folders = imported
    infos = {i.name: i for i in list_pretrained(ws)}
    assert set(infos) == set(CASES)
    base = infos["json-cased-gelu_new-bertbase"]
    assert base.arch == "bert_hf" and base.modality == "text"
    assert base.preprocessing["special"] == {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}
    assert base.preprocessing["lowercase"] is False and base.preprocessing["max_len"] == 40
    assert base.arch_config["hidden_act"] == "gelu_new" and base.arch_config["layer_norm_eps"] == 1e-7
    assert (base.path / "tokenizer.json").is_file()
    shuffled = infos["vocab-cased-gelu"]
    assert shuffled.preprocessing["special"] == {"pad": 0, "unk": 3, "cls": 5, "sep": 6, "mask": 7}
    assert shuffled.preprocessing["tokenizer"] == "vocab.txt" and (shuffled.path / "vocab.txt").is_file()
    assert infos["vocab-gelu_new"].preprocessing["lowercase"] is True
    assert all(i.source["ignored"] == [] and i.source["fresh"] == [] for i in infos.values())
    # a BertForMaskedLM of transformers 5 stores the tied decoder once: nothing is left out
    assert all(i.source["architecture"] == "BertForMaskedLM" for i in infos.values())


def test_tokenizer_lowercasing_and_mask(imported):
    """[MASK] stays one special token (the mask id) whether or not the text is lower-cased; case
    matters only in a cased model; the tokenizer survives pickling with its ids."""
    ws, _ = imported
    lower = load_text_tokenizer(load_pretrained("vocab-gelu_new", ws)[1])
    cased = load_text_tokenizer(load_pretrained("json-cased-gelu_new-bertbase", ws)[1])
    text = "PARIS [MASK] paris"
    assert lower.tokenize(text) == ["paris", "[MASK]", "paris"]
    assert cased.tokenize(text) == ["[UNK]", "[MASK]", "paris"]
    for tok in (lower, cased):
        enc = tok.encode_batch([text, "a"])
        assert enc.input_ids[0, 2] == tok.mask_id == 103 and enc.input_ids[0, 0] == tok.cls_id == 101
        assert enc.input_ids[1, 3:].tolist() == [tok.pad_id] * 2 and tok.sep_id == 102
        assert tok.decode(enc.input_ids[1]) == "a"
        again = copy.deepcopy(tok)  # by the pickle protocol (__reduce_ex__), as data-loader workers get it
        assert again.special_ids == tok.special_ids == (0, 101, 102, 103, 100)
        assert again.encode_batch([text]).input_ids.tolist() == tok.encode_batch([text]).input_ids.tolist()
    assert TextTokenizer.special_ids == (0, 1, 2, 3, 4)  # masklab's own tokenizers keep ids 0..4


def test_predict_errors(imported):
    ws, _ = imported
    with pytest.raises(PretrainedError, match=r"no \[MASK\]"):
        predict_text("json-gelu", "the cat sat", workspace=ws)
    with pytest.raises(PretrainedError, match="neither an imported model"):
        predict_text("no-such-model", "the [MASK]", workspace=ws)
    with pytest.raises(PretrainedError, match="--step is for runs"):
        predict_text("json-gelu", "the [MASK]", step=3, workspace=ws)


def test_pretraining_checkpoint_ignores_the_nsp_head(tmp_path):
    """BertForPreTraining: the pooler and NSP head are listed as ignored; the MLM head predicts
    what transformers' prediction_logits say."""
    folder = make_checkpoint(tmp_path / "pt", arch="BertForPreTraining", layout="bertbase", seed=7)
    info = import_model(str(folder), "pt", workspace=tmp_path / "ws")
    assert info.source["ignored"] == ["bert.pooler.dense.bias", "bert.pooler.dense.weight",
                                      "cls.seq_relationship.bias", "cls.seq_relationship.weight"]
    assert info.source["architecture"] == "BertForPreTraining"
    model, tok = hf_model(folder)
    out = predict_text("pt", TEXTS[2], top_k=4, workspace=tmp_path / "ws")
    probs = hf_probs(model, tok([TEXTS[2]], return_tensors="pt"))[0]
    assert len(out) == 2
    for o in out:
        ref = probs[o["position"]].topk(4)
        assert o["tokens"] == tok.convert_ids_to_tokens(ref.indices.tolist())
        assert max(abs(a - b) for a, b in zip(o["probs"], ref.values.tolist())) < TOL


def test_encoder_only_checkpoint_gets_a_fresh_head(tmp_path):
    """BertModel: imported with a fresh MLM head, said in source.fresh and the notes; its encoder
    (features) is transformers' exactly."""
    folder = make_checkpoint(tmp_path / "enc", arch="BertModel", seed=8)
    info = import_model(str(folder), "enc", workspace=tmp_path / "ws")
    assert info.source["fresh"] == ["mlm_head"] and "fresh" in " ".join(info.source["notes"])
    assert info.source["ignored"] == ["pooler.dense.bias", "pooler.dense.weight"]
    hf, tok = hf_model(folder)
    ours, _ = load_pretrained("enc", tmp_path / "ws")
    enc = tok(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        hidden = hf(**enc).last_hidden_state
        m = enc["attention_mask"][..., None]
        assert (ours.features(enc["input_ids"], enc["attention_mask"]) - (hidden * m).sum(1) / m.sum(1)).abs().max() < TOL


def _drop(folder: Path, key: str) -> None:
    sd = load_file(folder / "model.safetensors")
    del sd[key]
    save_file(sd, folder / "model.safetensors")


def _put(folder: Path, key: str, value: torch.Tensor) -> None:
    sd = load_file(folder / "model.safetensors")
    sd[key] = value
    save_file(sd, folder / "model.safetensors")


def _config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def _no_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").unlink()


def _bin_only(folder: Path) -> None:
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()


REFUSALS = {  # name: (how the good folder is spoiled, what the message must say)
    "missing tensor": (lambda f: _drop(f, "bert.encoder.layer.1.output.dense.weight"),
                       r"model\.safetensors: missing tensor\(s\) bert\.encoder\.layer\.1\.output\.dense\.weight"),
    "missing head": (lambda f: _drop(f, "cls.predictions.transform.LayerNorm.bias"),
                     r"missing tensor\(s\) cls\.predictions\.transform\.LayerNorm\.bias"),
    "wrong shape": (lambda f: _put(f, "bert.embeddings.position_embeddings.weight", torch.zeros(41, 64)),
                    r"model\.safetensors: tensor 'bert\.embeddings\.position_embeddings\.weight' has shape \[41, 64\]"),
    "unknown tensor": (lambda f: _put(f, "bert.encoder.layer.0.attention.self.rotary.weight", torch.zeros(4)),
                       r"tensor 'bert\.encoder\.layer\.0\.attention\.self\.rotary\.weight' fits nowhere"),
    "extra layer": (lambda f: _put(f, "bert.encoder.layer.2.output.dense.bias", torch.zeros(64)),
                    r"tensor 'bert\.encoder\.layer\.2\.output\.dense\.bias' fits nowhere"),
    "unknown architecture": (lambda f: _config(f, architectures=["BertForSequenceClassification"]),
                             r"config\.json: unknown architecture BertForSequenceClassification"),
    "unknown activation": (lambda f: _config(f, hidden_act="gelu_10"), r"config\.json: hidden_act 'gelu_10'"),
    "another tokenizer": (lambda f: _config(f, vocab_size=120), r"tokenizer\.json: 132 tokens, more than config\.json's "
                          r"vocab_size 120"),
    "no tokenizer": (_no_tokenizer, r"no tokenizer file \(tokenizer\.json or vocab\.txt\)"),
    "pickle only": (_bin_only, r"pytorch_model\.bin: masklab reads weights from safetensors only"),
}


@pytest.fixture(scope="module")
def good_folder(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("good") / "bert", layout="bertbase", seed=3)


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_leave_nothing(good_folder, tmp_path, case):
    """Each spoiled checkpoint is refused with a PretrainedError naming the file and the tensor or
    field, and nothing is left under the workspace's models/."""
    spoil, message = REFUSALS[case]
    folder = tmp_path / "bert"
    shutil.copytree(good_folder, folder)
    spoil(folder)
    ws = tmp_path / "ws"
    with pytest.raises(PretrainedError, match=message):
        import_model(str(folder), "broken", workspace=ws)
    models = ws / "models"
    assert not models.exists() or list(models.iterdir()) == []
    assert list_pretrained(ws) == []


def test_cli_import_and_predict(good_folder, workspace, capsys):
    """python -m engine models import / predict --json, in process."""
    assert cli_main(["models", "import", str(good_folder), "--name", "tiny-bert"]) == 0
    assert "imported tiny-bert: bert_hf (text)" in capsys.readouterr().out
    assert cli_main(["predict", "tiny-bert", "--text", "what is the capital of [MASK] ?", "--top-k", "3",
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    model, tok = hf_model(good_folder)
    enc = tok(["what is the capital of [MASK] ?"], return_tensors="pt")
    assert [o["position"] for o in out] == [6]
    ref = hf_probs(model, enc)[0, 6].topk(3)
    assert out[0]["tokens"] == tok.convert_ids_to_tokens(ref.indices.tolist())
    assert max(abs(a - b) for a, b in zip(out[0]["probs"], ref.values.tolist())) < TOL


def test_bert_hf_is_a_model_arch():
    """``bert_hf`` is registered beside ``bert``: it trains (tied decoder gets both gradients) and
    its forward at the masked positions is its logits there."""
    assert "bert_hf" in MODEL_REGISTRY and "bert" in MODEL_REGISTRY
    torch.manual_seed(0)
    model = HFBertMLM(vocab_size=50, max_len=16, dropout=0.1, attn_dropout=0.1,
                      **MODEL_REGISTRY["bert_hf"].presets["tiny"])
    ids = torch.randint(5, 50, (3, 10))
    attn = torch.ones(3, 10, dtype=torch.bool)
    attn[2, 6:] = False
    mlm = torch.zeros(3, 10, dtype=torch.bool)
    mlm[:, 2] = True
    mlm[0, 5] = True
    loss = torch.nn.functional.cross_entropy(model(ids, attn, mlm), ids[mlm])
    loss.backward()
    assert model.tok_embed.weight.grad is not None and model.head_bias.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(ids, attn, mlm), model.logits(ids, attn)[mlm], atol=1e-5)
    assert model.features(ids, attn).shape == (3, 128)
    top_ids, top_p = model.predict_topk(ids, attn, mlm, k=3, exclude_ids=(0, 1))
    assert top_ids.shape == (4, 3) and not bool(torch.isin(top_ids, torch.tensor([0, 1])).any())


def test_predict_text_from_a_run(shared_runs):
    """SOURCE may be a text_mlm run: its checkpoint and the tokenizer it trained (ids 0..4), as the
    fill-in box uses them; probabilities are the model's softmax over the whole vocabulary."""

    run = shared_runs.get("text_mlm")
    text = "what is the [MASK] of the [MASK] ?"
    out = predict_text(run.run_id, text, top_k=8, workspace=run.workspace)
    loaded = load_model(run.run_id, workspace=run.workspace)
    tok = tokenizer_of(loaded, run.workspace)
    enc = tok.encode_batch([text])
    assert [o["position"] for o in out] == (enc.input_ids[0] == tok.mask_id).nonzero()[:, 0].tolist()
    assert len(out) == 2 and tok.mask_id == 3
    with torch.no_grad():
        probs = loaded.model.forward_mlm(loaded.model.forward_encoder(enc.input_ids, enc.attention_mask),
                                         enc.input_ids == tok.mask_id).softmax(-1)
    for o, p in zip(out, probs):
        ref = p.topk(8)
        assert o["tokens"] == [tok.id_to_token(i) for i in ref.indices.tolist()]
        assert max(abs(a - b) for a, b in zip(o["probs"], ref.values.tolist())) < TOL
    box = fill_in(loaded, text, k=3, workspace=run.workspace)  # the fill-in box leaves special tokens out
    for o, f in zip(out, box):
        shown = dict(zip(o["tokens"], o["probs"]))
        assert all(abs(shown[t] - q) < TOL for t, q in f.candidates if t in shown)
    with pytest.raises(InferenceError, match="no kept checkpoint at step 999"):
        predict_text(run.run_id, text, step=999, workspace=run.workspace)
