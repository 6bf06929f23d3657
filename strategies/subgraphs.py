"""Nested subgraphs: ``torch.cond`` branches and ``map`` bodies with their own grad regions,
and (adversarial) regions already wrapped by ``wrap_with_set_grad_enabled``.

They take the form pre-dispatch export gives them: a get_attr of a GraphModule, a HOP call
node, and an ``operator.getitem`` per result.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from fxfuzz.core.case import copy_graph_module
from fxfuzz.strategies.builder import SET_GRAD_ENABLED, GraphBuilder
from fxfuzz.strategies.names import attr_name
from fxfuzz.strategies.ops import SIBLINGS
from fxfuzz.strategies.state import State, Value, count_region_shapes, pick
from hypothesis import strategies as st
from torch import fx

aten = torch.ops.aten
hop = torch.ops.higher_order

try:  # private to torch's cond (2.13): how its fake implementation merges the branches' metas
    from torch._higher_order_ops.cond import _merge_output
except ImportError:
    _merge_output = None  # type: ignore[assignment]

# draw, subgraph state, depth: fills a subgraph with steps (regions.draw_block).
Body = Callable[[st.DrawFn, State, int], None]


def _subgraph(
    draw: st.DrawFn, s: State, operands: list[torch.Tensor], depth: int, body: Body, grad_mode: bool
) -> tuple[fx.GraphModule, int]:
    """A subgraph taking ``operands`` (metas), filled by ``body``; returns it and its output count.

    Its outputs are values it computed, never its inputs or views of them: cond and map
    reject subgraphs whose outputs alias their inputs.
    """
    b = GraphBuilder(grad_mode, s.builder.fake_mode)
    b.autocast = list(s.builder.autocast)
    sub = State(b, s.domain, s.stats, s.budget, inplace_ok=False, max_depth=depth, reacts_to=s.reacts_to)
    for i, meta in enumerate(operands):
        sub.pool.append(Value(b.placeholder_like(f"arg{i}_1", meta), alias=True))
    body(draw, sub, depth)
    s.max_depth = max(s.max_depth, sub.max_depth)
    fresh = [v for v in sub.pool if not v.alias]
    if not fresh:
        fresh = [Value(b.call(aten.clone.default, [sub.pool[0].node]))]
    outs = [pick(draw, fresh).node for _ in range(draw(st.integers(1, 2)))]
    gm = b.finish_subgraph(list(dict.fromkeys(outs)))
    count_region_shapes(sub)
    return gm, len(dict.fromkeys(outs))


def _results(s: State, node: fx.Node | None, count: int, kind: str) -> None:
    if node is None:
        s.stats[f"hop_rejected:{kind}"] += 1
        return
    s.stats[f"hop:{kind}"] += 1
    for i in range(count):
        s.pool.append(Value(s.builder.call(operator.getitem, [node, i])))


def _operands(draw: st.DrawFn, s: State) -> list[Value]:
    return list({id(v.node): v for v in (pick(draw, s.pool) for _ in range(draw(st.integers(1, 2))))}.values())


def _predicate(draw: st.DrawFn, s: State) -> fx.Node:
    """A 0-d bool: an existing one, or ``x.sum() > 0`` as user code writes it."""
    ready = [v for v in s.pool if v.node.meta["val"].dtype == torch.bool and v.node.meta["val"].dim() == 0]
    if bool(ready) and draw(st.booleans()):  # bool(): else mypy types draw() by the left operand
        return pick(draw, ready).node
    total = s.builder.call(aten.sum.default, [pick(draw, s.pool).node])
    return s.builder.call(aten.gt.Scalar, [total, 0])


def _sibling(gm: fx.GraphModule) -> fx.GraphModule:
    """The other cond branch: the same graph with some unary ops swapped (sin for cos...),
    so both branches return identical metadata yet compute different values."""
    other = copy_graph_module(gm)
    for mod in other.modules():
        if isinstance(mod, fx.GraphModule):
            for n in mod.graph.nodes:
                if n.op == "call_function" and n.target in SIBLINGS:
                    n.target = SIBLINGS[n.target]
    other.recompile()  # regenerates the nested graphs' code too
    return other


def hop_outputs(
    grad_modes: tuple[bool, bool],
    outputs: list[torch.Tensor],
    operands: list[torch.Tensor],
    fake_mode: Any,
    rows: Any = None,
) -> tuple:
    """The ``meta['val']`` torch's fake tracing gives a cond (``rows`` None) or a map_impl call
    (``rows``: the length of its mapped dim), derived from the metas of its subgraph's
    ``outputs`` without tracing the subgraph again.

    Shapes, strides and dtypes are those torch's fake implementations derive from the same
    metas: a cond merges its branches' with torch's own ``_merge_output`` (which refuses
    outputs that are not dense, as cond does; both branches have the same metas), a map
    stacks a row per element. requires_grad holds where an operand requires it, the dtype can
    and grad is on both when the HOP is called and once its subgraph ran (``grad_modes``):
    both HOPs are autograd Functions, which the autograd key reaches only with grad on and
    which mark their outputs after running the subgraph, so a toggle it leaves set counts.
    tests/strategies/test_strategies_regions.py checks all of it against torch's tracing."""
    differentiable = all(grad_modes) and any(o.requires_grad for o in operands)
    vals = []
    for out in outputs:
        if rows is None:
            val = _merge_output(out, out, fake_mode)
        else:
            val = out.detach().unsqueeze(0).expand(rows, *out.shape).clone(memory_format=torch.contiguous_format)
        if differentiable and (val.is_floating_point() or val.is_complex()):
            with torch.enable_grad():
                # Not a leaf: an in-place op on it is then as legal as on torch's output.
                val = val.requires_grad_().clone()
        vals.append(val)
    return tuple(vals)


def mode_left(gm: fx.GraphModule, mode: bool) -> bool:
    """The grad mode running ``gm`` from ``mode`` leaves set: its toggles' and those of the cond
    and map subgraphs it calls, whose toggles leak out as well (a cond's false branch is its
    true branch's sibling; wrap_with_set_grad_enabled restores its own)."""
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is SET_GRAD_ENABLED:
            mode = n.args[0]
        elif n.target in (hop.cond, hop.map_impl):
            mode = mode_left(getattr(gm, n.args[1 if n.target is hop.cond else 0].target), mode)
    return mode


def _hop_call(
    s: State, target: Any, args: list[Any], gm: fx.GraphModule, operands: list[torch.Tensor]
) -> fx.Node | None:
    """The cond or map_impl call node, its metas from its subgraph's (``hop_outputs``), or None
    where torch would refuse the call: tracing every drawn subgraph again on fake tensors was
    30% of generation. A torch without the private merge traces as before. A toggle the
    subgraph leaves set (adversarial domain) is still set after the call when the graph runs, so
    the nodes drawn after it get their metas in that mode."""
    modes = (s.builder.grad_mode, mode_left(gm, s.builder.grad_mode))
    if _merge_output is None:
        node = s.builder.try_call(target, args)
    else:
        (output,) = [n for n in gm.graph.nodes if n.op == "output"]
        outputs = [o.meta["val"] for o in output.args[0]]
        try:
            with s.builder.fake_mode:
                rows = operands[0].shape[0] if target is hop.map_impl else None
                val = hop_outputs(modes, outputs, operands, s.builder.fake_mode, rows)
        except RuntimeError:  # cond's refusal of outputs that are not dense
            return None
        node = s.builder.emit(target, args, {}, val)
    if node is not None:
        s.builder.grad_mode = modes[1]
    return node


def draw_cond(draw: st.DrawFn, s: State, depth: int, body: Body) -> None:
    """``torch.cond(pred, true_fn, false_fn, operands)`` with grad regions inside the branches."""
    pred = _predicate(draw, s)
    operands = _operands(draw, s)
    metas = [v.node.meta["val"] for v in operands]
    true_gm, count = _subgraph(draw, s, metas, depth, body, s.builder.grad_mode)
    t = s.builder.get_attr(attr_name(draw, s.domain, "true_graph_0"), true_gm)
    f = s.builder.get_attr(attr_name(draw, s.domain, "false_graph_0"), _sibling(true_gm))
    node = _hop_call(s, hop.cond, [pred, t, f, tuple(v.node for v in operands)], true_gm, metas)
    _results(s, node, count, "cond")


def draw_map(draw: st.DrawFn, s: State, depth: int, body: Body) -> None:
    """``map(body, xs, *args)`` as export records it: ``map_impl(body_graph, [xs], [args])``."""
    # map slices along dim 0: an empty leading dim has no row to draw the body's meta from.
    mapped = [v for v in s.pool if v.node.meta["val"].dim() >= 1 and v.node.meta["val"].shape[0] > 0]
    if not mapped:
        return
    xs = pick(draw, mapped)
    args = [pick(draw, s.pool) for _ in range(draw(st.integers(0, 1)))]
    reduced = any(v.node.meta["val"].dtype in (torch.bfloat16, torch.float16) for v in [xs, *args])
    if reduced and any(enabled for _, enabled in s.builder.autocast):
        # map's eager kernel fails under CPU autocast on such operands ("Unexpected floating
        # ScalarType in at::autocast::prioritize"), which fake propagation does not show.
        s.stats["hop_rejected:map"] += 1
        return
    with s.builder.fake_mode:
        row = xs.node.meta["val"][0]
    metas = [row] + [v.node.meta["val"] for v in args]
    gm, count = _subgraph(draw, s, metas, depth, body, s.builder.grad_mode)
    g = s.builder.get_attr(attr_name(draw, s.domain, "body_graph_0"), gm)
    node = _hop_call(s, hop.map_impl, [g, [xs.node], [v.node for v in args]], gm, [xs.node.meta["val"], *metas[1:]])
    _results(s, node, count, "map")


def draw_wrapped(draw: st.DrawFn, s: State, depth: int, body: Body) -> None:
    """A region a pass already wrapped: ``wrap_with_set_grad_enabled(mode, submod, *args)``.

    Adversarial only: torch.export traces through this HOP, so the set-grad pass never
    receives one from export (the autocast pass, which runs after it, does)."""
    mode = draw(st.booleans())
    operands = _operands(draw, s)
    gm, count = _subgraph(draw, s, [v.node.meta["val"] for v in operands], depth, body, mode)
    g = s.builder.get_attr(attr_name(draw, s.domain, "submod_0"), gm)
    node = s.builder.try_call(hop.wrap_with_set_grad_enabled, [mode, g, *(v.node for v in operands)])
    _results(s, node, count, "wrap_with_set_grad_enabled")
