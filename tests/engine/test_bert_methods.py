"""engine.models.bert_methods and text_mlm's methods: data2vec's latent target for text (padding kept out
of the target's normalisation, the EMA teacher, the readout), the contrastive term between two masked
views, a plain config building the plain BertMLM, the refused combinations, short runs."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from engine.config import RunConfig, load_config
from engine.errors import ConfigError
from engine.eval.inference import load_model
from engine.masking import random_mask
from engine.methods.teacher import TARGET_STD, instance_norm_units, top_k_targets
from engine.models import BertMLM, build_model
from engine.models.bert_methods import MethodBertMLM, MLMParams
from engine.objectives import info_nce, masked_cross_entropy, masked_mse
from engine.runner.worker import execute_run
from engine.store import create_run, get_run, read_metrics
from engine.store.checkpoints import list_checkpoints, load_weights
from engine.tasks import resolve
from engine.tasks.text.inference import fill_in
from engine.training.loop import param_groups
from tests.engine.test_bert import MAX_LEN, MICRO, V, batch, gen
from tests.engine.test_text_tasks import _cfg, trec  # noqa: F401 (trec: a fixture)

LATENT = {"target": "latent", "top_k": 2, "ema_decay": 0.9, "ema_decay_end": 0.99, "ema_anneal_steps": 10}
WITH_CONTRASTIVE = [{"loss": "cross_entropy", "weight": 1.0}, {"loss": "contrastive", "weight": 0.5}]


def method(contrastive: bool = False, **params) -> MethodBertMLM:
    torch.manual_seed(0)
    return MethodBertMLM(V, MAX_LEN, **MICRO, params=MLMParams(**params), contrastive=contrastive)


def encoder(model) -> dict[str, torch.nn.Parameter]:
    """The student encoder's parameters (embeddings, blocks, final norm) by name."""
    return {n: p for n, p in model.named_parameters() if n.split(".")[0] in ("tok_embed", "blocks", "norm")}


# --- the latent target ----------------------------------------------------------------------------


def test_instance_norm_over_real_tokens_leaves_padding_out():
    """Hand-made: row 0 has 3 real tokens, row 1 has 2; the padding holds large values that would
    shift and scale an instance norm over the padded length."""
    y = torch.tensor([[[1.0, 0.0], [2.0, 4.0], [3.0, 8.0], [100.0, -50.0]],
                      [[5.0, 1.0], [7.0, 3.0], [-90.0, 70.0], [60.0, 60.0]]])
    valid = torch.tensor([[True, True, True, False], [True, True, False, False]])
    got = instance_norm_units(y, valid)
    eps = 1e-5
    # row 0, channel 0: 1, 2, 3 -> mean 2, biased var 2/3; channel 1: 0, 4, 8 -> mean 4, var 32/3
    want0 = torch.tensor([[-1.0, -4.0], [0.0, 0.0], [1.0, 4.0]]) / torch.tensor([2 / 3 + eps, 32 / 3 + eps]).sqrt()
    # row 1: 5, 7 -> mean 6, var 1; 1, 3 -> mean 2, var 1
    want1 = torch.tensor([[-1.0, -1.0], [1.0, 1.0]]) / math.sqrt(1 + eps)
    torch.testing.assert_close(got[0, :3], want0)
    torch.testing.assert_close(got[1, :2], want1)
    assert (got[0, 3] == 0).all() and (got[1, 2:] == 0).all()  # padding: 0
    for b, n in ((0, 3), (1, 2)):  # = F.instance_norm of the real tokens alone
        torch.testing.assert_close(got[b, :n], F.instance_norm(y[b : b + 1, :n].transpose(1, 2)).transpose(1, 2)[0])
    assert not torch.allclose(got[0, :3], F.instance_norm(y[:1].transpose(1, 2)).transpose(1, 2)[0, :3])
    # no padding: exactly the old top_k_targets (F.instance_norm over every unit)
    layers = [torch.randn(2, 5, 3, generator=gen(i)) for i in range(3)]
    want = torch.stack([F.instance_norm(t.transpose(1, 2)).transpose(1, 2) for t in layers[-2:]]).mean(0)
    assert torch.equal(top_k_targets(layers, 2), want)
    torch.testing.assert_close(top_k_targets(layers, 2, torch.ones(2, 5, dtype=torch.bool)), want)


def test_latent_targets_have_the_outputs_shapes_and_ignore_padding():
    model = method(**LATENT).eval()
    ids, att, words = batch(lengths=(6, 8, 4), L=10)
    mask = random_mask(ids.shape, 0.4, generator=gen(1), eligible=words)
    out = model.forward_outputs(ids.masked_fill(mask, 3), att, mask, clean_ids=ids)
    M = int(mask.sum())
    assert out["logits"].shape == (M, V) and out["pred"].shape == out["target"].shape == (3, 10, 32)
    assert torch.equal(out["mask"], mask) and out["target"].dtype == torch.float32
    assert (out["pred"][~mask] == 0).all() and (out["target"][~att] == 0).all()
    # the teacher's targets of the real tokens do not change when the batch is padded further
    wide = torch.cat([ids, torch.zeros(3, 5, dtype=torch.long)], dim=1)
    t_wide = model.teacher_targets(wide, wide != 0)
    torch.testing.assert_close(t_wide[:, :10][att], out["target"][att], atol=1e-5, rtol=1e-5)
    # one block (top_k 1): each text's last block output, instance-normalised over its real tokens alone
    model.params = MLMParams(**{**LATENT, "top_k": 1})
    t1 = model.teacher_targets(ids, att)
    last = model.teacher_layers(ids, att)[-1]
    for b, n in enumerate(att.sum(1).tolist()):
        want = F.instance_norm(last[b : b + 1, :n].transpose(1, 2)).transpose(1, 2)[0]
        torch.testing.assert_close(t1[b, :n], want)
        torch.testing.assert_close(t1[b, :n].mean(0), torch.zeros(32), atol=1e-5, rtol=0)
    # the target reads the unmasked text: the student's corruption does not change it
    torch.testing.assert_close(model.forward_outputs(ids.masked_fill(mask, 3), att, mask, clean_ids=ids)["target"], t1)


def test_ema_update_moves_the_teacher_toward_the_student_by_tau():
    model = method(**LATENT)
    assert [round(model.ema_decay_at(s), 4) for s in (0, 5, 10, 50)] == [0.9, 0.945, 0.99, 0.99]
    # frozen, out of the optimiser, in eval mode (no dropout) even when the model trains, saved
    assert all(not p.requires_grad for p in model.teacher.parameters())
    in_opt = {id(p) for g in param_groups(model, 0.01) for p in g["params"]}
    assert not in_opt & {id(p) for p in model.teacher.parameters()}
    model.train()
    assert model.training and not model.teacher.training
    keys = set(model.state_dict())
    assert {"teacher.tok_embed.tok.weight", "teacher.tok_embed.pos", "teacher.norm.weight", "latent_head.weight"} <= keys
    # the teacher starts as a copy of the encoder
    assert len(encoder(model)) == len(model._encoder_params(model.teacher)) == len(list(model.teacher.parameters()))
    for (n, s), t in zip(encoder(model).items(), model._encoder_params(model.teacher)):
        assert torch.equal(s, t), n
    with torch.no_grad():
        for p in encoder(model).values():
            p.add_(torch.randn(p.shape, generator=gen(2)))
    before = [t.clone() for t in model._encoder_params(model.teacher)]
    model.ema_update(5)  # tau = 0.945
    for t0, t, s in zip(before, model._encoder_params(model.teacher), encoder(model).values()):
        torch.testing.assert_close(t, 0.945 * t0 + 0.055 * s)
        assert (t - s).abs().sum() < (t0 - s).abs().sum()  # closer to the student
    # the checkpointed weights hold the teacher: a fresh model takes them back
    fresh = method(**LATENT)
    fresh.load_state_dict(model.state_dict())
    for a, b in zip(fresh._encoder_params(fresh.teacher), model._encoder_params(model.teacher)):
        assert torch.equal(a, b)


def test_readout_trains_the_head_and_sends_no_gradient_into_the_encoder(one_thread):
    model = method(**LATENT).train()
    ids, att, words = batch()
    mask = random_mask(ids.shape, 0.5, generator=gen(1), eligible=words)
    out = model.forward_outputs(ids.masked_fill(mask, 3), att, mask, clean_ids=ids)
    masked_cross_entropy(out["logits"], ids[mask]).backward(retain_graph=True)
    assert all(p.grad is None or not p.grad.any() for p in encoder(model).values())  # tied embedding included
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in
               (model.head_dense.weight, model.head_norm.weight, model.head_bias, model.readout_decoder.weight))
    assert model.latent_head.weight.grad is None
    # the readout alone learns the masked tokens of a fixed batch
    opt = torch.optim.Adam([model.head_dense.weight, model.head_dense.bias, model.head_bias,
                            model.readout_decoder.weight], lr=1e-2)
    first = None
    for _ in range(10):
        opt.zero_grad()
        ce = masked_cross_entropy(model.forward_outputs(ids.masked_fill(mask, 3), att, mask, clean_ids=ids)["logits"],
                                  ids[mask])
        ce.backward()
        opt.step()
        first = ce.item() if first is None else first
    assert ce.item() < first - 0.1
    model.zero_grad()
    masked_mse(out["pred"], out["target"], out["mask"]).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder(model).values())  # trains the encoder
    assert model.head_dense.weight.grad is None or not model.head_dense.weight.grad.any()
    assert all(p.grad is None for p in model.teacher.parameters())


def test_contrastive_term_outputs_and_gradient():
    model = method(contrastive=True, temperature=0.2, proj_dim=8).train()
    assert "logit_scale" not in model.state_dict() and model.teacher is None  # non-persistent; token target
    ids, att, words = batch(lengths=(6, 8, 4, 5))
    ma = random_mask(ids.shape, 0.3, generator=gen(1), eligible=words)
    mb = random_mask(ids.shape, 0.3, generator=gen(2), eligible=words)
    out = model.forward_outputs(ids.masked_fill(ma, 3), att, ma, input_ids_b=ids.masked_fill(mb, 3))
    assert out["emb_a"].shape == out["emb_b"].shape == (4, 8) and out["logits"].shape == (int(ma.sum()), V)
    assert float(out["logit_scale"]) == pytest.approx(math.log(5.0))
    assert not torch.allclose(out["emb_a"], out["emb_b"])  # two views
    loss = info_nce(out["emb_a"], out["emb_b"], out["logit_scale"])
    assert 0 < loss.item() and math.isfinite(loss.item())
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.projector.parameters())
    assert model.blocks[0].attn.qkv.weight.grad.abs().sum() > 0  # reaches the encoder
    # pooled over the real tokens: more padding leaves the embeddings alone
    model.eval()
    pad = lambda t: torch.cat([t, torch.zeros(len(t), 4, dtype=t.dtype)], dim=1)  # noqa: E731
    with torch.no_grad():
        a = model.forward_outputs(ids, att, ma, input_ids_b=ids)["emb_a"]
        a_wide = model.forward_outputs(pad(ids), pad(att), pad(ma), input_ids_b=pad(ids))["emb_a"]
    torch.testing.assert_close(a, a_wide, atol=1e-5, rtol=1e-5)
    assert "emb_a" not in model.forward_outputs(ids, att, ma)  # validation: one view, no embeddings


# --- configs --------------------------------------------------------------------------------------


def _resolved(**over) -> RunConfig:
    d = {"task": "text_mlm", "data": {"dataset": "x"}, "model": {"preset": "tiny"}}
    d.update(over)
    return resolve(RunConfig.from_dict(d))


def test_a_plain_config_builds_the_plain_bert_and_methods_build_theirs():
    old = _resolved(task_params={"mask_share": 0.8, "random_share": 0.1})
    assert old.objective.loss == "cross_entropy" and old.task_params["target"] == "token"
    torch.manual_seed(0)
    plain = build_model(old, vocab_size=V, max_len=MAX_LEN)
    torch.manual_seed(0)
    direct = BertMLM(V, MAX_LEN, embed_dim=128, depth=2, num_heads=2, mlp_ratio=4.0)
    assert type(plain) is BertMLM and plain.state_dict().keys() == direct.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), direct.state_dict().values()))
    latent = _resolved(task_params={"target": "latent"})
    assert latent.objective.loss == "mse"  # the latent target's default objective
    m = build_model(latent, vocab_size=V, max_len=MAX_LEN)
    assert isinstance(m, MethodBertMLM) and m.projector is None
    assert set(m.state_dict()) - set(direct.state_dict()) == {k for k in m.state_dict() if k.startswith(
        ("teacher.", "latent_head.", "readout_decoder."))}
    both = _resolved(task_params={"target": "latent"},
                     objective={"terms": [{"loss": "mse", "weight": 1.0}, {"loss": "contrastive", "weight": 0.1}]})
    m = build_model(both, vocab_size=V, max_len=MAX_LEN)
    assert m.teacher is not None and m.projector is not None
    m = build_model(_resolved(objective={"terms": WITH_CONTRASTIVE}), vocab_size=V, max_len=MAX_LEN)
    assert isinstance(m, MethodBertMLM) and m.teacher is None and m.projector is not None


@pytest.mark.parametrize("over, field", [
    ({"model": {"arch": "bert_hf", "preset": "tiny"}, "task_params": {"target": "latent"}}, r"task_params\.target"),
    ({"model": {"arch": "bert_hf", "preset": "tiny"}, "objective": {"terms": WITH_CONTRASTIVE}}, r"objective\.terms"),
    ({"model": {"preset": "tiny", "init_from": "someone/bert"}, "task_params": {"target": "latent"}},
     r"task_params\.target"),
    ({"model": {"preset": "tiny", "init_from": "abc123"}, "objective": {"terms": WITH_CONTRASTIVE}}, r"objective\.terms"),
    ({"task_params": {"target": "latent"}, "objective": {"loss": "cross_entropy"}}, r"objective\.loss: cross_entropy"),
    ({"task_params": {"target": "latent"}, "objective": {"terms": WITH_CONTRASTIVE}}, r"objective\.terms\.0\.loss"),
    ({"task_params": {"target": "latent", "top_k": 3}}, r"task_params\.top_k: 3 is more than the 2 blocks"),
    ({"objective": {"loss": "contrastive"}}, r"objective\.loss: a contrastive term alone"),
    ({"objective": {"loss": "mse"}}, r"objective\.loss: 'mse' needs model outputs"),  # the token target
    ({"task_params": {"target": "pixel"}}, r"task_params\.target"),
])
def test_refused_combinations_name_the_field(over, field):
    with pytest.raises(ConfigError, match=field):
        _resolved(**over)


def test_the_example_config_is_a_latent_bert_run():
    cfg = resolve(load_config("configs/method-data2vec-text.yaml", ["data.dataset=x"]))
    assert (cfg.model.arch, cfg.objective.loss, cfg.task_params["target"], cfg.task_params["top_k"]) == (
        "bert", "mse", "latent", 2)
    assert cfg.task_params["ema_anneal_steps"] == cfg.train.steps


# --- runs -----------------------------------------------------------------------------------------


def test_latent_run_logs_target_std_readout_and_accuracy_and_answers_the_fill_in_box(trec, one_thread):  # noqa: F811
    cfg = _cfg("text_mlm", trec, task_params=LATENT, train={"steps": 8, "eval_interval": 4, "checkpoint_interval": 4})
    run_id, d = create_run(cfg.to_dict())
    assert execute_run(d) == "completed", get_run(run_id).error
    m = read_metrics([run_id], ["loss", TARGET_STD, "loss/readout"], max_points=None)
    for key in ("loss", TARGET_STD, "loss/readout"):
        rows = m[m.key == key]
        assert sorted(rows.step) == list(range(1, 9)), key  # every training step
        assert rows.value.map(math.isfinite).all(), key
    assert (m[m.key == TARGET_STD].value > 0).all()
    latest = get_run(run_id).latest
    for k in ("val_loss", "val_top1", "val_top5", "val_ppl", "val_" + TARGET_STD, "baseline/unigram_top1"):
        assert k in latest and math.isfinite(latest[k]), k
    at4, weights = (load_weights(c) for c in list_checkpoints(d)[-2:])
    assert "teacher.blocks.0.attn.qkv.weight" in weights  # the teacher is saved: a resume gets it back
    for k in ("teacher.blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.weight", "readout_decoder.weight",
              "latent_head.weight"):
        assert not torch.equal(at4[k], weights[k]), k  # the teacher follows, the encoder and both heads train
    assert not torch.equal(weights["teacher.blocks.0.attn.qkv.weight"], weights["blocks.0.attn.qkv.weight"])
    preds = fill_in(load_model(run_id), "what is the [MASK] of china ?")
    assert len(preds) == 1 and len(preds[0].candidates) == 3


def test_contrastive_terms_train_beside_mlm_and_beside_the_latent_target(trec, one_thread):  # noqa: F811
    for params, terms in (({}, WITH_CONTRASTIVE),
                          (LATENT, [{"loss": "mse", "weight": 1.0}, {"loss": "contrastive", "weight": 0.1}])):
        cfg = _cfg("text_mlm", trec, task_params=params, objective={"terms": terms},
                   train={"steps": 4, "eval_interval": 4, "checkpoint_interval": 4})
        run_id, d = create_run(cfg.to_dict())
        assert execute_run(d) == "completed", get_run(run_id).error
        latest = get_run(run_id).latest
        first = terms[0]["loss"]
        assert math.isfinite(latest["loss/contrastive"]) and math.isfinite(latest[f"loss/{first}"])
        assert 0 < latest["loss/contrastive"] < 2 * math.log(8)  # InfoNCE of a batch of 8 (log 8 at chance)
        assert "val_top1" in latest and (TARGET_STD in latest) == bool(params)
