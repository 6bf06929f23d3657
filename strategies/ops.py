"""The ATen op table: which overloads graph cases use, and the rules that keep calls valid.

Each ``OpSpec`` says which operands fit (dtype class, rank, how a second operand must relate
to the first) and draws the op's non-tensor arguments. Output metas come from fake-tensor
propagation in the builder, which also rejects the rare call these rules let through.
"""

from __future__ import annotations

import math
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


# Scalars an op takes beside a tensor. Shrinking moves toward the first. Equal-valued twins of
# other types or signs (``1``, ``1.0``, ``True``; ``0.0``, ``-0.0``) are what a pass comparing
# arguments by ``==`` (a CSE keyed on a dict, a pattern matching a literal) takes for one value:
# ``x * 1`` is int64 for an int64 ``x`` where ``x * 1.0`` is float, and ``x * 0.0`` keeps the sign
# of ``x`` where ``x * -0.0`` flips it. NaN and infinity are last: rarer, and a NaN hides
# differences in what it reaches.
SCALARS: tuple[Any, ...] = (2, -1, 0.5, 1, 1.0, True, 0.0, -0.0, math.nan, math.inf)
# The other scalars equal to each (``==``) but told apart by type or sign: what a repeated call
# may take in place of its original's (fxfuzz.strategies.emit.draw_repeat).
TWINS: dict[str, tuple[Any, ...]] = {
    "1": (1.0, True),
    "1.0": (1, True),
    "True": (1, 1.0),
    "0.0": (-0.0, 0),
    "-0.0": (0.0, 0),
}


def twins(value: Any) -> tuple[Any, ...]:
    """The equal-valued twins of a scalar argument (none for a tensor, a node or a list);
    keyed by ``repr`` since ``1``, ``1.0`` and ``True`` are one dict key."""
    return TWINS.get(repr(value), ()) if isinstance(value, (bool, int, float)) else ()


def _scalar(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _args(draw(st.sampled_from(SCALARS)))


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


def _same_but_one(chosen: list[torch.Tensor], other: torch.Tensor) -> bool:
    """``cat``'s operands: one dtype and rank, sizes equal but in at most one dim."""
    first = chosen[0]
    if other.dtype != first.dtype or other.dim() != first.dim() or first.dim() == 0:
        return False
    return sum(a != b for a, b in zip(first.shape, other.shape)) <= 1


def _same_shape(chosen: list[torch.Tensor], other: torch.Tensor) -> bool:
    return other.dtype == chosen[0].dtype and other.shape == chosen[0].shape


def _bmm_fits(chosen: list[torch.Tensor], other: torch.Tensor) -> bool:
    a = chosen[0]
    return other.dim() == 3 and a.shape[0] == other.shape[0] and a.shape[2] == other.shape[1] and a.dtype == other.dtype


def _batched_matmul_fits(chosen: list[torch.Tensor], other: torch.Tensor) -> bool:
    """A matmul with a batch: one operand of rank 3 or more, the other's rows its columns."""
    a = chosen[0]
    if other.dim() < 2 or a.dtype != other.dtype or max(a.dim(), other.dim()) < 3 or a.shape[-1] != other.shape[-2]:
        return False
    try:
        torch.broadcast_shapes(a.shape[:-2], other.shape[:-2])
    except RuntimeError:
        return False
    return True


def _cat(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    differ = [d for d, (a, b) in enumerate(zip(metas[0].shape, metas[1].shape)) if a != b]
    return _args(differ[0] if differ else _dim(draw, metas[0]))


def _stack(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _args(draw(st.integers(0, metas[0].dim())))


def _dim_only(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    return None if metas[0].dim() == 0 else _args(_dim(draw, metas[0]))


def _softmax(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    return None if metas[0].dim() == 0 else _args(draw(st.sampled_from([-1, _dim(draw, metas[0])])))


def _layer_norm(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    # As export records ``nn.LayerNorm(n)`` without its affine parameters (functional form).
    return None if metas[0].dim() == 0 else _args([metas[0].shape[-1]], None, None, 1e-5, False)


def _same_view(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """``x.view(x.shape)``: a view to the shape it has, what Inductor's pointless-view pattern removes."""
    return _args(list(metas[0].shape)) if metas[0].is_contiguous() else None


def _eq_scalar(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _args(draw(st.sampled_from(SCALARS[:8])))


def _probability(draw: st.DrawFn) -> float:
    return draw(st.sampled_from([0.5, 0.0, 0.25, 1.0]))


def _dropout(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    # train=False is dropout as the identity: no draw at all.
    return _args(_probability(draw), draw(st.sampled_from([True, True, True, False])))


def _bernoulli_p(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _args(_probability(draw))


def _like(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Keyword arguments as export records ``torch.rand_like(x)``."""
    return (), {"pin_memory": False}


def _random_factory(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (list(metas[0].shape),), _factory_kwargs(draw)


def _randperm(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    if metas[0].dim() == 0:
        return None
    return (metas[0].shape[0],), {"device": CPU, "pin_memory": False}


@dataclass(frozen=True)
class OpSpec:
    """One ATen overload and the rules for drawing a valid call of it.

    ``arity`` tensor operands come first (``dtypes``: ``float``, ``num`` (no bool), ``any`` or
    ``bool`` for the first operand), each later one fitting those before it by ``fits``; then
    ``extra`` draws the remaining arguments. ``shape_from`` ops (factories) read only the
    first operand's shape and are emitted without it. ``tuple_out`` ops return a tuple
    consumed through ``operator.getitem``. ``view``: the result aliases the first operand.
    ``saves_output``: backward reads the result, so it must never be mutated in place.
    ``inplace`` ops mutate their first operand. ``packed`` ops take their tensor operands as one
    list, their first argument (``cat``, ``stack``).
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
    packed: bool = False
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

# Ops Inductor's patterns and torch's graph passes rewrite, drawn by the ``motif`` step kind
# (fxfuzz.strategies.motifs) alone or in the units those patterns match, never by a plain op
# step: a pass that does not declare the kind keeps its mix of ops. Integer and boolean chains
# (``cumsum`` of int64, ``eq.Scalar``, ``any.dim``) included.
PATTERN_OPS: tuple[OpSpec, ...] = (
    OpSpec("cat", aten.cat.default, 2, _cat, fits=_same_but_one, packed=True, min_dim=1),
    OpSpec("stack", aten.stack.default, 2, _stack, fits=_same_shape, packed=True),
    _binary("bmm", aten.bmm.default, "float", fits=_bmm_fits, min_dim=3),
    _binary("batched_matmul", aten.matmul.default, "float", fits=_batched_matmul_fits, min_dim=2),
    OpSpec("softmax", aten.softmax.int, 1, _softmax, dtypes="float", saves_output=True),
    OpSpec("log_softmax", aten.log_softmax.int, 1, _softmax, dtypes="float", saves_output=True),
    OpSpec("layer_norm", aten.layer_norm.default, 1, _layer_norm, dtypes="float"),
    OpSpec("cumsum", aten.cumsum.default, 1, _dim_only, dtypes="num"),
    OpSpec("eq_scalar", aten.eq.Scalar, 1, _eq_scalar, dtypes="any"),
    OpSpec("any_dim", aten.any.dim, 1, _dim_only, dtypes="any"),
    OpSpec("same_view", aten.view.default, 1, _same_view, view=True),
)

# Random ops (each call draws from the default generator and advances it), drawn by the
# ``random`` step kind alone (fxfuzz.strategies.motifs.draw_random); a pass that does not declare
# it keeps its mix. ``shape_from`` ones are factories.
ATEN_RANDOM_OPS: tuple[OpSpec, ...] = (
    OpSpec("dropout", aten.dropout.default, 1, _dropout, dtypes="float"),
    OpSpec("rand_like", aten.rand_like.default, 1, _like, dtypes="float"),
    OpSpec("randn_like", aten.randn_like.default, 1, _like, dtypes="float"),
    OpSpec("bernoulli_p", aten.bernoulli.p, 1, _bernoulli_p, dtypes="float"),
    OpSpec("rand", aten.rand.default, 1, _random_factory, shape_from=True),
    OpSpec("randn", aten.randn.default, 1, _random_factory, shape_from=True),
    OpSpec("randperm", aten.randperm.default, 1, _randperm, shape_from=True),
)
# The Python-level functions Dynamo and ``symbolic_trace`` record for the same calls: options of
# the export domain's random step (no domain draws torch-level graphs; they run, propagate and
# save as the ATen ones) for a pass that declares ``torch_level`` alone, since a pass its callers
# hand ATen graphs never meets them (export's ``constant_fold`` keeps a draw by its ATen tag,
# ``nondeterministic_seeded``, and folds a torch-level one). Last: shrinking moves toward ATen.
TORCH_RANDOM_OPS: tuple[OpSpec, ...] = (
    OpSpec("torch.rand_like", torch.rand_like, 1, dtypes="float"),
    OpSpec("torch.randn_like", torch.randn_like, 1, dtypes="float"),
    OpSpec("F.dropout", torch.nn.functional.dropout, 1, _dropout, dtypes="float"),
    OpSpec("torch.bernoulli", torch.bernoulli, 1, _bernoulli_p, dtypes="float"),
    OpSpec("torch.rand", torch.rand, 1, _random_factory, shape_from=True),
    OpSpec("torch.randn", torch.randn, 1, _random_factory, shape_from=True),
    OpSpec("torch.randperm", torch.randperm, 1, _randperm, shape_from=True),
)
RANDOM_OPS = (*ATEN_RANDOM_OPS, *TORCH_RANDOM_OPS)

# Overloads the motif units (fxfuzz.strategies.motifs) call besides those of the tables above.
MOTIF_TARGETS = (
    aten.scaled_dot_product_attention.default,
    aten.tril.default,
    aten.masked_fill.Scalar,
    aten.conv2d.default,
    aten.batch_norm.default,
    aten.fill_.Scalar,
    aten.slice_scatter.default,
    aten.select_scatter.default,
    aten.remainder.Scalar,
    aten.scatter.src,
    aten.embedding.default,
    aten.index_put.default,
    aten.index.Tensor,
)
# Every ATen overload the op and motif steps draw (and the torch-level random functions): the
# tables above and the units' own. Other steps call a few of their own (size steps in
# fxfuzz.strategies.symbolic, constants' reads in fxfuzz.strategies.constants, export's
# ``_assert_tensor_metadata`` in fxfuzz.strategies.emit).
DRAWN_TARGETS = frozenset(
    {spec.target for spec in (*OPS, *INPLACE_OPS, *PATTERN_OPS, *RANDOM_OPS)} | set(MOTIF_TARGETS)
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
