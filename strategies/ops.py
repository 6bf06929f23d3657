"""The ATen op table: which overloads graph cases use, and the rules that keep calls valid.

Each ``OpSpec`` says which operands fit (dtype class, rank, how a second operand must relate
to the first) and draws the op's non-tensor arguments. Output metas come from fake-tensor
propagation in the builder, which also rejects the rare call these rules let through.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st

aten = torch.ops.aten
CPU = torch.device("cpu")

# draw, operand metas -> (extra positional args, extra kwargs), or None when the op does not fit.
Extra = Callable[[st.DrawFn, list[torch.Tensor]], "tuple[tuple[Any, ...], dict[str, Any]] | None"]
# Does ``other`` fit as the next operand after the operands ``chosen`` so far?
Fits = Callable[[list[torch.Tensor], torch.Tensor], bool]

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _none(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (), {}


def _args(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return args, kwargs


def broadcastable(chosen: list[torch.Tensor], other: torch.Tensor) -> bool:
    """Whether ``other`` broadcasts with every tensor in ``chosen``."""
    try:
        torch.broadcast_shapes(*(m.shape for m in chosen), other.shape)
    except RuntimeError:
        return False
    return True


def fits_into(chosen: list[torch.Tensor], other: torch.Tensor) -> bool:
    """``other`` broadcasts to the target's shape: what an in-place op on the target needs."""
    target = chosen[0]
    if not torch.can_cast(torch.promote_types(target.dtype, other.dtype), target.dtype):
        return False
    return broadcastable(chosen, other) and torch.broadcast_shapes(target.shape, other.shape) == target.shape


def _mm_pair(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0] and a.dtype == b.dtype


def _mm_fits(chosen: list[torch.Tensor], other: torch.Tensor) -> bool:
    return _mm_pair(chosen[0], other)


def _matmul_fits(chosen: list[torch.Tensor], other: torch.Tensor) -> bool:
    first = chosen[0]
    if other.dim() == 0 or other.dim() > 2 or first.dim() > 2 or first.dtype != other.dtype:
        return False
    inner = other.shape[-2] if other.dim() == 2 else other.shape[0]
    return first.shape[-1] == inner


def _linear_fits(chosen: list[torch.Tensor], other: torch.Tensor) -> bool:
    first = chosen[0]
    return other.dim() == 2 and first.shape[-1] == other.shape[1] and first.dtype == other.dtype


def _addmm_fits(chosen: list[torch.Tensor], other: torch.Tensor) -> bool:
    """addmm(bias, a, b): a and b multiply as matrices, bias broadcasts to their product."""
    bias = chosen[0]
    if other.dtype != bias.dtype or other.dim() != 2:
        return False
    if len(chosen) == 1:
        return True
    a = chosen[1]
    if not _mm_pair(a, other):
        return False
    try:
        return torch.broadcast_shapes(bias.shape, (a.shape[0], other.shape[1])) == (a.shape[0], other.shape[1])
    except RuntimeError:
        return False


def size_hint(size: int | torch.SymInt) -> int:
    """The traced value of a size: an index or count drawn from a symbolic size is a
    constant in the graph (the trace's guards keep it valid at other sizes)."""
    return size.node.hint if isinstance(size, torch.SymInt) else size


def _dim(draw: st.DrawFn, meta: torch.Tensor) -> int:
    return draw(st.integers(0, meta.dim() - 1))


def _scalar(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _args(draw(st.sampled_from([2, -1, 0.5])))


def _dims_keepdim(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    if metas[0].dim() == 0:
        return None
    return _args([_dim(draw, metas[0])], draw(st.booleans()))


def _dim_keepdim(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    if metas[0].dim() == 0:
        return None
    return _args(_dim(draw, metas[0]), draw(st.booleans()))


def _var_mean(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    if metas[0].dim() == 0:
        return None
    # unbiased=False: a size-1 dim would otherwise divide by zero, which is valid but noisy.
    return _args([_dim(draw, metas[0])], False, draw(st.booleans()))


def _clamp(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _args(-1, 1)


def _transpose(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    if metas[0].dim() < 2:
        return None
    return _args(0, metas[0].dim() - 1)


def _permute(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _args(list(reversed(range(metas[0].dim()))))


def _flatten_view(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    return _args([-1]) if metas[0].is_contiguous() else None


def _slice(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    if metas[0].dim() == 0:
        return None
    dim = _dim(draw, metas[0])
    return _args(dim, draw(st.integers(0, 1)), metas[0].shape[dim])


def _select(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    if metas[0].dim() == 0:
        return None
    dim = _dim(draw, metas[0])
    if metas[0].shape[dim] == 0:
        return None
    return _args(dim, draw(st.integers(0, size_hint(metas[0].shape[dim]) - 1)))


def _expand(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _args([2, *metas[0].shape])


def _any_dim(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    return None if metas[0].dim() == 0 else _args(_dim(draw, metas[0]))


def _unsqueeze(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _args(draw(st.integers(0, metas[0].dim())))


def _t(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    return _args() if metas[0].dim() <= 2 else None


def _split(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    if metas[0].dim() == 0:
        return None
    return _args(draw(st.integers(1, 2)), _dim(draw, metas[0]))


def _topk(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    if metas[0].dim() == 0:
        return None
    dim = _dim(draw, metas[0])
    size = size_hint(metas[0].shape[dim])  # 0 after an empty slice
    return _args(draw(st.integers(min(1, size), size)), dim)


def _sort(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    return None if metas[0].dim() == 0 else _args(_dim(draw, metas[0]), draw(st.booleans()))


def _dtype(draw: st.DrawFn) -> torch.dtype:
    return draw(st.sampled_from([torch.float32, torch.float64, torch.int64, torch.bfloat16, torch.float16, torch.bool]))


def _factory_kwargs(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments as pre-dispatch export records ``torch.ones(...)`` and friends."""
    kwargs: dict[str, Any] = {"device": CPU, "pin_memory": False}
    if draw(st.booleans()):
        kwargs["dtype"] = draw(st.sampled_from(FLOAT_DTYPES))
    return kwargs


def _ones(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (list(metas[0].shape),), _factory_kwargs(draw)


def _full(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (list(metas[0].shape), draw(st.sampled_from([2.0, -0.5]))), _factory_kwargs(draw)


def _arange(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (draw(st.integers(1, 3)),), _factory_kwargs(draw)


def _to_dtype(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _args(_dtype(draw))


def _to_copy(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (), {"dtype": _dtype(draw)}


@dataclass(frozen=True)
class OpSpec:
    """One ATen overload and the rules for drawing a valid call of it.

    ``arity`` tensor operands come first (``dtypes``: ``float``, ``num`` (no bool), ``any`` or
    ``bool`` for the first operand), each later one fitting those before it by ``fits``; then
    ``extra`` draws the remaining arguments. ``shape_from`` ops (factories) read only the
    first operand's shape and are emitted without it. ``tuple_out`` ops return a tuple
    consumed through ``operator.getitem``. ``view``: the result aliases the first operand.
    ``saves_output``: backward reads the result, so it must never be mutated in place.
    ``inplace`` ops mutate their first operand.
    """

    name: str
    target: Any
    arity: int = 1
    extra: Extra = _none
    dtypes: str = "any"
    fits: Fits = broadcastable
    min_dim: int = 0
    tuple_out: bool = False
    view: bool = False
    saves_output: bool = False
    inplace: bool = False
    shape_from: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)


def _unary(name: str, target: Any, dtypes: str = "num", **kw: Any) -> OpSpec:
    return OpSpec(name, target, 1, dtypes=dtypes, **kw)


def _binary(name: str, target: Any, dtypes: str = "num", **kw: Any) -> OpSpec:
    return OpSpec(name, target, 2, dtypes=dtypes, **kw)


# Order matters for shrinking: Hypothesis shrinks a sampled op toward the first entry, so the
# simplest ops come first.
OPS: tuple[OpSpec, ...] = (
    _binary("add", aten.add.Tensor),
    _binary("mul", aten.mul.Tensor),
    _binary("sub", aten.sub.Tensor),
    _unary("neg", aten.neg.default),
    _unary("sin", aten.sin.default, "any"),
    _unary("cos", aten.cos.default, "any"),
    _unary("exp", aten.exp.default, "any", saves_output=True),
    _unary("tanh", aten.tanh.default, "any", saves_output=True),
    _unary("sigmoid", aten.sigmoid.default, "any", saves_output=True),
    _unary("relu", aten.relu.default, saves_output=True),
    _unary("abs", aten.abs.default),
    _unary("gelu", aten.gelu.default, "float"),
    OpSpec("pow", aten.pow.Tensor_Scalar, 1, lambda d, m: _args(2), dtypes="num"),
    OpSpec("clamp", aten.clamp.default, 1, _clamp, dtypes="num"),
    OpSpec("add_scalar", aten.add.Tensor, 1, _scalar, dtypes="num"),
    OpSpec("mul_scalar", aten.mul.Tensor, 1, _scalar, dtypes="num"),
    _unary("clone", aten.clone.default, "any"),
    _binary("div", aten.div.Tensor),
    _binary("maximum", aten.maximum.default),
    _binary("minimum", aten.minimum.default),
    OpSpec("where", aten.where.self, 3, dtypes="bool"),
    _binary("eq", aten.eq.Tensor, "any"),
    _binary("gt", aten.gt.Tensor),
    OpSpec("lt_scalar", aten.lt.Scalar, 1, lambda d, m: _args(0), dtypes="num"),
    _unary("logical_not", aten.logical_not.default, "any"),
    _unary("sum", aten.sum.default, "any"),
    OpSpec("sum_dim", aten.sum.dim_IntList, 1, _dims_keepdim),
    OpSpec("mean_dim", aten.mean.dim, 1, _dims_keepdim, dtypes="float"),
    OpSpec("amax", aten.amax.default, 1, _dims_keepdim, dtypes="num"),
    OpSpec("argmax", aten.argmax.default, 1, _dim_keepdim, dtypes="num"),
    OpSpec("logsumexp", aten.logsumexp.default, 1, _dims_keepdim, dtypes="float"),
    _binary("mm", aten.mm.default, "float", fits=_mm_fits, min_dim=2),
    _binary("matmul", aten.matmul.default, "float", fits=_matmul_fits, min_dim=1),
    _binary("linear", aten.linear.default, "float", fits=_linear_fits, min_dim=1),
    OpSpec("addmm", aten.addmm.default, 3, dtypes="float", fits=_addmm_fits),
    OpSpec("view", aten.view.default, 1, _flatten_view, view=True),
    OpSpec("transpose", aten.transpose.int, 1, _transpose, view=True),
    OpSpec("permute", aten.permute.default, 1, _permute, view=True),
    OpSpec("slice", aten.slice.Tensor, 1, _slice, view=True),
    OpSpec("select", aten.select.int, 1, _select, view=True),
    OpSpec("expand", aten.expand.default, 1, _expand, view=True),
    OpSpec("squeeze", aten.squeeze.dim, 1, _any_dim, view=True),
    OpSpec("unsqueeze", aten.unsqueeze.default, 1, _unsqueeze, view=True),
    OpSpec("detach", aten.detach.default, 1, view=True),
    OpSpec("t", aten.t.default, 1, _t, view=True),
    OpSpec("var_mean", aten.var_mean.dim, 1, _var_mean, dtypes="float", tuple_out=True),
    OpSpec("max_dim", aten.max.dim, 1, _dim_keepdim, dtypes="num", tuple_out=True),
    OpSpec("split", aten.split.Tensor, 1, _split, tuple_out=True, view=True),
    OpSpec("topk", aten.topk.default, 1, _topk, dtypes="num", tuple_out=True),
    OpSpec("sort", aten.sort.default, 1, _sort, dtypes="num", tuple_out=True),
    OpSpec("unbind", aten.unbind.int, 1, _any_dim, tuple_out=True, view=True),
    _unary("zeros_like", aten.zeros_like.default, "any"),
    _unary("ones_like", aten.ones_like.default, "any"),
    OpSpec("ones", aten.ones.default, 1, _ones, shape_from=True),
    OpSpec("full", aten.full.default, 1, _full, shape_from=True),
    OpSpec("arange", aten.arange.default, 1, _arange, shape_from=True),
    # to.dtype returns its input itself when the dtype already matches: treat it as a view.
    OpSpec("to_dtype", aten.to.dtype, 1, _to_dtype, view=True),
    OpSpec("_to_copy", aten._to_copy.default, 1, _to_copy),
)

INPLACE_OPS: tuple[OpSpec, ...] = (
    OpSpec("add_", aten.add_.Tensor, 2, dtypes="num", fits=fits_into, inplace=True),
    OpSpec("mul_", aten.mul_.Tensor, 2, dtypes="num", fits=fits_into, inplace=True),
    # float only: an int tensor cannot take ``*= 0.5`` in place, which fake tensors do not catch.
    OpSpec("mul_scalar_", aten.mul_.Tensor, 1, _scalar, dtypes="float", inplace=True),
    OpSpec("copy_", aten.copy_.default, 2, dtypes="any", fits=fits_into, inplace=True),
    OpSpec("clamp_", aten.clamp_.default, 1, _clamp, dtypes="num", inplace=True),
)

# Unary ops a cond's false branch swaps for the true branch's: same dtypes and shapes out.
SIBLINGS: dict[Any, Any] = {
    aten.sin.default: aten.cos.default,
    aten.cos.default: aten.sin.default,
    aten.exp.default: aten.sigmoid.default,
    aten.sigmoid.default: aten.exp.default,
    aten.tanh.default: aten.sin.default,
}


def dtype_ok(spec: OpSpec, meta: torch.Tensor) -> bool:
    """Does ``meta`` fit as the first operand of ``spec`` by dtype class and rank?"""
    if meta.dim() < spec.min_dim:
        return False
    if spec.dtypes == "float":
        return meta.dtype in FLOAT_DTYPES
    if spec.dtypes == "num":
        return meta.dtype != torch.bool
    if spec.dtypes == "bool":
        return meta.dtype == torch.bool
    return True
