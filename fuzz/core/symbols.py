"""The symbolic sizes of a graph's inputs and the other sizes a case may run at.

A graph traced with dynamic shapes has placeholder metas with symbolic sizes backed by one
ShapeEnv, which recorded the guards and runtime assertions the trace relied on (and the
symbols it specialized). An assignment of the symbols is valid when it lies inside every
symbol's range and satisfies all of them; the oracles then run the graphs at it.
"""

from __future__ import annotations

import itertools
from typing import Any

import sympy
import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

# Other sizes per case besides the traced ones.
EXTRA_SIZES = 2


def input_symbols(gm: fx.GraphModule) -> tuple[ShapeEnv | None, list[sympy.Symbol]]:
    """The ShapeEnv behind ``gm``'s placeholder metas and the symbols of their sizes, by name."""
    env: ShapeEnv | None = None
    symbols: set[sympy.Symbol] = set()
    for n in gm.graph.nodes:
        val = n.meta.get("val") if n.op == "placeholder" else None
        for size in val.shape if isinstance(val, torch.Tensor) else ():
            if isinstance(size, torch.SymInt):
                env = size.node.shape_env
                symbols |= size.node.expr.free_symbols
    return env, sorted(symbols, key=lambda s: s.name)


def free_symbols(env: ShapeEnv, symbols: list[sympy.Symbol]) -> list[sympy.Symbol]:
    """The symbols the others are expressed in after the ShapeEnv's replacements (none when
    the trace specialized every symbol)."""
    return sorted({f for s in symbols for f in env.replace(s).free_symbols}, key=lambda f: f.name)


def traced(env: ShapeEnv, symbols: list[Any]) -> dict[str, int] | None:
    """The traced sizes as ``assignment`` spells an assignment, so the two compare: a dim may be
    an expression of other symbols (``assignment`` says why), which has no traced value of its
    own to read."""
    return assignment(env, symbols, {f: int(env.backed_var_to_val[f]) for f in free_symbols(env, symbols)})


def _conditions(env: ShapeEnv) -> list[Any]:
    return [g.expr for g in env.guards] + [a.expr for asserts in env.deferred_runtime_asserts.values() for a in asserts]


def _replaced(env: ShapeEnv, expr: Any) -> Any:
    return expr.xreplace({s: env.replace(s) for s in expr.free_symbols})


def assignment(env: ShapeEnv, symbols: list[sympy.Symbol], free: dict[sympy.Symbol, int]) -> dict[str, int] | None:
    """Every symbol's value (replaced ones too) given the free ones' values, or None when a
    range, a guard or a runtime assertion of the trace rejects them."""
    values = {s: env.replace(s).xreplace({f: sympy.Integer(v) for f, v in free.items()}) for s in symbols}
    if not all(v.is_Integer for v in values.values()):
        return None
    for s, v in values.items():
        r = env.var_to_range.get(s)
        if r is not None and not (bool(r.lower <= v) and bool(v <= r.upper)):
            return None
    full = {**values, **{f: sympy.Integer(v) for f, v in free.items()}}
    # A guard may name a symbol the trace unified with another (``Eq(s40, s4)`` where two dims
    # share one Dim), which no placeholder shows: it is read through the replacement.
    if any(_replaced(env, cond).xreplace(full) is not sympy.true for cond in _conditions(env)):
        return None
    # A placeholder's dim may itself be an expression (``s0 + 1`` once the trace replaced a
    # symbol by it): it has no name of its own, and its size follows from its free symbols',
    # which are what size_at reads.
    return {s.name: int(v) for s, v in full.items() if isinstance(s, sympy.Symbol)}


def other_sizes(gm: fx.GraphModule, count: int = EXTRA_SIZES) -> tuple[dict[str, int], ...]:
    """Up to ``count`` valid assignments other than the traced one, chosen deterministically
    (each free symbol's traced size plus 1, 2, 3, then its lower bound): for captured cases,
    which no strategy draws."""
    env, symbols = input_symbols(gm)
    if env is None:
        return ()
    free = free_symbols(env, symbols)
    hints = {f: int(env.backed_var_to_val[f]) for f in free}
    choices = [[hints[f] + 1, hints[f] + 2, hints[f] + 3, int(env.var_to_range[f].lower)] for f in free]
    found: list[dict[str, int]] = []
    at_trace = traced(env, symbols)
    for values in itertools.product(*choices):
        a = assignment(env, symbols, dict(zip(free, values)))
        if a is not None and a != at_trace and a not in found:
            found.append(a)
            if len(found) == count:
                break
    return tuple(found)


def valid_sizes(gm: fx.GraphModule, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Those of ``sizes`` that every free symbol of ``gm``'s inputs may take at once (ranges,
    guards, runtime assertions): for a program whose input dims share one size, where the trace
    may have specialized it (``Dim.AUTO``) or narrowed it."""
    env, symbols = input_symbols(gm)
    if env is None:
        return ()
    free = free_symbols(env, symbols)
    return tuple(n for n in sizes if free and assignment(env, symbols, dict.fromkeys(free, n)) is not None)
