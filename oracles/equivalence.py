"""Observable behaviour of the original and transformed graph under the same grad mode."""

from __future__ import annotations

from typing import Any

import torch

from .execute import Run
from .finding import Finding


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality on CPU (NaNs equal to NaNs): the same kernels on the same inputs
    must give the same bits, so no tolerance is needed for deterministic ops."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a, b) or (a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all()))


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"Tensor{tuple(x.shape)}:{x.dtype}"
    return repr(x)


def compare_value(where: str, ref: Any, got: Any) -> list[Finding]:
    """Compare one observed value (an output or an input's final state)."""
    if isinstance(ref, torch.Tensor) != isinstance(got, torch.Tensor) or (
        not isinstance(ref, torch.Tensor) and ref != got
    ):
        return [Finding("equivalence", "value_kind_mismatch", f"{where}: {_describe(ref)} became {_describe(got)}")]
    if not isinstance(ref, torch.Tensor):
        return []
    if ref.shape != got.shape or ref.dtype != got.dtype:
        return [Finding("equivalence", "meta_mismatch", f"{where}: {_describe(ref)} became {_describe(got)}")]
    findings = []
    if not same_values(ref.detach(), got.detach()):
        diff = (ref.detach().double() - got.detach().double()).abs().nan_to_num(float("inf")).max().item() if ref.numel() else 0.0
        findings.append(Finding("equivalence", "value_mismatch", f"{where}: values differ (max abs diff {diff:g})", {"max_abs_diff": diff}))
    if ref.requires_grad != got.requires_grad:
        findings.append(
            Finding(
                "equivalence",
                "requires_grad_mismatch",
                f"{where}: requires_grad {ref.requires_grad} became {got.requires_grad}",
                {"expected": ref.requires_grad, "got": got.requires_grad},
            )
        )
    elif (ref.grad_fn is None) != (got.grad_fn is None):
        findings.append(Finding("equivalence", "grad_fn_mismatch", f"{where}: grad_fn presence changed"))
    return findings


def check_equivalence(ref: Run, got: Run) -> list[Finding]:
    """Outputs, inputs' state after the call (in-place effects) and the grad mode left behind."""
    if ref.error is not None or got.error is not None:
        if type(ref.error) is type(got.error):
            return []
        return [
            Finding(
                "equivalence",
                "raises_differently",
                f"original raised {type(ref.error).__name__ if ref.error else 'nothing'}, "
                f"transformed raised {type(got.error).__name__ if got.error else 'nothing'}: {got.error or ref.error}",
            )
        ]
    assert ref.outputs is not None and got.outputs is not None
    if len(ref.outputs) != len(got.outputs):
        return [
            Finding(
                "equivalence",
                "output_count_mismatch",
                f"{len(ref.outputs)} outputs became {len(got.outputs)}",
            )
        ]
    findings = []
    for i, (r, g) in enumerate(zip(ref.outputs, got.outputs)):
        findings += compare_value(f"output {i}", r, g)
    for i, (r, g) in enumerate(zip(ref.inputs, got.inputs)):
        findings += [f for f in compare_value(f"input {i} after the call", r, g) if f.kind != "grad_fn_mismatch"]
    if ref.grad_mode_after != got.grad_mode_after:
        findings.append(
            Finding(
                "equivalence",
                "grad_mode_leak",
                f"grad mode after the call is {got.grad_mode_after}, expected {ref.grad_mode_after}",
            )
        )
    return findings
