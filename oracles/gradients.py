"""Reverse-mode gradients of every input that requires grad, with shared random cotangents."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from fxfuzz.oracles.equivalence import raised_differently
from fxfuzz.oracles.execute import Run, effects_logged, release_frames
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.tolerance import Exact, max_abs_diff, same_values

VALUE_KINDS = frozenset({"grad_value_mismatch", "tangent_value_mismatch"})


@dataclass
class Grads:
    """The gradient of each grad-requiring input (None where it is unused), or the error
    backward raised; ``leaves`` are the positions of those inputs; ``effects``, the ordered
    side effects the backward made."""

    leaves: list[int]
    values: list[torch.Tensor | None] | None
    error: BaseException | None = None
    effects: list[torch.Tensor] = field(default_factory=list)


def random_like(t: torch.Tensor, seed: int) -> torch.Tensor:
    """Seeded random values shaped like ``t``, drawn on CPU so every device gets the same."""
    gen = torch.Generator().manual_seed(seed)
    dtype = t.dtype if t.is_floating_point() or t.is_complex() else torch.float32
    return torch.randn(t.shape, generator=gen, dtype=dtype).to(t.device)


def differentiable(x: object) -> bool:
    """Whether ``x`` is a tensor autograd differentiates: requires grad, floating or complex."""
    return isinstance(x, torch.Tensor) and x.requires_grad and (x.is_floating_point() or x.is_complex())


def input_grads(run: Run, seed: int = 0, create_graph: bool = False) -> Grads:
    """Backward through every differentiable output of ``run``, each weighted by a cotangent
    seeded by its position, so every run of the same outputs uses the same cotangents
    (``create_graph``: differentiable again, for second-order gradients)."""
    leaves = [i for i, t in enumerate(run.inputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    if run.outputs is None:
        return Grads(leaves, None, run.error)
    positions = [i for i, o in enumerate(run.outputs) if differentiable(o)]
    if not leaves or not positions:
        return Grads(leaves, [None] * len(leaves))
    outs = [run.outputs[i] for i in positions]
    cots = [random_like(run.outputs[i], seed + i) for i in positions]
    with effects_logged() as effects:
        try:
            grads = torch.autograd.grad(
                outs, [run.inputs[i] for i in leaves], cots, allow_unused=True, create_graph=create_graph
            )
            result = Grads(leaves, list(grads))
        except Exception as e:
            result = Grads(leaves, None, release_frames(e))
    result.effects = effects
    return result


def compare_derivatives(
    kind: str,
    noun: str,
    labels: Sequence[str],
    ref: Sequence[torch.Tensor | None],
    got: Sequence[torch.Tensor | None],
    exact: Exact,
    keyed: bool = False,
) -> list[Finding]:
    """One finding per derivative that changed: None against a tensor, or its values; kinds
    ``{kind}_presence_mismatch`` and ``{kind}_value_mismatch``, messages naming the ``noun``.
    ``keyed``: a presence finding's bucket tells a derivative lost from one that appeared."""
    findings = []
    for label, r, g in zip(labels, ref, got):
        if (r is None) != (g is None):
            findings.append(
                Finding(
                    "gradients",
                    f"{kind}_presence_mismatch",
                    f"{label}: {noun} {'None' if r is None else 'present'} became {'None' if g is None else 'present'}",
                    {"where": label, **({"key": "lost" if g is None else "appeared"} if keyed else {})},
                )
            )
        elif r is not None and g is not None and not same_values(r, g, exact):
            diff = max_abs_diff(r, g)
            findings.append(
                Finding(
                    "gradients",
                    f"{kind}_value_mismatch",
                    f"{label}: {noun}s differ (max abs diff {diff:g})",
                    {"where": label, "max_abs_diff": diff},
                )
            )
    return findings


def compare_grads(ref: Grads, got: Grads, labels: Sequence[str], exact: Exact = True) -> list[Finding]:
    """Each grad-requiring input's gradient, telling None apart from zeros."""
    if ref.error is not None or got.error is not None:
        return raised_differently("gradients", "backward_raises_differently", "backward", ref.error, got.error)
    assert ref.values is not None and got.values is not None
    return compare_derivatives("grad", "gradient", [labels[i] for i in ref.leaves], ref.values, got.values, exact)
