"""The ATen op table: which overloads graph cases use, and the rules that keep them valid."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st

aten = torch.ops.aten

# draw, operand metas -> extra (non-tensor) positional args, or None when the op does not fit.
ExtraArgs = Callable[[st.DrawFn, list[torch.Tensor]], "tuple[Any, ...] | None"]


def _no_extra(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[Any, ...]:
    return ()


def _broadcastable(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[Any, ...] | None:
    try:
        torch.broadcast_shapes(*(m.shape for m in metas))
    except RuntimeError:
        return None
    return ()


def _sum_dim(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[Any, ...] | None:
    if metas[0].dim() == 0:
        return None
    return ([draw(st.integers(0, metas[0].dim() - 1))], draw(st.booleans()))


def _var_mean_dim(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[Any, ...] | None:
    if metas[0].dim() == 0:
        return None
    return ([draw(st.integers(0, metas[0].dim() - 1))],)


def _transpose(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[Any, ...] | None:
    if metas[0].dim() < 2:
        return None
    return (0, metas[0].dim() - 1)


def _flatten_view(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[Any, ...] | None:
    if not metas[0].is_contiguous():
        return None
    return ([-1],)


def _scalar(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[Any, ...]:
    return (draw(st.sampled_from([2.0, 0.5, -1.0])),)


@dataclass(frozen=True)
class OpSpec:
    """One ATen overload and the rules for drawing a valid call of it.

    ``arity`` tensor operands come first, then ``extra`` draws the remaining arguments.
    ``outputs`` > 1 means the op returns a tuple consumed through ``operator.getitem``.
    ``kwargs`` are fixed keyword arguments. ``inplace`` ops mutate their first operand; ``saves_output`` marks ops whose backward
    reads their own result, so that result must never be mutated in place afterwards.
    """

    name: str
    target: Any
    arity: int = 1
    extra: ExtraArgs = _no_extra
    outputs: int = 1
    inplace: bool = False
    saves_output: bool = False
    differentiable: bool = True
    kwargs: dict[str, Any] = field(default_factory=dict)


OPS: tuple[OpSpec, ...] = (
    OpSpec("add", aten.add.Tensor, 2, _broadcastable),
    OpSpec("mul", aten.mul.Tensor, 2, _broadcastable),
    OpSpec("sub", aten.sub.Tensor, 2, _broadcastable),
    OpSpec("neg", aten.neg.default),
    OpSpec("sin", aten.sin.default),
    OpSpec("exp", aten.exp.default, saves_output=True),
    OpSpec("relu", aten.relu.default, saves_output=True),
    OpSpec("mul_scalar", aten.mul.Tensor, 1, _scalar),
    OpSpec("clone", aten.clone.default),
    OpSpec("detach", aten.detach.default),
    OpSpec("sum", aten.sum.default),
    OpSpec("sum_dim", aten.sum.dim_IntList, 1, _sum_dim),
    OpSpec("transpose", aten.transpose.int, 1, _transpose),
    OpSpec("view", aten.view.default, 1, _flatten_view),
    OpSpec("var_mean", aten.var_mean.correction, 1, _var_mean_dim, outputs=2, kwargs={"correction": 0}),
    OpSpec("zeros_like", aten.zeros_like.default, differentiable=False),
)

INPLACE_OPS: tuple[OpSpec, ...] = (
    OpSpec("add_", aten.add_.Tensor, 2, _broadcastable, inplace=True),
    OpSpec("mul_", aten.mul_.Tensor, 1, _scalar, inplace=True),
)

# Ops whose result is a view of their input: mutating that result would mutate the input too.
VIEW_OPS = frozenset({"transpose", "view", "detach"})
