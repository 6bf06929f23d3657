"""Symbolic sizes: cases traced as ``torch.export(..., dynamic_shapes=...)`` traces them.

Some user-input dimensions get a symbol (``s0``...) backed by a ShapeEnv, with export's rules:
only sizes of 2 or more (0 and 1 specialize), a range (``Dim("d", max=...)``) or none
(``Dim.AUTO``), parameters and buffers static. Ops then propagate symbolic metas; the ShapeEnv
records the guards (and specializations) the graph needs. Size steps read sizes
(``aten.sym_size.int``, emitted after the placeholders as export emits them), compute with them
(``operator.mul``/``add``/``floordiv``, ``sym_max``) and pass them to SymInt-taking ops, so
sizes cross grad-region boundaries both ways and can be graph outputs. After the graph is
drawn, other assignments of the symbols that satisfy every guard are drawn: the oracles run
both graphs at those sizes too (``GraphCase.sizes``).
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from fxfuzz.core.symbols import EXTRA_SIZES, assignment, free_symbols, traced
from fxfuzz.strategies.builder import GraphBuilder
from fxfuzz.strategies.state import State, Value, pick, rarely
from hypothesis import strategies as st
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StrictMinMaxConstraint
from torch.utils._sympy.value_ranges import ValueRanges

aten = torch.ops.aten
CPU = torch.device("cpu")
# The search for other sizes stops after this many draws.
_SEARCH = 12
# How far above the traced size an unbounded symbol's other sizes are drawn: small, to keep
# the extra executions cheap.
_SPREAD = 4
_ARITH: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("mul", operator.mul),
    ("add", operator.add),
    ("floordiv", operator.floordiv),
    ("sym_max", torch.sym_max),
)


def symbolic_mode() -> FakeTensorMode:
    """A fresh fake mode with a ShapeEnv configured as non-strict export configures its own."""
    env = ShapeEnv(tracked_fakes=[], prefer_deferred_runtime_asserts_over_guards=True, trace_asserts=True)
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True, export=True)
    # Without its dispatch cache: a mode lives for one case, so its entries are seldom hit, and
    # making one (with symbolic sizes, rebuilding the output to validate it) costs more than the
    # dispatch it would save: a fifth of generation (docs/benchmark.md). Draws are unchanged
    # (tests/strategies/test_memo_generation.py).
    mode.cache_enabled = False
    return mode


@dataclass
class Dims:
    """The symbols of one case: a symbolic size per traced size made dynamic."""

    mode: FakeTensorMode
    by_size: dict[int, torch.SymInt] = field(default_factory=dict)

    def meta(self, example: torch.Tensor) -> torch.Tensor:
        """A fake of ``example`` whose dims of a dynamic traced size are symbolic (a user
        input: dims of equal traced size share a symbol, as inputs sharing one ``Dim`` do)."""
        shape = [self.by_size.get(n, n) for n in example.shape]
        with self.mode:
            return torch.empty(shape, dtype=example.dtype).requires_grad_(example.requires_grad)


def draw_dims(draw: st.DrawFn, base: tuple[int, ...], stats: Counter) -> tuple[Dims | None, frozenset[int]]:
    """Which traced sizes of the base shape are dynamic, with their ranges; ``None`` (all
    static) is what shrinking reaches, so a failure that needs no symbol loses them. Also the
    sizes chosen for symbols, static case or not: weights and buffers broadcast over them
    (``draw_inputs``), so a case and its static twin have the same shapes."""
    sizes = sorted({n for n in base if n >= 2})  # 0 and 1 specialize, as in export
    dynamic = draw(st.integers(0, 3)) != 0
    # Drawn whether or not they are used: with the same draws either way, the shrinker can
    # make a case static without changing what the rest of its choices mean.
    chosen = [n for n in sizes if draw(st.booleans())] or sizes[:1]
    uppers = [draw(st.sampled_from([None, hint + 5, 16])) for hint in chosen]  # Dim.AUTO, or a Dim with a max
    if not (sizes and dynamic):
        return None, frozenset(chosen)
    dims = Dims(symbolic_mode())
    env = dims.mode.shape_env
    assert env is not None  # symbolic_mode() always makes one
    from torch._dynamo.source import ConstantSource  # noqa: PLC0415  (imports all of dynamo: only where a case is symbolic)

    for i, (hint, upper) in enumerate(zip(chosen, uppers)):
        constraint = None if upper is None else StrictMinMaxConstraint(vr=ValueRanges(2, upper), warn_only=False)
        source = ConstantSource(f"dim{i}")
        sym = env.create_symbol(hint, source, dynamic_dim=DimDynamic.DYNAMIC, constraint_dim=constraint)
        node = env.create_symintnode(sym, hint=hint, source=source)
        assert isinstance(node, torch.SymInt)  # a fresh symbol, never a constant
        dims.by_size[hint] = node
        stats["symbolic:range" if upper else "symbolic:auto"] += 1
    return dims, frozenset(chosen)


def _free(b: GraphBuilder, size: Any) -> bool:
    return isinstance(size, torch.SymInt) and not b.sym_expr(size).is_number


def _symbolic_dims(s: State) -> list[tuple[Value, int]]:
    return [
        (v, d)
        for v in s.pool
        if isinstance(v.node.meta.get("val"), torch.Tensor)
        for d, size in enumerate(v.node.meta["val"].shape)
        if _free(s.builder, size)
    ]


def _read_size(draw: st.DrawFn, s: State) -> fx.Node | None:
    dims = _symbolic_dims(s)
    if not dims:
        return None
    v, d = dims[-1 - draw(st.integers(0, len(dims) - 1))]
    node = s.builder.size_node(v.node.meta["val"].shape[d], (v.node, d))
    s.stats["symbolic:sym_size"] += 1
    return node if isinstance(node, fx.Node) else None


def _arith(draw: st.DrawFn, s: State) -> fx.Node | None:
    a = s.sizes[-1 - draw(st.integers(0, len(s.sizes) - 1))]
    name, fn = draw(st.sampled_from(_ARITH))
    other = s.sizes[-1 - draw(st.integers(0, len(s.sizes) - 1))] if draw(st.booleans()) else draw(st.integers(1, 3))
    node = s.builder.try_call(fn, [a, other])
    if node is not None:
        s.stats[f"symbolic:{name}"] += 1
    return node


def use_size(draw: st.DrawFn, s: State, sizes: list[fx.Node] | None = None) -> None:
    """A SymInt-taking op: ``x + n``, ``new_zeros``, ``arange``, ``reshape``, ``expand``, on
    one of ``sizes`` (default: any size of the graph)."""
    b = s.builder
    sizes = sizes or s.sizes
    n = sizes[-1 - draw(st.integers(0, len(sizes) - 1))]
    how = draw(st.sampled_from(["add", "new_zeros", "arange", "reshape", "expand"]))
    tensors = [v for v in s.pool if v.node.meta["val"].dtype != torch.bool]
    node, view = None, False
    if how == "add" and tensors:
        node = b.try_call(aten.add.Tensor, [pick(draw, tensors).node, n])
    elif how == "new_zeros" and s.pool:
        node = b.try_call(
            aten.new_zeros.default, [pick(draw, s.pool).node, [n, draw(st.integers(1, 2))]], {"pin_memory": False}
        )
    elif how == "arange":
        node = b.try_call(aten.arange.default, [n], {"device": CPU, "pin_memory": False})
    elif how in ("reshape", "expand"):
        node, view = _reshape_or_expand(draw, s, how, sizes), True
    s.stats[f"symbolic:op:{how}" if node is not None else "symbolic:op_rejected"] += 1
    if node is not None:
        s.pool.append(Value(node, mutable=not view, alias=view))


def _reshape_or_expand(draw: st.DrawFn, s: State, how: str, sizes: list[fx.Node]) -> fx.Node | None:
    """``x.reshape(n, -1)`` with ``n`` one of x's symbolic sizes, or ``x.expand`` of a size-1
    dim to a symbolic size; the sizes are read from the graph, as export records them."""
    b = s.builder
    dims = _symbolic_dims(s)
    if how == "reshape" and dims:
        v, d = dims[-1 - draw(st.integers(0, len(dims) - 1))]
        return b.try_call(aten.reshape.default, [v.node, [v.node.meta["val"].shape[d], -1]])
    ones = [(v, d) for v in s.pool for d, size in enumerate(v.node.meta["val"].shape) if size == 1]
    if how == "expand" and ones:
        v, d = ones[-1 - draw(st.integers(0, len(ones) - 1))]
        shape: list[Any] = [-1] * v.node.meta["val"].dim()
        shape[d] = sizes[-1 - draw(st.integers(0, len(sizes) - 1))]
        return b.try_call(aten.expand.default, [v.node, shape])
    return None


def draw_size_step(draw: st.DrawFn, s: State) -> None:
    """One step on sizes: read one, compute with one, or hand one to a SymInt-taking op."""
    how = draw(st.integers(0, 2)) if s.sizes else 0
    if how == 0:
        node = _read_size(draw, s)
    elif how == 1:
        node = _arith(draw, s)
    else:
        use_size(draw, s)
        return
    if node is not None and node not in s.sizes:
        s.sizes.append(node)


def draw_size_output(draw: st.DrawFn, s: State, outputs: list[Any]) -> None:
    """Sometimes return a size too (a ``SymIntArgument`` output of the signature)."""
    if s.sizes and rarely(draw, 3):
        outputs.insert(draw(st.integers(0, len(outputs))), s.sizes[-1 - draw(st.integers(0, len(s.sizes) - 1))])
        s.stats["output:symint"] += 1


def corrupt_size_metas(draw: st.DrawFn, graph: fx.Graph) -> int:
    """(adversarial) Size nodes whose ``meta['val']`` is their traced value instead of the
    SymInt: the inconsistent metas a hand-made or half-updated graph carries."""
    corrupted = 0
    for node in graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt) and rarely(draw, 4):
            node.meta["val"] = val.node.hint
            corrupted += 1
    return corrupted


def draw_sizes(draw: st.DrawFn, dims: Dims, stats: Counter, graph: fx.Graph) -> tuple[dict[str, int], ...]:
    """Up to ``EXTRA_SIZES`` assignments of the symbols the graph's placeholders carry, other
    than the traced one, inside each symbol's range and satisfying every guard (a specialized
    symbol keeps its value). Empty when no placeholder carries a symbol or the graph
    specialized every one: other sizes would then run the traced inputs again."""
    env = dims.mode.shape_env
    assert env is not None  # symbolic_mode() always makes one
    used = {
        sym
        for n in graph.nodes
        if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
        for d in n.meta["val"].shape
        if isinstance(d, torch.SymInt)
        for sym in d.node.expr.free_symbols
    }
    symbols = [e for e in (s.node.expr for s in dims.by_size.values()) if e.free_symbols & used]
    free = free_symbols(env, symbols)
    stats["symbolic:specialized"] += sum(env.replace(s).is_number for s in symbols)
    if not free:
        return ()
    found: list[dict[str, int]] = []
    at_trace = traced(env, symbols)  # every guard evaluated: once, not per draw
    for _ in range(_SEARCH):
        values = {}
        for f in free:
            r, hint = env.var_to_range[f], int(env.backed_var_to_val[f])
            top = min(int(r.upper), hint + _SPREAD) if r.upper.is_Integer else hint + _SPREAD
            values[f] = draw(st.integers(int(r.lower), max(int(r.lower), top)))
        sizes = assignment(env, symbols, values)
        if sizes is not None and sizes != at_trace and sizes not in found:
            found.append(sizes)
            if len(found) == EXTRA_SIZES:
                break
    stats["symbolic:sizes_tried"] += len(found)
    if found:
        stats["symbolic:case"] += 1
    return tuple(found)
