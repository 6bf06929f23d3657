"""``graph_cases()``: random pre-dispatch graphs with interleaved and nested grad toggles."""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st
from torch import fx
from torch.export.graph_signature import InputKind

from .builder import GraphBuilder
from .case import GraphCase
from .ops import INPLACE_OPS, OPS, VIEW_OPS, OpSpec

MAX_DEPTH = 3


@dataclass
class _Value:
    """A tensor in the pool that later ops may consume."""

    node: fx.Node
    # May this value be mutated in place without breaking autograd or aliasing an input?
    mutable: bool


@dataclass
class _State:
    builder: GraphBuilder
    pool: list[_Value]
    buffers: list[fx.Node]
    stats: Counter = field(default_factory=Counter)


def shapes() -> st.SearchStrategy[tuple[int, ...]]:
    """Small shapes, 0-d included; small sizes keep cases fast and shrink toward scalars."""
    return st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


def _tensor(draw: st.DrawFn, shape: tuple[int, ...], requires_grad: bool) -> torch.Tensor:
    seed = draw(st.integers(0, 2**16))
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen).requires_grad_(requires_grad)


def _draw_inputs(draw: st.DrawFn, b: GraphBuilder, base: tuple[int, ...]) -> _State:
    state = _State(b, [], [])
    # Inputs share the base shape or a broadcastable suffix of it, so binary ops mostly fit.
    def shape() -> tuple[int, ...]:
        return base[draw(st.integers(0, len(base))):]

    for i in range(draw(st.integers(0, 2))):
        t = _tensor(draw, shape(), True)
        node = b.placeholder(f"p_{i}", t, InputKind.PARAMETER, f"w{i}")
        state.pool.append(_Value(node, False))
    for i in range(draw(st.integers(0, 1))):
        t = _tensor(draw, shape(), False)
        node = b.placeholder(f"b_{i}", t, InputKind.BUFFER, f"buf{i}", persistent=True)
        state.pool.append(_Value(node, False))
        state.buffers.append(node)
    for i in range(draw(st.integers(0, 1))):
        t = _tensor(draw, shape(), False)
        node = b.placeholder(f"c_{i}", t, InputKind.CONSTANT_TENSOR, f"const{i}")
        state.pool.append(_Value(node, False))
    for i in range(draw(st.integers(1, 3))):
        t = _tensor(draw, shape(), draw(st.booleans()))
        node = b.placeholder(f"x_{i}", t, InputKind.USER_INPUT)
        state.pool.append(_Value(node, False))
    state.stats["inputs"] = len(state.pool)
    return state


def _pick(draw: st.DrawFn, pool: list[_Value]) -> _Value:
    # Prefer recent values: shrinking toward index 0 of the reversed pool keeps chains short.
    return pool[-1 - draw(st.integers(0, len(pool) - 1))]


def _draw_op(draw: st.DrawFn, s: _State) -> None:
    spec: OpSpec = draw(st.sampled_from(OPS))
    operands = [_pick(draw, s.pool) for _ in range(spec.arity)]
    metas = [v.node.meta["val"] for v in operands]
    extra = spec.extra(draw, metas)
    if extra is None:
        spec, operands, extra = OPS[0], [operands[0], operands[0]], ()
    node = s.builder.call(spec.target, [v.node for v in operands] + list(extra), spec.kwargs)
    s.stats[f"op:{spec.name}"] += 1
    if spec.outputs > 1:
        for i in range(spec.outputs):
            item = s.builder.call(operator.getitem, [node, i])
            s.pool.append(_Value(item, False))
        return
    mutable = not spec.saves_output and spec.name not in VIEW_OPS
    s.pool.append(_Value(node, mutable))


def _draw_inplace(draw: st.DrawFn, s: _State) -> bool:
    """Mutate a fresh activation, or a buffer under no_grad as ``self.buf.add_(...)`` does."""
    candidates = [v.node for v in s.pool if v.mutable and not v.node.users]
    if not s.builder.grad_mode:
        # A buffer already read by an op may be saved for backward: mutating it would break it.
        candidates += [b for b in s.buffers if not b.users]
    if not candidates:
        return False
    target = candidates[draw(st.integers(0, len(candidates) - 1))]
    spec: OpSpec = draw(st.sampled_from(INPLACE_OPS))
    others = [_pick(draw, s.pool).node for _ in range(spec.arity - 1)]
    shapes_ = [target.meta["val"].shape] + [o.meta["val"].shape for o in others]
    try:
        if torch.broadcast_shapes(*shapes_) != shapes_[0]:
            return False
    except RuntimeError:
        return False
    extra = spec.extra(draw, [target.meta["val"]]) if spec.arity == 1 else ()
    node = s.builder.call(spec.target, [target, *others, *(extra or ())])
    s.stats[f"op:{spec.name}"] += 1
    for v in s.pool:
        if v.node is target:
            v.node, v.mutable = node, False
    s.buffers = [node if b is target else b for b in s.buffers]
    return True


def _draw_block(draw: st.DrawFn, s: _State, depth: int) -> None:
    """A run of ops and nested grad blocks; each block restores the mode it entered from."""
    s.stats["max_depth"] = max(s.stats["max_depth"], depth)
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["op", "block", "inplace"] if depth < MAX_DEPTH else ["op", "inplace"]))
        if kind == "op" or (kind == "inplace" and not _draw_inplace(draw, s)):
            _draw_op(draw, s)
        elif kind == "block":
            outer = s.builder.grad_mode
            inner = draw(st.booleans())
            s.builder.set_grad(inner)
            s.stats[f"toggle:{'same' if inner == outer else 'flip'}"] += 1
            _draw_block(draw, s, depth + 1)
            s.builder.set_grad(outer)


@st.composite
def graph_cases(draw: st.DrawFn, domain: str = "export") -> GraphCase:
    """Random GraphCases: parameters, buffers, constants and user inputs feeding ATen ops
    inside nested grad-mode blocks, with the ambient grad mode drawn per case."""
    ambient = draw(st.booleans())
    builder = GraphBuilder(grad_mode=ambient)
    state = _draw_inputs(draw, builder, draw(shapes()))
    _draw_block(draw, state, 0)
    tensors = [v.node for v in state.pool]
    outputs: list[fx.Node | None] = [
        tensors[-1 - i] for i in draw(st.lists(st.integers(0, len(tensors) - 1), min_size=1, max_size=3))
    ]
    if draw(st.booleans()):
        outputs.insert(draw(st.integers(0, len(outputs))), None)
    gm, signature = builder.finish(outputs)
    return GraphCase(
        gm=gm,
        signature=signature,
        inputs=tuple(builder.inputs),
        ambient_grad=ambient,
        domain=domain,
        features=dict(state.stats),
    )
