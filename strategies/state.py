"""What a graph under construction offers the next step: its values and what may be done to them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hypothesis import strategies as st
from torch import fx

from .builder import GraphBuilder


@dataclass
class Value:
    """A tensor in the pool that later steps may consume."""

    node: fx.Node
    # May it be mutated in place without breaking autograd (no saved output, not a view)?
    mutable: bool = False
    # Does it alias a graph input (a view)? HOP subgraphs must not return such values.
    alias: bool = False


@dataclass
class Budget:
    """Steps left for the whole case, nested subgraphs included: keeps graphs small."""

    left: int


@dataclass
class State:
    """One graph being drawn: the top-level graph or a HOP subgraph."""

    builder: GraphBuilder
    domain: str
    stats: Counter
    budget: Budget
    pool: list[Value] = field(default_factory=list)
    # Placeholders a no_grad region may update in place (buffers, inputs needing no grad).
    targets: list[fx.Node] = field(default_factory=list)
    # cond and map forbid mutating their subgraphs' inputs, so subgraphs draw no in-place ops.
    inplace_ok: bool = True
    max_depth: int = 0


def rarely(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in ``one_in`` draws; shrinks to False, toward the plainer case."""
    return draw(st.integers(0, one_in - 1)) == one_in - 1


def pick(draw: st.DrawFn, values: list[Value]) -> Value:
    """Prefer recent values: shrinking toward index 0 of the reversed list keeps chains short."""
    return values[-1 - draw(st.integers(0, len(values) - 1))]
