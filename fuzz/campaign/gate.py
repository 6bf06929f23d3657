"""Gate a pass change: run a candidate pass and a baseline pass on the same cases, and report
every regression (``fxfuzz.oracles.differential`` says what a regression is).

The cases are the regression corpus (saved cases of earlier campaigns, then the built-in
corpus of ``fxfuzz.strategies.corpus.gate_corpus``: its modules and one with a pytree calling
convention) and fresh Hypothesis cases for the budget (``fresh_cases``: of the export domain,
the adversarial one, or both), each judged under both ambient grad modes so that a regression
shrinks like any campaign finding. ``run_gate`` judges in this process, the corpus first;
``run_gate_parallel`` (``fxfuzz gate``) judges every case in worker processes, so a case that
kills the process or hangs is a crash regression, and with two or more workers draws fresh
cases alongside the corpus.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fxfuzz.campaign.engine import (
    ExampleCheck,
    Hooks,
    Progress,
    Subject,
    bucket_id,
    run_campaign,
    run_examples,
    sample,
)
from fxfuzz.campaign.protocol import Task
from fxfuzz.campaign.results import Bucket, Buckets, CampaignResult, Sample, Size, StopReason
from fxfuzz.campaign.store import GRAPH_CASES
from fxfuzz.campaign.supervisor import ParallelCampaign, Supervisor, worker_seed
from fxfuzz.core.case import GraphCase
from fxfuzz.core.choices import DEFAULT_STAGE_SHARE
from fxfuzz.core.identity import resolve_pass
from fxfuzz.core.passes import Pass, PassFn, generation_kinds
from fxfuzz.core.serialize import case_from_dict, case_to_dict
from fxfuzz.core.settings import NO_EXAMPLE_LIMIT, CampaignSettings
from fxfuzz.oracles import Finding
from fxfuzz.oracles.differential import Blame, regressions, regressions_both_modes
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.corpus import gate_corpus
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase


def shown_as_found(bucket: Bucket) -> Sample | None:
    """The bucket's example under the ambient grad mode that showed its regression (a finding's
    details say which, ``regressions_both_modes``), so that its repro replays the regression."""
    example = bucket.example
    data = example.data() if example is not None else None
    ambient = bucket.finding.details.get("ambient_grad")
    if example is None or data is None or ambient is None or data["ambient_grad"] == ambient:
        return example
    raw = json.dumps({**data, "ambient_grad": bool(ambient)}).encode()
    return dataclasses.replace(example, size=Size.of(example.size.nodes, raw), ambient_grad=bool(ambient), raw=raw)


@dataclass
class GateResult:
    """A gate's campaign and its verdict's extra fields: how many corpus cases were judged, in
    how many seconds. The campaign holds the fresh cases' counts and every regression, bucketed
    like campaign findings (a bucket's ``source`` names the corpus case that showed it; None: a
    fresh case); its workers' account counts as ``excused_deaths`` the cases a worker died on
    where the candidate is not to blame (the baseline killed the process, or crashed on the
    case itself, when the candidate's crash is no regression)."""

    corpus_cases: int = 0
    corpus_s: float = 0.0
    campaign: CampaignResult = field(default_factory=CampaignResult)

    @property
    def buckets(self) -> Mapping[str, Bucket]:
        return self.campaign.buckets


class StopGate(BaseException):
    """Raised by ``on_regression`` to end the gate at once (mutation testing stops at the
    first kill); BaseException so that neither the oracles nor Hypothesis swallow it."""


def judge_corpus(
    candidate: PassFn,
    baseline: PassFn,
    corpus: Iterable[tuple[str, GraphCase]],
    on_regression: Callable[[Bucket], None] | None = None,
    stop: Callable[[], bool] | None = None,
    stage_share: float = DEFAULT_STAGE_SHARE,
) -> GateResult:
    """Judge ``candidate`` against ``baseline`` on every corpus case, in this process, until
    ``stop()`` turns true."""

    def check(case: GraphCase, cand: PassFn) -> list[Finding]:
        return regressions(case, cand, baseline, stage_share=stage_share)

    judged = run_examples(candidate, corpus, check, Hooks(stop=stop, on_bucket=on_regression), GRAPH_CASES)
    return GateResult(judged.examples, judged.duration_s, CampaignResult(buckets=judged.buckets))


def add_fresh(result: GateResult, fresh: CampaignResult) -> None:
    """Merge the fresh cases' campaign into ``result``: the corpus's buckets join the fresh
    ones (``Buckets.merge``), and its counts stay in ``corpus_cases``."""
    fresh.buckets.merge(result.campaign.buckets)
    result.campaign = fresh


def run_gate(
    candidate: PassFn,
    baseline: PassFn,
    corpus: Iterable[tuple[str, GraphCase]],
    settings: CampaignSettings = CampaignSettings(),
    *,
    database: ExampleDatabase | None = None,
    progress: Progress | None = None,
    on_regression: Callable[[Bucket], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> GateResult:
    """Judge ``candidate`` against ``baseline`` on every corpus case, then on fresh cases of
    ``settings.domain`` until ``settings.budget_s`` seconds (corpus time included) or
    ``settings.max_examples`` fresh cases are spent, or ``stop()`` turns true.

    ``on_regression`` sees each new bucket as it appears (and may raise StopGate).
    """
    start = time.monotonic()
    result = judge_corpus(candidate, baseline, corpus, on_regression, stop, settings.stage_share)
    buckets = result.campaign.buckets

    def check(case: GraphCase, cand: PassFn) -> list[Finding]:
        found = regressions_both_modes(case, cand, baseline, stage_share=settings.stage_share)
        if on_regression:
            for f in found:
                if bucket_id(f) not in buckets:
                    on_regression(Bucket(bucket_id(f), f, sample(case, GRAPH_CASES), 1, case=case))
        return found

    remaining = settings.budget_s - result.corpus_s
    if remaining > 0 and not (stop is not None and stop()):
        fresh = run_campaign(
            candidate,
            dataclasses.replace(settings, budget_s=remaining),
            database=database,
            hooks=Hooks(progress, stop),
            subject=Subject(fresh_cases(settings.domain, baseline), check),
        )
        add_fresh(result, fresh)
    result.campaign.duration_s = time.monotonic() - start
    return result


def fresh_cases(domain: str, baseline: PassFn) -> st.SearchStrategy[GraphCase]:
    """The fresh cases of a gate: graph cases of ``domain``, half of them drawn for the node
    kinds generation draws for the *baseline*, held to the gate's contract (``generation_kinds``;
    a candidate under review is a plain callable that declares none), half of today's mix.
    Each half alone misses a defect the other finds in seconds (docs/benchmark.md, "Time to
    find"): defects in a region's handling show on the owed toggles, defects about tensor
    attributes on the mix's adversarial cases."""
    mix = graph_cases(domain=domain)
    kinds = generation_kinds(baseline)
    return st.one_of(mix, graph_cases(domain=domain, reacts_to=kinds)) if kinds else mix


@functools.cache
def _baseline(spec: str, contract: str | None) -> Pass:
    """The baseline ``spec`` names held to the gate's ``--contract``, loaded once per worker
    process (its cases and its check both need it)."""
    return resolve_pass(spec, contract)[0]


def _given(settings: CampaignSettings) -> str | None:
    """The ``--contract`` the gate's candidate (its settings' pass) was given: the baseline
    is held to it too."""
    return None if settings.identity is None else settings.identity.given


def gate_cases(baseline: str, settings: CampaignSettings) -> st.SearchStrategy[GraphCase]:
    """``fresh_cases`` in a worker process, which loads the baseline by name (``fxfuzz.campaign.worker``)."""
    return fresh_cases(settings.domain, _baseline(baseline, _given(settings)))


def gate_check(baseline: str, blame: Blame, settings: CampaignSettings, both_modes: bool = True) -> ExampleCheck:
    """The judgement of a gate case (a worker process loads it by name, ``fxfuzz.campaign.supervisor``):
    the regressions of the pass under test against ``baseline``, in both grad modes (fresh
    cases) or in the case's own (corpus cases, captured under each mode)."""
    base = _baseline(baseline, _given(settings))
    regressions_of = regressions_both_modes if both_modes else regressions
    return lambda case, candidate: regressions_of(case, candidate, base, blame, settings.stage_share)


def corpus_with(saved: str) -> list[tuple[str, GraphCase]]:
    """The corpus a gate worker judges: the cases serialized in the file ``saved`` (repros of
    earlier runs), then the built-in corpus, captured in the worker itself because the node
    metadata a capture carries (which the interface check compares) is not serialized."""
    with open(saved) as fh:
        return [(name, case_from_dict(data)) for name, data in json.load(fh)] + gate_corpus()


def run_gate_parallel(
    baseline: str,
    saved: Sequence[tuple[str, GraphCase]],
    settings: CampaignSettings,
    *,
    progress: Callable[[int, int, float], None] | None = None,
    log_dir: str | None = None,
    stop: Callable[[], bool] | None = None,
) -> GateResult:
    """``run_gate`` with every case judged in worker processes (``fxfuzz.campaign.supervisor``),
    the candidate the settings' pass (``identity``).

    With two or more ``settings.workers``, fresh cases start with the corpus: one worker judges
    the corpus (the ``saved`` cases, then the built-in one) and then draws fresh cases, the
    others draw fresh cases from the first second. Fresh cases run until ``settings.budget_s``
    (counted from the gate's start) is spent and the corpus is judged, whichever comes later,
    so no core idles while the verdict waits for the corpus. With one worker, the corpus comes
    first and fresh cases get what is left of the budget. The gate stops early once a new
    regression is final (see ``_final_regression``): the verdict cannot change after it.

    As in ``fxfuzz run``, a case that kills a worker or runs past ``settings.example_timeout_s``
    is a crash regression (where the baseline survived it) and a replacement worker goes on
    with the next case. No worker starts after the budget but the one that runs a fatal case
    again; the corpus is judged whole unless a regression ends the gate early or such a death
    past the budget leaves no worker to finish it."""
    gate = _Gate(settings, stop, progress)
    check = f"{__name__}:gate_check"
    fresh_task = Task(
        check, {"baseline": baseline}, strategy=f"{__name__}:gate_cases", strategy_args={"baseline": baseline}
    )
    with tempfile.NamedTemporaryFile("w", prefix="fxfuzz-corpus-", suffix=".json") as fh:
        json.dump([(name, case_to_dict(case)) for name, case in saved], fh)
        fh.flush()
        corpus_task = Task(
            check, {"baseline": baseline, "both_modes": False}, f"{__name__}:corpus_with", {"saved": fh.name}
        )
        corpus_settings = dataclasses.replace(settings, workers=1, max_examples=CampaignSettings.max_examples, db=None)
        corpus_campaign = ParallelCampaign(corpus_settings, corpus_task, log_dir)
        if settings.workers == 1:
            corpus = gate.phase(corpus_campaign)
            gate.corpus_done.set()
            left = settings.budget_s - (time.monotonic() - gate.start)
            if left > 0 and gate.goes_on(corpus):
                gate.phase(ParallelCampaign(dataclasses.replace(settings, budget_s=left), fresh_task, log_dir))
        else:
            corpus_thread = threading.Thread(target=gate.corpus_then_fresh, args=(corpus_campaign, fresh_task, log_dir))
            corpus_thread.start()
            # Fresh cases until the gate says (budget spent and corpus judged, or a final regression).
            along = dataclasses.replace(settings, workers=settings.workers - 1, budget_s=math.inf)
            try:
                gate.phase(ParallelCampaign(along, fresh_task, log_dir, first_log=1), ends=gate.budget_over)
            finally:
                corpus_thread.join()
            gate.raise_from_thread()
    return gate.result()


class _Gate:
    """The phases of one ``run_gate_parallel`` (each a Supervisor, the corpus's in a thread of
    its own with two or more workers) and what they tell each other: the corpus is judged, a
    regression is final, the caller asked to stop."""

    def __init__(
        self,
        settings: CampaignSettings,
        stop: Callable[[], bool] | None,
        progress: Callable[[int, int, float], None] | None,
    ) -> None:
        self.settings, self.user_stop, self.progress = settings, stop or (lambda: False), progress
        self.start = time.monotonic()
        self.corpus_done, self.final = threading.Event(), threading.Event()
        self.corpus = CampaignResult()
        self.fresh: list[CampaignResult] = []
        self.fresh_counts: dict[int, tuple[int, int]] = {}  # per fresh phase: examples, buckets
        self.lock = threading.Lock()
        self.error: BaseException | None = None

    def budget_over(self) -> bool:
        return self.corpus_done.is_set() and time.monotonic() - self.start >= self.settings.budget_s

    def goes_on(self, corpus: CampaignResult) -> bool:
        """Whether fresh cases still have something to add after the corpus: not after an
        interrupt, a final regression, or a worker that could not judge the corpus (or died
        of fxfuzz's own error judging it)."""
        return not (self.user_stop() or self.final.is_set() or corpus.workers.errors or corpus.workers.internal_errors)

    def phase(self, campaign: ParallelCampaign, ends: Callable[[], bool] = lambda: False) -> CampaignResult:
        """Run one Supervisor until its limits, the caller's stop, a final regression (of any
        phase) or ``ends()``; its ``stopped_by`` says which, as the gate reads it."""
        supervisor = Supervisor(campaign)
        listed = campaign.task.examples is not None
        with self.lock:
            if listed:
                self.corpus = supervisor.result
            else:
                self.fresh.append(supervisor.result)
            key = len(self.fresh)

        def stop() -> bool:
            if _final_regression(supervisor.result, self.settings):
                self.final.set()
            return self.user_stop() or self.final.is_set() or ends()

        def counts(examples: int, buckets: int, elapsed: float) -> None:
            with self.lock:
                self.fresh_counts[key] = (examples, buckets)
                if self.progress is not None:
                    totals = [sum(c) for c in zip(*self.fresh_counts.values())]
                    self.progress(totals[0], totals[1], time.monotonic() - self.start)

        result = supervisor.run(None if listed else counts, stop)
        if result.stopped_by is StopReason.INTERRUPTED and not self.user_stop():
            result.stopped_by = StopReason.STOPPED if self.final.is_set() else StopReason.BUDGET
        return result

    def corpus_then_fresh(self, corpus: ParallelCampaign, fresh: Task, log_dir: str | None) -> None:
        """The corpus worker's share: the corpus, then fresh cases for the rest of the budget
        (with no limit on examples: a limit belongs whole to the workers drawing from the start)."""
        try:
            judged = self.phase(corpus)
            self.corpus_done.set()
            left = self.settings.budget_s - (time.monotonic() - self.start)
            if left > 0 and self.goes_on(judged) and self.settings.max_examples == NO_EXAMPLE_LIMIT:
                # The seed of the slot this worker holds: its stream must not repeat the others'.
                seed = worker_seed(self.settings.seed, self.settings.shard, self.settings.workers - 1, 0)
                late = dataclasses.replace(self.settings, workers=1, budget_s=left, seed=seed, replay_saved=False)
                self.phase(ParallelCampaign(late, fresh, log_dir))
        except BaseException as e:  # re-raised in the caller's thread
            self.error = e
            self.corpus_done.set()
            self.final.set()  # ends the other phase at once

    def raise_from_thread(self) -> None:
        if self.error is not None:
            raise self.error

    def result(self) -> GateResult:
        corpus = self.corpus
        merged = CampaignResult(buckets=Buckets(corpus.buckets), stopped_by=corpus.stopped_by)
        merged.workers.add(corpus.workers)
        for r in self.fresh:
            merged.examples += r.examples
            merged.stats.update(r.stats)
            merged.buckets.merge(r.buckets)
            merged.workers.add(r.workers)
            merged.stopped_by = r.stopped_by
        if self.user_stop():
            merged.stopped_by = StopReason.INTERRUPTED
        elif self.final.is_set():
            merged.stopped_by = StopReason.STOPPED
        merged.duration_s = time.monotonic() - self.start
        merged.identity = self.settings.identity
        return GateResult(corpus.examples, corpus.duration_s, merged)


def _final_regression(r: CampaignResult, settings: CampaignSettings) -> bool:
    """Whether a phase holds a new regression that nothing will change: found on a corpus case
    (never shrunk), a worker's death or hang (recorded as it is), or a fresh case whose
    shrinking is over (or off)."""
    return any(
        bid not in settings.known
        and (
            b.source is not None
            or bid in r.minimized
            or settings.max_shrink_s == 0
            or b.finding.kind in _RECORDED_AS_IS
        )
        for bid, b in r.buckets.items()
    )


# The crash kinds the supervisor records itself, from a death: no worker shrinks them.
_RECORDED_AS_IS = ("process_died", "hang")
