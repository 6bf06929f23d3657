"""Gate a pass change: run a candidate pass and a baseline pass on the same cases, and report
every regression.

A regression on a case is, per oracle family: the baseline passes the oracle and the candidate
fails it; or both fail it and the two transformed graphs disagree with each other (run on the
same inputs and compared like the equivalence and gradient oracles compare). A candidate that
passes an oracle the baseline fails is a fix, never a regression. Beyond behaviour, the
candidate's graph must show its consumers what the baseline's shows: the same signature specs
(names included) and the same metadata keys on each kind of node.

The cases are, in order: the regression corpus (saved cases of earlier campaigns, then the
built-in modules of ``fxfuzz.strategies.corpus`` and one with a pytree calling convention), then fresh
Hypothesis cases for the budget (of the export domain, the adversarial one, or both), each
judged under both ambient grad modes so that a regression shrinks like any campaign finding.
``run_gate`` judges in this process; ``run_gate_parallel`` (``fxfuzz gate``) judges every case in
worker processes, so a case that kills the process or hangs is a crash regression.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from fxfuzz.campaign.engine import (
    Blame,
    Bucket,
    CampaignResult,
    Check,
    Hooks,
    Progress,
    StopReason,
    Subject,
    bucket_id,
    run_campaign,
    run_examples,
)
from fxfuzz.campaign.protocol import Task
from fxfuzz.campaign.supervisor import ParallelCampaign, ParallelResult, run_parallel, to_campaign_result
from fxfuzz.core.case import GraphCase, copy_graph_module
from fxfuzz.core.choices import DEFAULT_STAGE_SHARE
from fxfuzz.core.contract import contract_option
from fxfuzz.core.passes import PassFn, contract_of, load_pass
from fxfuzz.core.serialize import case_from_dict, case_to_dict, target_name
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.oracles import Finding, input_labels, verify
from fxfuzz.oracles.semantics import Reference, compare_graphs
from fxfuzz.strategies.corpus import corpus_cases
from hypothesis.database import ExampleDatabase
from torch import fx

# The oracles whose checks compare two executions, and so can compare two transformed graphs.
_RUN_ORACLES = ("equivalence", "gradients")
_BEHAVIOUR = {"crash", "equivalence", "gradients"}


@dataclass
class Judged:
    """One pass on one case: its findings and, when it did not crash, what it returned."""

    findings: list[Finding]
    gm: fx.GraphModule | None
    interface: Interface | None = None


@dataclass(frozen=True)
class Interface:
    """What a transformed graph shows its consumers beyond behaviour: the signature's specs,
    and which metadata keys each kind of node carries (export's later stages read them)."""

    specs: tuple[tuple[str, ...], ...]
    meta: tuple[tuple[str, tuple[str, ...], int], ...]

    @staticmethod
    def of(gm: fx.GraphModule, sig: object) -> Interface:
        specs = tuple(
            (str(s.kind), str(getattr(s.arg, "name", s.arg)), str(s.target))
            for s in [*getattr(sig, "input_specs", []), *getattr(sig, "output_specs", [])]
        )
        meta = Counter(
            (target_name(n.target) if n.op == "call_function" else n.op, tuple(sorted(n.meta)))
            for m in gm.modules()
            if isinstance(m, fx.GraphModule)
            for n in m.graph.nodes
        )
        return Interface(specs, tuple(sorted((k, keys, c) for (k, keys), c in meta.items())))


def interface_differences(candidate: Interface, baseline: Interface, compare_specs: bool) -> list[Finding]:
    """The candidate's signature specs (unless the candidate fixed the baseline's signature)
    and node metadata keys against the baseline's."""
    found = []
    if compare_specs and candidate.specs != baseline.specs:
        diff = [f"{b} became {c}" for b, c in zip(baseline.specs, candidate.specs) if b != c][:3]
        found.append(Finding("signature", "vs_baseline_signature_differs", f"the signature differs from the baseline's: {diff}"))
    if candidate.meta != baseline.meta:
        keys = sorted(set(baseline.meta) ^ set(candidate.meta))[:3]
        found.append(Finding("structure", "vs_baseline_metadata_differs", f"node metadata keys differ from the baseline's: {keys}"))
    return found


def judge(case: GraphCase, pass_fn: PassFn, stage_share: float = DEFAULT_STAGE_SHARE) -> Judged:
    """``fxfuzz.oracles.verify`` of ``pass_fn`` on ``case`` (``stage_share`` of cases through
    export's stages), keeping the first graph the pass returned."""
    outputs: list[tuple[fx.GraphModule, Interface]] = []

    def recording(gm: object, sig: object) -> tuple[object, object]:
        out = pass_fn(gm, sig)
        if not outputs and isinstance(out, tuple) and out and isinstance(out[0], fx.GraphModule):
            # Copies: later checks (idempotence) may run passes on what verify holds.
            outputs.append((copy_graph_module(out[0]), Interface.of(out[0], out[1])))
        return out

    findings = verify(case, recording, contract_of(pass_fn), stage_share=stage_share)
    return Judged(findings, *outputs[0]) if outputs else Judged(findings, None)


def disagreements(case: GraphCase, candidate_gm: fx.GraphModule, baseline_gm: fx.GraphModule) -> list[Finding]:
    """The two transformed graphs compared as the oracles compare original and transformed
    (values, autograd flags, state, gradients, tangents), the baseline's taken as reference."""
    ref = Reference(baseline_gm, case.inputs, case.ambient_grad, input_labels(case), "cpu")
    found, _ = compare_graphs(candidate_gm, ref)
    return [
        Finding(f.oracle, f"vs_baseline_{f.kind}", f"candidate and baseline disagree: {f.message}", f.details)
        for f in found
    ]


def _in_process(on_candidate: bool) -> None:
    """The ``Blame`` of a gate in one process: a crash there ends the caller, so nobody listens."""


def regressions(
    case: GraphCase, candidate: PassFn, baseline: PassFn, blame: Blame = _in_process, stage_share: float = DEFAULT_STAGE_SHARE
) -> list[Finding]:
    """What the candidate breaks on ``case`` that the baseline does not (see the module doc),
    each judged with ``stage_share`` of cases through export's stages.

    The baseline runs first; ``blame`` hears that a death of the process is the candidate's
    only once the baseline has survived the case without crashing (if both crash, the
    candidate's crash is no regression)."""
    blame(False)
    base = judge(case, baseline, stage_share)
    failed_by_baseline = {f.oracle for f in base.findings}
    blame("crash" not in failed_by_baseline)
    cand = judge(case, candidate, stage_share)
    failed_by_candidate = {f.oracle for f in cand.findings}
    found = [f for f in cand.findings if f.oracle not in failed_by_baseline]
    both_failed = failed_by_baseline & failed_by_candidate & set(_RUN_ORACLES)
    if both_failed and cand.gm is not None and base.gm is not None:
        found += [f for f in disagreements(case, cand.gm, base.gm) if f.oracle in both_failed]
    # Where the baseline misbehaves a correct candidate's graph must differ from it, so the
    # interface is compared only where the baseline's behaviour is a trustworthy reference.
    if cand.interface is not None and base.interface is not None and not failed_by_baseline & _BEHAVIOUR:
        fixed_signature = "signature" in failed_by_baseline - failed_by_candidate
        found += interface_differences(cand.interface, base.interface, not fixed_signature)
    return found


def with_ambient(case: GraphCase, ambient: bool) -> GraphCase:
    """The same case with the pass (and both graphs) run under ``ambient``."""
    return case if case.ambient_grad == ambient else dataclasses.replace(case, ambient_grad=ambient)


def regressions_both_modes(
    case: GraphCase, candidate: PassFn, baseline: PassFn, blame: Blame = _in_process, stage_share: float = DEFAULT_STAGE_SHARE
) -> list[Finding]:
    """``regressions`` under the case's ambient grad mode, then under the other one; each
    finding's details say which mode showed it."""
    found = []
    for ambient in (case.ambient_grad, not case.ambient_grad):
        for f in regressions(with_ambient(case, ambient), candidate, baseline, blame, stage_share):
            found.append(dataclasses.replace(f, details={**f.details, "ambient_grad": ambient}))
    return found


def case_of(bucket: Bucket) -> GraphCase:
    """The bucket's case under the ambient grad mode that showed its regression."""
    case = bucket.case
    assert isinstance(case, GraphCase)  # the gate judges graph cases only
    ambient = bucket.finding.details.get("ambient_grad", case.ambient_grad)
    return with_ambient(case, bool(ambient))


@dataclass
class GateResult:
    """Regressions found on the corpus and on fresh cases, bucketed like campaign findings
    (a bucket's ``source`` names the corpus case that showed it; None: a fresh case)."""

    corpus_cases: int = 0
    corpus_s: float = 0.0
    campaign: CampaignResult = field(default_factory=CampaignResult)
    # What the worker processes of run_gate_parallel met (supervisor.ParallelResult's).
    restarts: int = 0
    worker_errors: list[str] = field(default_factory=list)
    # Cases a worker died on where the candidate is not to blame: the baseline killed the
    # process, or crashed on the case itself (then the candidate's crash is no regression).
    excused_deaths: int = 0

    @property
    def buckets(self) -> dict[str, Bucket]:
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
    check: Check = lambda case, cand: regressions(case, cand, baseline, stage_share=stage_share)
    judged = run_examples(candidate, corpus, check, Hooks(stop=stop, on_bucket=on_regression))
    return GateResult(judged.examples, judged.duration_s, CampaignResult(buckets=judged.buckets))


def add_fresh(result: GateResult, fresh: CampaignResult) -> None:
    """Merge the fresh cases' campaign into ``result``: corpus buckets keep their first case
    and gain the fresh counts."""
    buckets = result.campaign.buckets
    for bid, b in fresh.buckets.items():
        if bid in buckets:
            buckets[bid].count += b.count
        else:
            buckets[bid] = b
    fresh.buckets = buckets
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
                    on_regression(Bucket(bucket_id(f), f, case, 1))
        return found

    remaining = settings.budget_s - result.corpus_s
    if remaining > 0 and not (stop is not None and stop()):
        fresh = run_campaign(
            candidate,
            dataclasses.replace(settings, budget_s=remaining),
            database=database,
            hooks=Hooks(progress, stop),
            subject=Subject(check=check),
        )
        add_fresh(result, fresh)
    result.campaign.duration_s = time.monotonic() - start
    return result


def gate_check(baseline: str, blame: Blame, settings: CampaignSettings, both_modes: bool = True) -> Check:
    """The judgement of a gate case (a worker process loads it by name, ``fxfuzz.campaign.supervisor``):
    the regressions of the pass under test against ``baseline``, in both grad modes (fresh
    cases) or in the case's own (corpus cases, captured under each mode)."""
    base = load_pass(baseline, contract_option(settings.contract))
    judged = regressions_both_modes if both_modes else regressions
    return lambda case, candidate: judged(case, candidate, base, blame, settings.stage_share)


def corpus_with(saved: str) -> list[tuple[str, GraphCase]]:
    """The corpus a gate worker judges: the cases serialized in the file ``saved`` (repros of
    earlier runs), then the built-in corpus, captured in the worker itself because the node
    metadata a capture carries (which the interface check compares) is not serialized."""
    with open(saved) as fh:
        return [(name, case_from_dict(data)) for name, data in json.load(fh)] + gate_corpus()


def run_gate_parallel(
    candidate: str,
    baseline: str,
    saved: Sequence[tuple[str, GraphCase]],
    settings: CampaignSettings,
    *,
    progress: Callable[[int, int, float], None] | None = None,
    log_dir: str | None = None,
    stop: Callable[[], bool] | None = None,
) -> GateResult:
    """``run_gate`` with every case judged in worker processes (``fxfuzz.campaign.supervisor``):
    first the corpus (the ``saved`` cases, then the built-in one) in one worker, then the fresh
    cases in ``settings.workers``, for what is left of ``settings.budget_s``.

    As in ``fxfuzz run``, a case that kills a worker or runs past ``settings.example_timeout_s``
    is a crash regression (where the baseline survived it) and a replacement worker goes on
    with the next case. No worker starts after the budget but the one that runs a fatal case
    again, so the gate ends within about the budget plus twice the example timeout and a
    worker's start-up; the corpus is judged whole unless such a death past the budget leaves
    no worker to finish it."""
    start = time.monotonic()
    check = f"{__name__}:gate_check"
    with tempfile.NamedTemporaryFile("w", prefix="fxfuzz-corpus-", suffix=".json") as fh:
        json.dump([(name, case_to_dict(case)) for name, case in saved], fh)
        fh.flush()
        task = Task(check, {"baseline": baseline, "both_modes": False}, f"{__name__}:corpus_with", {"saved": fh.name})
        corpus_settings = dataclasses.replace(settings, workers=1, max_examples=CampaignSettings.max_examples, db=None)
        corpus = run_parallel(ParallelCampaign(candidate, corpus_settings, task, log_dir), stop=stop)
    judged = CampaignResult(buckets=to_campaign_result(corpus).buckets, stopped_by=corpus.stopped_by)
    result = GateResult(corpus.examples, corpus.duration_s, judged)
    phases: list[ParallelResult] = [corpus]
    remaining = settings.budget_s - (time.monotonic() - start)
    # After an interrupt, or a worker that could not judge the corpus, there is nothing to add.
    if remaining > 0 and corpus.stopped_by != StopReason.INTERRUPTED and not corpus.worker_errors:
        fresh = ParallelCampaign(candidate, dataclasses.replace(settings, budget_s=remaining), Task(check, {"baseline": baseline}), log_dir)
        phases.append(run_parallel(fresh, progress, stop))
        add_fresh(result, to_campaign_result(phases[-1]))
    result.restarts = sum(p.restarts for p in phases)
    result.worker_errors = [e for p in phases for e in p.worker_errors]
    result.excused_deaths = sum(p.excused_deaths for p in phases)
    result.campaign.duration_s = time.monotonic() - start
    return result


# ---------------------------------------------------------------------------- the command


def with_pytree_convention(case: GraphCase) -> GraphCase:
    """A copy of ``case`` whose graph carries a pytree calling convention, as graphs reach a
    pass from callers other than torch.export (``make_fx(..., pre_dispatch=True)`` on
    structured arguments; export itself installs the convention only after its passes).
    Inputs stay flat, since the oracles call graphs with flat inputs; outputs become a dict."""
    import torch.utils._pytree as pytree
    from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo

    out = case.copy()
    names = [n.name for n in out.gm.graph.nodes if n.op == "placeholder"]
    results = out.gm.graph.output_node().args[0]
    in_spec = pytree.tree_flatten((tuple(names), {}))[1]
    out_spec = pytree.tree_flatten({f"out{i}": 0 for i in range(len(cast(Sequence[Any], results)))})[1]  # export outputs a tuple
    out.gm.graph._codegen = _PyTreeCodeGen(_PyTreeInfo(names, in_spec, out_spec))
    out.gm.recompile()
    return out


# The built-in module whose capture also runs with a pytree calling convention: two outputs.
_CONVENTION_MODULE = "two_outputs_from_no_grad"


def gate_corpus() -> list[tuple[str, GraphCase]]:
    """The built-in regression corpus: every corpus module captured under both grad modes,
    then one of them again with a pytree calling convention, which the pass must keep (no
    capture has one, so without it nothing tests that the split graph keeps the codegen)."""
    cases = corpus_cases()
    return cases + [
        (f"{name}[pytree]", with_pytree_convention(case)) for name, case in cases if name.startswith(_CONVENTION_MODULE + "[")
    ]


