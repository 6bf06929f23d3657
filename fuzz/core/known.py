"""``--known FILE``: the baseline of findings a campaign reports but does not fail on.

Accepted forms:

* text: one bucket id per line, optionally followed by whitespace and a reason;
  blank lines and ``#`` comments are ignored;
* JSON: a list of bucket ids, or ``{"known": [{"id": ..., "reason": ...}, ...]}``,
  or a previous ``report.json`` (every finding in it becomes known).

A baseline is often a file someone else wrote (a CI artifact, a previous report): its size,
lines, ids and nesting are bounded, and anything out of bounds is a KnownFileError naming it.
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Iterable, Mapping

from fxfuzz.core.choices import LEVELS
from fxfuzz.core.errors import KnownFileError
from fxfuzz.core.fileio import read_bounded

# Device-side kinds carry their device as a prefix (``equivalence-cuda:value_mismatch-...``).
# Ids name files too (``repros/<id>.py``): a few dozen characters, never a path.
_BUCKET = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
# Bounds of a baseline: far above any real one (a report lists a few dozen buckets), far
# below what would take a campaign's memory or time to read.
MAX_KNOWN_BYTES = 64 << 20
MAX_KNOWN_IDS = 1_000_000
MAX_LINE = 4096
# Levels whose bucket ids carry the level as a prefix (mixed is graph and program together).
_PREFIXED_LEVELS = tuple(level for level in LEVELS if level not in ("graph", "mixed"))


def is_bucket_id(text: object) -> bool:
    """Whether ``text`` has the form of a bucket id (what ``--known`` and ``fxfuzz merge`` accept)."""
    return isinstance(text, str) and _BUCKET.fullmatch(text) is not None


def load_known_files(paths: Iterable[str]) -> dict[str, str]:
    """The baselines of every ``--known`` given, in order (a later file's reason wins): a
    pipeline's campaign names its first pass's file and the pipeline's own."""
    known: dict[str, str] = {}
    for path in paths:
        known.update(load_known(path))
    return known


def load_known(path: str) -> dict[str, str]:
    """Bucket id -> reason (may be empty)."""
    try:
        # A FIFO, a device, a link to one or a file over the bound: refused before any read.
        text = read_bounded(path, MAX_KNOWN_BYTES).decode()
    except (OSError, UnicodeDecodeError) as e:
        raise KnownFileError(
            f"cannot read known-findings file {path}: {e.strerror if isinstance(e, OSError) else e}"
        ) from None
    if text.lstrip().startswith(("{", "[")):
        return _from_json(path, text)
    known = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_LINE:
            raise KnownFileError(f"{path}:{lineno}: a line of {len(line)} characters (at most {MAX_LINE})")
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        bid, *reason = line.split(None, 1)  # any whitespace: a tab is as good as a space
        if not is_bucket_id(bid):
            raise KnownFileError(f"{path}:{lineno}: not a bucket id: {reprlib.repr(bid)}")
        known[bid] = reason[0] if reason else ""
    _check_count(path, known)
    return known


def _check_count(path: str, known: dict[str, str]) -> None:
    if len(known) > MAX_KNOWN_IDS:
        raise KnownFileError(f"{path}: more than {MAX_KNOWN_IDS} bucket ids")


def _from_json(path: str, text: str) -> dict[str, str]:
    try:
        doc = json.loads(text)
    except ValueError as e:  # a JSONDecodeError, or an integer of more digits than Python reads
        raise KnownFileError(f"{path} is not valid JSON: {e}") from None
    except RecursionError:
        raise KnownFileError(f"{path}: JSON nested deeper than Python's parser goes") from None
    if isinstance(doc, dict):
        entries = doc.get("known", doc.get("findings"))
    else:
        entries = doc
    if not isinstance(entries, list):
        raise KnownFileError(f'{path}: expected a list of bucket ids, {{"known": [...]}} or a report.json')
    known = {}
    for entry in entries:
        bid, reason = (
            (entry, "")
            if isinstance(entry, str)
            else (entry.get("id"), entry.get("reason"))
            if isinstance(entry, dict)
            else (None, "")
        )
        if not (isinstance(bid, str) and is_bucket_id(bid)):
            raise KnownFileError(f"{path}: not a bucket id: {reprlib.repr(entry)}")
        if not (reason is None or isinstance(reason, str) and len(reason) <= MAX_LINE):
            raise KnownFileError(f"{path}: the reason of {bid} is not a string of at most {MAX_LINE} characters")
        known[bid] = reason or ""
    _check_count(path, known)
    return known


def at_level(level: str, bid: str) -> str:
    """The id a bucket of a ``level`` campaign is reported under: graph-level ids as they
    are, others prefixed with their level (``program-...``), so a program and a graph case
    never share a bucket."""
    return bid if level == "graph" else f"{level}-{bid}"


def known_reason(known: Mapping[str, str], bid: str) -> str | None:
    """Why ``bid`` is known, or None when it is new. A program-level bucket is also known by
    the graph-level line of its id: the same check (oracle, kind and key) on the graph export
    captured, or the same stage raising the same exception, is the same defect."""
    if bid in known:
        return known[bid]
    level, _, rest = bid.partition("-")
    if level in _PREFIXED_LEVELS and rest in known:
        return known[rest]
    return None


def for_level(known: Iterable[str], level: str) -> frozenset[str]:
    """The known ids as a ``level`` campaign names its buckets before ``at_level`` prefixes
    them: the graph-level lines, and the level's own lines without their prefix."""
    return frozenset(k.removeprefix(f"{level}-") for k in known)
