"""Reverse-mode gradients of every input that requires grad, with shared random cotangents."""

from __future__ import annotations

import torch

from .equivalence import same_values
from .execute import Run
from .finding import Finding


def _cotangent(t: torch.Tensor, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(t.shape, generator=gen, dtype=t.dtype)


def _differentiable(x: object) -> bool:
    return isinstance(x, torch.Tensor) and x.requires_grad and x.is_floating_point()


def input_grads(run: Run, positions: list[int], seed: int) -> tuple[list[torch.Tensor | None] | None, BaseException | None]:
    """Gradients of ``run``'s grad-requiring inputs from the outputs at ``positions``."""
    assert run.outputs is not None
    leaves = [t for t in run.inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    kept = [i for i in positions if _differentiable(run.outputs[i])]
    if not leaves or not kept:
        return [None] * len(leaves), None
    outs = [run.outputs[i] for i in kept]
    # Seeded by output position, so both runs use the same cotangent for the same output.
    cots = [_cotangent(run.outputs[i], seed + i) for i in kept]
    try:
        return list(torch.autograd.grad(outs, leaves, cots, allow_unused=True)), None
    except Exception as e:
        return None, e


def check_gradients(ref: Run, got: Run, seed: int = 0) -> list[Finding]:
    """Backward through the original's differentiable outputs and the same outputs of the
    transformed graph; compare each input's gradient, telling None apart from zeros."""
    if ref.outputs is None or got.outputs is None or len(ref.outputs) != len(got.outputs):
        return []  # equivalence already reports runs that cannot be compared
    positions = [i for i, o in enumerate(ref.outputs) if _differentiable(o)]
    ref_grads, ref_err = input_grads(ref, positions, seed)
    got_grads, got_err = input_grads(got, positions, seed)
    if ref_err is not None or got_err is not None:
        if type(ref_err) is type(got_err):
            return []
        return [
            Finding(
                "gradients",
                "backward_raises_differently",
                f"backward of the original raised {type(ref_err).__name__ if ref_err else 'nothing'}, "
                f"of the transformed {type(got_err).__name__ if got_err else 'nothing'}: {got_err or ref_err}",
            )
        ]
    assert ref_grads is not None and got_grads is not None
    names = [i for i, t in enumerate(ref.inputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    findings = []
    for idx, r, g in zip(names, ref_grads, got_grads):
        if (r is None) != (g is None):
            findings.append(
                Finding(
                    "gradients",
                    "grad_presence_mismatch",
                    f"input {idx}: gradient {'None' if r is None else 'present'} became {'None' if g is None else 'present'}",
                    {"input": idx},
                )
            )
        elif r is not None and not same_values(r, g):
            diff = (r - g).abs().max().item() if r.numel() else 0.0
            findings.append(
                Finding(
                    "gradients",
                    "grad_value_mismatch",
                    f"input {idx}: gradients differ (max abs diff {diff:g})",
                    {"input": idx, "max_abs_diff": diff},
                )
            )
    return findings
