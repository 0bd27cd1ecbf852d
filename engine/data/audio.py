"""Audio: decode WAV / FLAC / Ogg clips, make them mono at the pipeline rate, and import a source as an
:class:`~engine.data.dataset.AudioDataset`.

Sources (:func:`import_audio`, through :func:`engine.data.import_source`):

- one ``.wav`` / ``.flac`` / ``.ogg`` file (a dataset of one clip, class ``unlabeled``);
- a ``.zip`` or (CLI) a folder of them. Members are read in memory with the archive safeguards of
  :mod:`engine.data.archive` (decoded member names, paths that leave the archive refused, entry,
  size and compression-ratio limits from the directory); nothing is extracted.

Labels: the first sub-folder of each clip (after one top folder common to every clip, as for
images), ``unlabeled`` for clips not in a sub-folder. Or a **manifest**: when the zip / folder holds
exactly one table (``.csv``, ``.tsv``, ``.jsonl``, read by :mod:`engine.data.tabular`), each row
names one clip in its file column (a path relative to the table's folder, or an id naming a clip by its
stem in any folder: :mod:`engine.data.manifest`) with its label, group
(e.g. the speaker) and, when ``text_column`` is given, its transcript; the columns come from
:class:`~engine.data.tabular.ImportOptions` (``--file-column``, ``--label-column``,
``--group-column``, ``--text-column``) or are detected (the text column only when given). Clips the
manifest does not list are skipped; a row whose file is missing, unsafe, ambiguous or listed twice is
rejected with its line (a missing one, and a clip no row lists, with its near misses). Several tables are refused (keep one manifest).

Decoding rules (:class:`ClipDecoder`), each refusal naming the file:

- **Formats by content**: ``RIFF``/``RF64`` ... ``WAVE`` is WAV, ``fLaC`` is FLAC, ``OggS`` is Ogg
  (Vorbis or Opus); only these (:data:`FORMATS`). A file whose extension names another of them than
  its content is refused as mismatched; a chained Ogg file (streams back to back, :func:`ogg_links`)
  is decoded whole, stream after stream (libsndfile alone reads the first), and named in the
  report; MP3, AAC/M4A, WMA, AIFF, AMR files are refused with "convert to WAV, FLAC or Ogg"; other
  extensions are skipped unread.
- **Bounds** (:class:`~engine.data.limits.ImportLimits`), from the header before decoding: at most
  ``max_clip_seconds`` (600 s) per clip, and 4 bytes a sample and channel against the import's
  ``max_decoded_bytes``.
- **Empty or damaged**: a zero-byte file ("empty file"), a header without samples ("no samples"), a
  file libsndfile cannot decode ("cannot be decoded", its message kept in the report's details).
- **Too short**: a clip shorter than :data:`MIN_CLIP_SECONDS` (25 ms: one analysis window of the
  log-mel features) is refused, naming its length. Clips at least that long are all imported; a
  run pads a clip shorter than its window (``data.audio.clip_seconds``) with silence, and the
  padding is never masked nor scored (:mod:`engine.audio.features`).
- **Mono**: several channels are averaged, ``(L + R) / 2`` for stereo (the report counts them).
- **Rate**: every clip is resampled to the pipeline rate (``ImportOptions.sample_rate``, default
  :data:`DEFAULT_SAMPLE_RATE` = 16 kHz) with ``torchaudio.functional.resample`` (band-limited
  windowed-sinc interpolation, Hann window, 6 zero crossings, rolloff 0.99), the report says from
  which rates. Its kernel grows with the reduced ratio (8,001 Hz -> 16 kHz is 16000/8001: a 513 MB
  kernel, 4.7 GB at the decoder's peak), so a ratio whose terms exceed :data:`MAX_RATIO_TERM` is replaced by the nearest with
  smaller terms (:func:`resample_ratio`; 8,001 Hz is read as 8,000 Hz, 0.0125% slower), said in the report.
- **Storage**: int16 PCM (``round(clip(x, -1, 1) * 32767)``); samples beyond full scale (float
  files, resampling overshoot) are clipped and the clips counted in the report.

The split is :func:`~engine.data.dataset.seeded_split`: by group when there is a group column
(every clip of a speaker in one split, so validation speakers are unseen), else stratified by class.

Bundled set ``asterisk-prompts`` (:func:`build_asterisk`): Debian's ``asterisk-core-sounds-en-wav``
(Allison Smith's studio voice prompts, 8 kHz 16-bit WAV, CC BY-SA 3.0), label = the prompt's folder
(``digits``, ``letters``, ``phonetic``, ...; prompts at the top are ``prompts``), transcripts from
the package's ``core-sounds-en.txt.gz``; kept at its recorded 8 kHz (resampling up adds nothing).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import io
import os
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path, PurePosixPath

import numpy as np
import soundfile as sf

from engine.access.policy import permission
from engine.data import importer, storage
from engine.data.archive import (
    Member,
    Members,
    NameDecoding,
    classify,
    decode_names,
    first_refusals,
    import_outcome,
    import_target,
    read_problem,
    refusal_lines,
    size_problem,
    skip_reason,
)
from engine.data.catalog import check_new_name
from engine.data.dataset import AudioDataset, DatasetInfo, classes_text, counted, seeded_split, to_pcm
from engine.data.images import Refused, isolated
from engine.data.importer import class_labels
from engine.data.limits import ImportLimits, budget_reason
from engine.data.manifest import ListedFiles
from engine.data.sampling import import_order
from engine.data.tabular import TABLE_EXTENSIONS, ColumnRoles, ImportOptions, detect_roles, parse_table
from engine.data.text import sorted_names
from engine.errors import DatasetError, NothingImportedError
from engine.messages import describe_error

DEFAULT_SAMPLE_RATE = 16_000
"""Pipeline rate (Hz) of an import that does not choose one: the rate of wav2vec 2.0, HuBERT and AudioMAE."""

SAMPLE_RATES = (8000, 16000, 22050, 44100, 48000)
"""Pipeline rates (Hz) the Data page offers and :func:`proposed_rate` rounds up to."""


def proposed_rate(recorded: dict[int, int]) -> int:
    """The pipeline rate (Hz) proposed for clips recorded at ``recorded`` (rate in Hz -> clips, as
    ``SourcePlan.sample_rates``): the highest recorded rate rounded up to one of :data:`SAMPLE_RATES`,
    at most :data:`DEFAULT_SAMPLE_RATE` (16 kHz, AudioMAE's). So 8 kHz recordings stay at 8 kHz
    (resampling up only adds empty mel bins) and 44.1 kHz music comes down to 16 kHz; without any
    header read it is :data:`DEFAULT_SAMPLE_RATE`. A rate within 1% of one of :data:`SAMPLE_RATES`
    counts as that rate (a clip whose header says 8,001 Hz does not make 8 kHz recordings 16 kHz).
    The Data page's form and ``python -m engine data add`` both start from it."""
    if not recorded:
        return DEFAULT_SAMPLE_RATE
    top = max(next((r for r in SAMPLE_RATES if abs(rec / r - 1) <= 0.01), rec) for rec in recorded)
    return min(next((r for r in SAMPLE_RATES if r >= top), SAMPLE_RATES[-1]), DEFAULT_SAMPLE_RATE)


def rates_text(recorded: dict[int, int]) -> str:
    """``"recorded at 8,000 Hz (64 clips' headers read)"``, or ``""`` without headers."""
    if not recorded:
        return ""
    n = sum(recorded.values())
    read = "1 clip's header" if n == 1 else f"{n} clips' headers"
    return f"recorded at {', '.join(f'{r:,} Hz' for r in recorded)} ({read} read)"


MIN_CLIP_SECONDS = 0.025
"""Shortest clip imported: one 25 ms analysis window (a clip shorter than that has no log-mel frame of its own)."""

FORMATS = {"WAV": (".wav", ".wave"), "FLAC": (".flac",), "OGG": (".ogg", ".oga", ".opus")}
"""Accepted formats (recognised by content) and the extensions that name them."""
EXTENSIONS = {ext: fmt for fmt, exts in FORMATS.items() for ext in exts}
"""Audio file extension -> format."""
UNSUPPORTED = {".mp3": "MP3", ".m4a": "AAC (M4A)", ".aac": "AAC", ".wma": "WMA", ".aif": "AIFF",
               ".aiff": "AIFF", ".amr": "AMR"}  # fmt: skip
"""Audio extensions that are refused with a reason (not skipped): the user meant them as clips."""
UNLABELED = "unlabeled"
PREVIEW_ROWS = 5
#: The plan reads the headers of at most this many clips, spread over the source, and members of at
#: most ``RATE_PROBE_BYTES`` each (a member is read whole to reach its header), to say at which rates
#: the clips were recorded (:func:`recorded_rates`).
RATE_PROBE_CLIPS, RATE_PROBE_BYTES = 64, 4 << 20

ASTERISK_ENV = "MASKLAB_ASTERISK_DIR"
ASTERISK_DEFAULT_DIR = "/usr/share/asterisk/sounds/en_US_f_Allison"
ASTERISK_TRANSCRIPTS = "/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"
ASTERISK_TOP_CLASS = "prompts"
ASTERISK_VAL_FRACTION, ASTERISK_SEED, ASTERISK_RATE = 0.1, 0, 8000
ASTERISK_HOW_TO = (
    "install the Debian package asterisk-core-sounds-en-wav (sudo apt-get install asterisk-core-sounds-en-wav), "
    f"which puts the prompts in {ASTERISK_DEFAULT_DIR}; or set ${ASTERISK_ENV} to a folder of .wav prompts"
)
ASTERISK_DESCRIPTION = (
    "Asterisk's English voice prompts (Debian's asterisk-core-sounds-en-wav): about 570 studio recordings "
    "by Allison Smith, 8 kHz, 0.2 s to 73 s (digits, letters, phonetic alphabet, phone-system phrases), "
    "label = the prompt's folder, with transcripts. Licence: CC BY-SA 3.0, see "
    "/usr/share/doc/asterisk-core-sounds-en/copyright."
)


def sniff(data: bytes) -> str | None:
    """The accepted format whose signature ``data`` starts with (``"WAV"``, ``"FLAC"``, ``"OGG"``), or None."""
    if data[:4] in (b"RIFF", b"RF64") and data[8:12] == b"WAVE":
        return "WAV"
    if data.startswith(b"fLaC"):
        return "FLAC"
    if data.startswith(b"OggS"):
        return "OGG"
    return None


def check_format(name: str, data: bytes) -> str:
    """The format of a member named ``name`` with content ``data``.

    Raises:
        Refused: an unsupported audio extension (MP3, AAC...), content of no accepted format, or an
            extension that names another accepted format than the content.
    """
    ext = PurePosixPath(name).suffix.lower()
    if ext in UNSUPPORTED:
        raise Refused(f"{UNSUPPORTED[ext]} is not read by masklab; convert it to WAV, FLAC or Ogg")
    fmt = sniff(data)
    if fmt is None:
        raise Refused("not a WAV, FLAC or Ogg file (its first bytes match none of them); export it as WAV")
    said = EXTENSIONS.get(ext)
    if said is not None and said != fmt:
        raise Refused(f"named {ext} ({said}) but its content is {fmt}; rename it to its real extension")
    return fmt


MAX_RATIO_TERM = 1000
"""Largest term of the resampling ratio (:func:`resample_ratio`): the sinc kernel holds about
``up * (down + 12)`` floats, at most 4 MB."""


def resample_ratio(source: int, target: int) -> tuple[int, int]:
    """``(up, down)``: the ratio ``target / source`` reduced, or, when a term of it exceeds
    :data:`MAX_RATIO_TERM`, the nearest ratio whose terms do not (continued fractions,
    ``fractions.Fraction.limit_denominator``). Resampling by ``up / down`` reads the clip as recorded
    at ``target * down / up`` Hz: 8001 -> 16000 gives ``(2, 1)``, the clip 0.0125% slower (a 0.2-cent
    pitch shift; exact rates such as 44100 -> 16000, ``(160, 441)``, are kept).

    Raises:
        ValueError: a rate that is not positive.
    """
    if source <= 0 or target <= 0:
        raise ValueError(f"rates must be positive, not {source} and {target}")
    if target >= source:  # down / up <= 1: bound the denominator (up), the numerator follows
        f = Fraction(source, target).limit_denominator(MAX_RATIO_TERM)
        return f.denominator, max(f.numerator, 1)
    f = Fraction(target, source).limit_denominator(MAX_RATIO_TERM)
    return max(f.numerator, 1), f.denominator


def ogg_links(data: bytes) -> list[bytes]:
    """The links of a chained Ogg file (streams back to back: a link starts at a beginning-of-stream
    page that follows an end-of-stream page, RFC 3533 section 4), each a complete Ogg file;
    ``[data]`` when it has one link or its pages cannot be walked (libsndfile then decides).
    libsndfile decodes the first link only."""
    starts, pos, ended = [0], 0, False
    while pos + 27 <= len(data) and data[pos:pos + 4] == b"OggS":
        flags, n_seg = data[pos + 5], data[pos + 26]
        if pos and flags & 0x02 and ended:  # a beginning of stream after an end of stream
            starts.append(pos)
        ended = bool(flags & 0x04)
        pos += 27 + n_seg + sum(data[pos + 27:pos + 27 + n_seg])
    if pos != len(data) or len(starts) == 1:
        return [data]
    return [data[a:b] for a, b in zip(starts, [*starts[1:], len(data)])]


def _kernel_mb(source: int, target: int) -> float:
    """MB of torchaudio's sinc kernel for the exact ratio (``up * (down + 2 * width)`` float32s)."""
    f = Fraction(target, source)
    up, down = f.numerator, f.denominator
    return up * (down + 2 * 6 * -(-down // min(up, down))) * 4 / 1e6


def seconds(n: int, rate: int) -> str:
    """``n`` samples at ``rate`` Hz as a short duration: ``"0.1 ms"``, ``"12 ms"``, ``"1.25 s"``."""
    s = n / rate
    return f"{s * 1000:.1f} ms" if s < 0.01 else f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def check_header(frames: int, rate: int, channels: int, limits: ImportLimits) -> None:
    """The decoding rules a clip's header alone decides (``frames`` per channel, ``rate`` in Hz).

    Raises:
        Refused: a rate or channel count that is not positive; longer than ``limits.max_clip_seconds``.
    """
    if rate <= 0 or channels <= 0:
        raise Refused(f"its header declares {rate} Hz and {channels} channels; export it again")
    if frames > limits.max_clip_seconds * rate:
        raise Refused(f"{frames / rate:.1f} s long; the limit is {limits.max_clip_seconds:g} s "
                      "(MASKLAB_MAX_CLIP_SECONDS): cut it into shorter clips or raise the limit")  # fmt: skip


def check_length(n: int, rate: int) -> None:
    """Refuse a clip of ``n`` decoded samples at ``rate`` Hz that holds none or is shorter than
    :data:`MIN_CLIP_SECONDS`.

    Raises:
        Refused: naming its length.
    """
    if n == 0:
        raise Refused("no samples: the recording is empty")
    if n < MIN_CLIP_SECONDS * rate:
        raise Refused(f"{n} sample{'s' if n != 1 else ''} at {rate} Hz ({seconds(n, rate)}): shorter than "
                      f"{MIN_CLIP_SECONDS * 1000:.0f} ms, the shortest clip masklab imports (one analysis window); "
                      "export a longer clip")  # fmt: skip


@dataclass
class DecodedClip:
    """A clip after the rules: ``pcm`` int16 ``[n]`` mono at the pipeline rate; what it was before
    (``name``: its member name; ``links``: streams of a chained Ogg file, decoded one after another)."""

    pcm: np.ndarray
    fmt: str
    source_rate: int
    channels: int
    clipped: int
    name: str = ""
    links: int = 1


class ClipDecoder:
    """Decodes clips by the module's rules, within one import's limits and byte budget.

    Args:
        sample_rate: the pipeline rate in Hz.
        limits: the import's bounds; ``left`` starts at ``limits.max_decoded_bytes``.
    """

    def __init__(self, sample_rate: int, limits: ImportLimits):
        self.rate, self.limits = int(sample_rate), limits
        self.left = limits.max_decoded_bytes
        self._resamplers: dict[int, object] = {}

    def _resample(self, x: np.ndarray, rate: int) -> np.ndarray:
        if rate == self.rate:
            return x
        import torch  # noqa: PLC0415 (the data package serves the dashboard and import jobs without torch)
        import torchaudio  # noqa: PLC0415 (the data package serves the dashboard and import jobs without torch)

        if rate not in self._resamplers:  # the transform keeps its sinc kernel for the next clip
            if len(self._resamplers) >= 8:  # a source of many odd rates: kernels are built again
                self._resamplers.clear()
            up, down = resample_ratio(rate, self.rate)
            self._resamplers[rate] = torchaudio.transforms.Resample(down, up)
        with torch.no_grad():
            return self._resamplers[rate](torch.from_numpy(np.ascontiguousarray(x))).numpy()

    def decode(self, name: str, data: bytes) -> DecodedClip:
        """One member's bytes -> :class:`DecodedClip`.

        Raises:
            Refused: by the module's rules (the reason says what to do; ``detail`` has libsndfile's text).
        """
        if not data:
            raise Refused("empty file")
        fmt = check_format(name, data)
        links = ogg_links(data) if fmt == "OGG" else [data]
        try:
            infos = [sf.info(io.BytesIO(link)) for link in links]
        except (RuntimeError, TypeError, ValueError) as e:  # sf.LibsndfileError is a RuntimeError
            raise Refused(f"cannot be decoded: a damaged or truncated {fmt} file", str(e)) from None
        rate, channels = int(infos[0].samplerate), int(infos[0].channels)
        if any((int(i.samplerate), int(i.channels)) != (rate, channels) for i in infos):
            raise Refused(f"a chained Ogg file whose {len(links)} streams differ in rate or channels "
                          f"({', '.join(f'{i.samplerate} Hz x {i.channels}' for i in infos)}); export it as one stream")
        frames = sum(int(i.frames) for i in infos)
        check_header(frames, rate, channels, self.limits)
        need = max(frames, 0) * channels * 4 + int(max(frames, 0) * self.rate / rate) * 6
        if need > self.left:
            raise Refused(budget_reason(need, self.left, self.limits))
        try:  # (frames, channels); every link of a chained Ogg, in order
            x = np.concatenate([sf.read(io.BytesIO(link), dtype="float32", always_2d=True)[0] for link in links])
        except (RuntimeError, TypeError, ValueError) as e:
            raise Refused(f"cannot be decoded: a damaged or truncated {fmt} file", str(e)) from None
        self.left -= need
        check_length(x.shape[0], rate)
        mono = x.mean(axis=1) if x.shape[1] > 1 else x[:, 0]
        pcm, clipped = to_pcm(self._resample(mono, rate))
        return DecodedClip(pcm, fmt, rate, x.shape[1], clipped, name, len(links))


# --------------------------------------------------------------------------- sources


CANDIDATES = (*EXTENSIONS, *UNSUPPORTED, *TABLE_EXTENSIONS)
"""Extensions read by an audio import: clips, refused audio formats (named), manifest tables."""


def audio_skip_reason(rel: str) -> str | None:
    """Why a member is not a clip or manifest candidate (skipped, listed), or None."""
    return skip_reason(rel, CANDIDATES, "an audio file")


@dataclass
class AudioSource:
    """What a source holds, from its directory and manifest alone (no clip decoded yet).

    Attributes:
        source: how messages name it; kind: ``"audio file"``, ``"audio zip"`` or ``"audio folder"``.
        clips: the members to decode, in order; labels / groups / transcripts: one per clip
            (groups and transcripts None without such a column).
        manifest: the manifest's path inside the source, or None; columns, roles: its columns and roles.
        rejected, skipped: ``(path or manifest:line, reason)``; names: how member names were decoded.
        notes: how the source is read.
    """

    source: str
    kind: str
    clips: list[Member] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    groups: list[str] | None = None
    transcripts: list[str] | None = None
    manifest: str | None = None
    columns: list[str] = field(default_factory=list)
    roles: ColumnRoles | None = None
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    names: NameDecoding | None = None
    notes: list[str] = field(default_factory=list)

    def preview(self) -> list[dict[str, str]]:
        """The first clips with their label (and group, transcript) for the Data page."""
        rows = []
        for i, m in enumerate(self.clips[:PREVIEW_ROWS]):
            row = {"file": m.name, "label": self.labels[i]}
            if self.groups is not None:
                row["group"] = self.groups[i]
            if self.transcripts is not None:
                row["transcript"] = self.transcripts[i]
            rows.append(row)
        return rows


def _single_file(path: Path, label: str, limits: ImportLimits) -> list[Member]:
    size = path.stat().st_size
    m = Member(path.name.encode("utf-8", "surrogateescape"), True, size, path.read_bytes)
    m.name = path.name
    m.problem = size_problem(m, limits)
    return [m]


@contextmanager
def open_source(path: Path, label: str, options: ImportOptions, limits: ImportLimits) -> Iterator[AudioSource]:
    """Open a file, zip or folder, classify its members and read its manifest; the members stay
    readable inside the ``with`` block.

    Raises:
        DatasetError: not a zip / folder / audio file, too many entries, a bad name encoding,
            several tables, column options without a manifest, a manifest without a file column or
            an unknown column, no clip at all.
    """
    ext = path.suffix.lower()
    if path.is_file() and (ext in EXTENSIONS or ext in UNSUPPORTED):
        if options.given_columns():
            raise DatasetError(f"{label}: column options apply to a manifest table; one audio file has none")
        src = AudioSource(label, "audio file")
        members = _single_file(path, label, limits)
        src.clips = [m for m in members if m.problem is None]
        src.rejected = [(m.name, m.problem) for m in members if m.problem is not None]
        src.labels = [UNLABELED] * len(src.clips)
        yield src
        return
    with Members(path, label, limits) as ms:
        src = AudioSource(label, "audio folder" if path.is_dir() else "audio zip")
        src.names = decode_names(ms.members, options.name_encoding)
        candidates, src.rejected, src.skipped = classify(ms.members, limits, audio_skip_reason)
        tables = [m for m in candidates if PurePosixPath(m.name).suffix.lower() in TABLE_EXTENSIONS]
        clips = [m for m in candidates if m not in tables]
        if len(tables) > 1:
            raise DatasetError(f"{label}: holds {len(tables)} tables ({', '.join(m.name for m in tables[:4])}); "
                               "keep one manifest (or none, to label clips by their sub-folder)")  # fmt: skip
        if tables:
            _apply_manifest(src, tables[0], clips, options)
        else:
            if options.given_columns():
                given = ", ".join(f"{r}_column" for r in options.given_columns())
                raise DatasetError(f"{label}: {given} apply to a manifest table (.csv, .tsv, .jsonl) and this "
                                   "source has none; labels come from the sub-folders")  # fmt: skip

            src.clips = clips
            src.labels = class_labels([m.name for m in clips])[0]  # first sub-folder, as for images
            src.notes.append("label = first sub-folder name (no manifest table)")
        if src.names.noteworthy:
            src.notes.append(src.names.describe())
        yield src


def _apply_manifest(src: AudioSource, table_member: Member, clips: list[Member], options: ImportOptions) -> None:
    """Label ``clips`` from the manifest ``table_member`` (module docstring); sets ``src.clips`` etc."""
    where = table_member.name
    try:
        data = table_member.read()
    except Exception as e:  # noqa: BLE001 - a bad CRC, an unsupported compression...
        raise DatasetError(f"{src.source}: the manifest {where} {read_problem(e)}") from None
    table = parse_table(data, where, TABLE_EXTENSIONS[PurePosixPath(where).suffix.lower()])
    roles = detect_roles(table, options)
    if options.text_column is None and roles.text is not None:  # transcripts only when asked for
        roles.text, roles.reasons["text"] = None, "not detected for audio; pick the transcript column as the text column (--text-column)"
    if roles.file is None:
        raise DatasetError(f"{where}: no file column ({roles.reasons.get('file')}); columns: "
                           f"{', '.join(map(repr, table.columns))}; name it with file_column (--file-column)")  # fmt: skip
    src.manifest, src.columns, src.roles = where, table.columns, roles
    src.rejected += table.rejected
    listed = ListedFiles(clips, where, "audio file", src.source)  # exact path, else by stem (engine.data.manifest)
    labels, groups, texts = [], [], []
    col = {r: (table.columns.index(getattr(roles, r)) if getattr(roles, r) else None) for r in ("file", "label", "group", "text")}
    for row, line in zip(table.rows, table.lines):
        m = listed.find(row[col["file"]], line)
        if m is None:
            continue
        listed.keep(m, line)
        src.clips.append(m)
        labels.append((row[col["label"]].strip() if col["label"] is not None else "") or UNLABELED)
        groups.append(row[col["group"]].strip() if col["group"] is not None else "")
        texts.append(row[col["text"]].strip() if col["text"] is not None else "")
    rejected, skipped, notes = listed.finish(f"not listed in the manifest {where}")
    src.rejected += rejected
    src.skipped += skipped
    src.labels = labels
    src.groups = groups if col["group"] is not None else None
    src.transcripts = texts if col["text"] is not None else None
    src.notes += table.notes + notes
    src.notes.append(f"manifest {where}: {roles.describe()}")


# --------------------------------------------------------------------------- import


def audio_stats(lengths: np.ndarray, rate: int, decoded: list[DecodedClip] | None = None) -> dict:
    """The ``stats`` of an audio dataset: ``sample_rate`` (Hz), ``clips``, ``seconds_total``,
    ``seconds_min`` / ``_median`` / ``_mean`` / ``_max`` (per clip), and, from the import,
    ``source_rates``, ``channels`` and ``formats`` (value -> clips, JSON string keys)."""
    s = np.asarray(lengths, dtype=np.float64) / rate
    out = {"sample_rate": int(rate), "clips": int(s.size), "seconds_total": round(float(s.sum()), 3)}
    if s.size:
        out.update(seconds_min=round(float(s.min()), 4), seconds_median=round(float(np.median(s)), 4),
                   seconds_mean=round(float(s.mean()), 4), seconds_max=round(float(s.max()), 4))  # fmt: skip
    if decoded is not None:
        for key, attr in (("source_rates", "source_rate"), ("channels", "channels"), ("formats", "fmt")):
            out[key] = {str(k): n for k, n in sorted(Counter(getattr(d, attr) for d in decoded).items())}
    return out


#: Part of every note on clips recorded below the import's rate (:func:`upsampled_notes`).
UPSAMPLED = "upsampled to"


def upsampled_notes(decoded: list[DecodedClip], rate: int) -> list[tuple[str, str]]:
    """``("", note)`` per clip recorded below ``rate`` Hz (the report's ``converted``): upsampling
    adds no content above half the recording rate, so those mel bins hold nothing and a masked
    model learns to predict silence there."""
    return [("", f"recorded at {d.source_rate:,} Hz, {UPSAMPLED} {rate:,} Hz: the mel bins above "
                 f"{d.source_rate // 2:,} Hz hold nothing; import again with the sample rate at {d.source_rate:,} Hz")
            for d in decoded if d.source_rate < rate]


def named_notes(decoded: list[DecodedClip], rate: int) -> list[tuple[str, str]]:
    """``(file, note)`` per clip read in a way its user should know (the report's ``converted``,
    shown by the Data page with the files): resampled by an approximate ratio
    (:func:`resample_ratio`), a chained Ogg file decoded whole."""
    out = []
    for d in decoded:
        up, down = resample_ratio(d.source_rate, rate)
        if Fraction(up, down) != Fraction(rate, d.source_rate):
            read_as = rate * down / up
            out.append((d.name, f"recorded at {d.source_rate:,} Hz, resampled as if recorded at {read_as:,.6g} Hz "
                                f"({abs(read_as / d.source_rate - 1):.4%} off; the exact ratio needs a "
                                f"{_kernel_mb(d.source_rate, rate):,.0f} MB kernel)"))
        if d.links > 1:
            out.append((d.name, "a chained Ogg file: its streams decoded one after another"))
    return out


def _conversion_notes(decoded: list[DecodedClip], rate: int) -> list[str]:
    notes = []
    multi = Counter(d.channels for d in decoded if d.channels > 1)
    if multi:
        notes.append("downmixed to mono (mean of the channels): " +
                     ", ".join(f"{n} clip{'s' * (n > 1)} of {c} channels" for c, n in sorted(multi.items())))
    rates = Counter(d.source_rate for d in decoded if d.source_rate != rate)
    if rates:
        notes.append(f"resampled to {rate} Hz with torchaudio.functional.resample (windowed sinc, Hann, 6 zero "
                     "crossings): " + ", ".join(f"{n} clip{'s' * (n > 1)} from {r} Hz" for r, n in sorted(rates.items())))
        for r in sorted(rates):
            up, down = resample_ratio(r, rate)
            read_as = rate * down / up
            if Fraction(up, down) != Fraction(rate, r):
                names = [d.name for d in decoded if d.source_rate == r]
                notes.append(f"{', '.join(names[:5])}{', …' if len(names) > 5 else ''} (recorded at {r:,} Hz): "
                             f"resampled by {up}/{down}, as if recorded at {read_as:,.6g} Hz "
                             f"({abs(read_as / r - 1):.4%} off; the exact ratio {rate}/{r} needs a sinc kernel of "
                             f"about {_kernel_mb(r, rate):,.0f} MB, masklab's are at most 4 MB)")
    else:
        notes.append(f"every clip was already at {rate} Hz (not resampled)")
    chained = [f"{d.name} ({d.links} streams)" for d in decoded if d.links > 1]
    if chained:
        notes.append(f"chained Ogg files decoded whole, their streams one after another: {', '.join(chained[:5])}"
                     + (", …" if len(chained) > 5 else ""))
    clipped = [d for d in decoded if d.clipped]
    if clipped:
        notes.append(f"{len(clipped)} clip(s) went beyond full scale after conversion; "
                     f"{sum(d.clipped for d in clipped)} samples were clipped to +-1")
    return notes


@dataclass
class DecodedSource:
    """A source after decoding: the kept clips (``pcm``, in source order) with their labels,
    groups and transcripts, everything refused, and the kept clips whose transcript is empty
    (``untranscribed``: names; only when the source has a transcript column)."""

    src: AudioSource
    decoded: list[DecodedClip]
    labels: list[str]
    groups: list[str] | None
    transcripts: list[str] | None
    rejected: list[tuple[str, str]]
    details: dict[str, str]
    untranscribed: list[str] = field(default_factory=list)


def decode_source(src: AudioSource, rate: int, limits: ImportLimits) -> DecodedSource:
    """Decode every clip of an open :class:`AudioSource`; refused ones are listed, the rest kept."""
    dec = ClipDecoder(rate, limits)
    kept: list[int] = []
    out: list[DecodedClip] = []
    rejected, details = list(src.rejected), {}
    for i, m in enumerate(src.clips):
        try:
            try:
                data = m.read()
            except Exception as e:  # noqa: BLE001 - a bad CRC, an unsupported method, a broken link...
                raise Refused(read_problem(e), str(e)) from None
            out.append(isolated(functools.partial(dec.decode, m.name, data)))
            kept.append(i)
        except Refused as r:
            rejected.append((m.name, r.reason))
            if r.detail:
                details[m.name] = r.detail
    pick = lambda vals: None if vals is None else [vals[i] for i in kept]  # noqa: E731
    untranscribed = [src.clips[i].name for i in kept if src.transcripts is not None and not src.transcripts[i].strip()]
    return DecodedSource(src, out, pick(src.labels), pick(src.groups), pick(src.transcripts), sorted(rejected), details,
                         untranscribed)


def _index(names: list[str]) -> tuple[tuple[str, ...], np.ndarray]:
    vocab = sorted_names(names)
    pos = {n: k for k, n in enumerate(vocab)}
    return vocab, np.array([pos[n] for n in names], dtype=np.int64)


def build_dataset(d: DecodedSource, info: DatasetInfo, rate: int, val_fraction: float, seed: int) -> AudioDataset:
    """The :class:`AudioDataset` of a decoded source: classes and groups sorted, seeded split (on the
    source order), rows stored in :func:`engine.data.sampling.import_order`, stats. ``info`` gives
    name, source, description and created_at; the rest is filled here."""
    class_names, labels = _index(d.labels)
    group_names, groups = _index(d.groups) if d.groups is not None else ((), None)
    split = seeded_split(labels, val_fraction, seed, groups)
    lengths = np.array([len(c.pcm) for c in d.decoded], dtype=np.int64)
    info = dataclasses.replace(info, modality="audio", image_shape=None, class_names=class_names,
                               n_train=int((split == 0).sum()), n_val=int((split == 1).sum()),
                               stats=audio_stats(lengths, rate, d.decoded), group_names=group_names)  # fmt: skip
    order = import_order(len(labels), seed)  # stored shuffled, as every import: no class-ordered slices
    transcripts = None if d.transcripts is None else [d.transcripts[i] for i in order]
    return AudioDataset.from_clips(info, [d.decoded[i].pcm for i in order], rate, labels[order], split[order],
                                   None if groups is None else groups[order], transcripts)


@dataclass
class AudioImportReport:
    """What :func:`import_audio` did (the audio counterpart of :class:`engine.data.importer.ImportReport`).

    Attributes:
        source, kind: the source as given and how it was read.
        dataset: the registered dataset's info (None when nothing was imported).
        accepted: clips in the dataset.
        rejected: ``(file or manifest:line, reason)``; skipped: ``(file, reason)`` for other files.
        details: libsndfile's own message for a rejected file, where there is one.
        names: how zip member names were decoded; roles: the manifest's column roles (or None).
        label_counts: clips per class; notes: how the source was read and converted.
        untranscribed: clips imported with an empty transcript (a transcript column was named):
            the audio tasks use them, the paired task (audio-text pairs) leaves them out.
        converted: ``(file, note)`` for clips converted in a way worth a warning (recorded below
            the import's rate: :func:`upsampled_notes`, the file not named there, ``""``; an
            approximate resampling ratio or a chained Ogg file: :func:`named_notes`).
    """

    source: str
    kind: str = ""
    dataset: DatasetInfo | None = None
    accepted: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)
    names: NameDecoding | None = None
    roles: ColumnRoles | None = None
    label_counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    untranscribed: list[str] = field(default_factory=list)
    converted: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        """Multi-line report: counts, how clips were converted, the dataset, every rejected file, skipped files by reason."""
        lines = [f"Import of {self.source} ({self.kind}): {counted(self.accepted, 'clip')} accepted, "
                 f"{len(self.rejected)} rejected, {len(self.skipped)} skipped."]  # fmt: skip
        lines += self.notes
        if self.dataset is not None:
            d, st = self.dataset, self.dataset.stats
            per_class = ", ".join(f"{c} {n}" for c, n in self.label_counts.items())
            groups = f", {counted(len(d.group_names), 'group')}" if d.group_names else ""
            lines.append(f"Dataset {d.name!r}: {d.n_train} train + {d.n_val} val clips at {st['sample_rate']} Hz, "
                         f"{st['seconds_total']:.1f} s in all ({st.get('seconds_min', 0):.2f} to "
                         f"{st.get('seconds_max', 0):.2f} s per clip), {classes_text(len(d.class_names))} "
                         f"({per_class}){groups}.")  # fmt: skip
        if self.untranscribed:
            lines.append(f"{len(self.untranscribed)} clip{'s' * (len(self.untranscribed) > 1)} without a transcript "
                         "(imported for the audio tasks; audio-text pairs leave them out): " + ", ".join(self.untranscribed))
        return "\n".join(lines + refusal_lines(self.rejected, self.skipped, "Skipped"))


@permission("data.import", import_target, import_outcome)
def import_audio(
    path: str | os.PathLike[str],
    name: str | None = None,
    options: ImportOptions | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    source_label: str | None = None,
    limits: ImportLimits | None = None,
) -> AudioImportReport:
    """Import an audio file, zip or folder (module docstring) and register it as dataset ``name``.

    Args:
        path: a ``.wav`` / ``.flac`` / ``.ogg`` file, a ``.zip`` or a folder.
        name: dataset name; default: the file or folder name (as for images).
        options: manifest columns, ``sample_rate``, ``val_fraction``, ``seed``, ``name_encoding``.
        workspace: workspace folder (default ``$MASKLAB_WORKSPACE`` or ``./workspace``).
        overwrite: replace an existing dataset of that name (only once the import succeeded).
        source_label: how reports and errors name the source (the dashboard passes the upload's name).
        limits: bounds of this import; default :meth:`ImportLimits.from_env`.
    Returns:
        An :class:`AudioImportReport` (``dataset`` is the registered info with its ``source_hash``).
    Raises:
        DatasetError: as :func:`open_source`; an invalid, reserved or existing name; no clip could
            be used (naming the first refused files and why). Nothing is written then.
        PermissionDeniedError: ``actor=`` (default :func:`engine.access.policy.current_identity`) is not an
            editor, or demo mode; checked before anything is read.
    """
    src_path = Path(path).expanduser()
    label = source_label or str(path)
    options = options or ImportOptions()
    if not src_path.exists():
        raise DatasetError(f"{label}: no such file or folder")
    name = check_new_name(name if name is not None else importer.default_name(src_path), workspace, overwrite)
    limits = limits or ImportLimits.from_env()
    rate = options.sample_rate or DEFAULT_SAMPLE_RATE
    with open_source(src_path, label, options, limits) as src:
        d = decode_source(src, rate, limits)
    report = AudioImportReport(label, src.kind, None, len(d.decoded), d.rejected, sorted(src.skipped), d.details,
                               src.names, src.roles, notes=list(src.notes), untranscribed=d.untranscribed)  # fmt: skip
    if not d.decoded:
        refused = first_refusals(d.rejected)
        what = f"{len(d.rejected)} refused: {refused}" if d.rejected else f"{len(src.skipped)} other files skipped"
        raise NothingImportedError(f"{label}: no usable audio clip (WAV, FLAC, Ogg); {what}", d.rejected,
                                   sorted(src.skipped))
    report.notes += _conversion_notes(d.decoded, rate)
    report.converted = upsampled_notes(d.decoded, rate) + named_notes(d.decoded, rate)
    info = DatasetInfo(name=name, modality="audio", source=f"upload:{src_path.name}", image_shape=None,
                       class_names=(), n_train=0, n_val=0, created_at=storage.utc_now(),
                       description=f"Imported from {src_path.name} ({src.kind}"
                       + (f", manifest {src.manifest}" if src.manifest else "")
                       + f"): {counted(len(d.decoded), 'clip')}.")  # fmt: skip
    ds = build_dataset(d, info, rate, options.val_fraction, options.seed)
    folder = storage.save_dataset(ds, workspace, overwrite=overwrite)
    report.dataset = storage.read_info(folder)
    counts = np.bincount(ds.labels, minlength=len(ds.info.class_names))
    report.label_counts = {c: int(n) for c, n in zip(ds.info.class_names, counts)}
    return report


def recorded_rates(clips: list[Member], limits: ImportLimits | None = None) -> dict[int, int]:
    """Recording rates (Hz) -> clip count, of at most :data:`RATE_PROBE_CLIPS` clips evenly spread
    over ``clips`` (members larger than :data:`RATE_PROBE_BYTES` are left out), from their headers.
    Only clips the header rules accept count: one the import refuses by them (unreadable, too short
    or too long, of another format than its name says...) has no say in the proposed rate. Read
    inside ``open_source``'s block."""
    limits = limits or ImportLimits.from_env()
    step = max(1, len(clips) / RATE_PROBE_CLIPS)
    rates: Counter[int] = Counter()
    for m in (clips[int(i * step)] for i in range(min(len(clips), RATE_PROBE_CLIPS))):
        if m.size is None or m.size > RATE_PROBE_BYTES:
            continue
        try:
            data = m.read()
            check_format(m.name, data)
            info = sf.info(io.BytesIO(data))
            check_header(int(info.frames), int(info.samplerate), int(info.channels), limits)
            check_length(int(info.frames), int(info.samplerate))  # from the header: the page decodes nothing
        except Exception:  # noqa: BLE001 - a clip the import refuses (named then) has no say in the rate
            continue
        rates[int(info.samplerate)] += 1
    return dict(sorted(rates.items()))


def inspect_audio(path: Path, options: ImportOptions, label: str) -> dict:
    """What :func:`import_audio` would take, from the directory and manifest (the headers of a sample
    of clips are read for :func:`recorded_rates`): the fields of :class:`engine.data.ingest.SourcePlan` as a dict."""
    limits = ImportLimits.from_env()
    with open_source(path, label, options, limits) as src:
        rates = recorded_rates(src.clips, limits)
    classes = Counter(src.labels)

    names = sorted_names(list(classes))
    return {"kind": src.kind, "columns": src.columns, "roles": src.roles, "preview": src.preview(),
            "class_names": names, "label_counts": {c: classes[c] for c in names}, "n_items": len(src.clips),
            "rejected": sorted(src.rejected), "skipped": sorted(src.skipped), "sample_rates": rates,
            "notes": src.notes + [f"clips are decoded on import (mono, {options.sample_rate or proposed_rate(rates):,} Hz"
                                  f"{'' if options.sample_rate else ', proposed from their own rates'}); unreadable "
                                  "ones are rejected then"]}  # fmt: skip


# --------------------------------------------------------------------------- bundled asterisk prompts


def asterisk_dir() -> Path:
    """Folder of the Asterisk prompts: ``$MASKLAB_ASTERISK_DIR``, else the Debian package's."""
    return Path(os.environ.get(ASTERISK_ENV) or ASTERISK_DEFAULT_DIR)


def asterisk_available() -> bool:
    """True when the prompts folder holds at least one ``.wav`` file (checks names only)."""
    d = asterisk_dir()
    return d.is_dir() and next(d.rglob("*.wav"), None) is not None


def read_transcripts(path: str | os.PathLike[str]) -> dict[str, str]:
    """``prompt -> transcript`` from Asterisk's ``core-sounds-en.txt(.gz)``: lines ``name: text``
    (``name`` is the path without ``.wav``, e.g. ``digits/7``); ``;`` lines are comments. A missing
    file gives ``{}``."""
    p = Path(path)
    try:
        raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
    except OSError:
        return {}
    out = {}
    for line in raw.decode("utf-8", errors="replace").splitlines():
        m = re.match(r"^([^;:\s][^:]*):\s*(.*)$", line)
        if m:
            out[m.group(1).strip()] = m.group(2).strip()
    return out


def _asterisk_layout() -> tuple[list[Path], list[str]]:
    """The prompt files (sorted by relative path) and their labels (first folder, ``prompts`` at the top)."""
    d = asterisk_dir()
    files = sorted((p for p in d.rglob("*") if p.suffix.lower() in EXTENSIONS and p.is_file()
                    and not any(part.startswith(".") for part in p.relative_to(d).parts)),
                   key=lambda p: p.relative_to(d).as_posix())  # fmt: skip
    rel = [p.relative_to(d).parts for p in files]
    return files, [r[0] if len(r) > 1 else ASTERISK_TOP_CLASS for r in rel]


def asterisk_info(created_at: str = "") -> DatasetInfo:
    """The info :func:`build_asterisk` gives, from the file names and WAV headers alone (read once
    per process and folder state; assumes every prompt decodes, as the Debian package's do).

    Raises:
        DatasetError: the prompts are not installed.
    """
    if not asterisk_available():
        raise DatasetError(f"bundled dataset 'asterisk-prompts' is not available: {ASTERISK_HOW_TO}")
    d = asterisk_dir()
    return dataclasses.replace(_asterisk_info(str(d), d.stat().st_mtime_ns), created_at=created_at)


@functools.lru_cache(maxsize=2)
def _asterisk_info(folder: str, mtime_ns: int) -> DatasetInfo:
    files, labels = _asterisk_layout()
    class_names, y = _index(labels)
    split = seeded_split(y, ASTERISK_VAL_FRACTION, ASTERISK_SEED)
    lengths = []
    for f in files:
        try:
            i = sf.info(str(f))
            lengths.append(round(i.frames * ASTERISK_RATE / i.samplerate))
        except (RuntimeError, ValueError) as e:
            raise DatasetError(f"{f}: cannot read the WAV header ({describe_error(e)}); {ASTERISK_HOW_TO}") from None
    return DatasetInfo(name="asterisk-prompts", modality="audio", source="bundled:asterisk-prompts",
                       image_shape=None, class_names=class_names, n_train=int((split == 0).sum()),
                       n_val=int((split == 1).sum()), created_at="", description=ASTERISK_DESCRIPTION,
                       stats=audio_stats(np.array(lengths), ASTERISK_RATE))  # fmt: skip


def build_asterisk(created_at: str = "", transcripts: str | os.PathLike[str] = ASTERISK_TRANSCRIPTS) -> AudioDataset:
    """The bundled ``asterisk-prompts`` dataset (module docstring): every ``.wav`` under
    :func:`asterisk_dir` at 8 kHz, label = first folder (``prompts`` at the top), transcripts.

    Raises:
        DatasetError: the folder holds no usable prompt.
    """
    d = asterisk_dir()
    if not asterisk_available():
        raise DatasetError(f"bundled dataset 'asterisk-prompts' is not available: {ASTERISK_HOW_TO}")
    limits = ImportLimits.from_env()
    with Members(d, str(d), limits) as ms:
        decode_names(ms.members)
        candidates, rejected, skipped = classify(ms.members, limits, audio_skip_reason)
        src = AudioSource(str(d), "audio folder", rejected=rejected, skipped=skipped)
        src.clips = [m for m in candidates if PurePosixPath(m.name).suffix.lower() in EXTENSIONS]
        texts = read_transcripts(transcripts)
        rel = [PurePosixPath(m.name).with_suffix("") for m in src.clips]
        src.labels = [r.parts[0] if len(r.parts) > 1 else ASTERISK_TOP_CLASS for r in rel]
        src.transcripts = [texts.get(str(r), "") for r in rel]
        dec = decode_source(src, ASTERISK_RATE, limits)
    if not dec.decoded:
        raise DatasetError(f"{d}: no usable prompt ({len(dec.rejected)} refused); {ASTERISK_HOW_TO}")
    info = DatasetInfo(name="asterisk-prompts", modality="audio", source="bundled:asterisk-prompts", image_shape=None,
                       class_names=(), n_train=0, n_val=0, created_at=created_at, description=ASTERISK_DESCRIPTION)
    return build_dataset(dec, info, ASTERISK_RATE, ASTERISK_VAL_FRACTION, ASTERISK_SEED)
