"""Everything one execution shows (values, gradients, tangents), and the comparison of the
original against the transformed graph on each device, with nondeterminism ruled out."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from fxfuzz.oracles import autograd_graph, equivalence, gradients, inplace_after_forward
from fxfuzz.oracles.autograd_graph import Probe, check_autograd_graph, probe
from fxfuzz.oracles.equivalence import check_equivalence
from fxfuzz.oracles.execute import Run, on_device, run_graph
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.forward_ad import Tangents, check_forward_ad, tangents
from fxfuzz.oracles.gradients import Grads, compare_grads, input_grads
from fxfuzz.oracles.inplace_after_forward import Graph, check_inplace_after_forward
from fxfuzz.oracles.tolerance import Bound, Exact
from torch import fx

VALUE_KINDS = (
    equivalence.VALUE_KINDS | gradients.VALUE_KINDS | autograd_graph.VALUE_KINDS | inplace_after_forward.VALUE_KINDS
)
# First-order differences in what requires grad or in gradients: where these show, what autograd
# records differs as a consequence, and the autograd-graph checks would report the same defect again.
FIRST_ORDER_KINDS = frozenset(
    {
        "requires_grad_mismatch",
        "grad_fn_mismatch",
        "grad_presence_mismatch",
        "grad_value_mismatch",
        "backward_raises_differently",
    }
)


@dataclass
class Observation:
    """One graph on one device: a plain run with its reverse-mode gradients, a forward-mode
    run with its tangents, and a probe run of what autograd records (``graph`` runs it
    again for the in-place-update checks, only where they are needed)."""

    run: Run
    grads: Grads
    tangents: Tangents
    probe: Probe
    graph: Graph


def observe(gm: fx.GraphModule, inputs: tuple[Any, ...], ambient_grad: bool, device: str = "cpu") -> Observation:
    """Run ``gm`` on ``device`` under ``ambient_grad``: values, reverse-mode gradients,
    tangents and the autograd probe."""
    gm = on_device(gm, device)
    run = run_graph(gm, inputs, ambient_grad, device)
    return Observation(
        run,
        input_grads(run),
        tangents(gm, inputs, ambient_grad, device),
        probe(gm, inputs, ambient_grad, device),
        Graph(gm, inputs, ambient_grad, device),
    )


def compare(
    ref: Observation,
    got: Observation,
    labels: Sequence[str],
    exact: Exact,
    same_device: bool = True,
    grads_exact: bool = True,
    views: bool = True,
    identity: bool = True,
) -> list[Finding]:
    """Equivalence, then gradients and tangents when the runs are comparable at all, then
    what autograd records where first-order behaviour agrees. Derivatives are compared as
    ``exact`` says unless ``grads_exact`` is off: then within tolerance (the sum of a
    node's gradient contributions is rounded as autograd adds them up, which a merge of
    equal nodes changes; docs/oracles.md), and a Bound (a contract that excuses rounding)
    holds for them too. ``views`` off: aliasing and strides are not compared, nor backward
    after an in-place update of an input (what it shows is whether a saved tensor shares the
    input's storage: a view the pass made a copy no longer sees the update); ``identity`` off:
    nor whether an output aliasing an input is that input itself."""
    findings = check_equivalence(ref.run, got.run, exact, same_device, views, identity)
    if not (ref.run.ok and got.run.ok and ref.run.spec == got.run.spec):
        return findings
    exact_d: Exact = exact if isinstance(exact, Bound) else exact and grads_exact
    findings += compare_grads(ref.grads, got.grads, labels, exact_d)
    findings += check_forward_ad(ref.tangents, got.tangents, labels, exact_d)
    if any(f.kind in FIRST_ORDER_KINDS for f in findings):
        return findings
    findings += check_autograd_graph(ref.probe, got.probe, labels, exact_d)
    if not views:
        return findings
    return findings + check_inplace_after_forward(ref.graph, got.graph, ref.probe, got.probe, labels, exact_d)


class Reference:
    """The original graph's observation on one device, and which of its values are
    nondeterministic (found lazily, by running the original once more, only when a value
    differs)."""

    def __init__(
        self, gm: fx.GraphModule, inputs: tuple[Any, ...], ambient_grad: bool, labels: Sequence[str], device: str
    ) -> None:
        self.gm, self.inputs, self.ambient_grad, self.labels, self.device = gm, inputs, ambient_grad, labels, device
        self.exact = device == "cpu"
        self.obs = observe(gm, inputs, ambient_grad, device)
        self._noisy: set[tuple[str, object]] | None = None

    @property
    def run(self) -> Run:
        return self.obs.run

    @cached_property
    def again(self) -> Observation:
        """The original observed once more: whatever differs from ``obs`` is nondeterministic."""
        return observe(self.gm, self.inputs, self.ambient_grad, self.device)

    def noisy(self) -> set[tuple[str, object]]:
        """(kind, where) of every value that differs between two runs of the original."""
        if self._noisy is None:
            self._noisy = {
                (f.kind, f.details.get("where"))
                for f in compare(self.obs, self.again, self.labels, self.exact)
                if f.kind in VALUE_KINDS
            }
        return self._noisy

    def unexplained(self, findings: list[Finding]) -> list[Finding]:
        """``findings`` minus value differences that the original's own nondeterminism
        explains: a value that changes from run to run is compared by property only
        (structure, shape, dtype, autograd flags); every other value still bit for bit."""
        if not any(f.kind in VALUE_KINDS for f in findings):
            return findings
        noisy = self.noisy()
        return [f for f in findings if (f.kind, f.details.get("where")) not in noisy]


@dataclass(frozen=True)
class Comparing:
    """How a contract has the two graphs' runs compared: derivatives bitwise or within
    tolerance (``grads_exact``), values within a Bound where it excuses rounding (None:
    bitwise on CPU), aliasing and strides or not (``views``), an input returned itself or as a
    tensor of its own (``identity``)."""

    grads_exact: bool = True
    values: Bound | None = None
    views: bool = True
    identity: bool = True


def compare_graphs(
    transformed: fx.GraphModule, ref: Reference, how: Comparing = Comparing()
) -> tuple[list[Finding], Observation]:
    """Original against transformed on the reference's device (bitwise on CPU, within
    tolerance on CUDA, within ``how.values`` where given); a value difference counts only
    where the original is deterministic."""
    got = observe(transformed, ref.inputs, ref.ambient_grad, ref.device)
    exact = ref.exact if how.values is None else how.values
    return ref.unexplained(
        compare(ref.obs, got, ref.labels, exact, grads_exact=how.grads_exact, views=how.views, identity=how.identity)
    ), got


def prefixed(findings: list[Finding], prefix: str, known: set[str]) -> list[Finding]:
    """Findings under ``<prefix>:<kind>`` kinds, minus the kinds in ``known`` (what CPU already showed)."""
    return [
        dataclasses.replace(f, kind=f"{prefix}:{f.kind}", message=f"{prefix}: {f.message}")
        for f in findings
        if f.kind not in known
    ]


def device_parity(
    cpu_ref: Observation, cpu_got: Observation, dev_ref: Observation, dev_got: Observation, labels: Sequence[str]
) -> list[Finding]:
    """The transformed graph must agree across CPU and another device within tolerance wherever
    the original does; where torch's own kernels disagree across devices, the pass is not to blame."""
    if compare(cpu_ref, dev_ref, labels, exact=False, same_device=False):
        return []
    return compare(cpu_got, dev_got, labels, exact=False, same_device=False)


def check_on_device(
    transformed: fx.GraphModule,
    cpu_ref: Reference,
    cpu_got: Observation,
    cpu_kinds: set[str],
    device: str,
    also: Callable[[Reference, Observation], list[Finding]] | None = None,
) -> list[Finding]:
    """Original against transformed on ``device`` too, as ``<device>:<kind>`` where CPU did not
    already show that kind, and CPU-against-``device`` parity as ``cpu_vs_<device>:<kind>``.
    ``also`` compares the same two observations on ``device`` in other ways (the ordered
    effects, whose module imports this one), its findings prefixed alike. ``verify`` calls it
    for CUDA; CPU can stand in for the second device, which is how the comparison is tested on
    machines without a GPU."""
    ref = Reference(cpu_ref.gm, cpu_ref.inputs, cpu_ref.ambient_grad, cpu_ref.labels, device)
    findings, got = compare_graphs(transformed, ref)
    if also is not None:
        findings += also(ref, got)
    parity = device_parity(cpu_ref.obs, cpu_got, ref.obs, got, cpu_ref.labels)
    return prefixed(findings, device, cpu_kinds) + prefixed(parity, f"cpu_vs_{device}", set())
