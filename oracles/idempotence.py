"""Applying the pass to its own output must keep the meaning and add no higher-order op:
``second_application`` once, then ``changes_meaning`` on each set of inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fxfuzz.core.internal import first_line
from fxfuzz.oracles.cleanup import code_of
from fxfuzz.oracles.effects import rerun_differences
from fxfuzz.oracles.equivalence import state_leak
from fxfuzz.oracles.execute import Run, graph_modules, pass_isolated, run_graph
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.semantics import Reference
from fxfuzz.oracles.tolerance import Exact
from torch import fx
from torch._ops import HigherOrderOperator


def hop_count(gm: fx.GraphModule) -> int:
    """Calls of higher-order ops in the module and every nested graph."""
    return sum(
        1
        for _, mod in graph_modules(gm)
        for n in mod.graph.nodes
        if n.op == "call_function" and isinstance(n.target, HigherOrderOperator)
    )


def second_application(
    pass_fn: Callable[[Any, Any], tuple[Any, Any]], gm: fx.GraphModule, sig: Any, ambient_grad: bool
) -> tuple[list[Finding], fx.GraphModule | None]:
    """Apply the pass to its own output ``gm`` (consumed) once: what it did wrong regardless of
    inputs, and the graph to run (None when there is nothing to run: it failed, or its code
    is ``gm``'s own, so its behaviour is too)."""
    before, code = hop_count(gm), code_of(gm)
    try:
        with pass_isolated(ambient_grad) as leaked:
            gm2, _ = pass_fn(gm, sig)
    except Exception as e:
        finding = Finding(
            "idempotence",
            "second_application_raised",
            f"the pass raised {type(e).__name__} on its own output: {first_line(e)}",
            {"exception": type(e).__name__},
        )
        return [finding], None
    if not isinstance(gm2, fx.GraphModule):
        bad = Finding(
            "idempotence", "second_application_bad_return", f"the pass returned {type(gm2).__name__} on its own output"
        )
        return [bad], None
    findings = state_leak(leaked)
    after = hop_count(gm2)
    if after > before:
        findings.append(
            Finding(
                "idempotence",
                "adds_hop",
                f"a second application added higher-order ops ({before} became {after})",
                {"before": before, "after": after},
            )
        )
    # The same code as before: the same behaviour, no need to run it.
    return findings, None if code_of(gm2) == code else gm2


def changes_meaning(again: fx.GraphModule | None, first: Run, ref: Reference, exact: Exact = True) -> list[Finding]:
    """The second application's result ``again`` run on ``ref``'s inputs against the first
    result's ``first`` run there, values compared as ``exact`` says."""
    if again is None:
        return []
    diffs = ref.unexplained(rerun_differences(first, run_graph(again, ref.inputs, ref.ambient_grad), exact))
    if not diffs:
        return []
    return [
        Finding(
            "idempotence",
            "second_application_changes_meaning",
            f"after a second application: {diffs[0].message}",
            {"kinds": sorted({f.kind for f in diffs})},
        )
    ]
