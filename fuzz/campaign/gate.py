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
judged under both ambient grad modes so that a regression shrinks like any campaign finding;
``run_gate_parallel`` judges the fresh cases in worker processes.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fxfuzz.campaign.engine import Bucket, CampaignResult, Check, Progress, bucket_id, run_campaign
from fxfuzz.campaign.supervisor import CampaignOptions, run_parallel, to_campaign_result
from fxfuzz.core.case import GraphCase, copy_graph_module
from fxfuzz.core.passes import PassFn, contract_of, load_pass
from fxfuzz.core.serialize import target_name
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
        diff = sorted(set(baseline.meta) ^ set(candidate.meta))[:3]
        found.append(Finding("structure", "vs_baseline_metadata_differs", f"node metadata keys differ from the baseline's: {diff}"))
    return found


def judge(case: GraphCase, pass_fn: PassFn) -> Judged:
    """``fxfuzz.oracles.verify`` of ``pass_fn`` on ``case``, keeping the first graph the pass returned."""
    outputs: list[tuple[object, object]] = []

    def recording(gm: object, sig: object) -> tuple[object, object]:
        out = pass_fn(gm, sig)
        if not outputs and isinstance(out, tuple) and out and isinstance(out[0], fx.GraphModule):
            # Copies: later checks (idempotence) may run passes on what verify holds.
            outputs.append((copy_graph_module(out[0]), Interface.of(out[0], out[1])))
        return out

    findings = verify(case, recording, contract_of(pass_fn))
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


def regressions(case: GraphCase, candidate: PassFn, baseline: PassFn) -> list[Finding]:
    """What the candidate breaks on ``case`` that the baseline does not (see the module doc)."""
    cand, base = judge(case, candidate), judge(case, baseline)
    failed_by_baseline = {f.oracle for f in base.findings}
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


def regressions_both_modes(case: GraphCase, candidate: PassFn, baseline: PassFn) -> list[Finding]:
    """``regressions`` under the case's ambient grad mode, then under the other one; each
    finding's details say which mode showed it."""
    found = []
    for ambient in (case.ambient_grad, not case.ambient_grad):
        for f in regressions(with_ambient(case, ambient), candidate, baseline):
            found.append(dataclasses.replace(f, details={**f.details, "ambient_grad": ambient}))
    return found


def case_of(bucket: Bucket) -> GraphCase:
    """The bucket's case under the ambient grad mode that showed its regression."""
    ambient = bucket.finding.details.get("ambient_grad", bucket.case.ambient_grad)
    return with_ambient(bucket.case, bool(ambient))  # type: ignore[arg-type]


@dataclass
class GateResult:
    """Regressions found on the corpus and on fresh cases, bucketed like campaign findings."""

    corpus_cases: int = 0
    corpus_s: float = 0.0
    campaign: CampaignResult = field(default_factory=CampaignResult)
    # bucket id -> the corpus case name that showed it first
    corpus_sources: dict[str, str] = field(default_factory=dict)

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
) -> GateResult:
    """Judge ``candidate`` against ``baseline`` on every corpus case, in this process."""
    start = time.monotonic()
    result = GateResult()
    buckets = result.campaign.buckets
    for name, case in corpus:
        result.corpus_cases += 1
        for f in regressions(case, candidate, baseline):
            bid = bucket_id(f)
            if bid in buckets:
                buckets[bid].count += 1
                continue
            buckets[bid] = Bucket(bid, f, case, 1)
            result.corpus_sources[bid] = name
            if on_regression:
                on_regression(buckets[bid])
    result.corpus_s = time.monotonic() - start
    return result


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
    *,
    budget_s: float = 60.0,
    max_examples: int = 1_000_000,
    seed_: int = 0,
    domain: str = "export",
    database: ExampleDatabase | None = None,
    progress: Progress | None = None,
    on_regression: Callable[[Bucket], None] | None = None,
) -> GateResult:
    """Judge ``candidate`` against ``baseline`` on every corpus case, then on fresh cases of
    ``domain`` until ``budget_s`` seconds (corpus time included) or ``max_examples`` fresh
    cases are spent.

    ``on_regression`` sees each new bucket as it appears (and may raise StopGate).
    """
    start = time.monotonic()
    result = judge_corpus(candidate, baseline, corpus, on_regression)
    buckets = result.campaign.buckets

    def check(case: GraphCase, cand: PassFn) -> list[Finding]:
        found = regressions_both_modes(case, cand, baseline)
        if on_regression:
            for f in found:
                if bucket_id(f) not in buckets:
                    on_regression(Bucket(bucket_id(f), f, case, 1))
        return found

    remaining = budget_s - result.corpus_s
    if remaining > 0:
        fresh = run_campaign(
            candidate,
            budget_s=remaining,
            max_examples=max_examples,
            seed_=seed_,
            domain=domain,
            database=database,
            progress=progress,
            check=check,
        )
        add_fresh(result, fresh)
    result.campaign.duration_s = time.monotonic() - start
    return result


def gate_check(baseline: str) -> Check:
    """The fresh-case judgement of ``run_gate`` for a worker process (``fxfuzz.campaign.supervisor`` loads
    it by name): the regressions of the worker's pass against ``baseline``, in both grad modes."""
    base = load_pass(baseline)
    return lambda case, candidate: regressions_both_modes(case, candidate, base)


def run_gate_parallel(
    candidate: str,
    baseline: str,
    corpus: Iterable[tuple[str, GraphCase]],
    *,
    workers: int,
    budget_s: float = 60.0,
    max_examples: int = 1_000_000,
    seed_: int = 0,
    domain: str = "export",
    progress: Callable[[int, int, float], None] | None = None,
    log_dir: str | None = None,
) -> GateResult:
    """``run_gate`` with the fresh cases judged in ``workers`` processes (``fxfuzz.campaign.supervisor``):
    the corpus in this process, then each worker its share of the fresh cases, with the
    regressions judged as ``run_gate`` judges them. As in ``fxfuzz run --workers``, a case
    that kills a worker or hangs is a crash regression instead of the end of the gate."""
    start = time.monotonic()
    result = judge_corpus(load_pass(candidate), load_pass(baseline), corpus)
    remaining = budget_s - result.corpus_s
    if remaining > 0:
        opts = CampaignOptions(
            pass_spec=candidate,
            budget_s=remaining,
            max_examples=max_examples,
            seed=seed_,
            domain=domain,
            workers=workers,
            check=f"{__name__}:gate_check",
            check_args={"baseline": baseline},
            log_dir=log_dir,
        )
        add_fresh(result, to_campaign_result(run_parallel(opts, progress)))
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
    out_spec = pytree.tree_flatten({f"out{i}": 0 for i in range(len(results))})[1]
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


