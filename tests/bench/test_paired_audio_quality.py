"""bench/paired_quality.py --audio, scaled down: configs/paired-audio-fsdd.yaml on the first 10
takes of each digit and speaker of FSDD (400 real clips, one of the four speakers held out in val),
one seed, 50 steps, the spectrogram's first 0.6 s (most FSDD words are said within it: 35 patches,
not 65), through the real importer and engine. The recipe's claims (the word from the audio above
the same model with the audio hidden, retrieval above chance and CCA) need 300 steps and more: they
are the bench's (bench/README.md, "Paired audio-text"; 300 steps took 103 to 142 s in CI). CI checks
that every figure and baseline is logged and read back alike by the CLI, and that the hidden
spectrogram patches are restored better than the training mean spectrogram (MSE 0.678 against 1.506
at 50 steps, as at 150). About 17 s."""

from __future__ import annotations

import pytest

from tests.bench import load_bench, paired_reports

STEPS, TAKES, WINDOW = 50, 10, ["data.audio.clip_seconds=0.6"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_short_audio_text_recipe_on_fsdd_logs_every_figure_and_restores_the_spectrogram(workspace, shared_data, capsys):
    bench = load_bench("paired_quality")
    out = bench.run(workspace, seeds=[0], steps=STEPS, overrides=WINDOW, max_rows=TAKES, recipe=bench.AUDIO)
    (r,) = out["runs"]
    m = out["mean"]
    assert out["kind"] == "audio" and out["pairs"] == 4 * 10 * TAKES and r["steps"] == STEPS
    c = r["config"]
    assert c["task"] == "paired_audio" and c["task_params"]["text_source"] == "digit_word" and c["train"]["num_threads"] == 1
    assert c["data"]["audio"]["clip_seconds"] == 0.6
    assert m["val_mse"] < 0.75 * m["baseline/mean_spec/mse"], m
    for k in (5, 10):
        assert 0 <= m[f"val_t2i_r{k}"] <= 1 and 0 <= m[f"val_i2t_r{k}"] <= 1, (k, m)
    assert 0 < m["baseline/chance/i2t_r1"] < m["baseline/chance/i2t_r5"] < m["baseline/chance/i2t_r10"]
    assert 0 <= m["val_caption_blank_acc"] <= 1 and 0 <= m["val_caption_acc"] <= 1, m
    assert set(out["checks"]) == set(bench.AUDIO.checks)
    # the report, then the CLI reading the same run back from the store (--collect): the same figures
    first, second, figures = paired_reports(bench, out, workspace, bench.AUDIO, ["--audio", "--collect", str(workspace)], capsys)
    assert "audio->text R@5 CCA" in first and "s CPU" in first and "s CPU" not in second and len(figures) > len(out["checks"])
