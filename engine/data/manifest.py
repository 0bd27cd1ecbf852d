"""The file column of a manifest (an audio manifest, an image-caption table) resolved to the members
of the upload, the same way for every kind of manifest (:class:`ListedFiles`).

Rules, in order, for a row's value (a path relative to the table's folder; ``\\`` is read as ``/``
and the report says so):

1. Names are compared in Unicode normal form C (:func:`unicodedata.normalize`): macOS writes
   decomposed (NFD) names into zips while a table typed elsewhere holds composed (NFC) ones, and the
   two look the same. The report counts the rows matched only so.
2. The member at exactly that path.
3. Else the members whose file name or stem is the value's last component, in any folder: an id
   ``0007`` names ``clips/0007.wav``, ``0007.wav`` names ``clips/0007.wav``. Among several, the one
   whose path ends with the value; if none or several do, the row is refused naming every candidate.
   The report counts the rows resolved so, with an example.
4. A row that names no member is refused; a member no row names is skipped; each names its near
   misses as "did you mean": the same name but for its case, its extension, accents or other
   Unicode forms (NFKD without combining marks), or a close spelling of its stem
   (:func:`difflib.get_close_matches`, ratio at least :data:`CLOSE_RATIO`).

A member named by two rows is refused on the second, naming the first line.
"""

from __future__ import annotations

import difflib
import unicodedata
from collections import defaultdict
from pathlib import PurePosixPath

from engine.data.archive import Member, clean_path, unsafe_path

CLOSE_RATIO = 0.8
"""Smallest :class:`difflib.SequenceMatcher` ratio of a close spelling (``"0007"`` vs ``"0070"``: 0.75, not close)."""

MAX_CLOSE_PAIRS = 200_000
"""Row-member pairs compared by spelling at most (unmatched rows x unlisted members); beyond, only the
exact rules (case, extension, accents) name near misses, so a wrong file column stays fast."""

MAX_HINTS = 3
"""Near misses named per row at most."""


def nfc(name: str) -> str:
    """``name`` in Unicode normal form C (composed: ``e`` + U+0301 -> ``é``)."""
    return unicodedata.normalize("NFC", name)


def _fold(name: str) -> str:
    """``name`` without case, accents or compatibility forms: NFKD, combining marks dropped, case folded."""
    return "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c)).casefold()


def _leaf(name: str) -> tuple[str, str]:
    """The last path component of an NFC name and its stem (``"a/0007.wav"`` -> ``("0007.wav", "0007")``)."""
    p = PurePosixPath(name)
    return p.name, p.stem if p.suffix else p.name


class ListedFiles:
    """Resolve the rows of one table's file column to ``members`` (module docstring).

    Use: ``m = listed.find(value, line)`` per row (None: the row is refused, in :attr:`rejected`),
    ``listed.keep(m, line)`` once the caller keeps the row, then :meth:`finish`.

    Args:
        members: the candidate files of the upload (names decoded and cleaned).
        table: the table's path inside the upload (rows are ``"<table>:<line>"``).
        what: what a member is, in messages (``"audio file"``, ``"image"``).
        source: how messages name the upload.
        missing_note: appended to the reason of a row whose file is missing (``": the pair has no image"``).
    """

    def __init__(self, members: list[Member], table: str, what: str, source: str, missing_note: str = ""):
        self.members, self.table, self.what, self.source, self.missing_note = members, table, what, source, missing_note
        self.base = PurePosixPath(table).parent
        self.by_path: dict[str, list[Member]] = defaultdict(list)
        self.by_leaf: dict[str, list[Member]] = defaultdict(list)
        for m in members:
            key = nfc(m.name)
            self.by_path[key].append(m)
            for part in dict.fromkeys(_leaf(key)):
                self.by_leaf[part].append(m)
        self.kept: dict[str, int] = {}
        self.rejected: list[tuple[str, str]] = []
        self._missing: list[tuple[int, int, str]] = []  # (index in rejected, line, name)
        self.by_name: list[tuple[str, str]] = []  # (value, member) resolved by name or stem
        self.normalised: list[tuple[str, str]] = []  # (value, member) equal only in NFC
        self.backslashed: list[str] = []
        self._ambiguous: dict[str, list[str]] = defaultdict(list)  # member -> the rows naming it among others

    def find(self, raw: str, line: int) -> Member | None:
        """The member row ``line`` names by ``raw`` (its file cell), or None after recording why not
        (empty, a path leaving the upload, ambiguous, listed twice, missing)."""
        at = f"{self.table}:{line}"
        value = raw.strip()
        if "\\" in value:
            self.backslashed.append(value)
            value = value.replace("\\", "/")
        if not value:
            return self._refuse(at, "empty file name")
        if (why := unsafe_path(value)) is not None:
            return self._refuse(at, why)
        name = clean_path(str(self.base / value)) if str(self.base) != "." else clean_path(value)
        key = nfc(name)
        hits, by_name = self.by_path.get(key, []), False
        if not hits:
            hits, by_name = self.by_leaf.get(_leaf(key)[0], []), True
            if len(hits) > 1:
                tail = nfc(clean_path(value))
                ends = [m for m in hits if any(p == tail or p.endswith("/" + tail)
                                               for p in (nfc(m.name), str(PurePosixPath(nfc(m.name)).with_suffix(""))))]
                hits = ends if len(ends) == 1 else hits
        if not hits:
            self._missing.append((len(self.rejected), line, name))
            return self._refuse(at, f"no {self.what} {name!r} in {self.source}{self.missing_note}")
        if len(hits) > 1:
            for m in hits:
                self._ambiguous[m.name].append(f"line {line}: {value!r} (ambiguous: {len(hits)} files)")
            how = "by its name or stem, in several folders" if by_name else "whose names differ only in their Unicode form"
            return self._refuse(at, f"{value!r} is ambiguous: it names {len(hits)} files {how} "
                                    f"({', '.join(sorted(m.name for m in hits))}); write the path of one")  # fmt: skip
        m = hits[0]
        if m.name in self.kept:
            return self._refuse(at, f"{m.name} is listed twice (first at line {self.kept[m.name]})")
        if by_name:
            self.by_name.append((value, m.name))
        elif m.name != name:
            self.normalised.append((value, m.name))
        return m

    def _refuse(self, at: str, why: str) -> None:
        self.rejected.append((at, why))
        return None

    def keep(self, m: Member, line: int) -> None:
        """Record that row ``line`` uses ``m`` (a later row naming it is refused as listed twice)."""
        self.kept[m.name] = line

    def finish(self, unlisted_reason: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[str]]:
        """``(rejected rows, skipped members, notes)``: the refused rows (each missing file with its
        near misses among the unlisted members), every member no kept row names (``unlisted_reason``,
        with the rows that nearly name it) and what the report says about the matching."""
        unlisted = [m for m in self.members if m.name not in self.kept]
        near_rows: dict[str, list[str]] = defaultdict(list, {n: list(v) for n, v in self._ambiguous.items()})
        spelling = len(self._missing) * len(unlisted) <= MAX_CLOSE_PAIRS
        index = NearMisses(unlisted)
        for i, line, name in self._missing:
            found = index.near(nfc(name), spelling)
            if found:
                how, ms = found
                at, why = self.rejected[i]
                self.rejected[i] = (at, f"{why}; did you mean {' or '.join(repr(m.name) for m in ms)} ({how})?")
                for m in ms:
                    near_rows[m.name].append(f"line {line}: {name!r} ({how})")
        skipped = [(m.name, unlisted_reason + (f"; nearly named at {'; '.join(near_rows[m.name])}"
                                               if m.name in near_rows else "")) for m in unlisted]  # fmt: skip
        notes = []
        if self.by_name:
            value, member = self.by_name[0]
            notes.append(f"{self.table}: {_rows(len(self.by_name), 'names its', 'name their')} file by its name or stem "
                         f"in another folder (e.g. {value!r} is {member})")
        if self.normalised:
            value, member = self.normalised[0]
            notes.append(f"{self.table}: {_rows(len(self.normalised), 'matches its', 'match their')} file only in Unicode "
                         f"normal form C (e.g. {value!r} and the upload's {member!r}, {_form(member)})")
        if self.backslashed:
            notes.append(f"{self.table}: {_rows(len(self.backslashed), 'uses', 'use')} \\ as the folder separator, read "
                         f"as / (e.g. {self.backslashed[0]})")
        return self.rejected, skipped, notes


def _rows(n: int, one: str, many: str) -> str:
    """``"1 row names its"`` / ``"5 rows name their"``: ``n`` rows and the verb that agrees."""
    return f"1 row {one}" if n == 1 else f"{n} rows {many}"


def _form(name: str) -> str:
    """How a name is stored: ``"stored decomposed (NFD)"``, or ``"stored in another Unicode form"``."""
    return "stored decomposed (NFD)" if unicodedata.is_normalized("NFD", name) else "stored in another Unicode form"


class NearMisses:
    """Members indexed by the keys of each near-miss rule (module docstring, rule 4):
    ``NearMisses(members).near(name, spelling)``."""

    RULES = ("differs only in case", "another extension", "differs in accents or Unicode form")

    def __init__(self, members: list[Member]):
        self.members = members
        self.keys: dict[str, dict[str, list[Member]]] = {r: defaultdict(list) for r in self.RULES}
        self.stems: dict[str, list[Member]] = defaultdict(list)
        for m in members:
            leaf, stem = _leaf(nfc(m.name))
            for k in {leaf.casefold(), stem.casefold()}:
                self.keys["differs only in case"][k].append(m)
            self.keys["another extension"][stem].append(m)
            for k in {_fold(leaf), _fold(stem)}:
                self.keys["differs in accents or Unicode form"][k].append(m)
            self.stems[stem].append(m)

    def near(self, name: str, spelling: bool) -> tuple[str, list[Member]] | None:
        """``(how, members)``: the unlisted members that nearly have ``name`` by the first rule that
        finds any (at most :data:`MAX_HINTS`), or None."""
        leaf, stem = _leaf(name)
        keys = {"differs only in case": [leaf.casefold()], "another extension": [stem],
                "differs in accents or Unicode form": [_fold(leaf), _fold(stem)]}  # fmt: skip
        for rule in self.RULES:
            found = {m.name: m for k in keys[rule] for m in self.keys[rule].get(k, ())}
            if found:
                return rule, [found[n] for n in sorted(found)][:MAX_HINTS]
        if spelling:
            close = difflib.get_close_matches(stem, list(self.stems), n=MAX_HINTS, cutoff=CLOSE_RATIO)
            if close:
                return "a close spelling", [m for c in close for m in self.stems[c]][:MAX_HINTS]
        return None
