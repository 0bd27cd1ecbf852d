"""What people say about a run: its tags, a note and whether it is archived.

Kept in ``runs/<id>/annotations.json`` (written atomically, never by the worker), apart from
``config.json``, which is the run's identity and is never rewritten for a label. Every change goes
through one write path, :func:`annotate`, which checks the ``run.annotate`` permission (editors;
viewers and demo mode are refused) and writes one audit line per call; :func:`set_tags`,
:func:`tag_run`, :func:`set_note` and :func:`archive_run` are its shorthands.

Two people annotating the same run at the same moment: the last write wins as a whole file (each
call reads the file, changes its part, and replaces the file); nothing is ever half-written.

    >>> set_tags(run_id, ["baseline", "ratio sweep"])
    >>> archive_run(run_id)             # hidden from Runs and ``python -m engine runs`` (not deleted)
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.access.policy import permission
from engine.errors import ConfigError
from engine.messages import describe_error
from engine.store.paths import note_write, run_dir
from engine.workspace import FORMAT, atomic_write_json, read_json

ANNOTATIONS_FILE = "annotations.json"
MAX_TAG_CHARS = 40
MAX_TAGS = 50
MAX_NOTE_CHARS = 10_000


@dataclass(frozen=True)
class Annotations:
    """A run's annotations.

    Attributes:
        tags: distinct tags in the order they were given (each 1 to :data:`MAX_TAG_CHARS` characters,
            no comma, no control character).
        note: free text, at most :data:`MAX_NOTE_CHARS` characters (``""``: none).
        archived: True hides the run from the Runs page and ``python -m engine runs`` (``--all`` shows it).
    """

    tags: tuple[str, ...] = ()
    note: str = ""
    archived: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored in ``annotations.json``."""
        return {"tags": list(self.tags), "note": self.note, "archived": self.archived, "format": FORMAT}


def validate_tag(tag: Any) -> str:
    """``tag`` with its surrounding spaces removed, or raise.

    Raises:
        ConfigError: not text, empty, longer than :data:`MAX_TAG_CHARS` characters, or holding a comma
            or a control character (tab, newline...); the message quotes the tag.
    """
    if not isinstance(tag, str):
        raise ConfigError(f"tag {tag!r}: a tag is text, not {type(tag).__name__}")
    t = tag.strip()
    if not t:
        raise ConfigError("a tag cannot be empty")
    if len(t) > MAX_TAG_CHARS:
        raise ConfigError(f"tag {t[:20]!r}...: {len(t)} characters, at most {MAX_TAG_CHARS}")
    if "," in t:
        raise ConfigError(f"tag {t!r}: a tag cannot hold a comma (commas separate tags); give each tag on its own")
    bad = next((c for c in t if unicodedata.category(c).startswith("C")), None)
    if bad is not None:
        raise ConfigError(f"tag {t!r}: a tag cannot hold a control character ({bad!r})")
    return t


def validate_tags(tags: Iterable[Any]) -> tuple[str, ...]:
    """Each tag through :func:`validate_tag`, duplicates dropped (first kept), at most :data:`MAX_TAGS`.

    Raises:
        ConfigError: a bad tag (see :func:`validate_tag`), a plain string given instead of a list, or
            more than :data:`MAX_TAGS` tags.
    """
    if isinstance(tags, str):
        raise ConfigError(f"tags {tags!r}: give a list of tags, not one string")
    out = tuple(dict.fromkeys(validate_tag(t) for t in tags))
    if len(out) > MAX_TAGS:
        raise ConfigError(f"{len(out)} tags: a run takes at most {MAX_TAGS}")
    return out


def validate_note(note: Any) -> str:
    """``note`` as it is (an empty note clears it).

    Raises:
        ConfigError: not text, or longer than :data:`MAX_NOTE_CHARS` characters.
    """
    if not isinstance(note, str):
        raise ConfigError(f"the note is text, not {type(note).__name__}")
    if len(note) > MAX_NOTE_CHARS:
        raise ConfigError(f"the note has {len(note):,} characters, at most {MAX_NOTE_CHARS:,}: shorten it")
    return note


def read_annotations(d: Path) -> tuple[Annotations, list[str]]:
    """The annotations of run folder ``d`` and what is wrong with its file (empty list when fine).

    A missing file is no annotation. A damaged one gives empty annotations and a warning naming the
    file (the run is still listed; the next change replaces the file).
    """
    path = Path(d) / ANNOTATIONS_FILE
    try:
        raw = read_json(path)
    except FileNotFoundError:
        return Annotations(), []
    except (OSError, ValueError) as e:
        return Annotations(), [f"{Path(d).name}/{ANNOTATIONS_FILE} is unreadable ({describe_error(e)}); tags, note "
                               "and archived are unknown"]
    try:
        if not isinstance(raw, dict):
            raise ConfigError(f"expected a JSON object, found {type(raw).__name__}")
        return Annotations(validate_tags(raw.get("tags", [])), validate_note(raw.get("note", "")),
                           bool(raw.get("archived", False))), []
    except ConfigError as e:
        return Annotations(), [f"{Path(d).name}/{ANNOTATIONS_FILE}: {e}; tags, note and archived are unknown"]


def _changed(result: Annotations) -> dict[str, Any]:
    return {"tags": list(result.tags), "archived": result.archived, "note_chars": len(result.note)}


@permission("run.annotate", lambda a: a["run_id"], _changed)
def annotate(run_id: str, *, tags: Iterable[str] | None = None, add_tags: Iterable[str] = (),
             remove_tags: Iterable[str] = (), note: str | None = None, archived: bool | None = None,
             workspace=None) -> Annotations:
    """The one write path of run annotations: change what is given, keep the rest.

    Args:
        run_id: the run.
        tags: the run's new tags (replacing the old ones); None keeps them.
        add_tags: tags added after ``tags`` is applied (already there: kept once).
        remove_tags: tags removed last (absent: ignored).
        note: the new note (``""`` clears it); None keeps it.
        archived: True archives, False unarchives; None keeps it.
        workspace: the workspace (default ``$MASKLAB_WORKSPACE``).
        actor: who acts (keyword added by :func:`engine.access.policy.permission`).

    Returns:
        The annotations now stored.

    Raises:
        RunNotFoundError: no such run.
        ConfigError: a bad tag or note (nothing is written).
        PermissionDeniedError: a viewer, nobody signed in, or demo mode (checked first; audited).
        StorageError: the file cannot be written (the old one is kept).
    """
    d = run_dir(run_id, workspace)
    old, _ = read_annotations(d)
    new_tags = validate_tags(old.tags if tags is None else tags)
    new_tags = validate_tags([*new_tags, *validate_tags(add_tags)])
    gone = set(validate_tags(remove_tags))
    new = Annotations(tuple(t for t in new_tags if t not in gone),
                      old.note if note is None else validate_note(note),
                      old.archived if archived is None else bool(archived))
    atomic_write_json(d / ANNOTATIONS_FILE, new.to_dict(), what=f"the annotations of run {run_id}")
    note_write(d)
    return new


def set_tags(run_id: str, tags: Iterable[str], *, workspace=None, actor=None) -> Annotations:
    """Replace the run's tags (:func:`annotate`; same errors)."""
    return annotate(run_id, tags=tags, workspace=workspace, actor=actor)


def tag_run(run_id: str, add: Iterable[str] = (), remove: Iterable[str] = (), *, workspace=None,
            actor=None) -> Annotations:
    """Add then remove tags, keeping the others (:func:`annotate`; same errors)."""
    return annotate(run_id, add_tags=add, remove_tags=remove, workspace=workspace, actor=actor)


def set_note(run_id: str, note: str, *, workspace=None, actor=None) -> Annotations:
    """Replace the run's note; ``""`` clears it (:func:`annotate`; same errors)."""
    return annotate(run_id, note=note, workspace=workspace, actor=actor)


def archive_run(run_id: str, archived: bool = True, *, workspace=None, actor=None) -> Annotations:
    """Archive (or, with ``archived=False``, unarchive) the run: it stays whole, only hidden from run
    lists (:func:`annotate`; same errors). Archiving an active run is allowed: its worker goes on."""
    return annotate(run_id, archived=archived, workspace=workspace, actor=actor)
