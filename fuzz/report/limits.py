"""How much of a report the documents for people show. ``report.json`` lists every finding
bucket; ``report.md``, ``report.html``, ``junit.xml`` and the issue texts show the first
``SHOWN`` in report order (new ones first, then the most seen), and say how many more there
are: whatever a report holds (a merge of shard reports that anyone could have written), those
documents stay small."""

from __future__ import annotations

from typing import Protocol, TypeVar

SHOWN = 100


class _Listed(Protocol):
    known: bool


F = TypeVar("F", bound=_Listed)


def shown(findings: list[F]) -> tuple[list[F], str | None]:
    """The findings a document shows, and a sentence on those it leaves out (None: none)."""
    rest = findings[SHOWN:]
    if not rest:
        return findings, None
    new = sum(1 for f in rest if not f.known)
    return findings[:SHOWN], f"{len(rest)} more finding bucket(s) ({new} new) are listed only in report.json"
