"""The differential oracle: a candidate pass against a baseline pass on the same case.

A regression on a case is, per oracle family: the baseline passes the oracle and the candidate
fails it; or both fail it and the two transformed graphs disagree with each other (run on the
same inputs and compared like the equivalence and gradient oracles compare). A candidate that
passes an oracle the baseline fails is a fix, never a regression. Beyond behaviour, the
candidate's graph must show its consumers what the baseline's shows: the same signature specs
(names included) and the same metadata keys on each kind of node. ``fxfuzz.campaign.gate``
runs this oracle over a corpus and fresh cases.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from fxfuzz.core.case import GraphCase, copy_graph_module
from fxfuzz.core.choices import DEFAULT_STAGE_SHARE
from fxfuzz.core.internal import call_out
from fxfuzz.core.passes import PassFn, contract_of
from fxfuzz.core.serialize import target_name
from fxfuzz.oracles import input_labels, verify
from fxfuzz.oracles.effects import check_effects
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.rng import check_rng
from fxfuzz.oracles.semantics import Reference, compare_graphs
from torch import fx

# The oracles whose checks compare two executions, and so can compare two transformed graphs.
_RUN_ORACLES = ("equivalence", "gradients", "effects", "rng")
_BEHAVIOUR = {"crash", "equivalence", "gradients", "effects", "rng"}


@dataclass
class Verified:
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
        found.append(
            Finding("signature", "vs_baseline_signature_differs", f"the signature differs from the baseline's: {diff}")
        )
    if candidate.meta != baseline.meta:
        keys = sorted(set(baseline.meta) ^ set(candidate.meta))[:3]
        found.append(
            Finding(
                "structure", "vs_baseline_metadata_differs", f"node metadata keys differ from the baseline's: {keys}"
            )
        )
    return found


def verify_keeping_output(case: GraphCase, pass_fn: PassFn, stage_share: float = DEFAULT_STAGE_SHARE) -> Verified:
    """``fxfuzz.oracles.verify`` of ``pass_fn`` on ``case`` (``stage_share`` of cases through
    export's stages), keeping the first graph the pass returned."""
    outputs: list[tuple[fx.GraphModule, Interface]] = []

    def recording(gm: object, sig: object) -> tuple[object, object]:
        out = call_out(pass_fn, gm, sig)
        if not outputs and isinstance(out, tuple) and out and isinstance(out[0], fx.GraphModule):
            # Copies: later checks (idempotence) may run passes on what verify holds.
            outputs.append((copy_graph_module(out[0]), Interface.of(out[0], out[1])))
        return out

    findings = verify(case, recording, contract_of(pass_fn), stage_share=stage_share)
    return Verified(findings, *outputs[0]) if outputs else Verified(findings, None)


def disagreements(case: GraphCase, candidate_gm: fx.GraphModule, baseline_gm: fx.GraphModule) -> list[Finding]:
    """The two transformed graphs compared as the oracles compare original and transformed
    (values, autograd flags, state, gradients, tangents, ordered effects, the random
    generator's state), the baseline's
    taken as reference."""
    ref = Reference(baseline_gm, case.inputs, case.ambient_grad, input_labels(case), "cpu")
    found, got = compare_graphs(candidate_gm, ref)
    found += check_effects(ref, got, grads_exact=True) + check_rng(ref, got)
    return [
        Finding(f.oracle, f"vs_baseline_{f.kind}", f"candidate and baseline disagree: {f.message}", f.details)
        for f in found
    ]


# Told by a check, in a worker process, whether a death of the process from now on is the
# pass's (True, the default at each example's start) or not (the gate's baseline is running).
Blame = Callable[[bool], None]


def _in_process(on_candidate: bool) -> None:
    """The ``Blame`` of a gate in one process: a crash there ends the caller, so nobody listens."""


def regressions(
    case: GraphCase,
    candidate: PassFn,
    baseline: PassFn,
    blame: Blame = _in_process,
    stage_share: float = DEFAULT_STAGE_SHARE,
) -> list[Finding]:
    """What the candidate breaks on ``case`` that the baseline does not (see the module doc),
    each judged with ``stage_share`` of cases through export's stages.

    The baseline runs first; ``blame`` hears that a death of the process is the candidate's
    only once the baseline has survived the case without crashing (if both crash, the
    candidate's crash is no regression)."""
    blame(False)
    base = verify_keeping_output(case, baseline, stage_share)
    failed_by_baseline = {f.oracle for f in base.findings}
    blame("crash" not in failed_by_baseline)
    cand = verify_keeping_output(case, candidate, stage_share)
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
    case: GraphCase,
    candidate: PassFn,
    baseline: PassFn,
    blame: Blame = _in_process,
    stage_share: float = DEFAULT_STAGE_SHARE,
) -> list[Finding]:
    """``regressions`` under the case's ambient grad mode, then under the other one; each
    finding's details say which mode showed it."""
    found = []
    for ambient in (case.ambient_grad, not case.ambient_grad):
        for f in regressions(with_ambient(case, ambient), candidate, baseline, blame, stage_share):
            found.append(dataclasses.replace(f, details={**f.details, "ambient_grad": ambient}))
    return found
