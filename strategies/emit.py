"""One op step: draw an overload from the op table, operands that fit it, and emit the call."""

from __future__ import annotations

import operator

import torch
from fxfuzz.strategies.custom import custom_specs
from fxfuzz.strategies.names import attr_name
from fxfuzz.strategies.ops import INPLACE_OPS, OPS, OpSpec, dtype_ok, size_hint, twins
from fxfuzz.strategies.state import State, Value, pick
from hypothesis import strategies as st
from torch import fx

aten = torch.ops.aten
_ASSERT_META = aten._assert_tensor_metadata.default


def _meta(v: Value | fx.Node) -> torch.Tensor:
    node = v.node if isinstance(v, Value) else v
    return node.meta["val"]


def _operands(draw: st.DrawFn, spec: OpSpec, first: list[Value], pool: list[Value]) -> list[Value] | None:
    """The first operand from ``first``, each later one from the pool values that fit."""
    if not first:
        return None
    chosen = [pick(draw, first)]
    for _ in range(spec.arity - 1):
        metas = [_meta(v) for v in chosen]
        # No bool operand anywhere for a numeric op: ``x - mask`` fails only in the real kernel.
        fitting = [
            v for v in pool if spec.fits(metas, _meta(v)) and (spec.dtypes != "num" or _meta(v).dtype != torch.bool)
        ]
        if not fitting:
            return None
        chosen.append(pick(draw, fitting))
    return chosen


def _emit(draw: st.DrawFn, s: State, spec: OpSpec, operands: list[Value]) -> fx.Node | None:
    metas = [_meta(v) for v in operands]
    extra = spec.extra(draw, metas)
    if extra is None:
        return None
    args, kwargs = extra
    nodes = [v.node for v in operands]
    tensors = [] if spec.shape_from else [nodes] if spec.packed else nodes
    if spec.name == "to_dtype":
        # Export records a metadata assertion in front of every .to(dtype).
        m = metas[0]
        s.builder.call(_ASSERT_META, [operands[0].node], {"dtype": m.dtype, "device": m.device, "layout": m.layout})
    node = s.builder.try_call(spec.target, tensors + list(args), {**spec.kwargs, **kwargs})
    if node is not None:
        s.stats[f"op:{spec.name}"] += 1
    else:
        s.stats["op_rejected"] += 1
    return node


def draw_op(
    draw: st.DrawFn,
    s: State,
    values: list[Value] | None = None,
    first: list[Value] | None = None,
    table: tuple[OpSpec, ...] | None = None,
) -> fx.Node | None:
    """A functional op on pool values (or on ``values``, a part of the pool), its first operand
    from ``first`` where given, drawn from ``table`` (by default the op table and the custom
    operators); tuple results enter the pool through getitem. The call, or None where the op
    drawn fits no operand."""
    values = s.pool if values is None else values
    spec: OpSpec = draw(st.sampled_from(table or OPS + custom_specs(inplace=False)))
    fitting = [v for v in (values if first is None else first) if dtype_ok(spec, _meta(v))]
    operands = _operands(draw, spec, fitting, values)
    node = _emit(draw, s, spec, operands) if operands else None
    if node is None:
        s.stats["op_unfit"] += 1
        return None
    if spec.tuple_out:
        # Export unpacks every element, used or not.
        for i in range(len(node.meta["val"])):
            item = s.builder.call(operator.getitem, [node, i])
            s.pool.append(Value(item, alias=spec.view))
        return node
    s.pool.append(Value(node, mutable=not (spec.view or spec.saves_output), alias=spec.view))
    return node


def needs_grad(node: fx.Node) -> bool:
    return getattr(node.meta.get("val"), "requires_grad", False)


def draw_repeat(draw: st.DrawFn, s: State, values: list[Value]) -> bool:
    """The same call again (``x.sin()`` written twice) on one of ``values`` computed by a
    functional ATen op whose operands are all still current (none updated in place since), its
    meta computed anew under the grad mode and autocast state here: equal computations, maybe
    in another grad-mode region, the bait for a pass that merges them (CSE). Where the call
    takes a scalar that has equal-valued twins (``ops.TWINS``), the repeat may take a twin
    instead (``x * 1`` again as ``x * 1.0``): equal by ``==``, not in meaning."""
    current = {v.node for v in s.pool}

    def repeatable(v: Value) -> bool:
        n = v.node
        return (
            n.op == "call_function"
            and isinstance(n.target, torch._ops.OpOverload)
            and not n.target._schema.is_mutable
            and all(
                a in current or a.op == "get_attr" or not isinstance(a.meta.get("val"), torch.Tensor)
                for a in n.all_input_nodes
            )
        )

    candidates = [v for v in values if repeatable(v)]
    if not candidates:
        return False
    # A call on values needing grad where there is one: only its result differs between modes.
    original = pick(draw, [v for v in candidates if any(needs_grad(a) for a in v.node.all_input_nodes)] or candidates)
    node = original.node
    assert callable(node.target)  # an OpOverload, as repeatable() checked
    if node.prev.op == "call_function" and node.prev.target is _ASSERT_META:
        s.builder.call(_ASSERT_META, list(node.prev.args), dict(node.prev.kwargs))  # as export records every .to(dtype)
    args = list(node.args)
    swappable = [i for i, a in enumerate(args) if twins(a)]
    twinned = bool(swappable) and draw(st.booleans())
    if twinned:
        i = draw(st.sampled_from(swappable))
        args[i] = draw(st.sampled_from(twins(args[i])))
        s.stats["repeat:twin"] += 1
    repeat = s.builder.try_call(node.target, args, dict(node.kwargs))
    if repeat is None:
        s.stats["op_rejected"] += 1
        return False
    s.stats["repeat:call"] += 1
    s.pool.append(Value(repeat, alias=original.alias))
    s.repeats.append((original, s.pool[-1]))
    if twinned:
        s.twins.append(s.repeats[-1])
    return True


def draw_inplace(draw: st.DrawFn, s: State) -> bool:
    """Mutate a fresh activation, or under no_grad a buffer or input, as ``self.buf.add_(y)``
    records it. Only values nothing has read yet: a read may have saved it for backward."""
    if not s.inplace_ok:
        return False
    spec: OpSpec = draw(st.sampled_from(INPLACE_OPS + custom_specs(inplace=True)))
    targets = [v for v in s.pool if v.mutable and not v.node.users]
    if not s.builder.grad_mode:
        targets += [Value(n) for n in s.targets if not n.users]
    first = [v for v in targets if dtype_ok(spec, _meta(v))]
    operands = _operands(draw, spec, first, s.pool)
    # ``x.mul_(x)`` saves x for its own backward and then overwrites it: autograd refuses it.
    if not operands or any(o.node is operands[0].node for o in operands[1:]):
        return False
    node = _emit(draw, s, spec, operands)
    if node is None:
        return False
    target = operands[0].node
    if target.op == "placeholder":
        s.stats["inplace:input"] += 1
        kind = next(spec.kind for spec in s.builder.input_specs if spec.arg.name == target.name)
        s.stats["inplace:" + kind.name.lower()] += 1  # buffer, user_input, parameter...
    else:
        s.stats["inplace:activation"] += 1
    # Later reads see the mutated tensor through the in-place node, as make_fx records it;
    # a custom operator that mutates and returns nothing leaves them reading the target.
    for v in s.pool:
        if v.node is target:
            v.node, v.mutable = (target if node.meta["val"] is None else node), False
    return True


def draw_tensor_attr(draw: st.DrawFn, s: State) -> None:
    """(adversarial) A constant tensor read through ``get_attr``, which export never emits (it
    lifts tensors to placeholders) but a hand-built graph may: a new attribute, possibly named
    like one the passes create (``submod_1``), or one more read of an existing one, so that
    inlining a region that reads it collides with an attribute the parent already has."""
    b = s.builder
    existing = {name: attr for name, attr in b.attrs.items() if isinstance(attr, torch.Tensor)}
    if bool(existing) and draw(st.booleans()):  # bool(): else mypy types draw() by the left operand
        name = draw(st.sampled_from(list(existing)))
        node, value = b.graph.get_attr(name), existing[name]
        s.stats["adversarial:tensor_attr_reread"] += 1
    else:
        like = _meta(pick(draw, s.pool))
        shape = [size_hint(n) for n in like.shape]  # a constant has its traced shape
        value = torch.linspace(-1.0, 1.0, size_hint(like.numel())).reshape(shape).to(like.dtype)
        node = b.get_attr(attr_name(draw, s.domain, "_tensor_constant0"), value)
        s.stats["adversarial:tensor_attr"] += 1
    node.meta["val"] = b.fake_mode.from_tensor(value, static_shapes=True)
    # Not mutable and alias: a shared constant, never updated in place nor returned by a subgraph.
    s.pool.append(Value(node, alias=True))
