"""``--known FILE``: the baseline of findings a campaign reports but does not fail on.

Accepted forms:

* text: one bucket id per line, optionally followed by whitespace and a reason;
  blank lines and ``#`` comments are ignored;
* JSON: a list of bucket ids, or ``{"known": [{"id": ..., "reason": ...}, ...]}``,
  or a previous ``report.json`` (every finding in it becomes known).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from fxfuzz.core.choices import LEVELS
from fxfuzz.core.errors import KnownFileError

# Device-side kinds carry their device as a prefix (``equivalence-cuda:value_mismatch-...``).
_BUCKET = re.compile(r"^[A-Za-z0-9_.:-]+$")
# Levels whose bucket ids carry the level as a prefix (mixed is graph and program together).
_PREFIXED_LEVELS = tuple(level for level in LEVELS if level not in ("graph", "mixed"))


def load_known(path: str) -> dict[str, str]:
    """Bucket id -> reason (may be empty)."""
    try:
        with open(path) as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise KnownFileError(f"cannot read known-findings file {path}: {e.strerror if isinstance(e, OSError) else e}") from None
    if text.lstrip().startswith(("{", "[")):
        return _from_json(path, text)
    known = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        bid, *reason = line.split(None, 1)  # any whitespace: a tab is as good as a space
        if not _BUCKET.match(bid):
            raise KnownFileError(f"{path}:{lineno}: not a bucket id: {bid!r}")
        known[bid] = reason[0] if reason else ""
    return known


def _from_json(path: str, text: str) -> dict[str, str]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise KnownFileError(f"{path} is not valid JSON: {e}") from None
    if isinstance(doc, dict):
        entries = doc.get("known", doc.get("findings"))
    else:
        entries = doc
    if not isinstance(entries, list):
        raise KnownFileError(f"{path}: expected a list of bucket ids, {{\"known\": [...]}} or a report.json")
    known = {}
    for entry in entries:
        bid, reason = (entry, "") if isinstance(entry, str) else (entry.get("id"), entry.get("reason", "")) if isinstance(entry, dict) else (None, "")
        if not isinstance(bid, str) or not _BUCKET.match(bid):
            raise KnownFileError(f"{path}: not a bucket id: {entry!r}")
        known[bid] = str(reason or "")
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
