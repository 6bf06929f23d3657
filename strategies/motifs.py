"""Subgraphs Inductor's pattern passes and torch's graph passes rewrite, drawn as units.

A random op step almost never composes a pattern: attention, a softmax's amax/sub/exp/sum/div
chain or conv-bn-relu takes several calls on the right operands in the right order. The
``motif`` step kind (``regions.MOTIF``) draws one such unit, or one op of ``ops.PATTERN_OPS``
alone; each unit is emitted as pre-dispatch export records it (``softmax.int``, ``conv2d``,
``layer_norm``, ``scaled_dot_product_attention``; the ``aten`` domain lowers them to
``_softmax``, ``convolution``...). A unit whose first calls fit and a later one does not stays
as far as it got (``motif_unfinished``), like any rejected op. Shrinking moves the step toward
a plain op, so a failure that needs no unit shrinks to a case without one.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch
from fxfuzz.strategies.emit import draw_op
from fxfuzz.strategies.ops import (
    ATEN_RANDOM_OPS,
    CPU,
    FLOAT_DTYPES,
    PATTERN_OPS,
    RANDOM_OPS,
    fits_into,
    size_hint,
    twins,
)
from fxfuzz.strategies.state import State, Value, pick, rarely
from hypothesis import strategies as st
from torch import fx

aten = torch.ops.aten


class _Unfit(Exception):
    """A call of the unit the operands drawn do not fit: the unit ends there."""


def _meta(v: Value | fx.Node) -> torch.Tensor:
    return (v.node if isinstance(v, Value) else v).meta["val"]


def _call(
    s: State, target: Any, args: list[Any], kwargs: dict[str, Any] | None = None, pooled: bool = True, **value: bool
) -> fx.Node:
    """Emit one call of a unit; its result joins the pool where ``pooled`` (``value``: the
    Value's flags). A tuple result, or a view the unit then updates, stays out of it."""
    node = s.builder.try_call(target, args, kwargs)
    if node is None:
        raise _Unfit(str(target))
    if pooled:
        s.pool.append(Value(node, **value))
    return node


def _items(s: State, node: fx.Node, alias: bool) -> list[fx.Node]:
    """Export unpacks every element of a tuple result through getitem."""
    items = [s.builder.call(operator.getitem, [node, i]) for i in range(len(node.meta["val"]))]
    s.pool += [Value(n, alias=alias) for n in items]
    return items


def _values(s: State, ok: Callable[[torch.Tensor], bool]) -> list[Value]:
    return [v for v in s.pool if isinstance(_meta(v), torch.Tensor) and ok(_meta(v))]


def _first(draw: st.DrawFn, s: State, ok: Callable[[torch.Tensor], bool]) -> Value:
    candidates = _values(s, ok)
    if not candidates:
        raise _Unfit("no operand")
    return pick(draw, candidates)


def _floating(min_dim: int) -> Callable[[torch.Tensor], bool]:
    return lambda m: m.dtype in FLOAT_DTYPES and m.dim() >= min_dim


def _static(m: torch.Tensor) -> bool:
    return all(isinstance(n, int) for n in m.shape)


def _solid(m: torch.Tensor) -> bool:
    """Static, at least 1-d, no size 0 (an empty slice makes some): every unit's index or
    kernel size is drawn below a size."""
    return m.dim() >= 1 and all(isinstance(n, int) and n > 0 for n in m.shape)


def _dim(draw: st.DrawFn, m: torch.Tensor) -> int:
    return draw(st.integers(0, m.dim() - 1))


def _factory(s: State, target: Any, shape: list[int], *args: Any, dtype: torch.dtype | None = None) -> fx.Node:
    kwargs: dict[str, Any] = {"device": CPU, "pin_memory": False}
    if dtype is not None:
        kwargs["dtype"] = dtype
    return _call(s, target, [shape, *args], kwargs, mutable=True)


def _top_level(s: State) -> bool:
    """Random draws only in the top-level graph (``random_ops``): cond and map bodies are
    traced again by torch, and what a body draws would be another question."""
    return bool(s.builder.input_specs)


def attention(draw: st.DrawFn, s: State) -> None:
    """``softmax(q @ k.T * scale [+ mask]) [dropout] @ v`` written out, or one
    ``scaled_dot_product_attention`` call, with and without mask, scale and dropout: the
    shapes Inductor's sfdp patterns replace."""
    q = _first(draw, s, _floating(2))
    qm = _meta(q)
    same = [v for v in _values(s, lambda m: m.dtype == qm.dtype and m.shape == qm.shape)] or [q]
    k, v = pick(draw, same), pick(draw, same)
    n = qm.shape[-2]
    mask = draw(st.sampled_from(["none", "causal", "additive"]))
    scale = draw(st.sampled_from([None, 0.5]))
    p = draw(st.sampled_from([0.0, 0.5])) if _top_level(s) else 0.0
    attn_mask = None
    if mask == "causal" and _static(qm):
        attn_mask = _call(s, aten.tril.default, [_factory(s, aten.ones.default, [n, n], dtype=torch.bool)])
    elif mask == "additive" and _static(qm):
        attn_mask = _factory(s, aten.full.default, [n, n], -0.5, dtype=qm.dtype)
    if draw(st.booleans()):
        kwargs: dict[str, Any] = {}
        if attn_mask is not None:
            kwargs["attn_mask"] = attn_mask
        if p:
            kwargs["dropout_p"] = p
        if scale is not None:
            kwargs["scale"] = scale
        _call(s, aten.scaled_dot_product_attention.default, [q.node, k.node, v.node], kwargs)
        s.stats["motif:sdpa"] += 1
        return
    scores = _call(s, aten.matmul.default, [q.node, _call(s, aten.transpose.int, [k.node, -2, -1], alias=True)])
    factor = scale if scale is not None else 1 / math.sqrt(size_hint(qm.shape[-1]))
    scores = _call(
        s, *((aten.mul.Tensor, [scores, factor]) if draw(st.booleans()) else (aten.div.Tensor, [scores, 1 / factor]))
    )
    if attn_mask is not None and attn_mask.meta["val"].dtype == torch.bool:
        scores = _call(s, aten.masked_fill.Scalar, [scores, _call(s, aten.logical_not.default, [attn_mask]), -math.inf])
    elif attn_mask is not None:
        scores = _call(s, aten.add.Tensor, [scores, attn_mask])
    weights = _call(s, aten.softmax.int, [scores, -1])
    if p:
        weights = _call(s, aten.dropout.default, [weights, p, True])
    _call(s, aten.matmul.default, [weights, v.node])
    s.stats["motif:attention"] += 1


def softmax_chain(draw: st.DrawFn, s: State) -> None:
    """A softmax written out as its decomposition records it: amax, sub, exp, sum, div (the
    partial-softmax patterns), or without the amax (a naive one)."""
    x = _first(draw, s, _floating(1))
    d = draw(st.sampled_from([-1, _dim(draw, _meta(x))]))
    shifted = x.node
    if not rarely(draw, 4):
        top = _call(s, aten.amax.default, [x.node, [d], True])
        shifted = _call(s, aten.sub.Tensor, [x.node, top])
    e = _call(s, aten.exp.default, [shifted])
    _call(s, aten.div.Tensor, [e, _call(s, aten.sum.dim_IntList, [e, [d], True])])
    s.stats["motif:softmax_chain"] += 1


def conv_bn_relu(draw: st.DrawFn, s: State) -> None:
    """conv2d, batch_norm (training with batch statistics, or eval with running ones) and relu
    on a float32/float64 value viewed as an image, weights made by factories."""
    x = _first(
        draw,
        s,
        lambda m: m.dtype in (torch.float32, torch.float64) and m.dim() >= 2 and m.is_contiguous() and _solid(m),
    )
    m = _meta(x)
    w_ = m.shape[-1]
    h = m.numel() // w_
    img = _call(s, aten.view.default, [x.node, [1, 1, h, w_]], alias=True)
    out, k = draw(st.integers(1, 2)), draw(st.integers(1, min(2, h, w_)))
    weight = _factory(s, aten.full.default, [out, 1, k, k], 0.5, dtype=m.dtype)
    bias = _factory(s, aten.full.default, [out], -0.25, dtype=m.dtype) if draw(st.booleans()) else None
    conv = _call(s, aten.conv2d.default, [img, weight, bias] + ([[1, 1], [1, 1]] if draw(st.booleans()) else []))
    if draw(st.booleans()):
        normed = _call(s, aten.batch_norm.default, [conv, None, None, None, None, True, 0.1, 1e-5, False])
    else:
        mean = _factory(s, aten.full.default, [out], 0.1, dtype=m.dtype)
        var = _factory(s, aten.full.default, [out], 2.0, dtype=m.dtype)
        normed = _call(s, aten.batch_norm.default, [conv, None, None, mean, var, False, 0.1, 1e-5, False])
    _call(s, aten.relu.default, [normed])
    s.stats["motif:conv_bn_relu"] += 1


def split_cat(draw: st.DrawFn, s: State) -> None:
    """split then cat of the pieces (in order, reversed, or one changed), or unbind then stack:
    what Inductor's split/cat patterns fold."""
    x = _first(draw, s, _solid)
    m = _meta(x)
    d = _dim(draw, m)
    if draw(st.booleans()):
        pieces = _items(s, _call(s, aten.unbind.int, [x.node, d], pooled=False), alias=True)
        _call(s, aten.stack.default, [pieces, d])
        s.stats["motif:unbind_stack"] += 1
        return
    pieces = _items(s, _call(s, aten.split.Tensor, [x.node, draw(st.integers(1, 2)), d], pooled=False), alias=True)
    how = draw(st.sampled_from(["same", "reversed", "changed"]))
    if how == "reversed":
        pieces = pieces[::-1]
    elif how == "changed" and m.dtype != torch.bool:
        pieces[0] = _call(s, aten.neg.default, [pieces[0]], mutable=True)
    _call(s, aten.cat.default, [pieces, d])
    s.stats["motif:split_cat"] += 1


def linear_x3(draw: st.DrawFn, s: State) -> None:
    """Three linear calls on one input (q, k and v projections), weights from the pool where
    one fits, else made by a factory: what the batched-linear patterns merge."""
    # Static: a factory's weight of a symbolic size would specialize the symbol.
    x = _first(draw, s, lambda m: m.dtype in FLOAT_DTYPES and m.dim() >= 1 and _static(m))
    m = _meta(x)
    e = m.shape[-1]
    weights = _values(s, lambda w: w.dim() == 2 and w.dtype == m.dtype and w.shape[1] == e)
    for _ in range(3):
        if bool(weights) and draw(st.booleans()):  # bool(): else mypy types draw() by the left operand
            weight = pick(draw, weights).node
        else:
            weight = _factory(s, aten.full.default, [draw(st.integers(1, 3)), e], 0.25, dtype=m.dtype)
        _call(s, aten.linear.default, [x.node, weight])
    s.stats["motif:linear_x3"] += 1


def view_round_trip(draw: st.DrawFn, s: State) -> None:
    """A view to another shape and back, a permute and its inverse, or a transpose twice: what
    the pointless view/permute patterns remove."""
    x = _first(draw, s, lambda m: m.dim() >= 1)
    m = _meta(x)
    how = draw(st.sampled_from(["view", "permute", "transpose"]))
    if how == "view" and m.is_contiguous():
        flat = _call(s, aten.view.default, [x.node, [-1]], alias=True)
        _call(s, aten.view.default, [flat, list(m.shape)], alias=True)
    elif how == "permute" or m.dim() < 2:
        order = draw(st.permutations(range(m.dim())))
        inverse = sorted(range(m.dim()), key=order.__getitem__)
        _call(
            s, aten.permute.default, [_call(s, aten.permute.default, [x.node, order], alias=True), inverse], alias=True
        )
    else:
        a, b = draw(st.sampled_from([(0, 1), (-2, -1), (0, -1)]))
        _call(s, aten.transpose.int, [_call(s, aten.transpose.int, [x.node, a, b], alias=True), a, b], alias=True)
    s.stats["motif:view_round_trip"] += 1


def full_cumsum(draw: st.DrawFn, s: State) -> None:
    """``torch.full(shape, v).cumsum(d)``, in an int, float or bool dtype: the cumsum pattern
    rewrites it as an arange."""
    m = _meta(_first(draw, s, _solid))
    dtype = draw(st.sampled_from([None, torch.int64, torch.float32, torch.bool]))
    filled = _factory(s, aten.full.default, list(m.shape), draw(st.sampled_from([1, 1.0, True, 2])), dtype=dtype)
    _call(s, aten.cumsum.default, [filled, _dim(draw, m)], mutable=True)
    s.stats["motif:full_cumsum"] += 1


def slice_assignment(draw: st.DrawFn, s: State) -> None:
    """``y = x.clone(); y[a:b] = src`` (or ``y[i] = src``) as export records it, a copy_ into a
    view of the clone, where in-place updates are drawn; else its functional form,
    ``slice_scatter`` / ``select_scatter`` (what reinplace turns back into the former)."""
    x = _first(draw, s, _solid)
    m = _meta(x)
    d = _dim(draw, m)
    size = m.shape[d]
    select = draw(st.booleans())
    start = draw(st.integers(0, size - 1))
    end = draw(st.integers(start + 1, size))
    if s.inplace_ok and draw(st.booleans()):
        clone = s.builder.try_call(aten.clone.default, [x.node])
        if clone is None:
            raise _Unfit("clone")
        view = _call(
            s,
            *((aten.select.int, [clone, d, start]) if select else (aten.slice.Tensor, [clone, d, start, end])),
            pooled=False,
        )
        sources = [v for v in s.pool if fits_into([_meta(view)], _meta(v)) and v.node is not x.node]
        if bool(sources) and draw(st.booleans()):  # bool(): as above
            s.builder.call(aten.copy_.default, [view, pick(draw, sources).node])
        else:
            s.builder.call(aten.fill_.Scalar, [view, draw(st.sampled_from([1.0, 0, -0.0]))])
        s.pool.append(Value(clone))
        s.stats["motif:slice_assign_inplace"] += 1
        return
    part = _call(
        s,
        *((aten.select.int, [x.node, d, start]) if select else (aten.slice.Tensor, [x.node, d, start, end])),
        alias=True,
    )
    src = _call(s, aten.neg.default if m.dtype != torch.bool else aten.logical_not.default, [part], mutable=True)
    if select:
        _call(s, aten.select_scatter.default, [x.node, src, d, start], mutable=True)
    else:
        _call(s, aten.slice_scatter.default, [x.node, src, d, start, end], mutable=True)
    s.stats["motif:slice_scatter"] += 1


def _indices(draw: st.DrawFn, s: State, n: int) -> fx.Node:
    """An int64 index tensor with values in ``[0, n)``: an int64 value of the pool taken modulo
    ``n`` (an integer chain), an arange, or (top level only) a random permutation."""
    ints = _values(s, lambda m: m.dtype == torch.int64 and m.dim() >= 1)
    how = draw(st.sampled_from(["arange", "remainder", "randperm"]))
    if how == "remainder" and ints:
        return _call(s, aten.remainder.Scalar, [pick(draw, ints).node, n], mutable=True)
    if how == "randperm" and _top_level(s):
        return _call(s, aten.randperm.default, [n], {"device": CPU, "pin_memory": False}, mutable=True)
    return _call(s, aten.arange.default, [n], {"device": CPU, "pin_memory": False}, mutable=True)


def indexing(draw: st.DrawFn, s: State) -> None:
    """Reads and writes through integer indices: ``x[idx]`` (index), ``x.index_put`` (with and
    without accumulate), ``scatter`` along a dim with ``sort``'s indices, ``embedding``, and a
    boolean chain on the indices (``eq.Scalar``, ``any.dim``)."""
    x = _first(draw, s, lambda m: _solid(m) and m.dtype != torch.bool)
    m = _meta(x)
    how = draw(st.sampled_from(["index", "index_put", "scatter", "embedding", "bool_chain"]))
    if how == "scatter":
        d = _dim(draw, m)
        order = _call(s, aten.sort.default, [x.node, d], pooled=False)
        _, positions = _items(s, order, alias=False)
        _call(s, aten.scatter.src, [x.node, d, positions, x.node], mutable=True)
    elif how == "embedding" and m.dim() == 2 and m.dtype in FLOAT_DTYPES:
        _call(s, aten.embedding.default, [x.node, _indices(draw, s, m.shape[0])], mutable=True)
    elif how == "bool_chain":
        idx = _indices(draw, s, m.shape[0])
        _call(s, aten.any.dim, [_call(s, aten.eq.Scalar, [idx, draw(st.sampled_from([0, 0.0, True]))]), 0])
    else:
        idx = _indices(draw, s, m.shape[0])
        if how == "index_put":
            row = _call(s, aten.select.int, [x.node, 0, 0], alias=True)
            _call(s, aten.index_put.default, [x.node, [idx], row, draw(st.booleans())], mutable=True)
        else:
            _call(s, aten.index.Tensor, [x.node, [idx]], mutable=True)
    s.stats[f"motif:{how}"] += 1


def scalar_twins(draw: st.DrawFn, s: State) -> None:
    """One call with a scalar and the same call with an equal-valued twin of it (``x * 1`` and
    ``x * 1.0``; ``x + 0.0`` and ``x + -0.0``; ``full(shape, 1)`` and ``full(shape, True)``):
    equal by ``==``, not in dtype or sign, what a pass comparing arguments by ``==`` merges."""
    x = _first(draw, s, lambda m: m.dtype != torch.bool)
    m = _meta(x)
    # The forms where the twins' results differ come first: full's dtype follows its value's
    # type, a product's sign follows a zero's; a sum or comparison differs less often.
    how = draw(st.sampled_from(["full", "mul", "add", "eq"]))
    value = draw(st.sampled_from([1, True, 1.0] if how == "full" else [0.0, -0.0, 1, 1.0, True]))
    twin = draw(st.sampled_from(twins(value)))
    if how == "full":
        if not _static(m):
            raise _Unfit("symbolic shape")
        _factory(s, aten.full.default, list(m.shape), value)
        _factory(s, aten.full.default, list(m.shape), twin)
    else:
        target = {"mul": aten.mul.Tensor, "add": aten.add.Tensor, "eq": aten.eq.Scalar}[how]
        _call(s, target, [x.node, value], mutable=True)
        _call(s, target, [x.node, twin], mutable=True)
    s.repeats.append((s.pool[-2], s.pool[-1]))
    s.twins.append(s.repeats[-1])
    s.stats["motif:scalar_twins"] += 1
    s.stats["repeat:twin"] += 1


MOTIFS: dict[str, Callable[[st.DrawFn, State], None]] = {
    "attention": attention,
    "softmax_chain": softmax_chain,
    "conv_bn_relu": conv_bn_relu,
    "split_cat": split_cat,
    "linear_x3": linear_x3,
    "view_round_trip": view_round_trip,
    "full_cumsum": full_cumsum,
    "slice_assignment": slice_assignment,
    "indexing": indexing,
    "scalar_twins": scalar_twins,
}


def draw_motif(draw: st.DrawFn, s: State) -> None:
    """One motif step: a single op of ``ops.PATTERN_OPS`` (first: shrinking moves there, then
    to a plain op), or one of the units above."""
    # Scalar twins twice: the one unit a merge of equal calls goes wrong on without any pattern.
    kind = draw(st.sampled_from(("op", *MOTIFS, "scalar_twins")))
    if kind == "op":
        if draw_op(draw, s, table=PATTERN_OPS) is not None:
            s.stats["motif:op"] += 1
        return
    try:
        MOTIFS[kind](draw, s)
    except _Unfit:
        s.stats["motif_unfinished"] += 1


def draw_random(draw: st.DrawFn, s: State) -> None:
    """One random step in the top-level graph: a call of ``ops.ATEN_RANDOM_OPS`` (and of
    ``ops.TORCH_RANDOM_OPS`` where the pass declares ``torch_level``), or the same call twice
    (two draws a pass must not merge); a HOP body draws a plain op instead."""
    if not _top_level(s):
        draw_op(draw, s)
        return
    twice = draw(st.booleans())
    node = draw_op(draw, s, table=RANDOM_OPS if s.torch_level else ATEN_RANDOM_OPS)
    if node is None:
        return
    assert callable(node.target)  # a random op of the table
    s.stats[f"random:{'twice' if twice else 'once'}"] += 1
    if twice:
        again = s.builder.try_call(node.target, node.args, dict(node.kwargs))
        if again is not None:
            s.pool.append(Value(again, mutable=True))
