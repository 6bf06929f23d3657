"""What a graph under construction offers the next step: its values and what may be done to them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from fxfuzz.strategies.builder import AUTOCAST_ENTER, AUTOCAST_EXIT, SET_GRAD_ENABLED, GraphBuilder
from hypothesis import strategies as st
from torch import fx

_MODE_CALLS = (SET_GRAD_ENABLED, AUTOCAST_ENTER, AUTOCAST_EXIT)


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
    # (entering toggle, restoring toggle) of each closed grad region, for count_region_shapes.
    regions: list[tuple[fx.Node, fx.Node]] = field(default_factory=list)
    # Nodes computing symbolic sizes (SymInts) that later steps may use.
    sizes: list[fx.Node] = field(default_factory=list)
    # The node kinds the pass under test reacts to (regions.REACTION_STEPS): owed at the top
    # level only (regions.draw_block), baited in subgraphs too (regions.ACROSS_TOGGLE).
    reacts_to: tuple[str, ...] = ()
    # Whether the random step may call torch's Python functions (tooled.TORCH_LEVEL declared).
    torch_level: bool = False
    # Values the bait steps next to toggles computed (regions._bait), which outputs may favour.
    baits: list[Value] = field(default_factory=list)
    # (original, repeat) of each call drawn again (emit.draw_repeat), which outputs may return together.
    repeats: list[tuple[Value, Value]] = field(default_factory=list)
    # Those of ``repeats`` whose second call took an equal-valued twin of a scalar: preferred.
    twins: list[tuple[Value, Value]] = field(default_factory=list)
    # Second and later reads of a tensor constant (constants.draw_constant), which outputs may return.
    rereads: list[Value] = field(default_factory=list)


def rarely(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in ``one_in`` draws; shrinks to False, toward the plainer case."""
    return draw(st.integers(0, one_in - 1)) == one_in - 1


def pick(draw: st.DrawFn, values: list[Value]) -> Value:
    """Prefer recent values: shrinking toward index 0 of the reversed list keeps chains short."""
    return values[-1 - draw(st.integers(0, len(values) - 1))]


def count_region_shapes(s: State) -> None:
    """Count how the closed grad regions of a finished graph exchange values, the shapes the
    split hands the pass: ``region:no_outputs`` (values nothing after the region reads: dead
    code, or only in-place updates, whose effects the pass must keep though the split gives the
    submodule no outputs), ``region:value_in`` / ``region:value_out`` (a value crossing the
    boundary into / out of the region), and ``region:single_output_read_inside`` (the region's
    one output is read inside it too: inlining must keep both readers)."""
    for enter, exit_ in s.regions:
        inside: set[fx.Node] = set()
        node = enter.next
        while node is not exit_:
            inside.add(node)
            node = node.next
        values = [n for n in inside if n.op == "call_function" and n.target not in _MODE_CALLS]
        outputs = [n for n in values if any(u not in inside for u in n.users)]
        if values and not outputs:
            s.stats["region:no_outputs"] += 1
        if outputs:
            s.stats["region:value_out"] += 1
        if any(a not in inside and a.op != "get_attr" for n in values for a in n.all_input_nodes):
            s.stats["region:value_in"] += 1
        # SymInts crossing the boundary: operands and outputs the split gives the region.
        if any(
            a not in inside and isinstance(a.meta.get("val"), torch.SymInt) for n in values for a in n.all_input_nodes
        ):
            s.stats["region:symint_in"] += 1
        if any(isinstance(n.meta.get("val"), torch.SymInt) for n in outputs):
            s.stats["region:symint_out"] += 1
        if len(outputs) == 1 and any(u in inside for u in outputs[0].users):
            s.stats["region:single_output_read_inside"] += 1
