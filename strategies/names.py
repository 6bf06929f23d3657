"""Node and attribute names, including the names passes generate themselves.

A pass that creates ``submod_0`` or ``getitem`` nodes must cope with a graph that already
uses those names; the adversarial domain draws them on purpose.
"""

from __future__ import annotations

from fxfuzz.strategies.state import rarely
from hypothesis import strategies as st
from torch import fx

# Names the set-grad and autocast passes (and export's HOP tracing) create.
COLLIDING = (
    "submod_0",
    "submod_1",
    "submod_3",
    "getitem",
    "getitem_1",
    "_set_grad_enabled",
    "_set_grad_enabled_1",
    "wrap_with_set_grad_enabled",
    "wrap_with_autocast",
    "true_graph_0",
    "false_graph_0",
    "body_graph_0",
    "cond",
    "arg0_1",
    "_enter_autocast",
)


def placeholder_names(draw: st.DrawFn, domain: str, count: int = 8) -> list[str]:
    """Names in export's pre-pass style (``arg0_1``...); adversarial cases mix in colliding ones."""
    names = [f"arg{i}_1" for i in range(count)]
    if domain == "adversarial":
        for i in range(count):
            candidate = draw(st.sampled_from(COLLIDING))
            # Placeholder names are the forward's parameter names, so they must stay distinct.
            if rarely(draw, 4) and candidate not in names:
                names[i] = candidate
    return names


def attr_name(draw: st.DrawFn, domain: str, default: str) -> str:
    """Attribute name of a HOP subgraph: export's own (``true_graph_0``...) or a colliding one."""
    if domain == "adversarial" and draw(st.booleans()):
        return draw(st.sampled_from(COLLIDING[:3]))
    return default


def rename_some(draw: st.DrawFn, graph: fx.Graph) -> int:
    """Give some call nodes colliding names (FX keeps them unique); returns how many."""
    calls = [n for n in graph.nodes if n.op == "call_function"]
    renamed = 0
    for node in calls:
        if rarely(draw, 5):
            node._rename(draw(st.sampled_from(COLLIDING)))
            renamed += 1
    return renamed
