"""engine.data for audio: decoding rules, every refusal named, manifests and speaker splits, storage,
the bundled Asterisk prompts. Real recordings from ../shared/data/fsdd (spoken digits)."""

from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio

import engine.data.audio as audio_mod
from engine.cli import main
from engine.data import AudioDataset, ImportOptions, import_source, inspect_source, load_dataset
from engine.data.audio import (
    ASTERISK_DEFAULT_DIR,
    MIN_CLIP_SECONDS,
    asterisk_info,
    build_asterisk,
    proposed_rate,
    rates_text,
    read_transcripts,
    sniff,
)
from engine.data.dataset import PCM_SCALE, to_pcm
from engine.data.sampling import import_order
from engine.data.storage import array_path, datasets_dir
from engine.errors import DatasetError

needs_asterisk = pytest.mark.skipif(
    not Path(ASTERISK_DEFAULT_DIR, "digits", "7.wav").is_file(),
    reason="install the Debian package asterisk-core-sounds-en-wav (sudo apt-get install asterisk-core-sounds-en-wav)",
)


@pytest.fixture(scope="module")
def fsdd(shared_data) -> Path:
    return shared_data / "fsdd"


def real_clip(fsdd: Path, name: str = "3_theo_7") -> np.ndarray:
    x, sr = sf.read(fsdd / "recordings" / f"{name}.wav", dtype="float32")
    assert sr == 8000
    return x


def wav_bytes(x: np.ndarray, sr: int, subtype: str = "PCM_16", fmt: str = "WAV") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, sr, subtype=subtype, format=fmt)
    return buf.getvalue()


def decoded(data: bytes) -> np.ndarray:
    """What a file's bytes hold, as float32 ``(frames, channels)`` (16-bit files are quantised)."""
    return sf.read(io.BytesIO(data), dtype="float32", always_2d=True)[0]


def make_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    return path


def expected_pcm(mono: np.ndarray, sr: int, rate: int) -> np.ndarray:
    """The importer's rule computed independently: resample with torchaudio.functional.resample, int16."""
    y = torchaudio.functional.resample(torch.from_numpy(mono.astype(np.float32)), sr, rate).numpy() if sr != rate else mono
    return np.round(np.clip(y, -1, 1) * PCM_SCALE).astype(np.int16)


# --------------------------------------------------------------------------- the three edge files


def test_one_sample_zero_byte_and_stereo_48k_each_get_their_rule_and_are_named(workspace, tmp_path, fsdd):
    """In one zip with real clips: the 1-sample WAV and the zero-byte WAV are refused naming the
    file and why; the stereo 48 kHz WAV is imported, downmixed and resampled as the report says."""
    a, b = real_clip(fsdd, "3_theo_7"), real_clip(fsdd, "3_jackson_7")
    n = min(len(a), len(b))
    left = torchaudio.functional.resample(torch.from_numpy(a[:n]), 8000, 48000).numpy()
    right = torchaudio.functional.resample(torch.from_numpy(b[:n]), 8000, 48000).numpy()
    stereo_wav = wav_bytes(np.stack([left, right], axis=1), 48000)  # (frames, 2) at 48 kHz, 16-bit
    z = make_zip(tmp_path / "edge.zip", {
        "clips/three/3_theo_7.wav": (fsdd / "recordings" / "3_theo_7.wav").read_bytes(),
        "clips/three/one_sample.wav": wav_bytes(np.array([0.25], np.float32), 8000),
        "clips/three/zero_bytes.wav": b"",
        "clips/three/stereo48k.wav": stereo_wav,
    })
    report = import_source(z, "edge", ImportOptions(val_fraction=0.0), workspace=workspace)
    rejected = dict(report.rejected)
    assert set(rejected) == {"clips/three/one_sample.wav", "clips/three/zero_bytes.wav"}
    assert rejected["clips/three/one_sample.wav"] == (
        "1 sample at 8000 Hz (0.1 ms): shorter than 25 ms, the shortest clip masklab imports (one analysis "
        "window); export a longer clip")
    assert rejected["clips/three/zero_bytes.wav"] == "empty file"
    assert report.accepted == 2
    summary = report.summary()
    assert "clips/three/one_sample.wav: 1 sample at 8000 Hz" in summary and "clips/three/zero_bytes.wav: empty file" in summary
    assert "downmixed to mono (mean of the channels): 1 clip of 2 channels" in summary
    assert "resampled to 16000 Hz with torchaudio.functional.resample" in summary
    assert "1 clip from 8000 Hz" in summary and "1 clip from 48000 Hz" in summary
    # only the clip recorded below the import's rate is a warning: its high mel bins hold nothing
    assert report.converted == [("", "recorded at 8,000 Hz, upsampled to 16,000 Hz: the mel bins above 4,000 Hz hold "
                                     "nothing; import again with the sample rate at 8,000 Hz")]

    ds = load_dataset("edge", workspace)
    assert isinstance(ds, AudioDataset) and ds.rate == 16000 and len(ds) == 2
    source = sorted(["clips/three/3_theo_7.wav", "clips/three/stereo48k.wav"])  # kept clips, in source order
    stored = [source[i] for i in import_order(2, ImportOptions().seed)]  # rows are stored shuffled
    stereo_row = stored.index("clips/three/stereo48k.wav")
    want = expected_pcm(decoded(stereo_wav).mean(axis=1), 48000, 16000)
    got = ds.audio_pcm[ds.audio_offsets[stereo_row] : ds.audio_offsets[stereo_row + 1]]
    np.testing.assert_array_equal(got, want)
    mono_row = 1 - stereo_row
    np.testing.assert_array_equal(ds.audio_pcm[ds.audio_offsets[mono_row] : ds.audio_offsets[mono_row + 1]],
                                  expected_pcm(a, 8000, 16000))
    assert ds.info.stats["channels"] == {"1": 1, "2": 1}
    assert ds.info.stats["source_rates"] == {"48000": 1, "8000": 1}


@pytest.mark.parametrize("case, data, message", [
    ("one_sample.wav", wav_bytes(np.array([0.25], np.float32), 8000),
     r"one_sample\.wav: no usable audio clip .*1 refused: one_sample\.wav: 1 sample at 8000 Hz \(0\.1 ms\): shorter than 25 ms"),
    ("zero_bytes.wav", b"", r"zero_bytes\.wav: no usable audio clip .*zero_bytes\.wav: empty file"),
])
def test_a_single_unusable_file_is_refused_naming_it(workspace, tmp_path, case, data, message):
    p = tmp_path / case
    p.write_bytes(data)
    with pytest.raises(DatasetError, match=message):
        import_source(p, "single", workspace=workspace)
    assert not (datasets_dir(workspace) / "single").exists()


def test_a_single_stereo_48k_file_is_one_mono_clip(workspace, tmp_path, fsdd):
    x = real_clip(fsdd)
    x48 = torchaudio.functional.resample(torch.from_numpy(x), 8000, 48000).numpy()
    p = tmp_path / "Stereo Take.wav"
    p.write_bytes(wav_bytes(np.stack([x48, 0.5 * x48], axis=1), 48000))
    stereo = decoded(p.read_bytes())
    report = import_source(p, workspace=workspace)
    assert report.dataset.name == "stereo-take" and report.accepted == 1 and not report.rejected
    ds = load_dataset("stereo-take", workspace)
    np.testing.assert_array_equal(ds.audio_pcm, expected_pcm(stereo.mean(axis=1), 48000, 16000))
    assert ds.info.class_names == ("unlabeled",) and ds.info.n_val == 0


def test_the_shortest_accepted_clip_is_exactly_25_ms(workspace, tmp_path, fsdd):
    x = real_clip(fsdd)
    n = round(MIN_CLIP_SECONDS * 8000)  # 200 samples
    z = make_zip(tmp_path / "short.zip", {"a/ok.wav": wav_bytes(x[:n], 8000), "a/short.wav": wav_bytes(x[: n - 1], 8000)})
    report = import_source(z, "short", ImportOptions(sample_rate=8000), workspace=workspace)
    assert report.accepted == 1
    assert report.rejected == [("a/short.wav", "199 samples at 8000 Hz (25 ms): shorter than 25 ms, the shortest clip "
                                               "masklab imports (one analysis window); export a longer clip")]
    np.testing.assert_array_equal(load_dataset("short", workspace).audio_pcm, to_pcm(x[:n])[0])


# --------------------------------------------------------------------------- formats by content


def test_formats_are_decided_by_content_and_mismatches_refused(workspace, tmp_path, fsdd):
    x = real_clip(fsdd)
    wav = wav_bytes(x, 8000)
    flac = wav_bytes(x, 8000, "PCM_16", "FLAC")
    ogg = wav_bytes(x, 8000, "VORBIS", "OGG")
    assert (sniff(wav), sniff(flac), sniff(ogg)) == ("WAV", "FLAC", "OGG")
    z = make_zip(tmp_path / "formats.zip", {
        "d/a.wav": wav, "d/b.flac": flac, "d/c.ogg": ogg,
        "d/wav_named.flac": wav, "d/flac_named.wav": flac,
        "d/song.mp3": b"ID3\x03\x00" + bytes(100), "d/noise.wav": bytes(range(256)) * 4,
        "d/header_only.wav": wav[:44], "d/notes.md": b"# notes",
    })
    report = import_source(z, "formats", ImportOptions(sample_rate=8000), workspace=workspace)
    assert dict(report.rejected) == {
        "d/wav_named.flac": "named .flac (FLAC) but its content is WAV; rename it to its real extension",
        "d/flac_named.wav": "named .wav (WAV) but its content is FLAC; rename it to its real extension",
        "d/song.mp3": "MP3 is not read by masklab; convert it to WAV, FLAC or Ogg",
        "d/noise.wav": "not a WAV, FLAC or Ogg file (its first bytes match none of them); export it as WAV",
        "d/header_only.wav": "no samples: the recording is empty",
    }
    assert report.skipped == [("d/notes.md", "not an audio file (.md)")]
    ds = load_dataset("formats", workspace)
    src = np.argsort(import_order(3, ImportOptions().seed))  # stored row of each source clip (rows are shuffled)
    pcm = [ds.audio_pcm[ds.audio_offsets[i] : ds.audio_offsets[i + 1]] for i in src]  # a.wav, b.flac, c.ogg
    np.testing.assert_array_equal(pcm[0], to_pcm(x)[0])
    np.testing.assert_array_equal(pcm[1], pcm[0])  # FLAC is lossless
    ogg_x = pcm[2].astype(np.float64)
    assert len(ogg_x) == len(x) and np.corrcoef(ogg_x, pcm[0].astype(np.float64))[0, 1] > 0.95  # Vorbis is lossy
    assert ds.info.stats["formats"] == {"FLAC": 1, "OGG": 1, "WAV": 1}


def test_a_truncated_file_is_refused_with_the_decoders_message_kept(workspace, tmp_path, fsdd):
    flac = wav_bytes(real_clip(fsdd), 8000, "PCM_16", "FLAC")
    z = make_zip(tmp_path / "t.zip", {"ok.wav": wav_bytes(real_clip(fsdd), 8000), "cut.flac": flac[:30]})
    report = import_source(z, "trunc", workspace=workspace)
    assert report.rejected == [("cut.flac", "cannot be decoded: a damaged or truncated FLAC file")]
    assert report.details["cut.flac"]  # libsndfile's own words


def test_archive_safeguards_and_the_clip_length_limit(workspace, tmp_path, fsdd, monkeypatch):
    x = real_clip(fsdd)
    long = np.tile(x, int(np.ceil(1.5 * 8000 / len(x))))  # over 1.5 s
    z = make_zip(tmp_path / "s.zip", {"ok/a.wav": wav_bytes(x, 8000), "../evil.wav": wav_bytes(x, 8000),
                                      "ok/long.wav": wav_bytes(long, 8000)})
    monkeypatch.setenv("MASKLAB_MAX_CLIP_SECONDS", "1.0")
    report = import_source(z, "safe", workspace=workspace)
    rejected = dict(report.rejected)
    assert rejected["../evil.wav"].startswith("path leaves the archive")
    assert rejected["ok/long.wav"] == (f"{len(long) / 8000:.1f} s long; the limit is 1 s (MASKLAB_MAX_CLIP_SECONDS): "
                                       "cut it into shorter clips or raise the limit")
    assert report.accepted == 1


# --------------------------------------------------------------------------- labels, manifests, splits


def test_fsdd_folder_with_its_manifest_is_split_by_speaker(workspace, fsdd):
    plan = inspect_source(fsdd, ImportOptions(group_column="speaker"))
    assert (plan.modality, plan.kind, plan.n_items) == ("audio", "audio folder", 2000)
    assert plan.roles.file == "path" and plan.roles.label == "label" and plan.roles.group == "speaker"
    assert plan.roles.text is None  # a transcript column only when asked for
    assert plan.sample_rates == {8000: 64}  # the headers of 64 clips spread over the 2,000
    report = import_source(fsdd, "fsdd", ImportOptions(group_column="speaker", sample_rate=8000, val_fraction=0.25),
                           workspace=workspace)
    assert report.accepted == 2000 and not report.rejected
    assert report.skipped == [("README.md", "not an audio file (.md)")]
    ds = load_dataset("fsdd", workspace)
    assert ds.info.class_names == tuple(str(d) for d in range(10))
    assert ds.info.group_names == ("jackson", "nicolas", "theo", "yweweler")
    with open(fsdd / "manifest.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    speakers_val = {ds.info.group_names[g] for g in ds.groups[ds.split == 1]}
    speakers_train = {ds.info.group_names[g] for g in ds.groups[ds.split == 0]}
    assert len(speakers_val) == 1 and not speakers_val & speakers_train  # validation speakers are unseen
    # every clip has the manifest's label and speaker, and its own samples
    order = import_order(2000, ImportOptions().seed)  # stored row i is manifest row order[i]
    for i in (0, 777, 1999):
        r = rows[order[i]]
        assert ds.info.class_names[ds.labels[i]] == r["label"] and ds.info.group_names[ds.groups[i]] == r["speaker"]
        pcm = ds.audio_pcm[ds.audio_offsets[i] : ds.audio_offsets[i + 1]]
        np.testing.assert_array_equal(pcm, to_pcm(sf.read(fsdd / r["path"], dtype="float32")[0])[0])
    assert ds.info.stats["sample_rate"] == 8000 and ds.info.stats["seconds_min"] == pytest.approx(0.1436, abs=1e-3)


def test_manifest_rows_with_problems_are_named_by_line_and_unlisted_clips_skipped(workspace, tmp_path, fsdd):
    x = real_clip(fsdd)
    manifest = "file,label,speaker,words\nclips/a.wav,three,theo,three\nclips/missing.wav,one,theo,one\n" \
               "clips/a.wav,three,theo,three\n../b.wav,two,x,two\nclips/b.wav,,jackson,\n"
    z = make_zip(tmp_path / "m.zip", {"set/manifest.csv": manifest.encode(), "set/clips/a.wav": wav_bytes(x, 8000),
                                      "set/clips/b.wav": wav_bytes(x[::-1].copy(), 8000),
                                      "set/clips/c.wav": wav_bytes(x, 8000)})
    report = import_source(z, "man", ImportOptions(text_column="words", val_fraction=0.0), workspace=workspace)
    assert dict(report.rejected) == {
        "set/manifest.csv:3": "no audio file 'set/clips/missing.wav' in " + str(tmp_path / "m.zip"),
        "set/manifest.csv:4": "set/clips/a.wav is listed twice (first at line 2)",
        "set/manifest.csv:5": "path leaves the archive ('..' in the path); masklab uses names inside the archive only",
    }
    assert report.skipped == [("set/clips/c.wav", "not listed in the manifest set/manifest.csv")]
    ds = load_dataset("man", workspace)
    assert ds.info.class_names == ("three", "unlabeled") and ds.info.group_names == ("jackson", "theo")
    assert [ds.transcript(i) for i in range(len(ds))] == ["three", ""]


def test_labels_come_from_sub_folders_without_a_manifest(workspace, tmp_path, fsdd):
    z = make_zip(tmp_path / "f.zip", {f"digits/{d}/{d}_theo_{k}.wav": (fsdd / "recordings" / f"{d}_theo_{k}.wav").read_bytes()
                                      for d in (1, 2) for k in range(3)} | {"digits/loose.wav": wav_bytes(real_clip(fsdd), 8000)})
    report = import_source(z, "folders", ImportOptions(sample_rate=8000), workspace=workspace)
    assert report.label_counts == {"1": 3, "2": 3, "unlabeled": 1}
    with pytest.raises(DatasetError, match=r"label_column apply to a manifest table .* this source has none"):
        import_source(z, "folders2", ImportOptions(label_column="x"), workspace=workspace)


def test_the_plan_reads_recording_rates_from_headers_of_a_spread_of_clips(tmp_path, fsdd, monkeypatch):
    """Rates of clips across the source, not its first ones; damaged and oversized members left out."""
    x = real_clip(fsdd)
    members = {f"a/{i:02d}.wav": wav_bytes(x, 8000) for i in range(6)}
    members |= {f"b/{i:02d}.wav": wav_bytes(np.tile(x, 2), 44100) for i in range(4)}  # after the 8 kHz ones
    members["b/99.wav"] = b"RIFF" + bytes(40)  # a damaged header: refused on import, not counted here
    z = make_zip(tmp_path / "mixed.zip", members)
    assert inspect_source(z).sample_rates == {8000: 6, 44100: 4}
    monkeypatch.setattr(audio_mod, "RATE_PROBE_CLIPS", 3)  # clips 0, 3 and 7 of 11: a/00, a/03, b/01
    assert inspect_source(z).sample_rates == {8000: 2, 44100: 1}
    monkeypatch.setattr(audio_mod, "RATE_PROBE_BYTES", len(wav_bytes(x, 8000)) + 1)  # the 44.1 kHz ones are larger
    assert inspect_source(z).sample_rates == {8000: 2}
    assert inspect_source(make_zip(tmp_path / "t.zip", {"a.txt": b"hello"})).sample_rates == {}


def test_options_of_other_modalities_are_refused(workspace, tmp_path, fsdd):
    with pytest.raises(DatasetError, match=r"min_chars do not apply to audio"):
        import_source(fsdd, "x", ImportOptions(min_chars=3), workspace=workspace)
    (tmp_path / "t.txt").write_text("hello world\n")
    with pytest.raises(DatasetError, match=r"sample_rate do not apply to text"):
        import_source(tmp_path / "t.txt", "y", ImportOptions(sample_rate=8000), workspace=workspace)


def test_cli_data_add_imports_a_folder_of_audio(workspace, fsdd, capsys):
    assert main(["data", "add", str(fsdd), "--name", "fsdd-cli", "--group-column", "speaker", "--sample-rate", "8000"]) == 0
    out = capsys.readouterr().out
    assert "2,000 clips accepted, 0 rejected, 1 skipped" in out and "4 groups" in out
    assert main(["data", "list"]) == 0
    assert "fsdd-cli             audio  8000 Hz" in capsys.readouterr().out


@pytest.mark.parametrize("recorded, rate", [
    ({8000: 64}, 8000),  # FSDD: kept at its own rate (upsampling adds empty mel bins)
    ({11025: 3}, 16000),  # rounded up to an offered rate, so nothing is lost
    ({8000: 10, 16000: 2}, 16000),  # the highest recorded rate
    ({44100: 5}, 16000), ({48000: 1}, 16000),  # music comes down to the 16 kHz default
    ({}, 16000),  # no header read
])
def test_the_import_form_proposes_the_clips_own_rate_at_most_16_khz(recorded, rate):
    assert proposed_rate(recorded) == rate


def test_the_import_form_says_at_which_rates_the_clips_were_recorded():
    assert rates_text({8000: 64}) == "recorded at 8,000 Hz (64 clips' headers read)"
    assert rates_text({8000: 1, 44100: 2}) == "recorded at 8,000 Hz, 44,100 Hz (3 clips' headers read)"
    assert rates_text({22050: 1}) == "recorded at 22,050 Hz (1 clip's header read)" and rates_text({}) == ""


def test_cli_data_add_resamples_to_the_rate_the_data_page_proposes(workspace, tmp_path, fsdd, capsys):
    """Without --sample-rate the CLI imports at the Data page's proposal and says so; with it, at
    the rate given. ``data inspect`` prints the same line."""
    x = real_clip(fsdd)
    eight = make_zip(tmp_path / "eight.zip", {f"c/{i}.wav": wav_bytes(x, 8000) for i in range(3)})
    music = make_zip(tmp_path / "music.zip", {f"c/{i}.wav": wav_bytes(x, 44100) for i in range(2)})
    assert main(["data", "inspect", str(eight)]) == 0
    line = "sample rate: 8,000 Hz (clips recorded at 8,000 Hz (3 clips' headers read); --sample-rate HZ chooses another)"
    assert line in capsys.readouterr().out
    assert main(["data", "add", str(eight), "--name", "eight"]) == 0
    assert line in capsys.readouterr().out and load_dataset("eight", workspace).rate == 8000
    assert main(["data", "add", str(music), "--name", "music"]) == 0
    assert "sample rate: 16,000 Hz (clips recorded at 44,100 Hz (2 clips' headers read);" in capsys.readouterr().out
    assert load_dataset("music", workspace).rate == 16000
    assert main(["data", "inspect", str(eight), "--sample-rate", "22050"]) == 0
    assert "sample rate: 22,050 Hz (--sample-rate; clips recorded at 8,000 Hz" in capsys.readouterr().out
    assert main(["data", "add", str(eight), "--name", "eight22", "--sample-rate", "22050"]) == 0
    assert "sample rate:" not in capsys.readouterr().out and load_dataset("eight22", workspace).rate == 22050


# --------------------------------------------------------------------------- storage


def test_stored_arrays_are_checked_against_the_metadata(workspace, tmp_path, fsdd):
    z = make_zip(tmp_path / "c.zip", {"a/x.wav": wav_bytes(real_clip(fsdd), 8000)})
    import_source(z, "chk", workspace=workspace)
    path = array_path(datasets_dir(workspace) / "chk", "audio_offsets")
    np.save(path, np.load(path) + 1)
    with pytest.raises(DatasetError, match=r"audio_offsets must be int64 \[2\], from 0 to \d+, non-decreasing"):
        load_dataset("chk", workspace)


# --------------------------------------------------------------------------- bundled prompts


@needs_asterisk
def test_bundled_asterisk_prompts(workspace):
    ds = load_dataset("asterisk-prompts", workspace)
    assert isinstance(ds, AudioDataset) and ds.rate == 8000
    assert ds.info.class_names == ("dictate", "digits", "followme", "letters", "phonetic", "prompts", "silence")
    cheap = asterisk_info()
    assert (cheap.n_train, cheap.n_val, cheap.class_names) == (ds.info.n_train, ds.info.n_val, ds.info.class_names)
    assert cheap.stats["seconds_total"] == pytest.approx(ds.info.stats["seconds_total"], abs=0.01)
    texts = read_transcripts("/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz")
    assert texts["digits/7"] == "seven"
    i = next(i for i in range(len(ds)) if ds.transcript(i) == "seven")
    assert ds.info.class_names[ds.labels[i]] == "digits"
    x, sr = sf.read(Path(ASTERISK_DEFAULT_DIR) / "digits" / "7.wav", dtype="float32")
    np.testing.assert_array_equal(ds.audio_pcm[ds.audio_offsets[i] : ds.audio_offsets[i + 1]], to_pcm(x)[0])
    assert np.allclose(ds.clip(i), x, atol=1 / PCM_SCALE)


@needs_asterisk
def test_build_asterisk_is_deterministic():
    a, b = build_asterisk(), build_asterisk()
    assert np.array_equal(a.audio_pcm, b.audio_pcm) and np.array_equal(a.split, b.split)
