"""Compare's sample views when the compared runs saw different inputs (other datasets, image sizes,
windows or tokenizers): each run's columns show its own inputs, an original per run, so no run's
reconstruction or prediction sits beside another run's original. With the same inputs there is one
shared original. The views are called outside a Streamlit session (its calls are no-ops there) on
samples made of real scikit-learn digits; the column and row structure is what is checked."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from app.modalities.audio import compare_view as audio_compare_view
from app.modalities.image import compare_view as image_compare_view
from app.modalities.paired import caption_rows
from app.modalities.text import compare_rows
from engine.store.samples import Sample

DIGITS = load_digits().images.astype(np.float32) / 16.0  # [1797, 8, 8] in [0, 1]


def image_sample(rows: slice, step: int = 2) -> Sample:
    x = DIGITS[rows][:, None]  # [N, 1, 8, 8]
    mask = np.zeros((len(x), 4, 4), bool)
    mask[:, ::2] = True  # 2x2 patches, half of them hidden
    return Sample(step=step, kind="image", arrays={"images": x, "mask": mask, "pasted": x, "pred_img": x,
                                                    "labels": np.zeros(len(x), np.int64)})


def spec_sample(frames: int, step: int = 2) -> Sample:
    spec = np.log1p(np.tile(DIGITS[:4], (1, 1, frames // 8 + 1))[:, :, :frames]).astype(np.float16)  # [4, 8, T]
    mask = np.zeros(spec.shape, bool)
    mask[:, :, ::3] = True
    return Sample(step=step, kind="audio_spec", arrays={"spec": spec, "pred": spec, "mask": mask,
                                                         "real": np.ones((4, frames), bool)})


def text_sample(texts: list[str], step: int = 2) -> Sample:
    width = max(len(t.split()) for t in texts)
    tokens = np.array([t.split() + [""] * (width - len(t.split())) for t in texts])
    mask = np.zeros(tokens.shape, bool)
    mask[:, 1] = True
    top = np.stack([tokens, tokens], axis=-1)  # [N, L, 2]: the top-2 words
    return Sample(step=step, kind="text_mlm", arrays={"tokens": tokens, "mask": mask, "top_tokens": top})


def captions(drawn) -> list[str]:
    return [c for c, _ in drawn]


def test_image_runs_on_the_same_images_share_one_original():
    drawn = image_compare_view({"a": image_sample(slice(0, 6)), "b": image_sample(slice(0, 6), step=4)})
    assert captions(drawn) == ["original", "a · masked (step 2)", "a · reconstruction (step 2)",
                               "b · masked (step 4)", "b · reconstruction (step 4)"]


def test_image_runs_on_different_images_show_each_its_own_original():
    a, b = image_sample(slice(0, 6)), image_sample(slice(100, 106))
    drawn = image_compare_view({"a": a, "b": b})
    assert captions(drawn) == ["a · original", "a · masked (step 2)", "a · reconstruction (step 2)",
                               "b · original", "b · masked (step 2)", "b · reconstruction (step 2)"]
    # each original column is that run's own images (upscaled): b's differs from a's
    assert not np.array_equal(drawn[0][1], drawn[3][1])


@pytest.mark.parametrize("frames, same", [(32, True), (40, False)])
def test_audio_runs_on_other_windows_show_each_its_own_original(frames, same):
    drawn = audio_compare_view({"a": spec_sample(32), "b": spec_sample(frames)})
    own = ["a · original"] * (not same) + ["a · masked (step 2)", "a · reconstruction (step 2)"] + \
        ["b · original"] * (not same) + ["b · masked (step 2)", "b · reconstruction (step 2)"]
    assert captions(drawn) == (["original"] if same else []) + own
    if not same:  # a 40-frame window draws wider than a 32-frame one
        assert drawn[3][1].shape[1] > drawn[0][1].shape[1]


def test_text_runs_on_other_texts_show_each_its_own_text_and_hidden_words():
    ours = ["what is the capital of peru", "who wrote the iliad"]
    rows, same = compare_rows({"a": text_sample(ours), "b": text_sample(ours, step=4)})
    assert same and list(rows.columns) == ["text", "hidden", "a (step 2)", "b (step 4)"]
    assert list(rows["hidden"]) == ["is", "wrote"]
    other = ["how far is the moon", "name a prime number"]
    rows, same = compare_rows({"a": text_sample(ours), "b": text_sample(other)})
    assert not same and list(rows.columns) == ["a · text", "a · hidden", "a (step 2)",
                                               "b · text", "b · hidden", "b (step 2)"]
    assert list(rows["b · hidden"]) == ["far", "a"] and list(rows["b (step 2)"]) == ["far", "a"]


def test_paired_runs_on_other_captions_show_each_its_own_caption():
    def paired(texts: list[str]) -> Sample:
        s = text_sample(texts)
        return Sample(step=2, kind="paired", arrays={"tokens": s["tokens"], "caption_from_image": s["tokens"][:, ::-1]})

    ours, other = ["a red apple", "a blue car"], ["a green frog", "a small boat"]
    rows = caption_rows({"a": paired(ours), "b": paired(ours)})
    assert list(rows.columns) == ["caption", "a from the image (step 2)", "b from the image (step 2)"]
    rows = caption_rows({"a": paired(ours), "b": paired(other)})
    assert list(rows.columns) == ["a · caption", "a from the image (step 2)", "b · caption", "b from the image (step 2)"]
    assert list(rows["b · caption"]) == ["a green frog", "a small boat"]
