"""Downstream robustness: the clean-ups later passes routinely run on a graph (deep copy,
dead-code elimination, recompile, running it again) must work on the result and keep its
meaning, wherever they work on the original and keep the original's meaning."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fxfuzz.oracles.equivalence import check_equivalence
from fxfuzz.oracles.execute import Run, graph_modules, release_frames, run_graph
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.semantics import Reference
from torch import fx


def code_of(gm: fx.GraphModule) -> list[tuple[str, str]]:
    """The generated code of the module and every nested graph: equal code, equal behaviour."""
    return [(name, mod.code) for name, mod in graph_modules(gm)]


def _clean(gm: fx.GraphModule) -> fx.GraphModule:
    """A deep copy with dead code eliminated and the code regenerated in every graph it changed
    (deepcopy already generated the code of the others)."""
    dc = copy.deepcopy(gm)
    changed = [name for name, mod in graph_modules(dc) if mod.graph.eliminate_dead_code()]
    # recompile() regenerates a module's code and that of every graph nested in it, so only
    # the outermost changed modules need it (one per changed graph would redo the nested ones).
    for name, mod in graph_modules(dc):
        if name in changed and not any(_nested_in(name, outer) for outer in changed):
            mod.recompile()
    return dc


def _nested_in(name: str, outer: str) -> bool:
    """Whether the module named ``name`` (as ``graph_modules`` names it) lies inside ``outer``."""
    return name != outer and (outer == "<root>" or name.startswith(outer + "."))


def _attempt(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return fn(), None
    except Exception as e:
        return None, release_frames(e)


def _first(findings: list[Finding]) -> str:
    return findings[0].message if findings else ""


def check_downstream(transformed: fx.GraphModule, first: Run, ref: Reference) -> list[Finding]:
    """Rerun the result; deep-copy it, eliminate dead code and recompile, then run that; each
    must behave as the result's ``first`` run did (differences from the original are the
    equivalence oracle's). The original goes through the same clean-up only when the result
    fails, to tell the pass's fault from a clean-up that never was safe."""
    original, inputs, ambient_grad = ref.gm, ref.inputs, ref.ambient_grad

    def diffs(gm: fx.GraphModule, baseline: Run = first) -> list[Finding]:
        return ref.unexplained(check_equivalence(baseline, run_graph(gm, inputs, ambient_grad)))

    findings = []
    again = diffs(transformed)
    if again:
        findings.append(
            Finding("structure", "rerun_changes_meaning", f"running the result a second time: {_first(again)}")
        )
    cleaned, error = _attempt(lambda: _clean(transformed))
    if error is not None:
        if _attempt(lambda: _clean(original))[1] is None:
            findings.append(
                Finding(
                    "structure",
                    "cleanup_failed",
                    f"deepcopy/eliminate_dead_code/recompile of the result raised {type(error).__name__}: {error}",
                    {"exception": type(error).__name__},
                )
            )
        return findings
    # Same code as the result's (nothing was dead): the first run already shows its behaviour.
    changed = [] if code_of(cleaned) == code_of(transformed) else diffs(cleaned)
    if changed:
        orig_cleaned, orig_error = _attempt(lambda: _clean(original))
        if orig_error is None and not diffs(orig_cleaned, ref.run):
            findings.append(
                Finding(
                    "structure",
                    "dead_code_elimination_changes_meaning",
                    "after deepcopy + eliminate_dead_code + recompile, the result behaves differently "
                    f"(the original survives the same clean-up): {_first(changed)}",
                    {"kinds": sorted({f.kind for f in changed})},
                )
            )
    return findings
