"""What a campaign found, in one vocabulary from the worker that judged an example to the
report: a ``Bucket`` (the findings that share a bucket id, with the smallest example that
showed them), ``Buckets`` (adding and merging them by the one order of examples, ``Size``) and
``CampaignResult`` (a campaign's buckets and counts, whether it ran in this process, in worker
processes, at several levels, or is the fresh half of a gate).

``Size`` is the only definition of "smaller": the engine keeps a shrinking bucket's example by
it, the supervisor keeps the smallest of what its workers send, the example database keeps one
example per bucket by it, and levels, gates and ``fxfuzz merge`` merge buckets by it. An
example is plain data here (``Sample``: its serialized bytes and what the report shows of it);
the live example stays in the process that judged it.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from fxfuzz.core.identity import PassIdentity

if TYPE_CHECKING:  # torch-free: a worker's protocol names these types before it imports torch
    from fxfuzz.core.case import Example
    from fxfuzz.oracles.finding import Finding


class StopReason(enum.StrEnum):
    """Why a campaign ended; the values are what report.json's ``stopped_by`` says."""

    EXAMPLES = "max_examples"  # its examples ran (or Hypothesis had no more to draw)
    BUDGET = "budget"  # its time ran out
    STOPPED = "stopped"  # the caller's ``stop()`` turned true
    INTERRUPTED = "interrupted"  # a signal stopped it (the command line)
    WORKERS_LOST = "workers_lost"  # its worker processes kept dying outside any example
    INTERNAL_ERROR = "internal_error"  # a worker died of fxfuzz's own error, and its share with it


@dataclass(frozen=True, order=True)
class Size:
    """How large an example is, compared field by field: one that cannot be replayed (it
    could not be serialized, or a report holds no repro of it) is larger than any that can;
    then fewer compute nodes, then fewer bytes serialized, then the digest of those bytes, so
    that of two examples alike in all else every process and every order of merging keeps the
    same one."""

    unsaved: bool
    nodes: int
    nbytes: int
    digest: str

    @staticmethod
    def of(nodes: int, raw: bytes | None) -> Size:
        """The size of an example of ``nodes`` compute nodes serialized as ``raw`` (None: it
        could not be)."""
        if raw is None:
            return Size(True, nodes, 0, "")
        return Size(False, nodes, len(raw), hashlib.sha256(raw).hexdigest()[:16])


@dataclass(frozen=True)
class Sample:
    """A bucket's example as plain data: its serialized bytes (``raw``, the JSON the database
    keeps and repros are written from; None where it could not be serialized, and in an
    example read back from a report), its ``Size``, and what a report shows of it. ``level``
    says which kind of example ``raw`` holds: ``graph`` (a serialized graph case) or
    ``program``."""

    size: Size
    code: str | None
    ambient_grad: bool | None
    domain: str | None
    level: str = "graph"
    raw: bytes | None = None

    @staticmethod
    def of(case: Example, raw: bytes | None, level: str = "graph") -> Sample:
        return Sample(Size.of(case.compute_nodes(), raw), case.code(), case.ambient_grad, case.domain, level, raw)

    def data(self) -> dict[str, Any] | None:
        """The serialized example as JSON data, or None."""
        return json.loads(self.raw) if self.raw is not None else None

    def graph_hash(self) -> str | None:
        """A hash of a graph case's structure (graph, signature, ambient mode; not its input
        values), so the same minimized graph is recognized across buckets and runs."""
        data = self.data() if self.level == "graph" else None
        if data is None:
            return None
        canon = json.dumps([data["graph"], data["signature"], data["ambient_grad"]], sort_keys=True)
        return hashlib.sha256(canon.encode()).hexdigest()[:16]


# The size of a bucket with no example at all (a worker died on one it could not serialize).
NO_EXAMPLE = Size(True, 2**63, 2**63, "")


@dataclass
class Bucket:
    """The findings that share a bucket id: ``finding``, the one its kept ``example`` showed;
    ``count``, how many examples showed it; ``source``, the name of the listed example (a gate's
    corpus case) that showed the kept one. ``case`` is the live example, only in the process
    that judged it (the engine shrinks it); it never crosses processes."""

    id: str
    finding: Finding
    example: Sample | None
    count: int = 1
    source: str | None = None
    case: Example | None = None

    @property
    def size(self) -> Size:
        return self.example.size if self.example is not None else NO_EXAMPLE

    @property
    def graph_nodes(self) -> int:
        return self.example.size.nodes if self.example is not None else 0

    def plain(self) -> Bucket:
        """This bucket without its live example, as it crosses to another process."""
        return replace(self, case=None)

    def take(self, smaller: Bucket) -> None:
        """Show ``smaller``'s example, and the finding and source that came with it."""
        self.finding, self.example, self.source, self.case = (
            smaller.finding,
            smaller.example,
            smaller.source,
            smaller.case,
        )


class Kept(Protocol):
    """What ``Buckets`` keeps: a bucket of a campaign (``Bucket``) or of a report
    (``fxfuzz.report.schema.ReportFinding``, which a merge of reports keeps by the same order)."""

    id: str
    count: int

    @property
    def size(self) -> Size: ...

    def take(self, smaller: Any) -> None: ...


K = TypeVar("K", bound=Kept)


class Buckets(Mapping[str, K], Generic[K]):
    """Buckets by id, added to only through ``add`` (and ``merge``), which keep each bucket's
    smallest example by ``Size`` and add the counts."""

    def __init__(self, buckets: Mapping[str, K] | None = None) -> None:
        self._by_id: dict[str, K] = {}
        for b in (buckets or {}).values():
            self.add(b)

    def __getitem__(self, bid: str) -> K:
        return self._by_id[bid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def __repr__(self) -> str:
        return f"Buckets({self._by_id!r})"

    def add(self, b: K) -> bool:
        """Add ``b``'s count to its bucket, and have the bucket take ``b``'s example (with its
        finding and source) if it is smaller than the kept one; a new bucket is ``b`` itself.
        Whether ``b`` is now what the bucket shows (new, or smaller)."""
        old = self._by_id.get(b.id)
        if old is None:
            self._by_id[b.id] = b
            return True
        old.count += b.count
        if b.size < old.size:
            old.take(b)
            return True
        return False

    def seen(self, bid: str) -> None:
        """One more example showed bucket ``bid`` (which is here), not offered as its example."""
        self._by_id[bid].count += 1

    def merge(self, other: Mapping[str, K]) -> None:
        """``add`` each of ``other``'s buckets."""
        for b in other.values():
            self.add(b)

    def could_keep(self, bid: str, nodes: int) -> bool:
        """Whether an example of ``nodes`` compute nodes could be kept by bucket ``bid``: the
        bucket is new, or ``nodes`` is no more than its kept example's by ``Size``'s order (so a
        caller need not serialize an example that is larger anyway)."""
        old = self._by_id.get(bid)
        return old is None or old.size.unsaved or nodes <= old.size.nodes

    def recount(self, counts: Mapping[str, int]) -> None:
        """Set each bucket's count from ``counts`` (at least 1: it was seen)."""
        for bid, b in self._by_id.items():
            b.count = max(1, counts.get(bid, 0))


@dataclass
class WorkerAccount:
    """What worker processes did besides judging examples: restarts, deaths a fresh worker did
    not repeat, workers that could not start or finish (``errors``), the errors of fxfuzz's own
    that workers died of (never findings, each said once), examples that could not be
    serialized, and examples a worker died on while its check said the pass under test was not
    running (the gate's baseline). Empty for a campaign in this process."""

    restarts: int = 0
    unrepeated_deaths: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    unserializable: int = 0
    excused_deaths: int = 0

    def add(self, other: WorkerAccount) -> None:
        self.restarts += other.restarts
        self.unrepeated_deaths += other.unrepeated_deaths
        self.errors += other.errors
        self.internal_errors += [e for e in other.internal_errors if e not in self.internal_errors]
        self.unserializable += other.unserializable
        self.excused_deaths += other.excused_deaths


@dataclass
class CampaignResult:
    """One campaign's outcome, wherever it ran: examples judged, time, buckets, statistics,
    why it stopped, one-line notes for the user (saved examples left out, a shared database
    lost), the buckets whose shrinking is over, examples run over time (``timeline``: seconds,
    examples) and its workers' account."""

    examples: int = 0
    duration_s: float = 0.0
    buckets: Buckets[Bucket] = field(default_factory=Buckets)
    stats: Counter = field(default_factory=Counter)
    stopped_by: StopReason = StopReason.EXAMPLES
    notes: list[str] = field(default_factory=list)
    minimized: set[str] = field(default_factory=set)
    timeline: list[tuple[float, int]] = field(default_factory=list)
    workers: WorkerAccount = field(default_factory=WorkerAccount)
    # The pass it judged (its settings' identity); None for a caller's own callable.
    identity: PassIdentity | None = None

    @property
    def examples_per_s(self) -> float:
        return self.examples / self.duration_s if self.duration_s > 0 else 0.0

    def note(self, text: str) -> None:
        """Add a note, unless it is there (every worker hears of a lost database: said once)."""
        if text not in self.notes:
            self.notes.append(text)
