"""The campaign driver: Hypothesis generates cases, the pass rewrites them, oracles judge.

A campaign runs in rounds. In each round Hypothesis generates cases until one shows a
finding in a bucket not yet minimized; Hypothesis then shrinks that case and the round
ends. Later rounds keep counting the buckets already minimized without stopping on them.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Flaky

from oracles import Finding, verify
from strategies import graph_cases

from .passes import PassFn


def bucket_id(f: Finding) -> str:
    """Stable id for deduplication: oracle, kind, and for crashes the exception type and
    innermost pass frame."""
    key = [f.oracle, f.kind]
    if f.oracle == "crash":
        key += [str(f.details.get("exception")), str(f.details.get("frame"))]
    digest = hashlib.sha1("|".join(key).encode()).hexdigest()[:8]
    return f"{f.oracle}-{f.kind}-{digest}"


class Example(Protocol):
    """What a campaign needs of a generated example (a GraphCase, or a program at program level)."""

    ambient_grad: bool
    domain: str
    features: dict[str, object]

    def code(self) -> str: ...

    def compute_nodes(self) -> int: ...


Check = Callable[[Any, PassFn], "list[Finding]"]


@dataclass
class Bucket:
    """All findings that share a bucket id, with the smallest example that showed them."""

    id: str
    finding: Finding
    case: Example
    count: int = 0

    @property
    def graph_nodes(self) -> int:
        return self.case.compute_nodes()


@dataclass
class CampaignResult:
    examples: int = 0
    duration_s: float = 0.0
    buckets: dict[str, Bucket] = field(default_factory=dict)
    stats: Counter = field(default_factory=Counter)
    stopped_by: str = "max_examples"

    @property
    def examples_per_s(self) -> float:
        return self.examples / self.duration_s if self.duration_s > 0 else 0.0


class _Stop(BaseException):
    """Ends a round from inside the test body; BaseException so Hypothesis does not
    treat it as a failing example to shrink."""


class _FoundBug(Exception):
    """Raised for a case in an unminimized bucket; one subclass per bucket, so that
    Hypothesis shrinks toward the same bucket rather than any failure."""


_BUG_CLASSES: dict[str, type[_FoundBug]] = {}


def _bug_class(bid: str) -> type[_FoundBug]:
    if bid not in _BUG_CLASSES:
        _BUG_CLASSES[bid] = type(f"Found_{bid.replace('-', '_')}", (_FoundBug,), {})
    return _BUG_CLASSES[bid]


Progress = Callable[[CampaignResult, float], None]
BucketHook = Callable[[Bucket], None]


def database_key(pass_fn: PassFn, domain: str) -> bytes:
    """Where a campaign's examples live in the database: one entry per pass and domain, so a
    failure replays first on the next campaign against the same pass."""
    name = f"{getattr(pass_fn, '__module__', '')}:{getattr(pass_fn, '__qualname__', repr(pass_fn))}"
    return hashlib.sha384(f"fxfuzz|{name}|{domain}".encode()).digest()


def run_campaign(
    pass_fn: PassFn,
    *,
    budget_s: float = 60.0,
    max_examples: int = 1_000_000,
    seed_: int = 0,
    domain: str = "export",
    database: ExampleDatabase | None = None,
    progress: Progress | None = None,
    strategy: st.SearchStrategy[Example] | None = None,
    check: Check = verify,
    stop: Callable[[], bool] | None = None,
    on_bucket: BucketHook | None = None,
) -> CampaignResult:
    """Fuzz ``pass_fn`` until ``budget_s`` seconds or ``max_examples`` examples are spent,
    or ``stop()`` turns true.

    ``strategy`` draws the examples (graph cases of ``domain`` by default) and ``check``
    judges one example against the pass (``oracles.verify`` by default). ``on_bucket`` is
    called when a bucket appears and whenever its example shrinks, so a caller can keep
    the smallest example of each bucket even if this process dies later.
    """
    result = CampaignResult()
    start = time.monotonic()
    deadline = start + budget_s
    strategy = strategy if strategy is not None else graph_cases(domain=domain)

    for round_ in range(10_000):
        remaining = max_examples - result.examples
        if remaining <= 0 or time.monotonic() >= deadline:
            break
        shrinking: list[str] = []  # the bucket this round is minimizing, once one appeared

        @settings(
            max_examples=remaining,
            database=database,
            deadline=None,
            derandomize=False,
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
            print_blob=False,
        )
        @seed(seed_ * 1_000_003 + round_)
        @given(strategy)
        def body(case: Example) -> None:
            now = time.monotonic()
            if now >= deadline or (stop is not None and stop()):
                raise _Stop
            findings = check(case, pass_fn)
            ids = {bucket_id(f): f for f in findings}
            if shrinking:
                # Shrink attempts: keep the smallest case of the bucket being minimized.
                b = result.buckets[shrinking[0]]
                if shrinking[0] in ids:
                    if case.compute_nodes() <= b.graph_nodes:
                        b.case, b.finding = case, ids[shrinking[0]]
                        if on_bucket:
                            on_bucket(b)
                    raise _bug_class(shrinking[0])(str(ids[shrinking[0]]))
                return
            result.examples += 1
            for k, v in case.features.items():
                result.stats[k] += v if isinstance(v, int) else 1
            result.stats[f"ambient_grad:{case.ambient_grad}"] += 1
            new = None
            for bid, f in ids.items():
                if bid in result.buckets:
                    result.buckets[bid].count += 1
                else:
                    result.buckets[bid] = Bucket(bid, f, case, 1)
                    new = new or bid
                    if on_bucket:
                        on_bucket(result.buckets[bid])
            if progress:
                progress(result, now - start)
            if new:
                shrinking.append(new)
                raise _bug_class(new)(str(ids[new]))

        body._hypothesis_internal_database_key = database_key(pass_fn, domain)  # type: ignore[attr-defined]
        try:
            body()
        except _Stop:
            result.stopped_by = "stopped" if stop is not None and stop() else "budget"
            break
        except (_FoundBug, Flaky):
            # Flaky: the pass misbehaved on a case once and not on replay; the bucket and its
            # case are already recorded.
            continue
        else:
            break
    result.duration_s = time.monotonic() - start
    return result
