"""Oracles: checks a pass's output against the case it was given. Entry point: ``verify``;
the checks themselves are the table in ``fxfuzz.oracles.checks``."""

from __future__ import annotations

import signal
from typing import Any

from fxfuzz.core.calls import CallerRunRaised, given_inputs
from fxfuzz.core.case import GraphCase
from fxfuzz.core.choices import DEFAULT_STAGE_SHARE, DEVICES
from fxfuzz.core.contract import PassContract, on_form
from fxfuzz.core.inductor import counting_patterns, pass_context
from fxfuzz.core.internal import InternalError, call_out, raised_by_fxfuzz
from fxfuzz.core.passes import PassFn, contract_of
from fxfuzz.oracles.checks import Observed, input_labels, run_checks
from fxfuzz.oracles.crash import crash_finding
from fxfuzz.oracles.equivalence import state_leak
from fxfuzz.oracles.execute import StateChange, pass_isolated, release_frames, run_graph
from fxfuzz.oracles.finding import ORACLES, Finding, Oracle
from fxfuzz.oracles.hop_checks import memoized_hop_checks
from fxfuzz.oracles.structure import malformed, malformed_result
from fxfuzz.oracles.timing import step
from torch import fx
from torch.export.graph_signature import ExportGraphSignature

__all__ = ["DEVICES", "Finding", "ORACLES", "Oracle", "PassContract", "verify", "apply_pass", "input_labels"]


def apply_pass(case: GraphCase, pass_fn: PassFn) -> tuple[Any, Any]:
    """Run the pass on an independent copy of the case under the case's ambient grad mode;
    whatever process state the pass leaves changed (grad mode, autocast, dispatch keys, the
    default dtype, threads, RNG: ``fxfuzz.oracles.execute.pass_isolated``) is put back, so
    it cannot leak into the runs that judge it or into later examples. The Inductor pattern
    entries it applies are counted (``fxfuzz.core.inductor.counting_patterns``)."""
    return _run_pass(case, pass_fn)[0]


def _run_pass(case: GraphCase, pass_fn: PassFn) -> tuple[Any, list[StateChange]]:
    """``apply_pass``'s result, and the process state the pass left changed (put back)."""
    with step("copy of the case"):
        work = case.copy()
    with step("the pass"), pass_isolated(case.ambient_grad) as leaked, counting_patterns():
        result = call_out(pass_fn, work.gm, work.signature)
    return result, leaked


def _blamed_on_pass(e: BaseException) -> bool:
    """Whether ``e``, escaping the pass's call, is the pass's to answer for: any Exception; a
    SystemExit (the pass called ``sys.exit``); a KeyboardInterrupt where no Ctrl-C can reach
    this process (a worker ignores SIGINT), so the pass raised it. Elsewhere a
    KeyboardInterrupt is the user's, and ends the run."""
    if isinstance(e, (Exception, SystemExit)):
        return True
    return isinstance(e, KeyboardInterrupt) and signal.getsignal(signal.SIGINT) is signal.SIG_IGN


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
    ``contract`` (by default the pass's own) selects the checks; one whose result is not
    differentiated has both graphs run as such (``GraphCase.undifferentiated``). Raises ``InternalError``
    where fxfuzz's own code fails: that is never a finding against the pass.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    contract = on_form(contract or contract_of(pass_fn), case.domain)
    if not contract.differentiated:
        case = case.undifferentiated()
    # The graphs run many times below; torch's mutation check of their cond/map calls, traced
    # anew on every call, is computed once per distinct call (fxfuzz.oracles.hop_checks).
    # A pass that calibrates or traces on example inputs, as its real caller does, finds the
    # case's (fxfuzz.core.calls.example_inputs), at each of its calls; on Inductor's forms the
    # pass runs, as in compile_fx, with the graph's fake mode set.
    with memoized_hop_checks(), given_inputs(case.inputs), pass_context(case.domain, case.gm):
        return _verify(case, pass_fn, contract, device, stage_share)


def _verify(case: GraphCase, pass_fn: PassFn, contract: PassContract, device: str, stage_share: float) -> list[Finding]:
    try:
        result, leaked = _run_pass(case, pass_fn)
    except BaseException as e:
        if not _blamed_on_pass(e):
            raise
        if isinstance(e, CallerRunRaised):
            if run_graph(case.gm, case.inputs, case.ambient_grad).error is not None:
                return []  # the caller's own run of the model fails as the graph does: no verdict
            assert e.__cause__ is not None
            e = e.__cause__
        if raised_by_fxfuzz(e):
            raise InternalError("the pass's run", e) from None
        return [crash_finding(release_frames(e))]
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], fx.GraphModule)):
        return [
            Finding("crash", "bad_return", f"the pass returned {type(result).__name__}, not (GraphModule, signature)")
        ]
    gm, sig = result
    if sig is not None and not isinstance(sig, ExportGraphSignature):
        # Checked here, not by each check: what the checks are handed is theirs to trust, and
        # an error on it inside fxfuzz's code would read as fxfuzz's bug.
        return [
            Finding(
                "crash",
                "bad_return",
                f"the pass returned a {type(sig).__name__} as its signature, not an ExportGraphSignature",
            )
        ]
    why = malformed(gm)
    if why is not None:
        return [malformed_result(why)]
    return state_leak(leaked) + run_checks(Observed(case, pass_fn, gm, sig, contract, device, stage_share))
