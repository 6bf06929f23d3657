"""The campaign driver: Hypothesis generates cases, the pass rewrites them, oracles judge.

A campaign runs in rounds. In each round Hypothesis generates cases until one shows a
finding in a bucket not yet minimized; Hypothesis then shrinks that case and the round
ends. Later rounds keep counting the buckets already minimized without stopping on them.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fxfuzz.core.case import Example
from fxfuzz.core.choices import DEFAULT_MAX_SHRINK_S
from fxfuzz.core.errors import SerializeError
from fxfuzz.core.passes import Pass, PassFn
from fxfuzz.core.reproducible import reproducible_draws
from fxfuzz.core.serialize import case_from_dict, case_to_dict
from fxfuzz.oracles import Finding, verify
from fxfuzz.oracles.stages import stages_forced
from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Flaky


def bucket_id(f: Finding) -> str:
    """Stable id for deduplication: oracle, kind, for crashes the exception type and
    innermost pass frame, for a downstream stage that raised the exception type (a
    serializer refusing the result and a verifier rejecting what it loaded are two defects),
    and the finding's own ``details["key"]`` where its oracle set one."""
    key = [f.oracle, f.kind]
    if f.oracle == "crash":
        key += [str(f.details.get("exception")), str(f.details.get("frame"))]
    elif f.oracle == "downstream" and f.kind.endswith("_raised"):
        key.append(str(f.details.get("exception")))
    if "key" in f.details:
        key.append(str(f.details["key"]))
    digest = hashlib.sha1("|".join(key).encode()).hexdigest()[:8]
    return f"{f.oracle}-{f.kind}-{digest}"


Check = Callable[[Any, PassFn], "list[Finding]"]
# Told by a check, in a worker process, whether a death of the process from now on is the
# pass's (True, the default at each example's start) or not (the gate's baseline is running).
Blame = Callable[[bool], None]


@dataclass
class Bucket:
    """All findings that share a bucket id, with the smallest example that showed them."""

    id: str
    finding: Finding
    case: Example | None
    count: int = 0
    # The example serialized (fuzz.serialize), when it came from a worker process; None
    # for an example a worker died on before it could be serialized.
    case_data: dict[str, Any] | None = None
    source: str | None = None  # the name of the listed example (run_examples) it came from

    @property
    def graph_nodes(self) -> int:
        return self.case.compute_nodes() if self.case is not None else 0


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


class _ShrinkTimeUp(_Stop):
    """Ends one bucket's shrinking (its best example so far is kept) so that a slow shrink
    cannot eat the whole budget."""


class _FoundBug(Exception):
    """Raised for a case in an unminimized bucket; one subclass per bucket, so that
    Hypothesis shrinks toward the same bucket rather than any failure."""


_BUG_CLASSES: dict[str, type[_FoundBug]] = {}


def _raise_found(bid: str, finding: Finding) -> None:
    """Raise the bucket's exception from this one line: Hypothesis identifies a failure by
    exception type *and* raising line, and calls a replay that fails on another line flaky,
    which would end the round without shrinking."""
    if bid not in _BUG_CLASSES:
        _BUG_CLASSES[bid] = type(f"Found_{bid.replace('-', '_')}", (_FoundBug,), {})
    raise _BUG_CLASSES[bid](str(finding))


Progress = Callable[[CampaignResult, float], None]
BucketHook = Callable[[Bucket], None]


def _record(
    result: CampaignResult, case: Example, ids: dict[str, Finding], on_bucket: BucketHook | None, source: str | None = None
) -> None:
    """Count one example and its findings; a new bucket starts with ``case``."""
    result.examples += 1
    for k, v in case.features.items():
        result.stats[k] += v if isinstance(v, int) else 1
    result.stats[f"ambient_grad:{case.ambient_grad}"] += 1
    for bid, f in ids.items():
        if bid in result.buckets:
            result.buckets[bid].count += 1
        else:
            result.buckets[bid] = Bucket(bid, f, case, 1, source=source)
            if on_bucket:
                on_bucket(result.buckets[bid])


def run_examples(
    pass_fn: PassFn,
    examples: Iterable[tuple[str, Example]],
    *,
    check: Check = verify,
    progress: Progress | None = None,
    stop: Callable[[], bool] | None = None,
    on_bucket: BucketHook | None = None,
) -> CampaignResult:
    """Judge each named example once, in order, until ``stop()`` turns true: a fixed corpus
    rather than generated examples, so nothing shrinks and each bucket keeps the first
    example that showed it, with its name as the bucket's ``source``."""
    result = CampaignResult()
    start = time.monotonic()
    for name, case in examples:
        if stop is not None and stop():
            result.stopped_by = "stopped"
            break
        _record(result, case, {bucket_id(f): f for f in check(case, pass_fn)}, on_bucket, name)
        if progress:
            progress(result, time.monotonic() - start)
    result.duration_s = time.monotonic() - start
    return result


def database_key(pass_fn: PassFn, domain: str) -> bytes:
    """Where a campaign's examples live in the database: one entry per pass and domain, so a
    failure replays first on the next campaign against the same pass."""
    if isinstance(pass_fn, Pass):
        # The name loaded passes were keyed by before fxfuzz became one package, so databases
        # written then keep replaying.
        name = f"fuzz.passes:{pass_fn.target}"
    else:
        name = f"{getattr(pass_fn, '__module__', '')}:{getattr(pass_fn, '__qualname__', repr(pass_fn))}"
    return hashlib.sha384(f"fxfuzz|{name}|{domain}".encode()).digest()


@dataclass(frozen=True)
class Codec:
    """Turns an example into bytes for the database and back (None: cannot be saved)."""

    dumps: Callable[[Any], bytes | None]
    loads: Callable[[bytes], Any]


def _graph_case_dumps(case: Any) -> bytes | None:
    try:
        return json.dumps(case_to_dict(case)).encode()
    except (SerializeError, AttributeError):
        return None


def _graph_case_loads(raw: bytes) -> Any:
    return case_from_dict(json.loads(raw))


GRAPH_CASES = Codec(_graph_case_dumps, _graph_case_loads)


class SavedFailures:
    """Each bucket's smallest example, kept in the Hypothesis example database under one key
    per pass and domain, so the next campaign replays them before generating anything.

    Hypothesis's own replay of choice sequences does not fit rounds: a later round replays
    an already-minimized failure, sees it "pass" (the round ignores known buckets) and
    deletes it. Storing the serialized example makes replay independent of the strategy's
    choice sequence, and any ExampleDatabase (directory, GitHubArtifactDatabase,
    MultiplexedDatabase) carries it.

    Several processes save into one database (workers, restarts, the supervisor, later
    campaigns), each knowing only what it saved or replayed itself; so a store deletes an
    example only for a smaller one of the same bucket, or when it no longer fails. The
    database thereby only ever improves a bucket's example.
    """

    def __init__(self, database: ExampleDatabase, key: bytes, codec: Codec) -> None:
        self.db, self.key, self.codec = database, key + b".fxfuzz-failures", codec
        # bucket -> (compute nodes, bytes, raw): its smallest example, ordered by that key
        self.by_bucket: dict[str, tuple[int, int, bytes]] = {}

    def saved(self) -> list[tuple[bytes, Any]]:
        """The saved examples that still load, smallest first (compute nodes, then bytes); an
        example written by another fxfuzz or torch version that no longer loads is deleted."""
        loaded = []
        for raw in self.db.fetch(self.key):
            try:
                case = self.codec.loads(raw)
            except Exception:
                self.db.delete(self.key, raw)
                continue
            loaded.append(((case.compute_nodes(), len(raw), raw), case))
        return [(size[2], case) for size, case in sorted(loaded, key=lambda sc: sc[0])]

    def keep(self, bid: str, raw: bytes | None, nodes: int) -> None:
        """Save ``raw`` (``nodes`` compute nodes) as bucket ``bid``'s example if it is smaller
        than the one this store holds for it, deleting that one."""
        if raw is None:
            return
        new = (nodes, len(raw), raw)
        old = self.by_bucket.get(bid)
        if old is not None and old <= new:
            return
        self.by_bucket[bid] = new
        self.db.save(self.key, raw)
        if old is not None:
            self.drop_unless_held(old[2])

    def drop_unless_held(self, raw: bytes) -> None:
        """Delete ``raw`` unless it is the smallest example of some bucket held here."""
        if all(raw != held for _, _, held in self.by_bucket.values()):
            self.db.delete(self.key, raw)


class _HeapFrozen(contextlib.ContextDecorator):
    """Moves every object alive when a campaign starts (torch, Hypothesis, the pass, the
    caller's data) out of the garbage collector's reach until it ends: each example leaves
    reference cycles behind (fx nodes, fake tensors), and every older-generation collection
    they trigger would rescan those hundreds of thousands of long-lived objects (about 9% of
    a campaign's CPU time; 5% with them frozen). Nothing is lost: they return on exit."""

    def __enter__(self) -> _HeapFrozen:
        gc.freeze()
        return self

    def __exit__(self, *exc: object) -> None:
        gc.unfreeze()


@_HeapFrozen()
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
    codec: Codec | None = GRAPH_CASES,
    replay_saved: bool = True,
    max_shrink_s: float = DEFAULT_MAX_SHRINK_S,
    known: frozenset[str] = frozenset(),
    rerun: Sequence[Example] = (),
) -> CampaignResult:
    """Fuzz ``pass_fn`` until ``budget_s`` seconds or ``max_examples`` examples are spent,
    or ``stop()`` turns true.

    ``strategy`` draws the examples (graph cases of ``domain`` by default) and ``check``
    judges one example against the pass (``fxfuzz.oracles.verify`` by default). ``on_bucket`` is
    called when a bucket appears and whenever its example shrinks, so a caller can keep
    the smallest example of each bucket even if this process dies later.

    With a ``database``, each bucket's minimized example is saved (through ``codec``) and,
    when ``replay_saved``, the saved examples run first: a failure found once shows in the
    first examples of the next campaign. Shrinking one bucket stops after ``max_shrink_s``
    seconds with the smallest example found so far (0: each bucket keeps its first example);
    ``stats["shrink_attempts"]`` counts the examples judged while shrinking. Buckets in
    ``known`` (the baseline) are counted but not shrunk: the budget goes to finding something new.

    ``rerun`` examples run before anything else, whatever the budget, limits or ``stop()``
    say (a worker runs the example its predecessor died on again); they count as examples,
    and their buckets are shrunk when a later example shows them.
    """
    result = CampaignResult()
    start = time.monotonic()
    deadline = start + budget_s
    strategy = strategy if strategy is not None else graph_cases(domain=domain)
    store = SavedFailures(database, database_key(pass_fn, domain), codec) if database and codec else None

    def record(case: Example, ids: dict[str, Finding]) -> None:
        _record(result, case, ids, on_bucket)
        if progress:
            progress(result, time.monotonic() - start)

    # Buckets whose round of shrinking is over; an example may show several new buckets at
    # once, and each gets its own round when a later example shows it again.
    minimized: set[str] = set(known)

    def finish_round(shrunk: list[str]) -> None:
        """The round's bucket is as small as it gets: stop shrinking it, save its example."""
        minimized.update(shrunk)
        for bid in shrunk if store else []:
            b = result.buckets[bid]
            store.keep(bid, store.codec.dumps(b.case), b.graph_nodes)  # type: ignore[union-attr]

    for case in rerun:
        record(case, {bucket_id(f): f for f in check(case, pass_fn)})

    for raw, case in store.saved() if store and replay_saved else []:
        assert store is not None  # iterated only with one
        if result.examples >= max_examples or time.monotonic() >= deadline or (stop is not None and stop()):
            break
        result.stats["saved_replayed"] += 1
        ids = {bucket_id(f): f for f in check(case, pass_fn)}
        record(case, ids)
        for bid in ids:
            minimized.add(bid)  # saved examples were minimized when they were saved
            store.keep(bid, raw, case.compute_nodes())
        # Fixed since it was saved, or a larger example of a bucket a smaller one showed first.
        store.drop_unless_held(raw)

    for round_ in range(10_000):
        remaining = max_examples - result.examples
        if remaining <= 0:
            break
        if time.monotonic() >= deadline:
            result.stopped_by = "budget"
            break
        shrinking: list[str] = []  # the bucket this round is minimizing, once one appeared
        shrink_started: list[float] = []

        @settings(
            max_examples=remaining,
            database=None,  # failures persist through SavedFailures instead
            deadline=None,
            derandomize=False,
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            print_blob=False,
        )
        @seed(seed_ * 1_000_003 + round_)
        @given(strategy)
        def body(case: Example) -> None:
            now = time.monotonic()
            if now >= deadline or (stop is not None and stop()):
                raise _Stop
            if shrinking and now - shrink_started[0] >= max_shrink_s:
                raise _ShrinkTimeUp  # before judging: an attempt past the limit is time spent for nothing
            # While a downstream bucket shrinks, every attempt goes through the export stages,
            # so the shrinker judges each candidate alike whatever share the case hashes to.
            with stages_forced(bool(shrinking) and result.buckets[shrinking[0]].finding.oracle == "downstream"):
                findings = check(case, pass_fn)
            ids = {bucket_id(f): f for f in findings}
            if shrinking:
                result.stats["shrink_attempts"] += 1
                # Shrink attempts: keep the smallest case of the bucket being minimized. A bucket
                # no example showed yet is kept too (as Hypothesis keeps the other bugs its
                # shrinker meets), saved at once, to be minimized when an example shows it again.
                for bid in ids.keys() - result.buckets.keys():
                    result.buckets[bid] = Bucket(bid, ids[bid], case, 1)
                    if store:
                        store.keep(bid, store.codec.dumps(case), case.compute_nodes())
                    if on_bucket:
                        on_bucket(result.buckets[bid])
                b = result.buckets[shrinking[0]]
                if shrinking[0] in ids:
                    if case.compute_nodes() <= b.graph_nodes:
                        b.case, b.finding = case, ids[shrinking[0]]
                        if on_bucket:
                            on_bucket(b)
                    _raise_found(shrinking[0], ids[shrinking[0]])
                return
            record(case, ids)
            # A bucket of this example not minimized yet, new or not.
            target = next((bid for bid in ids if bid not in minimized), None)
            if target:
                shrinking.append(target)
                shrink_started.append(time.monotonic())
                _raise_found(target, ids[target])

        try:
            with reproducible_draws():
                body()
        except _ShrinkTimeUp:
            pass
        except _Stop:
            result.stopped_by = "stopped" if stop is not None and stop() else "budget"
            finish_round(shrinking)
            break
        except (_FoundBug, Flaky):
            # Flaky: the pass misbehaved on a case once and not on replay; the bucket and its
            # case are already recorded.
            pass
        else:
            break
        finish_round(shrinking)
    result.duration_s = time.monotonic() - start
    return result
