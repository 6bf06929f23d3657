"""Ordered side effects: what each execution of a graph did through ``fxfuzz::logged``, an
operator registered with an ORDERED effect (``fxfuzz.core.custom_ops``), call by call.

Every execution records its own log (``fxfuzz.oracles.execute.effects_logged``): the forward,
the forward-mode AD run, the backward, the backward with ``create_graph`` and the double
backward. Each log of the result is compared with the original's log of the same kind of
execution: the same number of effects, in the same order, each seeing the same value
(bitwise on CPU, as outputs are; for the derivative executions as derivatives are compared).
A log is compared only where that execution succeeded on both sides, as the inputs' state
after the call is: a raise difference is the equivalence and gradients oracles' to report,
and under refinement a result may do anything where the original raised. The checks that
run a graph again (a rerun, the clean-ups, a second application) compare its forward log too
(``rerun_differences``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from fxfuzz.oracles.equivalence import check_equivalence
from fxfuzz.oracles.execute import Run
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.semantics import Observation, Reference
from fxfuzz.oracles.tolerance import Exact, same_values

Log = list[torch.Tensor]

# Each kind of execution, and its log in an observation (None where that execution raised or
# never ran: no grad-requiring input, or no second-order gradient to take). Derivative
# executions are compared as derivatives are (``grads_exact``).
EXECUTIONS: tuple[tuple[str, bool, Callable[[Observation], Log | None]], ...] = (
    ("forward", False, lambda o: o.run.effects if o.run.ok else None),
    ("forward-mode AD", False, lambda o: o.tangents.effects if o.tangents.error is None else None),
    ("backward", True, lambda o: o.grads.effects if o.grads.error is None else None),
    (
        "backward with create_graph",
        True,
        lambda o: o.probe.first.effects if o.probe.first is not None and o.probe.first.error is None else None,
    ),
    (
        "double backward",
        True,
        lambda o: o.probe.second.effects if o.probe.second is not None and o.probe.second.error is None else None,
    ),
)


def _describe(log: Log) -> str:
    return (
        "["
        + ", ".join(
            f"{tuple(t.shape)}:{str(t.dtype).removeprefix('torch.')} sum {float(t.double().sum()):.4g}" for t in log
        )
        + "]"
    )


def _permutation(ref: Log, got: Log, exact: Exact) -> bool:
    """Whether ``got`` holds the effects of ``ref``, each once, in some order."""
    left = list(got)
    for r in ref:
        match = next((i for i, g in enumerate(left) if same_values(r, g, exact)), None)
        if match is None:
            return False
        del left[match]
    return True


def compare_logs(execution: str, ref: Log, got: Log, exact: Exact) -> list[Finding]:
    """The result's effects against the original's in one execution: lost or added calls
    (``effects_lost``, ``effects_added``), the same calls in another order
    (``effects_reordered``), or a call that saw another value (``effect_value_mismatch``)."""
    details = {"where": execution, "expected": len(ref), "got": len(got)}
    if len(got) != len(ref):
        kind, what = ("effects_lost", "fewer") if len(got) < len(ref) else ("effects_added", "more")
        return [
            Finding(
                "effects",
                kind,
                f"{execution}: {len(ref)} ordered effects became {len(got)} ({what} calls of an effectful operator): "
                f"{_describe(ref)} became {_describe(got)}",
                details,
            )
        ]
    first = next((i for i, (r, g) in enumerate(zip(ref, got)) if not same_values(r, g, exact)), None)
    if first is None:
        return []
    if _permutation(ref, got, exact):
        return [
            Finding(
                "effects",
                "effects_reordered",
                f"{execution}: ordered effects {_describe(ref)} ran as {_describe(got)}",
                details,
            )
        ]
    return [
        Finding(
            "effects",
            "effect_value_mismatch",
            f"{execution}: ordered effect {first} saw other values ({_describe(ref[first : first + 1])} became {_describe(got[first : first + 1])})",
            {**details, "position": first},
        )
    ]


VALUE_KINDS = frozenset({"effects_reordered", "effect_value_mismatch"})


def check_effects(ref: Reference, got: Observation, grads_exact: bool, values: Exact | None = None) -> list[Finding]:
    """Each kind of execution's log of the result against the original's (module docstring),
    one finding per kind: the first execution that shows it. Where two runs of the original
    itself log other values (a nondeterministic value reaches an effect), that execution's
    values are not compared, only its count. ``values``: how a contract that excuses rounding
    compares the values (``fxfuzz.oracles.bounds``), in every execution; count and order stay exact."""
    findings: list[Finding] = []
    for execution, derivative, log_of in EXECUTIONS:
        r, g = log_of(ref.obs), log_of(got)
        if r is None or g is None:
            continue
        exact: Exact = ref.exact and (grads_exact or not derivative) if values is None else values
        found = [f for f in compare_logs(execution, r, g, exact) if f.kind not in {seen.kind for seen in findings}]
        if any(f.kind in VALUE_KINDS for f in found):
            again = log_of(ref.again)
            if again is None or compare_logs(execution, r, again, exact):
                found = [f for f in found if f.kind not in VALUE_KINDS]
        findings += found
    return findings


def rerun_differences(baseline: Run, run: Run, exact: Exact = True) -> list[Finding]:
    """What a later run of a graph (the result again, cleaned up, or after a second
    application) changed against ``baseline``: the equivalence oracle's differences, then its
    forward effects' (a clean-up that drops an effectful call changes no value); values
    compared as ``exact`` says (bitwise but for a second application under a contract that
    excuses rounding)."""
    found = check_equivalence(baseline, run, exact)
    if baseline.ok and run.ok:
        found += compare_logs("forward", baseline.effects, run.effects, exact)
    return found
