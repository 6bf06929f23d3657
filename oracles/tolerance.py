"""When two tensors count as the same value: bitwise on one CPU, a per-dtype tolerance elsewhere.

On CPU the original and the transformed graph run the same deterministic kernels on the same
bits, so any difference at all is a change of meaning. On CUDA (kernel selection and atomics
may vary between runs) and between CPU and CUDA (different kernels), values are compared with
the per-dtype tolerances of ``torch.testing.assert_close``. Integers and booleans are always
compared exactly. NaN equals NaN (payloads are not observable); a sign of zero is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# dtype -> (rtol, atol); the defaults of torch.testing.assert_close.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


@dataclass(frozen=True)
class Bound:
    """Values equal within ``scale`` times the dtype's tolerance above, plus ``slack`` absolute:
    what a contract that excuses rounding allows (``fxfuzz.oracles.bounds``)."""

    scale: float = 1.0
    slack: float = 0.0


# How values are compared: bitwise (True), within the dtype's tolerance (False), or a Bound.
Exact = bool | Bound


def _as_real(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t.resolve_conj()) if t.is_complex() else t


def same_values(a: torch.Tensor, b: torch.Tensor, exact: Exact = True) -> bool:
    """``a`` and ``b`` hold the same shape, dtype and values (``exact`` True: bitwise up to NaN
    payloads; False: within the dtype's tolerance; a Bound: within it)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach(), b.detach()
    if b.device != a.device:
        b = b.to(a.device)
    if not (a.is_floating_point() or a.is_complex()):
        return torch.equal(a, b)
    a, b = _as_real(a), _as_real(b)
    if exact is True:
        same = (a == b) & (a.signbit() == b.signbit())
        return bool((same | (a.isnan() & b.isnan())).all())
    rtol, atol = TOLERANCES.get(a.dtype, (0.0, 0.0))
    if isinstance(exact, Bound):
        rtol, atol = rtol * exact.scale, atol * exact.scale + exact.slack
    return bool(torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True).all())


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference (inf where only one side is NaN), for messages."""
    if a.shape != b.shape or a.numel() == 0:
        return 0.0
    a, b = _as_real(a.detach()).double(), _as_real(b.detach().to(a.device)).double()
    same = (a == b) | (a.isnan() & b.isnan())
    return float((a - b).abs().masked_fill(same, 0).nan_to_num(float("inf")).max())
