"""In-place updates between forward and backward: after the forward, update an input,
parameter or buffer in place (under no_grad, as an optimizer step or a running-stat update
would), then run backward. Whether backward refuses ("modified by an inplace operation") or
succeeds, and with which gradients, depends on which tensors the graph saved for backward, so a
pass that saves a copy of an input instead of the input (or the other way round) changes it
while every value and gradient of an undisturbed run stays equal.

Backward reads inputs only through saved tensors, and an in-place update is seen only through a
saved tensor sharing the input's storage (and so its version counter). The probe run
(``fxfuzz.oracles.autograd_graph``) records, per graph, the inputs sharing storage with a
tensor backward unpacked (``hit``). An input hit in neither graph cannot change either backward
(its gradients are those of the undisturbed run, already compared); one hit in both makes both
refuse. Only the inputs hit on one side are updated and run for real, one at a time, each on
fresh copies; and inside ``torch.autograd.graph.allow_mutation_on_saved_tensors()``, where
backward must see the values saved before the update, each input hit on either side, again one
at a time (so a finding names the input whose update changed the result, and an input whose
update makes both graphs raise alike hides no other).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from fxfuzz.oracles.autograd_graph import Probe, directed
from fxfuzz.oracles.execute import run_graph
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.gradients import Grads, compare_derivatives, input_grads
from fxfuzz.oracles.tolerance import Exact
from torch.autograd.graph import allow_mutation_on_saved_tensors

VERSION_ERROR = "modified by an inplace operation"
VALUE_KINDS = frozenset(
    {"inplace_after_forward_grad_value_mismatch", "inplace_after_forward_allow_mutation_grad_value_mismatch"}
)


@dataclass
class Graph:
    """What it takes to run one graph again: the module, the case's inputs, grad mode, device."""

    gm: Callable[..., object]
    inputs: tuple[object, ...]
    ambient_grad: bool
    device: str


def after_update(graph: Graph, position: int, allow_mutation: bool) -> Grads:
    """Run ``graph``, update the input at ``position`` in place under no_grad, then backward
    (the whole of it inside ``allow_mutation_on_saved_tensors`` when ``allow_mutation``)."""

    def go() -> Grads:
        run = run_graph(graph.gm, graph.inputs, graph.ambient_grad, graph.device)
        if not run.ok:
            return Grads([], None, run.error)
        with torch.no_grad():
            run.inputs[position].add_(1.0)
        return input_grads(run)

    if not allow_mutation:
        return go()
    with allow_mutation_on_saved_tensors():
        return go()


def _outcome(g: Grads) -> str:
    if g.error is None:
        return "succeeded"
    if VERSION_ERROR in str(g.error):
        return "raised the version-counter error"
    return f"raised {type(g.error).__name__}"


def _compare(kind: str, what: str, ref: Grads, got: Grads, labels: Sequence[str], exact: Exact) -> list[Finding]:
    if _outcome(ref) != _outcome(got):
        # Keyed by direction: saving an input the original did not (backward now refuses) and
        # no longer saving one (it now succeeds) are two defects.
        return directed(
            [
                Finding(
                    "gradients",
                    f"{kind}_raises_differently",
                    f"backward after {what}: the original {_outcome(ref)}, the result {_outcome(got)}",
                    {"where": what, "original": _outcome(ref), "transformed": _outcome(got)},
                )
            ]
        )
    if ref.values is None or got.values is None:
        return []
    return compare_derivatives(
        f"{kind}_grad",
        "gradient",
        [f"{labels[i]} ({what})" for i in ref.leaves],
        ref.values,
        got.values,
        exact,
        keyed=True,
    )


def check_inplace_after_forward(
    ref: Graph, got: Graph, ref_probe: Probe, got_probe: Probe, labels: Sequence[str], exact: Exact = True
) -> list[Finding]:
    """Backward after an in-place update of each input one side saved and the other did not,
    and, inside ``allow_mutation_on_saved_tensors``, of each input either side saved."""
    if ref_probe.error is not None or got_probe.error is not None:
        return []
    findings = []
    for i in sorted(ref_probe.hit ^ got_probe.hit):
        what = f"updating {labels[i]} in place"
        findings += _compare(
            "inplace_after_forward", what, after_update(ref, i, False), after_update(got, i, False), labels, exact
        )
    for i in sorted(ref_probe.hit | got_probe.hit):
        what = f"updating {labels[i]} in place under allow_mutation_on_saved_tensors"
        kind = "inplace_after_forward_allow_mutation"
        findings += _compare(kind, what, after_update(ref, i, True), after_update(got, i, True), labels, exact)
    return findings
