"""Checks at sizes other than the traced ones: a case with symbolic sizes runs the original and
the transformed graph at each assignment in ``case.sizes`` too, with inputs resized by
``fxfuzz.core.rebuild.inputs_at``. A pass that bakes a traced size into the graph (a
specialization) behaves the same at the traced sizes and shows only there."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from fxfuzz.core.case import GraphCase
from fxfuzz.core.rebuild import inputs_at
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.semantics import Comparing, Observation, Reference, compare_graphs
from torch import fx


@dataclass
class AtSizes:
    """Both graphs observed at one assignment of the symbolic sizes."""

    sizes: dict[str, int]
    ref: Reference
    got: Observation
    findings: list[Finding]

    @property
    def ok(self) -> bool:
        return self.ref.run.ok and self.got.run.ok

    def tagged(self, findings: list[Finding]) -> list[Finding]:
        """``findings`` seen at these sizes, saying which sizes (message and ``details``). The
        kind stays: a defect is one bucket whichever sizes show it."""
        label = ", ".join(f"{k}={v}" for k, v in sorted(self.sizes.items()))
        return [
            dataclasses.replace(f, message=f"at sizes {label}: {f.message}", details={**f.details, "sizes": self.sizes})
            for f in findings
        ]


def observe_sizes(
    case: GraphCase, transformed: fx.GraphModule, labels: Sequence[str], how: Comparing = Comparing()
) -> list[AtSizes]:
    """Original against transformed at each of ``case.sizes`` (executions only: the pass has
    already run), with the comparison's findings (``compare_graphs``)."""
    out = []
    for i, sizes in enumerate(case.sizes, 1):
        ref = Reference(case.gm, inputs_at(case.gm, case.inputs, sizes, seed=i), case.ambient_grad, labels, "cpu")
        findings, got = compare_graphs(transformed, ref, how)
        out.append(AtSizes(sizes, ref, got, findings))
    return out


def new_kinds(findings: list[Finding], known: set[str]) -> list[Finding]:
    """``findings`` whose kind is not in ``known`` (what the traced sizes, or an earlier size,
    already showed), adding their kinds to ``known``: one defect, one bucket."""
    fresh = [f for f in findings if f.kind not in known]
    known.update(f.kind for f in fresh)
    return fresh
