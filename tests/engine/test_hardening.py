"""Three of issue 38's findings, fixed: a refused pickle's message gives no advice to load it unsafely
(run checkpoints and the MAE repository's .pth), a config file is size-capped before it is parsed,
and class names (which an upload names) are escaped in the text mask preview's HTML."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from app.modalities.text import masked_sentences_html
from engine.config import MAX_CONFIG_BYTES, load_config
from engine.errors import ConfigError, DamagedFileError
from engine.pretrained.importers import import_model
from engine.pretrained.store import PretrainedError, list_pretrained
from engine.store.checkpoints import load_checkpoint_state

UNSAFE_ADVICE = ("weights_only", "can still be loaded", "trust", "add_safe_globals")
HOSTILE = "<a href='https://evil.example'>click</a><b style='font-size:99px'>x</b>"


class Ran:
    """A pickle that calls ``print`` when loaded unsafely; weights_only refuses it."""

    def __reduce__(self):
        return (print, ("this ran",))


def test_a_run_checkpoint_with_code_is_refused_without_advice_to_run_it(tmp_path, capsys):
    ckpt = tmp_path / "step-0000001"
    ckpt.mkdir()
    torch.save({"step": 1, "rng": Ran()}, ckpt / "state.pt")
    with pytest.raises(DamagedFileError) as e:
        load_checkpoint_state(ckpt)
    msg = str(e.value)
    assert re.search(r"Unsupported global: GLOBAL (builtins\.)?print\b", msg) and "never runs a checkpoint's code" in msg
    assert not any(w in msg for w in UNSAFE_ADVICE), msg
    assert "this ran" not in capsys.readouterr().out


def test_an_mae_pth_with_code_is_refused_without_advice_to_run_it(tmp_path, workspace):
    f = tmp_path / "mae.pth"
    torch.save({"model": {"w": torch.zeros(2)}, "args": Ran()}, f)
    with pytest.raises(PretrainedError) as e:
        import_model(str(f), "m", workspace=workspace)
    msg = str(e.value)
    assert "needs code to load" in msg and re.search(r"Unsupported global: GLOBAL (builtins\.)?print\b", msg)
    assert not any(w in msg.replace("torch.load(weights_only=True) only", "") for w in UNSAFE_ADVICE), msg
    assert list_pretrained(workspace) == []


def test_a_config_over_the_cap_is_refused_before_it_is_parsed(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("name: x\n" + "# " + "y" * MAX_CONFIG_BYTES + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"big\.yaml: 1,048,58\d bytes; a run config is a few KB"):
        load_config(big)
    ok = tmp_path / "ok.yaml"
    ok.write_text("name: fine\n", encoding="utf-8")
    assert load_config(ok).name == "fine"


def test_class_names_are_escaped_in_the_text_mask_preview():
    tokens = np.array([["[CLS]", "a", "<b>x</b>", "[SEP]"]])
    out = masked_sentences_html(tokens, np.array([[False, True, False, False]]), [HOSTILE])
    assert "<a href" not in out and "<b style" not in out and "<b>x</b>" not in out
    assert "&lt;a href=&#x27;https://evil.example&#x27;&gt;click&lt;/a&gt;" in out and "&lt;b&gt;x&lt;/b&gt;" in out
