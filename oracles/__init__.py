"""Oracles: checks a pass's output against the case it was given. Entry point: ``verify``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fxfuzz.core.case import GraphCase
from fxfuzz.core.choices import DEFAULT_STAGE_SHARE, DEVICES
from fxfuzz.core.contract import PassContract
from fxfuzz.core.passes import PassFn, contract_of
from fxfuzz.oracles.crash import crash_finding
from fxfuzz.oracles.downstream import CleanedUp, check_downstream
from fxfuzz.oracles.execute import Run, isolated, release_frames
from fxfuzz.oracles.exported import check_exported
from fxfuzz.oracles.finding import ORACLES, Finding
from fxfuzz.oracles.hop_checks import memoized_hop_checks
from fxfuzz.oracles.idempotence import changes_meaning, second_application
from fxfuzz.oracles.semantics import Reference, check_on_device, compare_graphs
from fxfuzz.oracles.signature import check_signature
from fxfuzz.oracles.sizes import AtSizes, new_kinds, observe_sizes
from fxfuzz.oracles.stages import check_stages, stages_selected
from fxfuzz.oracles.structure import check_structure
from fxfuzz.oracles.timing import step
from torch import fx

__all__ = ["DEVICES", "Finding", "ORACLES", "PassContract", "verify", "apply_pass"]


def apply_pass(case: GraphCase, pass_fn: PassFn) -> tuple[Any, Any]:
    """Run the pass on an independent copy of the case under the case's ambient grad mode;
    whatever process state the pass leaves changed (grad mode, autocast, dispatch keys) is
    put back, so it cannot leak into the runs that judge it or into later examples."""
    with step("copy of the case"):
        work = case.copy()
    with step("the pass"), isolated(case.ambient_grad):
        return pass_fn(work.gm, work.signature)


def input_labels(case: GraphCase) -> list[str]:
    """``input i (name)`` for each input, named as the signature names it."""
    names = [getattr(s.arg, "name", "?") for s in case.signature.input_specs]
    return [f"input {i} ({n})" for i, n in enumerate(names)]


def _guarded(oracle: str, check: Callable[[], list[Finding]]) -> list[Finding]:
    """Run one check; a result too broken for the check to run at all is itself a finding."""
    try:
        return check()
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else ""
        return [
            Finding(
                oracle,
                "check_impossible",
                f"the {oracle} check could not run on the result: {type(e).__name__}: {first}",
                {"exception": type(e).__name__},
            )
        ]


def verify(
    case: GraphCase,
    pass_fn: PassFn,
    contract: PassContract | None = None,
    device: str = "cpu",
    stage_share: float = DEFAULT_STAGE_SHARE,
) -> list[Finding]:
    """Run ``pass_fn`` on a copy of ``case`` and return every check that failed.

    The original and the transformed graph each execute on their own copies of the inputs,
    under the ambient grad mode the pass ran in, on CPU; with ``device="cuda"`` on CUDA too,
    plus CPU-against-CUDA parity. A deterministic ``stage_share`` of cases (0 to 1) also goes
    through torch.export's stages: they cost about ten times the rest of an example
    (docs/oracles.md). The transformed graph is consumed by the last check.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    # The graphs run many times below; torch's mutation check of their cond/map calls, traced
    # anew on every call, is computed once per distinct call (fxfuzz.oracles.hop_checks).
    with memoized_hop_checks():
        return _verify(case, pass_fn, contract or contract_of(pass_fn), device, stage_share)


def _verify(case: GraphCase, pass_fn: PassFn, contract: PassContract, device: str, stage_share: float) -> list[Finding]:
    try:
        result = apply_pass(case, pass_fn)
    except Exception as e:
        return [crash_finding(release_frames(e))]
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], fx.GraphModule)):
        return [Finding("crash", "bad_return", f"the pass returned {type(result).__name__}, not (GraphModule, signature)")]
    gm, sig = result
    labels = input_labels(case)
    with step("structure and signature checks"):
        findings = _guarded("structure", lambda: check_structure(gm, contract, case.gm))
        findings += _guarded("signature", lambda: check_signature(gm, sig, case.signature, case.gm))
    with step("export checks (verifier on copies)"):
        findings += _guarded("signature", lambda: check_exported(gm, sig, case.gm, case.signature, case.inputs))
    with step("reference runs (original graph)"):
        ref = Reference(case.gm, case.inputs, case.ambient_grad, labels, "cpu")
    with step("transformed runs and comparison"):
        semantic, got = compare_graphs(gm, ref)
    findings += semantic
    known = {f.kind for f in findings}
    with step("runs at other sizes"):
        others = observe_sizes(case, gm, labels)
    for at in others:
        findings += new_kinds(at.tagged(at.findings), known)
    if device != "cpu":
        with step(f"the same on {device}, and parity"):
            findings += check_on_device(gm, ref, got, {f.kind for f in semantic}, device)
    if ref.run.ok and got.run.ok:
        ok = [at for at in others if at.ok]
        with step("downstream clean-ups"):
            cleaned = CleanedUp(gm, ref.gm)
            findings += _guarded("structure", lambda: check_downstream(gm, got.run, ref, cleaned))
            for at in ok:
                findings += new_kinds(
                    at.tagged(_guarded("structure", lambda: check_downstream(gm, at.got.run, at.ref, cleaned))), known
                )
        # Only where the result means what the original does: a change of meaning is the
        # equivalence oracle's, and every stage would only repeat it.
        stages = stages_selected(case.code(), case.ambient_grad, stage_share) if not semantic else ()
        if stages:
            with step("export stages (module, decompositions, save/load, unflatten)"):
                traced = _guarded(
                    "downstream", lambda: check_stages(gm, sig, case.gm, case.signature, case.inputs, case.ambient_grad, stages)
                )
                findings += traced
                known.update(f.kind for f in traced)
                # The stages' modules at the other sizes too: a program specialized by the pass
                # (or by a stage, on the result only) shows there.
                for at in ok:
                    findings += new_kinds(
                        at.tagged(
                            _guarded(
                                "downstream",
                                lambda: check_stages(gm, sig, case.gm, case.signature, at.ref.inputs, case.ambient_grad, stages),
                            )
                        ),
                        known,
                    )
        with step("idempotence (second application)"):
            findings += _guarded("idempotence", lambda: _idempotence(pass_fn, gm, sig, got.run, ref, ok, known))
    return findings


def _idempotence(pass_fn: PassFn, gm: fx.GraphModule, sig: Any, first: Run, ref: Reference, others: list[AtSizes], known: set[str]) -> list[Finding]:
    """The pass applied to its own output once; the result run at the traced sizes and at
    each of ``others``."""
    findings, again = second_application(pass_fn, gm, sig, ref.ambient_grad)
    findings += changes_meaning(again, first, ref)
    known.update(f.kind for f in findings)
    for at in others:
        findings += new_kinds(at.tagged(changes_meaning(again, at.got.run, at.ref)), known)
    return findings
