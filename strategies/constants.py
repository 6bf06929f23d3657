"""Tensor constants as torch.export traces them, before its ``lift_constants_pass`` runs.

A module's plain tensor attribute (``self.c = torch.linspace(...)``, neither parameter nor
buffer) reaches the traced graph as a ``get_attr`` of a ``_tensor_constantN`` attribute, one
``get_attr`` per use (``_tensor_constant0_1``); a tensor made in ``forward``
(``torch.tensor([...])``) as one read through ``lift_fresh_copy`` and ``detach_``. A read whose
use is dead code stays behind with no user (``self.c.detach()``, result unused).
Computations on constants alone are traced as ops like any other: what a constant folder
(``const_fold.split_const_subgraphs``, export's ``constant_fold``) folds.
``lift_constants_pass`` turns the attributes into ``CONSTANT_TENSOR`` inputs before export
hands the set-grad pass its graph: only a pass that declares the kind ``constant``
(``Registered.reacts_to``) gets these cases.
"""

from __future__ import annotations

import torch
from fxfuzz.strategies.emit import draw_op
from fxfuzz.strategies.inputs import DTYPES, tensor_value
from fxfuzz.strategies.state import State, Value, pick
from hypothesis import strategies as st
from torch import fx

aten = torch.ops.aten
# What make_fx names the attribute holding a tensor it meets while tracing.
_ATTR = "_tensor_constant"
# What a constant step draws; shrinking moves toward the first: an op on constants alone (on a
# new module constant where there is none yet), the shape a constant folder folds.
# "reread_fold": one more read of an attribute, folded alone, beside its other reads taken by
# ops on other values (one read folded, one live: a folder must keep the attribute).
_KINDS = ("fold", "fold", "attribute", "reread", "literal", "unread", "reread_fold")
# Many ops fit neither a constant's dtype nor its shape: an op taking one is drawn up to this often.
_TRIES = 3


def constant_only(node: fx.Node) -> bool:
    """Is ``node`` a tensor constant or computed from tensor constants alone?"""
    if node.op == "get_attr":
        return True
    inputs = node.all_input_nodes
    return node.op == "call_function" and bool(inputs) and all(constant_only(a) for a in inputs)


def draw_constant(draw: st.DrawFn, s: State) -> None:
    """One constant step in the top-level graph (export lifts only its constants; a HOP body
    draws a plain op instead): an op on constants alone, a new module constant or one more read
    of one, each taken by an op on it and other values, a tensor made in ``forward``, or a
    read nothing uses."""
    if not s.builder.input_specs:  # a HOP body: only the top-level graph has a signature
        draw_op(draw, s)
        return
    kind = draw(st.sampled_from(_KINDS))
    existing = [name for name, attr in s.builder.attrs.items() if isinstance(attr, torch.Tensor)]
    if kind == "fold":
        constants = [v for v in s.pool if constant_only(v.node)] or [_attribute(draw, s, existing)]
        _use(draw, s, kind, constants, constants)
    elif kind in ("reread", "reread_fold") and existing:
        name = draw(st.sampled_from(existing))
        node = s.builder.graph.get_attr(name)
        _annotate(s, node, s.builder.attrs[name])  # type: ignore[arg-type]  # a tensor, as filtered
        s.pool.append(Value(node, alias=True))
        s.rereads.append(s.pool[-1])
        _use(draw, s, kind, [s.pool[-1]], [s.pool[-1]] if kind == "reread_fold" else s.pool)
    elif kind == "literal":
        _literal(draw, s, existing)
    else:
        value = _attribute(draw, s, existing)
        if kind == "unread":
            s.stats["constant:unread"] += 1
        else:
            _use(draw, s, "attribute", [value], s.pool)


def _use(draw: st.DrawFn, s: State, kind: str, first: list[Value], values: list[Value]) -> None:
    """An op whose first operand is one of ``first``, the others from ``values``."""
    drawn = len(s.pool)
    for _ in range(_TRIES):
        draw_op(draw, s, values, first)
        if len(s.pool) > drawn:
            s.stats[f"constant:{kind}"] += 1
            return
    s.stats["constant:unfit"] += 1


def _new(draw: st.DrawFn, s: State, existing: list[str]) -> fx.Node:
    like = pick(draw, s.pool).node.meta["val"]
    # Static, as a module's attribute is: size 1 where the traced value's size is symbolic
    # (broadcasting), so that the constant never specializes a symbol.
    shape = tuple(n if isinstance(n, int) else 1 for n in like.shape)
    value = tensor_value(draw, shape, draw(st.sampled_from(DTYPES)), False)
    node = s.builder.get_attr(f"{_ATTR}{len(existing)}", value)
    _annotate(s, node, value)
    return node


def _attribute(draw: st.DrawFn, s: State, existing: list[str]) -> Value:
    """A module's tensor attribute: never updated in place nor returned by a subgraph."""
    s.pool.append(Value(_new(draw, s, existing), alias=True))
    return s.pool[-1]


def _literal(draw: st.DrawFn, s: State, existing: list[str]) -> None:
    """``torch.tensor([...])`` in forward: make_fx reads it through a fresh copy, which its
    pre-dispatch trace detaches in place (``detach_``) and its functional trace does not: a
    graph without in-place updates (the functional domain) gets the latter."""
    node = _new(draw, s, existing)
    b = s.builder
    read = b.call(aten.lift_fresh_copy.default, [node])
    if s.inplace_ok:
        read = b.call(aten.detach_.default, [read])
    s.pool.append(Value(read, mutable=True))
    s.stats["constant:literal"] += 1


def _annotate(s: State, node: fx.Node, value: torch.Tensor) -> None:
    node.meta["val"] = s.builder.fake_mode.from_tensor(value, static_shapes=True)
