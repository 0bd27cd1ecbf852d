"""The modality registry: every per-modality table (importers, dataset classes, masking offers) is
derived from one registration per modality."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine.data.dataset import AudioDataset, ImageDataset, PairedDataset, TextDataset
from engine.errors import DatasetError
from engine.masking import MASKING_REGISTRY, register_masking, strategies_for, strategies_on
from engine.modalities import (
    MODALITY_REGISTRY,
    Importer,
    Modality,
    get_importer,
    get_modality,
    importers,
    modality_names,
    register_modality,
)
from engine.modalities.grids import GRID_KINDS, lineage, register_grid_kind

ROOT = Path(__file__).resolve().parents[2]

# What the dashboard offered per (modality, grid dims) when each strategy listed its modalities by
# name: the grid kinds must give exactly the same offers.
OFFERED = {
    ("image", 2): {"attention", "bernoulli", "block", "hierarchical", "periodic", "random", "region", "superpixel"},
    ("text", 1): {"attention", "bernoulli", "hierarchical", "periodic", "random", "region", "sentence_span", "span",
                  "span_starts", "whole_word"},
    ("audio", 1): {"attention", "bernoulli", "hierarchical", "periodic", "random", "region", "span", "span_starts",
                   "time_mask", "voiced"},
    ("audio", 2): {"attention", "bernoulli", "block", "freq_mask", "hierarchical", "periodic", "random", "region",
                   "specaugment", "time_mask", "voiced"},
    ("paired", 1): set(),
    ("paired", 2): set(),
}


def test_builtin_modalities_and_their_dataset_classes():
    assert modality_names()[:4] == ("image", "text", "audio", "paired")  # built-ins load on first lookup
    classes = {m: get_modality(m).dataset_type() for m in ("image", "text", "audio", "paired")}
    assert classes == {"image": ImageDataset, "text": TextDataset, "audio": AudioDataset, "paired": PairedDataset}
    with pytest.raises(DatasetError, match=r"unknown modality 'nope'; known modalities: image, text, audio, paired"):
        get_modality("nope")


def test_importers_are_tried_in_order_and_name_their_modality():
    builtin = [i for i in importers() if i.name in ("idx", "paired", "image", "audio", "text")]
    assert [(i.name, i.modality) for i in builtin] == [
        ("idx", "image"), ("paired", "paired"), ("image", "image"), ("audio", "audio"), ("text", "text")]
    assert {".csv", ".tsv", ".jsonl", ".txt"} <= set(get_importer("text").files)
    assert ".wav" in get_importer("audio").files and ".mp3" in get_importer("audio").files  # refused on import, not skipped
    assert ".png" in get_importer("image").tree and not get_importer("image").files
    assert get_importer("audio").preload == ("soundfile", "torch", "torchaudio")
    assert (get_importer("text").options, get_importer("audio").options) == (("min_chars", "max_chars"), ("sample_rate",))
    assert not get_importer("image").columns and get_importer("text").columns


@pytest.mark.parametrize("modality,dims", sorted(OFFERED))
def test_strategies_offered_per_modality_come_from_grid_kinds(modality, dims):
    assert set(strategies_for(modality, dims)) == OFFERED[(modality, dims)]


def test_grid_kinds_form_a_hierarchy_and_strategies_check_them():
    assert lineage("tokens-1d") == {"tokens-1d", "seq-1d"} and lineage("patch-2d") == {"patch-2d"}
    span = MASKING_REGISTRY["span"]
    assert span.works_on("tokens-1d") and span.works_on("frames-1d") and not span.works_on("patch-2d")
    assert not MASKING_REGISTRY["whole_word"].works_on("seq-1d")  # a specific kind does not widen to its parent
    assert all(MASKING_REGISTRY["random"].works_on(k) for k in GRID_KINDS)  # no grids listed: any grid of its dims
    assert strategies_on("tube-3d") == ["hierarchical", "periodic", "random", "region", "tube"]
    assert strategies_on("patch-2d", 1) == []
    with pytest.raises(ValueError, match="unknown grid kind 'hex-2d'"):
        strategies_on("hex-2d")
    with pytest.raises(ValueError, match="already registered"):
        register_grid_kind("seq-1d", 1)
    with pytest.raises(ValueError, match=r"parents \['patch-2d'\] are unknown or not 1-D"):
        register_grid_kind("odd-1d", 1, ("patch-2d",))
    with pytest.raises(ValueError, match=r"unknown grid kind or side input \['hex-2d'\]"):
        register_masking("never", grids=("hex-2d",))
    assert set(GRID_KINDS) >= {"seq-1d", "tokens-1d", "frames-1d", "patch-2d", "spec-2d", "tube-3d"}


def test_register_modality_refuses_clashes():
    with pytest.raises(ValueError, match="modality 'image' is already registered"):
        register_modality(Modality("image", lambda: ImageDataset))
    with pytest.raises(ValueError, match=r"importer name\(s\) \['text'\] already registered"):
        register_modality(Modality("other", lambda: TextDataset, (Importer("text", print, print),)))
    with pytest.raises(ValueError, match=r"unknown grid kind\(s\) \['hex-2d'\]"):
        register_modality(Modality("hexes", lambda: ImageDataset, grids=("hex-2d",)))
    assert not {"other", "hexes"} & set(MODALITY_REGISTRY)


def test_engine_branches_on_no_modality_name():
    """The loop, data, masking and eval layers never name a modality or task: only the modality and
    task plug-in modules do (``engine/modalities/``, ``engine/tasks/``)."""
    out = subprocess.run(["git", "grep", "-nE", r'"image_mim"|modality ==|\.modality in', "--", "engine",
                          ":!engine/modalities", ":!engine/tasks"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1 and out.stdout == "", out.stdout
