"""``verify`` as a table: one row per check, run in table order on one ``Observed`` context.

Each row declares its oracles (the first is the one a ``check_impossible`` names), what it
``needs`` built before it runs (``Needs``), and when it runs: only where the contract judges
internals (``internals``), only where both graphs ran at the traced sizes (``both_ran``), and
again at each other size of a symbolic case (``at_sizes``, where a kind already seen is not
repeated: one defect, one bucket). ``internal_kinds`` are the kinds of a behaviour row that
judge internals all the same (a name, what is saved for backward), dropped where the contract
does not judge internals. Adding a check is one row here and its function.

The contract selects the checks in ``within_contract`` and nowhere else (``fxfuzz.core.contract``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

from fxfuzz.core.case import GraphCase
from fxfuzz.core.contract import PassContract
from fxfuzz.core.internal import InternalError, first_line, raised_by_fxfuzz
from fxfuzz.oracles.bounds import value_bound
from fxfuzz.oracles.cleanup import CleanedUp, check_cleanup
from fxfuzz.oracles.downstream import check_downstream, stages_selected
from fxfuzz.oracles.effects import check_effects
from fxfuzz.oracles.exported import check_exported
from fxfuzz.oracles.finding import Finding, Oracle
from fxfuzz.oracles.idempotence import changes_meaning, second_application
from fxfuzz.oracles.rng import check_rng
from fxfuzz.oracles.semantics import Comparing, Reference, check_on_device, compare_graphs
from fxfuzz.oracles.signature import check_signature
from fxfuzz.oracles.sizes import AtSizes, new_kinds, observe_sizes
from fxfuzz.oracles.structure import check_structure, check_unused_submodules, malformed, malformed_result
from fxfuzz.oracles.timing import step
from torch import fx

# The oracle of the pass's own run (it raised, or returned something else), before any row.
PASS_ORACLE = Oracle.CRASH


class Needs(enum.Flag):
    """What a row reads from the context, built (once per example) before the row runs."""

    NOTHING = 0
    REFERENCE = enum.auto()  # the original graph's runs on the case's inputs
    RESULT = enum.auto()  # the result's runs there, compared with the reference
    OTHER_SIZES = enum.auto()  # both graphs at each other size of a symbolic case
    STAGES = enum.auto()  # the export stages this example goes through (by the stage share)
    DEVICE = enum.auto()  # a device besides CPU


class Observed:
    """One example as the checks see it: the case, the pass and its result, the contract, the
    device, and (built on demand, once) the runs of both graphs at the traced and other sizes,
    their comparison, the clean-ups' modules, the stages selected and the second application."""

    def __init__(
        self,
        case: GraphCase,
        pass_fn: Any,
        gm: fx.GraphModule,
        sig: Any,
        contract: PassContract,
        device: str,
        stage_share: float,
    ) -> None:
        self.case, self.pass_fn, self.gm, self.sig, self.contract, self.device = (
            case,
            pass_fn,
            gm,
            sig,
            contract,
            device,
        )
        self.stage_share = stage_share
        self.labels = input_labels(case)
        self.ref: Reference | None = None
        self.traced: AtSizes | None = None
        self.others: list[AtSizes] = []
        self._sized = False

    def build(self, needs: Needs) -> None:
        """Run what ``needs`` asks for and this example has not run yet, each in its timed step."""
        if needs & (Needs.REFERENCE | Needs.RESULT) and self.ref is None:
            with step("reference runs (original graph)"):
                self.ref = Reference(self.case.gm, self.case.inputs, self.case.ambient_grad, self.labels, "cpu")
        if Needs.RESULT in needs and self.traced is None:
            assert self.ref is not None
            with step("transformed runs and comparison"):
                semantic, got = compare_graphs(self.gm, self.ref, self.comparing)
            self.traced = AtSizes({}, self.ref, got, within_contract(self.contract, SEMANTIC, semantic))
        # A quantized result was calibrated on the case's inputs: values at other sizes, drawn
        # afresh, fall outside the ranges it observed, and its bound does not hold there.
        if Needs.OTHER_SIZES in needs and not self._sized and self.contract.values != "quantized":
            self._sized = True
            with step("runs at other sizes"):
                self.others = observe_sizes(self.case, self.gm, self.labels, self.comparing)

    @property
    def grads_exact(self) -> bool:
        """Derivatives bit for bit, except under refinement: an optimizing pass that merges
        equal nodes changes how autograd rounds the sum of their gradient contributions
        (docs/oracles.md)."""
        return not self.contract.refines

    @cached_property
    def comparing(self) -> Comparing:
        """How the contract has both graphs' runs compared (built after the reference runs:
        a quantized bound reads their magnitudes)."""
        assert self.ref is not None
        bound = value_bound(self.contract, self.case.gm, self.gm, self.ref.run)
        return Comparing(self.grads_exact, bound, self.contract.views, self.contract.identity)

    @property
    def both_ran(self) -> bool:
        return self.traced is not None and self.traced.ok

    @cached_property
    def stages(self) -> tuple[str, ...]:
        # Only where the result means what the original does: a change of meaning is the
        # equivalence oracle's, and every stage would only repeat it.
        assert self.traced is not None
        return (
            stages_selected(self.case.code(), self.case.ambient_grad, self.stage_share)
            if not self.traced.findings
            else ()
        )

    @cached_property
    def cleaned(self) -> CleanedUp:
        return CleanedUp(self.gm, self.case.gm)

    @cached_property
    def second(self) -> tuple[list[Finding], fx.GraphModule | None]:
        """The pass applied to its own output (which it consumes: the idempotence row is last)."""
        return second_application(self.pass_fn, self.gm, self.sig, self.case.ambient_grad)


def input_labels(case: GraphCase) -> list[str]:
    """``input i (name)`` for each input, named as the signature names it."""
    names = [getattr(s.arg, "name", "?") for s in case.signature.input_specs]
    return [f"input {i} ({n})" for i, n in enumerate(names)]


# A row's check: the context, and the sizes to check at (the traced ones, or one other; None
# for a row that needs no runs).
CheckFn = Callable[[Observed, "AtSizes | None"], list[Finding]]


@dataclass(frozen=True)
class Check:
    """One row of the table (module docstring)."""

    name: str
    step: str  # the timed step (``fxfuzz bench``) it counts under
    oracles: tuple[Oracle, ...]
    check: CheckFn
    needs: Needs = Needs.NOTHING
    internals: bool = False
    both_ran: bool = False
    at_sizes: bool = False
    internal_kinds: frozenset[str] = frozenset()

    def runs(self, ctx: Observed) -> bool:
        """Whether this row runs on the example (its needs built)."""
        if self.internals and not ctx.contract.internals:
            return False
        if Needs.DEVICE in self.needs and ctx.device == "cpu":
            return False
        if self.both_ran and not ctx.both_ran:
            return False
        return Needs.STAGES not in self.needs or bool(ctx.stages)


def _semantic(ctx: Observed, at: AtSizes | None) -> list[Finding]:
    """The comparison of both graphs' runs, made while building the context."""
    assert at is not None
    return at.findings


def _effects(ctx: Observed, at: AtSizes | None) -> list[Finding]:
    assert at is not None
    return check_effects(at.ref, at.got, ctx.grads_exact, ctx.comparing.values)


def _rng(ctx: Observed, at: AtSizes | None) -> list[Finding]:
    assert at is not None
    return check_rng(at.ref, at.got)


def _device(ctx: Observed, at: AtSizes | None) -> list[Finding]:
    """Values, gradients and ordered effects on the device, each kind only where CPU did not
    already show it."""
    assert at is not None
    effects = partial(check_effects, grads_exact=ctx.grads_exact)
    shown = {f.kind for f in [*at.findings, *effects(at.ref, at.got)]}
    return check_on_device(ctx.gm, at.ref, at.got, shown, ctx.device, effects)


def _cleanup(ctx: Observed, at: AtSizes | None) -> list[Finding]:
    assert at is not None
    return check_cleanup(ctx.gm, at.got.run, at.ref, ctx.cleaned)


def _downstream(ctx: Observed, at: AtSizes | None) -> list[Finding]:
    assert at is not None
    return check_downstream(
        ctx.gm,
        ctx.sig,
        ctx.case.gm,
        ctx.case.signature,
        at.ref.inputs,
        ctx.case.ambient_grad,
        ctx.stages,
        ctx.grads_exact,
        ctx.comparing.values,
    )


def _idempotence(ctx: Observed, at: AtSizes | None) -> list[Finding]:
    """At the traced sizes, what the second application did wrong regardless of inputs; at
    every size, its result against the first's."""
    assert at is not None
    if not ctx.contract.idempotent:
        return []
    findings, again = ctx.second
    # A pass that rounds rounds again: held to the second result's own bound.
    bound = value_bound(ctx.contract, ctx.case.gm, again, at.ref.run) if again is not None else None
    return (list(findings) if at is ctx.traced else []) + changes_meaning(
        again, at.got.run, at.ref, True if bound is None else bound
    )


def _behaviour(name: str, oracle: Oracle, check: CheckFn) -> Check:
    """A row comparing one more observable of both graphs' runs, at every size, its own step."""
    return Check(name, name, (oracle,), check, Needs.REFERENCE | Needs.RESULT | Needs.OTHER_SIZES, at_sizes=True)


SEMANTIC = Check(
    "equivalence and gradients",
    "transformed runs and comparison",
    (Oracle.EQUIVALENCE, Oracle.GRADIENTS),
    _semantic,
    Needs.REFERENCE | Needs.RESULT | Needs.OTHER_SIZES,
    at_sizes=True,
    internal_kinds=frozenset({"saved_tensors_mismatch"}),
)

CHECKS: tuple[Check, ...] = (
    Check(
        "unused submodules",
        "structure and signature checks",
        (Oracle.STRUCTURE,),
        lambda ctx, at: check_unused_submodules(ctx.gm, ctx.case.gm),
        internals=True,
    ),
    Check(
        "graph invariants",
        "structure and signature checks",
        (Oracle.STRUCTURE,),
        lambda ctx, at: check_structure(ctx.gm, ctx.contract),
    ),
    Check(
        "signature",
        "structure and signature checks",
        (Oracle.SIGNATURE,),
        lambda ctx, at: check_signature(
            ctx.gm, ctx.sig, ctx.case.signature, ctx.case.gm, getattr(ctx.pass_fn, "takes_signature", True)
        ),
        internal_kinds=frozenset({"input_names_mismatch", "output_name_mismatch"}),
    ),
    Check(
        "export's verifier",
        "export checks (verifier on copies)",
        (Oracle.SIGNATURE,),
        lambda ctx, at: check_exported(ctx.gm, ctx.sig, ctx.case.gm, ctx.case.signature, ctx.case.inputs),
        internals=True,
    ),
    SEMANTIC,
    # Every contract: set_grad and autocast promise the meaning plus a form, and the sequence
    # of ordered effects is meaning (docs/oracles.md#effects).
    _behaviour("ordered side effects", Oracle.EFFECTS, _effects),
    # Every contract: a random call deleted, merged or frozen changes what the caller draws next.
    _behaviour("random generator state", Oracle.RNG, _rng),
    Check(
        "device and parity",
        "the same on {device}, and parity",
        (Oracle.EQUIVALENCE, Oracle.GRADIENTS, Oracle.EFFECTS),
        _device,
        Needs.REFERENCE | Needs.RESULT | Needs.DEVICE,
    ),
    Check(
        "downstream clean-ups",
        "downstream clean-ups",
        (Oracle.STRUCTURE,),
        _cleanup,
        Needs.REFERENCE | Needs.RESULT | Needs.OTHER_SIZES,
        both_ran=True,
        at_sizes=True,
    ),
    Check(
        "export stages",
        "export stages (module, decompositions, save/load, unflatten)",
        (Oracle.DOWNSTREAM,),
        _downstream,
        Needs.REFERENCE | Needs.RESULT | Needs.OTHER_SIZES | Needs.STAGES,
        both_ran=True,
        at_sizes=True,
    ),
    # Last: the second application consumes the result.
    Check(
        "idempotence",
        "idempotence (second application)",
        (Oracle.IDEMPOTENCE,),
        _idempotence,
        Needs.REFERENCE | Needs.RESULT | Needs.OTHER_SIZES,
        both_ran=True,
        at_sizes=True,
        internal_kinds=frozenset({"adds_hop"}),
    ),
)


def original_raised(f: Finding) -> bool:
    """Whether ``f`` says only that the result did otherwise where the original raised (a
    forward, a backward, a backward after an in-place update): it succeeded, or raised another
    error. Where the original raises, a refinement may do anything (Alive2's undefined
    behaviour); until 2026-11-27 only succeeding was excused, and the cse row's 840 s campaign
    drew a backward that raised the version-counter error where the original's raised another."""
    original = f.details.get("original")
    return f.kind.endswith("raises_differently") and original not in (None, "succeeded")


def within_contract(contract: PassContract, row: Check, findings: list[Finding]) -> list[Finding]:
    """``findings`` of ``row`` that ``contract`` judges: internals only where it judges them,
    under refinement no finding about what the result did where the original raised, and
    derivatives only where the result is differentiated (``verify`` runs the graphs of a
    contract that says it is not with nothing requiring grad; forward mode needs no such
    flag, so its findings are dropped here)."""
    if not contract.differentiated:
        findings = [f for f in findings if f.oracle != "gradients"]
    if not contract.internals:
        findings = [f for f in findings if f.kind not in row.internal_kinds]
    if contract.refines:
        findings = [f for f in findings if not original_raised(f)]
    return findings


def impossible(ctx: Observed, row: Check, e: Exception) -> list[Finding]:
    """What ``e``, raised while ``row`` ran or its needs were built, says. Raised in torch's or
    the pass's code, the result is too broken for the check to run at all, itself a finding.
    Raised in fxfuzz's own code on a result that is not a graph fxfuzz can read (``malformed``,
    lint included), the result is the pass's defect (``malformed_result``); on one that is, it
    is fxfuzz's bug, raised on as an InternalError."""
    if raised_by_fxfuzz(e):
        why = malformed(ctx.gm, lint=True)
        if why is None:
            raise InternalError(row.name, e) from None
        return [malformed_result(why)]
    oracle = row.oracles[0]
    return [
        Finding(
            oracle,
            "check_impossible",
            f"the {oracle} check could not run on the result: {type(e).__name__}: {first_line(e)}",
            {"exception": type(e).__name__},
        )
    ]


def guarded(ctx: Observed, row: Check, check: Callable[[], list[Finding]]) -> list[Finding]:
    """Run one check; what it raises is ``impossible``'s to judge."""
    try:
        return check()
    except Exception as e:
        return impossible(ctx, row, e)


def _sizes(ctx: Observed, row: Check) -> Iterator[AtSizes]:
    """The other sizes ``row`` runs at: every one, or where it needs both runs, where both ran."""
    return (at for at in ctx.others if at.ok or not row.both_ran)


def run_checks(ctx: Observed) -> list[Finding]:
    """Every row that runs on ``ctx``, in table order: their findings. Where the runs a row
    needs cannot be made, that row says so and no later row needing runs is tried."""
    findings: list[Finding] = []
    known: set[str] = set()
    unbuilt = False
    for row in CHECKS:
        if row.needs and unbuilt:
            continue
        try:
            ctx.build(row.needs)
        except Exception as e:
            findings += within_contract(ctx.contract, row, impossible(ctx, row, e))
            unbuilt = True
            continue
        if not row.runs(ctx):
            continue
        with step(row.step.format(device=ctx.device)):
            seen = within_contract(ctx.contract, row, guarded(ctx, row, partial(row.check, ctx, ctx.traced)))
            findings += seen
            known.update(f.kind for f in seen)
            if row.at_sizes:
                for at in _sizes(ctx, row):
                    findings += new_kinds(
                        at.tagged(within_contract(ctx.contract, row, guarded(ctx, row, partial(row.check, ctx, at)))),
                        known,
                    )
    return findings
