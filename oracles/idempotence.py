"""Applying the pass to its own output must keep the meaning and add no higher-order op."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fxfuzz.oracles.downstream import code_of
from fxfuzz.oracles.equivalence import check_equivalence
from fxfuzz.oracles.execute import Run, graph_modules, isolated, run_graph
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.semantics import Reference
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


def check_idempotence(
    pass_fn: Callable[[Any, Any], tuple[Any, Any]],
    gm: fx.GraphModule,
    sig: Any,
    first: Run,
    ref: Reference,
) -> list[Finding]:
    """Run the pass again on ``gm`` (consumed: the pass may rewrite it in place) under the
    ambient grad mode, then compare HOP counts, and the meaning against ``gm``'s ``first``
    run (differences from the original are the equivalence oracle's)."""
    before, code = hop_count(gm), code_of(gm)
    try:
        with isolated(ref.ambient_grad):
            gm2, _ = pass_fn(gm, sig)
    except Exception as e:
        return [
            Finding(
                "idempotence",
                "second_application_raised",
                f"the pass raised {type(e).__name__} on its own output: {str(e).splitlines()[0] if str(e) else ''}",
                {"exception": type(e).__name__},
            )
        ]
    if not isinstance(gm2, fx.GraphModule):
        return [Finding("idempotence", "second_application_bad_return", f"the pass returned {type(gm2).__name__} on its own output")]
    findings = []
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
    if code_of(gm2) == code:
        return findings  # the same code as before: the same behaviour, no need to run it
    diffs = ref.unexplained(check_equivalence(first, run_graph(gm2, ref.inputs, ref.ambient_grad)))
    if diffs:
        findings.append(
            Finding(
                "idempotence",
                "second_application_changes_meaning",
                f"after a second application: {diffs[0].message}",
                {"kinds": sorted({f.kind for f in diffs})},
            )
        )
    return findings
