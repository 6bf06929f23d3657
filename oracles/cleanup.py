"""The clean-ups later passes routinely run on a graph (deep copy, dead-code elimination,
recompile, running it again) must work on the result and keep its meaning, wherever they work
on the original and keep the original's meaning: checks of the ``structure`` oracle (the
``downstream`` oracle, torch.export's stages, is ``fxfuzz.oracles.downstream``)."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

from fxfuzz.oracles.effects import rerun_differences
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


class CleanedUp:
    """The clean-up (``_clean``) of the result and, when needed, of the original, each done
    once however many sizes then run them: the cleaned modules do not depend on the inputs."""

    def __init__(self, transformed: fx.GraphModule, original: fx.GraphModule) -> None:
        self.transformed, self.original = transformed, original

    @functools.cached_property
    def result(self) -> tuple[fx.GraphModule | None, BaseException | None]:
        return _attempt(lambda: _clean(self.transformed))

    @functools.cached_property
    def original_result(self) -> tuple[fx.GraphModule | None, BaseException | None]:
        return _attempt(lambda: _clean(self.original))

    @functools.cached_property
    def same_code(self) -> bool:
        """Nothing was dead: the result's own runs already show the cleaned module's behaviour."""
        result = self.result[0]
        assert result is not None  # asked only once the clean-up succeeded
        return code_of(result) == code_of(self.transformed)


def check_cleanup(
    transformed: fx.GraphModule, first: Run, ref: Reference, cleaned: CleanedUp | None = None
) -> list[Finding]:
    """Rerun the result; deep-copy it, eliminate dead code and recompile, then run that; each
    must behave as the result's ``first`` run did (differences from the original are the
    equivalence oracle's). The original goes through the same clean-up only when the result
    fails, to tell the pass's fault from a clean-up that never was safe. ``cleaned`` shares
    the clean-ups between calls on the same result at other sizes."""
    inputs, ambient_grad = ref.inputs, ref.ambient_grad
    cleaned = cleaned or CleanedUp(transformed, ref.gm)

    def diffs(gm: fx.GraphModule, baseline: Run = first) -> list[Finding]:
        return ref.unexplained(rerun_differences(baseline, run_graph(gm, inputs, ambient_grad)))

    findings = []
    again = diffs(transformed)
    if again:
        findings.append(
            Finding("structure", "rerun_changes_meaning", f"running the result a second time: {_first(again)}")
        )
    result, error = cleaned.result
    if result is None:  # _attempt gives a value or the error
        if cleaned.original_result[1] is None:
            findings.append(
                Finding(
                    "structure",
                    "cleanup_failed",
                    f"deepcopy/eliminate_dead_code/recompile of the result raised {type(error).__name__}: {error}",
                    {"exception": type(error).__name__},
                )
            )
        return findings
    changed = [] if cleaned.same_code else diffs(result)
    if changed:
        orig_cleaned, _ = cleaned.original_result
        if orig_cleaned is not None and not diffs(orig_cleaned, ref.run):
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
