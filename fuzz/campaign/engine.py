"""The campaign driver: Hypothesis generates cases, the pass rewrites them, oracles judge.

A campaign (``Campaign``: one object holds its state) runs in named phases, in order:
``rerun`` (examples a caller hands over, judged whatever the limits say), ``replay saved``
(the database's saved failures), then rounds of ``generate`` and ``shrink``: Hypothesis
generates cases until one shows a finding in a bucket not yet minimized, then shrinks that
case, and the round ends. Later rounds keep counting the buckets already minimized without
stopping on them. ``StopReason`` says why it ended.
"""

from __future__ import annotations

import contextlib
import enum
import gc
import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from fxfuzz.campaign.database import open_database
from fxfuzz.campaign.reduce import reduce_case
from fxfuzz.campaign.results import Bucket, CampaignResult, Sample, StopReason
from fxfuzz.campaign.store import GRAPH_CASES, Codec, SavedFailures, database_key
from fxfuzz.core.case import Example, GraphCase
from fxfuzz.core.inductor import drain_reach
from fxfuzz.core.passes import PassFn, generation_ambient, generation_kinds
from fxfuzz.core.reproducible import reproducible_draws
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.oracles import Finding, verify
from fxfuzz.oracles.crash import site_key
from fxfuzz.oracles.downstream import stages_forced
from fxfuzz.oracles.program import shrinks_with_shared_checks
from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, Phase, given, seed
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Flaky


def bucket_id(f: Finding) -> str:
    """Stable id for deduplication: oracle, kind, for crashes the exception type and where
    it was raised (``fxfuzz.oracles.crash.site_key``), for a downstream stage that raised the
    exception type (a serializer refusing the result and a verifier rejecting what it loaded
    are two defects), and the finding's own ``details["key"]`` where its oracle set one."""
    key = [f.oracle, f.kind]
    if f.oracle == "crash":
        key += [str(f.details.get("exception")), site_key(f.details)]
    elif f.oracle == "downstream" and f.kind.endswith("_raised"):
        key.append(str(f.details.get("exception")))
    if "key" in f.details:
        key.append(str(f.details["key"]))
    digest = hashlib.sha1("|".join(key).encode()).hexdigest()[:8]
    return f"{f.oracle}-{f.kind}-{digest}"


# How a campaign judges one example against the pass: its findings (``verify``, the gate's regressions).
ExampleCheck = Callable[[Any, PassFn], "list[Finding]"]


class CampaignPhase(enum.Enum):
    """Where a campaign is, in the order it goes (see the module doc)."""

    RERUN = "rerun"
    REPLAY_SAVED = "replay saved"
    GENERATE = "generate"
    SHRINK = "shrink"


class _Halt(BaseException):
    """Ends a round from inside the test body: the campaign's end when its ``stop_reason`` is
    set, else one bucket's shrink past its time limit (its best example so far is kept).
    BaseException so Hypothesis does not treat it as a failing example to shrink."""


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


@dataclass(frozen=True)
class Hooks:
    """What a caller hears of a running campaign (``progress`` after each example,
    ``on_bucket`` when a bucket appears or its example shrinks, ``on_minimized`` when a
    bucket's shrinking is over) and how it ends one early (``stop()`` turns true)."""

    progress: Progress | None = None
    stop: Callable[[], bool] | None = None
    on_bucket: BucketHook | None = None
    on_minimized: BucketHook | None = None

    def stopped(self) -> bool:
        return self.stop is not None and self.stop()


def sample(case: Example, codec: Codec | None) -> Sample:
    """``case`` as plain data, serialized by ``codec`` (None: not at all)."""
    return Sample.of(
        case, codec.dumps(case) if codec is not None else None, codec.level if codec is not None else "graph"
    )


def _record(
    result: CampaignResult,
    case: Example,
    ids: dict[str, Finding],
    on_bucket: BucketHook | None,
    codec: Codec | None,
    name: str | None = None,
) -> None:
    """Count one example and its findings; a new bucket starts with ``case`` (shrinking, not
    generation, offers a bucket a smaller example)."""
    result.examples += 1
    for k, v in case.features.items():
        result.stats[k] += v if isinstance(v, int) else 1
    result.stats[f"ambient_grad:{case.ambient_grad}"] += 1
    # Inductor's pattern entries the pass applied to it (pattern reach, docs/oracles.md).
    result.stats.update(drain_reach())
    for bid, f in ids.items():
        if bid in result.buckets:
            result.buckets.seen(bid)
        else:
            result.buckets.add(Bucket(bid, f, sample(case, codec), 1, name, case))
            if on_bucket:
                on_bucket(result.buckets[bid])


def run_examples(
    pass_fn: PassFn,
    examples: Iterable[tuple[str, Example]],
    check: ExampleCheck = verify,
    hooks: Hooks = Hooks(),
    codec: Codec | None = None,
) -> CampaignResult:
    """Judge each named example once, in order, until ``hooks.stop()`` turns true: a fixed
    corpus rather than generated examples, so nothing shrinks and each bucket keeps the first
    example that showed it (serialized by ``codec``), with its name as the bucket's ``source``."""
    result = CampaignResult()
    start = time.monotonic()
    for name, case in examples:
        if hooks.stopped():
            result.stopped_by = StopReason.STOPPED
            break
        _record(result, case, {bucket_id(f): f for f in check(case, pass_fn)}, hooks.on_bucket, codec, name)
        if hooks.progress:
            hooks.progress(result, time.monotonic() - start)
    result.duration_s = time.monotonic() - start
    return result


def verify_with(settings: CampaignSettings) -> ExampleCheck:
    """``fxfuzz.oracles.verify`` on the settings' device and stage share, holding the pass to
    its own contract (a loaded pass carries the ``--contract`` it was resolved with)."""
    return lambda case, pass_fn: verify(case, pass_fn, None, settings.device, settings.stage_share)


@dataclass(frozen=True)
class Subject:
    """What a campaign draws (None: graph cases of the settings' domain), how it judges one
    example against the pass (None: ``verify_with(settings)``) and how it saves one in the
    database (None: not at all)."""

    strategy: st.SearchStrategy[Any] | None = None
    check: ExampleCheck | None = None
    codec: Codec | None = GRAPH_CASES


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


# A round ends on a new bucket; each round draws at least one example, so this only guards
# against a strategy that never draws.
_MAX_ROUNDS = 10_000


class Campaign:
    """One campaign's state, run as named phases (see the module doc): its result so far,
    the buckets whose shrinking is over, the bucket being shrunk and since when, and why it
    stopped."""

    def __init__(
        self,
        pass_fn: PassFn,
        settings: CampaignSettings,
        database: ExampleDatabase | None,
        hooks: Hooks,
        subject: Subject,
    ) -> None:
        self.pass_fn, self.settings, self.hooks = pass_fn, settings, hooks
        self.strategy = (
            subject.strategy
            if subject.strategy is not None
            else graph_cases(
                domain=settings.domain, reacts_to=generation_kinds(pass_fn), ambient=generation_ambient(pass_fn)
            )
        )
        self.check = subject.check if subject.check is not None else verify_with(settings)
        self.codec = subject.codec
        self.result = CampaignResult(identity=settings.identity)
        if database is None and settings.db is not None:
            database = open_database(settings.db, self.result.notes.append)
        self.store = (
            SavedFailures(database, database_key(pass_fn, settings.domain), subject.codec)
            if database is not None and subject.codec is not None
            else None
        )
        self.start = time.monotonic()
        self.deadline = self.start + settings.budget_s
        self.phase = CampaignPhase.RERUN
        # Buckets whose round of shrinking is over (known ones never get one); an example may
        # show several new buckets at once, and each gets its own round when a later example
        # shows it again.
        self.minimized: set[str] = set(settings.known)
        # Known buckets whose example was reduced: Hypothesis never shrinks them, but the graph
        # reduction runs once on the first example a campaign judges of each, so their repros
        # are as small as a new bucket's.
        self.reduced_known: set[str] = set()
        self.shrinking: str | None = None  # the bucket this round is minimizing, once one appeared
        self.shrink_started = 0.0
        self.stop_reason: StopReason | None = None

    def run(self, rerun: Sequence[Example]) -> CampaignResult:
        self._rerun(rerun)
        self._replay_saved()
        self._generate()
        if self.stop_reason is not None:
            self.result.stopped_by = self.stop_reason
        self.result.duration_s = time.monotonic() - self.start
        return self.result

    # -- the phases
    def _rerun(self, examples: Sequence[Example]) -> None:
        self.phase = CampaignPhase.RERUN
        for case in examples:
            self._record(case, self._judge(case))

    def _replay_saved(self) -> None:
        self.phase = CampaignPhase.REPLAY_SAVED
        store = self.store
        if store is None or not self.settings.replay_saved:
            return
        saved = store.saved(self.settings.example_timeout_s)
        self.result.stats.update(store.skipped)
        self.result.notes.extend(store.notes)
        for raw, case in saved:
            if self.result.examples >= self.settings.max_examples or self._halt_reason() is not None:
                break
            self.result.stats["saved_replayed"] += 1
            ids = self._judge(case)
            self._record(case, ids)
            for bid in ids:
                self.minimized.add(bid)  # saved examples were minimized when they were saved
                self.result.minimized.add(bid)
                store.keep(bid, raw, case.compute_nodes())
            # Fixed since it was saved, or a larger example of a bucket a smaller one showed first.
            store.drop_unless_held(raw)

    def _generate(self) -> None:
        """Rounds of generating, then shrinking the first example of a bucket not yet
        minimized, until a limit or ``stop()`` ends the campaign."""
        for round_ in range(_MAX_ROUNDS):
            remaining = self.settings.max_examples - self.result.examples
            if remaining <= 0:
                return
            if time.monotonic() >= self.deadline:
                self.stop_reason = StopReason.BUDGET
                return
            self.phase, self.shrinking = CampaignPhase.GENERATE, None
            try:
                with reproducible_draws():
                    self._round(round_, remaining)()
            except _Halt:
                pass
            except (_FoundBug, Flaky):
                # Flaky: the pass misbehaved on a case once and not on replay; the bucket and its
                # case are already recorded.
                pass
            else:
                return  # Hypothesis drew all it would
            self._finish_round()
            if self.stop_reason is not None:
                return

    def _round(self, round_: int, remaining: int) -> Callable[[], None]:
        """One round's Hypothesis test, drawing at most ``remaining`` examples."""

        @hypothesis_settings(
            max_examples=remaining,
            database=None,  # failures persist through SavedFailures instead
            deadline=None,
            derandomize=False,
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            print_blob=False,
        )
        @seed(self.settings.seed * 1_000_003 + round_)
        @given(self.strategy)
        def example(case: Example) -> None:
            self.stop_reason = self._halt_reason()
            if self.stop_reason is not None:
                raise _Halt
            if self.phase is CampaignPhase.SHRINK:
                if time.monotonic() - self.shrink_started >= self.settings.max_shrink_s:
                    raise _Halt  # before judging: an attempt past the limit is time spent for nothing
                self._shrink_attempt(case)
            else:
                self._generated(case)

        return example

    def _generated(self, case: Example) -> None:
        ids = self._judge(case)
        self._record(case, ids)
        # A bucket of this example not minimized yet, new or not, starts the shrink phase.
        target = next((bid for bid in ids if bid not in self.minimized), None)
        if target:
            self.phase, self.shrinking, self.shrink_started = CampaignPhase.SHRINK, target, time.monotonic()
            _raise_found(target, ids[target])

    def _shrink_attempt(self, case: Example) -> None:
        """Keep the smallest case of the bucket being minimized. A bucket no example showed yet
        is kept too (as Hypothesis keeps the other bugs its shrinker meets), saved at once, to
        be minimized when an example shows it again."""
        assert self.shrinking is not None
        buckets = self.result.buckets
        # While a downstream bucket shrinks, every attempt goes through the export stages, so
        # the shrinker judges each candidate alike whatever share the case hashes to.
        with stages_forced(shrinks_with_shared_checks(buckets[self.shrinking].finding)):
            ids = self._judge(case)
        self.result.stats["shrink_attempts"] += 1
        for bid in ids.keys() - buckets.keys():
            buckets.add(Bucket(bid, ids[bid], sample(case, self.codec), 1, case=case))
            self._save(buckets[bid])
            if self.hooks.on_bucket:
                self.hooks.on_bucket(buckets[bid])
        if self.shrinking in ids:
            self._offer(Bucket(self.shrinking, ids[self.shrinking], None, 0, case=case))
            _raise_found(self.shrinking, ids[self.shrinking])

    def _finish_round(self) -> None:
        """The round's bucket is as small as Hypothesis gets it: reduce its graph
        (``fxfuzz.campaign.reduce``), stop shrinking it, save its example."""
        if self.shrinking is not None:
            self._reduce(self.result.buckets[self.shrinking])
            self.minimized.add(self.shrinking)
            self.result.minimized.add(self.shrinking)
            self._save(self.result.buckets[self.shrinking])
            if self.hooks.on_minimized:
                self.hooks.on_minimized(self.result.buckets[self.shrinking])

    def _reduce(self, b: Bucket) -> None:
        """Reduce bucket ``b``'s graph while it shows the same bucket, for another
        ``max_shrink_s`` at most (and within the campaign's budget); a program is left as is."""
        if not isinstance(b.case, GraphCase) or self.settings.max_shrink_s <= 0:
            return
        deadline = min(time.monotonic() + self.settings.max_shrink_s, self.deadline)
        with stages_forced(shrinks_with_shared_checks(b.finding)):
            reduced = reduce_case(b.case, lambda c: b.id in self._judge(c), deadline=deadline, stop=self.hooks.stopped)
            self.result.stats["reduce_attempts"] += reduced.judged
            if reduced.accepted:
                finding = self._judge(reduced.case).get(b.id, b.finding)
                self._offer(Bucket(b.id, finding, None, 0, b.source, reduced.case))

    # -- helpers
    def _halt_reason(self) -> StopReason | None:
        if self.hooks.stopped():
            return StopReason.STOPPED
        return StopReason.BUDGET if time.monotonic() >= self.deadline else None

    def _judge(self, case: Example) -> dict[str, Finding]:
        return {bucket_id(f): f for f in self.check(case, self.pass_fn)}

    def _record(self, case: Example, ids: dict[str, Finding]) -> None:
        _record(self.result, case, ids, self.hooks.on_bucket, self.codec)
        for bid in sorted(ids.keys() & self.settings.known - self.reduced_known):
            self.reduced_known.add(bid)
            self._reduce(self.result.buckets[bid])
        if self.hooks.progress:
            self.hooks.progress(self.result, time.monotonic() - self.start)

    def _offer(self, b: Bucket) -> None:
        """Offer ``b``'s live example (not yet serialized: only one that could be kept is) to
        its bucket, which keeps it if it is smaller (``Buckets.add``); its count is not one more
        example's."""
        assert b.case is not None
        if self.result.buckets.could_keep(b.id, b.case.compute_nodes()):
            b.example = sample(b.case, self.codec)
            if self.result.buckets.add(b) and self.hooks.on_bucket:
                self.hooks.on_bucket(self.result.buckets[b.id])

    def _save(self, b: Bucket) -> None:
        if self.store is not None and b.example is not None:
            self.store.keep(b.id, b.example.raw, b.example.size.nodes)


@_HeapFrozen()
def run_campaign(
    pass_fn: PassFn,
    settings: CampaignSettings = CampaignSettings(),
    *,
    database: ExampleDatabase | None = None,
    hooks: Hooks = Hooks(),
    subject: Subject = Subject(),
    rerun: Sequence[Example] = (),
) -> CampaignResult:
    """Fuzz ``pass_fn`` until ``settings.budget_s`` seconds or ``settings.max_examples``
    examples are spent, or ``hooks.stop()`` turns true.

    ``subject`` says what is drawn and judged (graph cases of ``settings.domain`` under
    ``verify`` by default). ``hooks.on_bucket`` is called when a bucket appears and whenever
    its example shrinks, so a caller can keep the smallest example of each bucket even if
    this process dies later.

    With a ``database`` (any Hypothesis ``ExampleDatabase``; without one, ``settings.db``
    opened), each bucket's minimized example
    is saved (through ``subject.codec``) and, with ``settings.replay_saved``, the saved
    examples run first: a failure found once shows in the first examples of the next
    campaign. Shrinking one bucket stops after ``settings.max_shrink_s`` seconds with the
    smallest example found so far (0: each bucket keeps its first example);
    ``stats["shrink_attempts"]`` counts the examples judged while shrinking. Buckets in
    ``settings.known`` (the baseline) are counted but not shrunk: the budget goes to finding
    something new. The graph reduction (``fxfuzz.campaign.reduce``, bounded as a new bucket's
    is: ``max_shrink_s`` and the budget) still runs once on the first example of each that
    this campaign judges, so a known bucket's repro is a short program too;
    ``stats["reduce_attempts"]`` counts the candidates it judged.

    ``rerun`` examples run before anything else, whatever the budget, limits or ``stop()``
    say (a worker runs the example its predecessor died on again); they count as examples,
    and their buckets are shrunk when a later example shows them.
    """
    return Campaign(pass_fn, settings, database, hooks, subject).run(rerun)
