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

from fxfuzz.core.errors import KnownFileError

# Device-side kinds carry their device as a prefix (``equivalence-cuda:value_mismatch-...``).
_BUCKET = re.compile(r"^[A-Za-z0-9_.:-]+$")


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
    for e in entries:
        bid, reason = (e, "") if isinstance(e, str) else (e.get("id"), e.get("reason", "")) if isinstance(e, dict) else (None, "")
        if not isinstance(bid, str) or not _BUCKET.match(bid):
            raise KnownFileError(f"{path}: not a bucket id: {e!r}")
        known[bid] = str(reason or "")
    return known
