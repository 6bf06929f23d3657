"""Forward-mode AD: the same random tangents pushed through both graphs as dual tensors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD
from fxfuzz.oracles.equivalence import raised_differently
from fxfuzz.oracles.execute import release_frames, run_graph
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.gradients import compare_derivatives, random_like
from fxfuzz.oracles.tolerance import Exact


@dataclass
class Tangents:
    """Tangents of the output leaves and of the inputs after the call, or the error;
    ``effects``, the ordered side effects the forward-mode run made."""

    outputs: list[torch.Tensor | None] | None
    inputs: list[torch.Tensor | None] | None
    error: BaseException | None = None
    effects: list[torch.Tensor] = field(default_factory=list)


def _tangent_of(x: Any) -> torch.Tensor | None:
    return fwAD.unpack_dual(x).tangent if isinstance(x, torch.Tensor) else None


def _floating(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())


def tangents(gm: Any, inputs: tuple[Any, ...], ambient_grad: bool, device: str = "cpu", seed: int = 0) -> Tangents:
    """Run ``gm`` on dual tensors: every floating input gets a tangent seeded by its position."""

    def make_duals(clones: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(fwAD.make_dual(c, random_like(c, seed + i)) if _floating(c) else c for i, c in enumerate(clones))

    duals: list[tuple[Any, ...]] = []

    def prepare(clones: tuple[Any, ...]) -> tuple[Any, ...]:
        duals.append(make_duals(clones))
        return duals[0]

    with fwAD.dual_level():
        try:
            run = run_graph(gm, inputs, ambient_grad, device, prepare)
        except Exception as e:  # make_dual itself may refuse an input
            return Tangents(None, None, release_frames(e))
        if not run.ok:
            return Tangents(None, None, run.error, run.effects)
        assert run.outputs is not None
        return Tangents([_tangent_of(o) for o in run.outputs], [_tangent_of(d) for d in duals[0]], effects=run.effects)


def check_forward_ad(ref: Tangents, got: Tangents, labels: Sequence[str], exact: Exact = True) -> list[Finding]:
    """The tangent of every output and every input after the call must be the same; an op
    without forward-AD support on both sides is not a finding."""
    if ref.error is not None or got.error is not None:
        return raised_differently("gradients", "jvp_raises_differently", "forward-mode AD", ref.error, got.error)
    assert ref.outputs is not None and got.outputs is not None and ref.inputs is not None and got.inputs is not None
    if len(ref.outputs) != len(got.outputs):
        return []  # equivalence reports the structure change
    out_labels = [f"output {i}" for i in range(len(ref.outputs))]
    in_labels = [f"{label} after the call" for label in labels]
    return compare_derivatives(
        "tangent", "tangent", out_labels + in_labels, ref.outputs + ref.inputs, got.outputs + got.inputs, exact
    )
