"""What autograd records for one run, beyond first-order values (``torch.autograd.graph``): the
tensors packed for backward, which inputs each output reaches, and second-order gradients.

All of it comes from one extra forward per graph (the probe run): under ``save_on_cpu`` (whose
hooks are wrapped to record every packed tensor), gradient edges read off the outputs, then a
first-order backward with ``create_graph=True``, then the gradient of a seeded combination of
those first-order gradients. The probe also
records which inputs share storage, and so the version counter, with a tensor that backward
unpacked: the inputs an in-place update after the forward can make backward refuse
(``fxfuzz.oracles.inplace_after_forward``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from fxfuzz.oracles.equivalence import raised_differently
from fxfuzz.oracles.execute import effects_logged, release_frames, run_graph
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.gradients import (
    Grads,
    compare_derivatives,
    differentiable,
    input_grads,
    random_like,
)
from fxfuzz.oracles.tolerance import Exact
from torch.autograd.graph import get_gradient_edge, save_on_cpu

VALUE_KINDS = frozenset({"double_backward_value_mismatch"})
# Seeds of the second-order cotangents, apart from the first-order ones (seeded by output position).
SECOND_ORDER_SEED = 1000
Meta = tuple[tuple[int, ...], torch.dtype]


@dataclass
class Probe:
    """One probe run: the shape and dtype of every tensor packed for backward; per output
    leaf, the input positions its gradient edges reach; first-order gradients under
    ``save_on_cpu`` (``create_graph=True``); second-order gradients; and ``hit``, the
    floating inputs sharing storage with a tensor backward unpacked. ``error`` is the
    forward's own error (equivalence reports it)."""

    saved: list[Meta] = field(default_factory=list)
    edges: list[frozenset[int]] = field(default_factory=list)
    first: Grads | None = None
    second: Grads | None = None
    hit: frozenset[int] = frozenset()
    error: BaseException | None = None


class _Recorder(save_on_cpu):
    """``save_on_cpu`` that also records each packed tensor's shape, dtype and storage, and
    which of them backward unpacks."""

    def __init__(self) -> None:
        super().__init__()
        pack, unpack = self.pack_hook, self.unpack_hook
        self.metas: list[Meta] = []
        self.storages: list[int | None] = []
        self.unpacked: set[int] = set()

        def record(t: torch.Tensor) -> tuple[int, Any]:
            self.metas.append((tuple(t.shape), t.dtype))
            self.storages.append(_storage(t))
            return len(self.metas) - 1, pack(t)

        def replay(packed: tuple[int, Any]) -> torch.Tensor:
            self.unpacked.add(packed[0])
            return unpack(packed[1])

        self.pack_hook, self.unpack_hook = record, replay


def _storage(t: torch.Tensor) -> int | None:
    return t.untyped_storage().data_ptr() if t.numel() else None


def _reached(out: Any, inputs: Sequence[Any], accumulators: dict[Any, int]) -> frozenset[int]:
    """The input positions whose gradient accumulators ``out``'s autograd graph reaches (an
    output that is an input itself reaches that input; a view made under no_grad, a leaf
    without an accumulator of its own, reaches none)."""
    if not differentiable(out):
        return frozenset()
    if out.grad_fn is None:
        return frozenset(i for i, t in enumerate(inputs) if t is out)
    todo, seen, found = [out.grad_fn], set(), set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node in accumulators:
            found.add(accumulators[node])
        todo += [f for f, _ in node.next_functions]
    return frozenset(found)


def _second_order(first: Grads, leaves: list[torch.Tensor], seed: int) -> Grads:
    """The gradient, into every leaf, of the first-order gradients weighted by seeded cotangents."""
    assert first.values is not None
    positions, values = first.leaves, first.values
    live = {i: g for i, g in enumerate(values) if g is not None and g.requires_grad}
    if not live:
        return Grads(positions, [None] * len(leaves))
    cots = [random_like(g, seed + SECOND_ORDER_SEED + i) for i, g in live.items()]
    with effects_logged() as effects:
        try:
            result = Grads(positions, list(torch.autograd.grad(list(live.values()), leaves, cots, allow_unused=True)))
        except Exception as e:  # any error of autograd's is an observation, as in input_grads
            result = Grads(positions, None, release_frames(e))
    result.effects = effects
    return result


def probe(gm: Any, inputs: tuple[Any, ...], ambient_grad: bool, device: str = "cpu", seed: int = 0) -> Probe:
    """The probe run of ``gm`` (see the module docstring), cotangents seeded as ``input_grads``
    seeds them. Without an input that requires grad autograd records nothing: no run."""
    if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
        return Probe(first=Grads([], []))
    recorder = _Recorder()
    with recorder:
        run = run_graph(gm, inputs, ambient_grad, device)
    if not run.ok:
        return Probe(error=run.error)
    assert run.outputs is not None
    positions = [i for i, t in enumerate(run.inputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    leaves = [run.inputs[i] for i in positions]
    accumulators = {get_gradient_edge(run.inputs[i]).node: i for i in positions}
    result = Probe(saved=recorder.metas, edges=[_reached(o, run.inputs, accumulators) for o in run.outputs])
    result.first = input_grads(run, seed, create_graph=True)  # the saved tensors unpack through the recorder
    if result.first.values is not None:
        result.second = _second_order(result.first, leaves, seed)
    unpacked = {recorder.storages[i] for i in recorder.unpacked} - {None}
    result.hit = frozenset(
        i
        for i, t in enumerate(run.inputs)
        if isinstance(t, torch.Tensor) and t.is_floating_point() and _storage(t) in unpacked
    )
    return result


def _saved_summary(metas: Sequence[Meta]) -> list[str]:
    return sorted(f"{list(shape)}:{str(dtype).removeprefix('torch.')}" for shape, dtype in metas)


def check_autograd_graph(ref: Probe, got: Probe, labels: Sequence[str], exact: Exact = True) -> list[Finding]:
    """Tensors packed for backward (as a multiset: a pass may reorder independent nodes),
    gradient edges per output, and second-order gradients."""
    if ref.error is not None or got.error is not None:
        return []  # equivalence reports a forward that raises differently
    findings = []
    if _saved_summary(ref.saved) != _saved_summary(got.saved):
        findings.append(_saved_tensors_finding(ref.saved, got.saved))

    def names(positions: frozenset[int]) -> str:
        return ", ".join(labels[j] for j in sorted(positions)) or "no input"

    for i, (r, g) in enumerate(zip(ref.edges, got.edges)):
        if r != g:
            findings.append(
                Finding(
                    "gradients",
                    "gradient_edges_mismatch",
                    f"output {i}: its autograd graph reached {names(r)}, now {names(g)}",
                    {"where": f"output {i}", "expected": sorted(r), "got": sorted(g)},
                )
            )
    assert ref.first is not None and got.first is not None
    return findings + check_double_backward(
        ref.first, got.first, ref.second, got.second, [labels[i] for i in ref.first.leaves], exact
    )


def _saved_tensors_finding(ref: Sequence[Meta], got: Sequence[Meta]) -> Finding:
    r, g = Counter(_saved_summary(ref)), Counter(_saved_summary(got))
    lost, new = ", ".join(sorted((r - g).elements())) or "none", ", ".join(sorted((g - r).elements())) or "none"
    return Finding(
        "gradients",
        "saved_tensors_mismatch",
        f"{len(ref)} tensors packed for backward became {len(got)} (only in the original: {lost}; only in the result: {new})",
        {"expected": len(ref), "got": len(got)},
    )


def check_double_backward(
    ref_first: Grads, got_first: Grads, ref: Grads | None, got: Grads | None, labels: Sequence[str], exact: Exact = True
) -> list[Finding]:
    """Second-order gradients: raise behaviour (of the ``create_graph`` first-order backward
    under ``save_on_cpu`` too), then presence and values per input."""
    kind = "double_backward_raises_differently"
    if ref_first.error is not None or got_first.error is not None:
        return directed(
            raised_differently(
                "gradients", kind, "the first-order backward with create_graph", ref_first.error, got_first.error
            )
        )
    if ref is None or got is None:
        return []
    if ref.error is not None or got.error is not None:
        return directed(raised_differently("gradients", kind, "double backward", ref.error, got.error))
    assert ref.values is not None and got.values is not None
    return compare_derivatives(
        "double_backward", "second-order gradient", labels, ref.values, got.values, exact, keyed=True
    )


def directed(findings: list[Finding]) -> list[Finding]:
    """Bucket a raise difference by which side raised what: a pass that makes backward refuse
    and one that makes it succeed are two defects."""
    for f in findings:
        f.details["key"] = f"{f.details['original']} -> {f.details['transformed']}"
    return findings
