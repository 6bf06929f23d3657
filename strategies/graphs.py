"""``graph_cases()``: random pre-dispatch graphs as torch.export hands them to a grad-mode pass.

Domains: ``export`` (the default) draws only what torch.export can produce; ``adversarial``
also draws unbalanced toggles, crossing regions, already-wrapped regions, colliding names and
missing metas; ``both`` draws each case from either; ``aten`` lowers export's cases after
dispatch (``fxfuzz.strategies.forms``); the Inductor forms lower them as torch.compile's Inductor
backend does (``fxfuzz.strategies.inductor``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from fxfuzz.core.case import GraphCase
from fxfuzz.core.choices import BOTH, DOMAIN_CHOICES, INDUCTOR_FORMS
from fxfuzz.strategies.builder import SET_GRAD_ENABLED, GraphBuilder
from fxfuzz.strategies.forms import aten_cases
from fxfuzz.strategies.inductor import inductor_cases
from fxfuzz.strategies.inputs import base_shapes, draw_inputs
from fxfuzz.strategies.names import placeholder_names, rename_some
from fxfuzz.strategies.regions import NODE_KINDS, draw_block
from fxfuzz.strategies.state import Budget, State, Value, count_region_shapes, pick, rarely
from fxfuzz.strategies.symbolic import corrupt_size_metas, draw_dims, draw_size_output, draw_sizes
from fxfuzz.strategies.tooled import TOOL_FORM, TORCH_LEVEL, draw_tool_forms
from hypothesis import strategies as st
from torch import fx

# Steps per case, nested subgraphs included: keeps the median graph near 20 compute nodes.
MAX_STEPS = 14


def _outputs(draw: st.DrawFn, s: State, stats: Counter) -> list[Any]:
    """User outputs: computed values or inputs passed straight through, possibly repeated,
    with None and non-tensor constants mixed in."""
    # A view taken under no_grad of a tensor needing grad claims requires_grad yet has no
    # grad_fn; autograd cannot differentiate it as an output, so no gradient could be checked.
    candidates = [v for v in s.pool if not _detached_view(v.node)]
    outputs: list[Any] = [pick(draw, candidates).node for _ in range(draw(st.integers(1, 3)))]
    # A value computed next to a toggle (regions._bait) is bait only if its grad mode shows.
    baits = [v for v in s.baits if v in candidates]
    if bool(baits) and draw(st.booleans()):  # bool(): else mypy types draw() by the left operand
        outputs.append(pick(draw, baits).node)
        stats["output:bait"] += 1
    # Two equal calls (a repeat, a call and its scalar twin's, preferred) both returned: a merge
    # of the two shows only where both are read.
    pairs = [(a.node, b.node) for a, b in (s.twins or s.repeats) if a in candidates and b in candidates]
    if bool(pairs) and draw(st.booleans()):
        outputs += draw(st.sampled_from(pairs))
        stats["output:repeat_pair"] += 1
    # A constant read again, returned: a folder or lifter that drops an attribute it thinks
    # used up, or merges reads, shows there.
    if bool(s.rereads) and draw(st.booleans()):
        outputs.append(pick(draw, s.rereads).node)
        stats["output:reread"] += 1
    if len(set(outputs)) < len(outputs):
        stats["output:duplicate"] += 1
    stats["output:input_passthrough"] += sum(o.op == "placeholder" for o in outputs)
    for extra in draw(st.lists(st.sampled_from([None, 3, 0.5]), max_size=1)):
        outputs.insert(draw(st.integers(0, len(outputs))), extra)
        stats[f"output:{'none' if extra is None else 'constant'}"] += 1
    return outputs


def _detached_view(node: fx.Node) -> bool:
    val = node.meta.get("val")
    return node.op != "placeholder" and isinstance(val, torch.Tensor) and val.requires_grad and val.grad_fn is None


def _drop_metas(draw: st.DrawFn, graph: fx.Graph) -> int:
    dropped = 0
    for node in graph.nodes:
        if node.op == "call_function" and "val" in node.meta and rarely(draw, 6):
            del node.meta["val"]
            node.meta.pop("tensor_meta", None)
            dropped += 1
    return dropped


def _shape_stats(gm: fx.GraphModule, stats: Counter) -> None:
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    if calls and calls[0].target is SET_GRAD_ENABLED:
        stats["toggle:first_node"] += 1
    if calls and calls[-1].target is SET_GRAD_ENABLED:
        stats["toggle:last_node"] += 1


@st.composite
def graph_cases(
    draw: st.DrawFn,
    domain: str = "export",
    max_steps: int = MAX_STEPS,
    reacts_to: tuple[str, ...] = (),
    ambient: bool | None = None,
) -> GraphCase:
    """Random GraphCases: parameters, buffers, constants and user inputs of mixed dtypes and
    requires_grad feeding ATen ops inside nested grad-mode and autocast regions and
    cond/map subgraphs, with the ambient grad mode drawn per case. ``max_steps`` bounds the
    ops, regions and subgraphs drawn (nested ones included). ``domain="both"`` draws the
    domain per case, export first, so a failure shrinks toward a case export can produce.
    ``reacts_to`` names the node kinds the pass under test reacts to (``Registered.reacts_to``,
    ``regions.NODE_KINDS``): nine cases in ten then hold at least one of those a step draws
    (``regions.draw_block``), and ``tool_form`` draws the finished case in the forms torch's
    tools emit (``fxfuzz.strategies.tooled``); empty, the mix of steps is the same for every pass. ``ambient``
    fixes the grad mode the pre-dispatch cases are traced and run under (None: drawn); the
    ``aten`` domain, whose lowering bakes the toggles in, keeps drawing it."""
    if domain not in DOMAIN_CHOICES:
        raise ValueError(f"unknown domain {domain!r}; expected one of {DOMAIN_CHOICES}")
    unknown = sorted(set(reacts_to) - set(NODE_KINDS))
    if unknown:
        raise ValueError(f"unknown node kinds {unknown} in reacts_to; expected some of {NODE_KINDS}")
    # The tool forms are drawn on the finished case (fxfuzz.strategies.tooled), not by a step;
    # torch-level calls are options of the random step.
    tooled, torch_level = TOOL_FORM in reacts_to, TORCH_LEVEL in reacts_to
    lowering = tuple(k for k in reacts_to if k != TOOL_FORM)
    reacts_to = tuple(k for k in lowering if k != TORCH_LEVEL)
    if domain == "both":
        domain = draw(st.sampled_from(BOTH))
    if domain == "aten":
        lowered = draw(aten_cases(graph_cases("export", max_steps, lowering)))
        return draw_tool_forms(draw, lowered) if tooled else lowered
    if domain in INDUCTOR_FORMS:
        return draw(inductor_cases(graph_cases("export", max_steps, lowering), domain))
    ambient = draw(st.booleans()) if ambient is None else ambient
    stats: Counter = Counter({f"domain:{domain}": 1})
    base = draw(base_shapes())
    dims, batch = draw_dims(draw, base, stats)
    builder = GraphBuilder(grad_mode=ambient, fake_mode=dims.mode if dims else None)
    inputs = draw_inputs(draw, builder, base, stats, placeholder_names(draw, domain), dims, batch)
    s = State(
        builder, domain, stats, Budget(max_steps), [Value(n) for n in inputs.values], inputs.mutable,
        inplace_ok=domain != "functional", reacts_to=reacts_to, torch_level=torch_level,
    )  # fmt: skip
    draw_block(draw, s, 0)
    outputs = _outputs(draw, s, stats)
    draw_size_output(draw, s, outputs)
    sizes = draw_sizes(draw, dims, stats, builder.graph) if dims else ()
    if domain == "adversarial":
        if rarely(draw, 6):
            builder.set_grad(not builder.grad_mode)  # a toggle left on when the graph returns
            stats["adversarial:trailing_toggle"] += 1
        stats["adversarial:renamed"] += rename_some(draw, builder.graph)
        stats["adversarial:missing_meta"] += _drop_metas(draw, builder.graph)
        stats["adversarial:inconsistent_size_meta"] += corrupt_size_metas(draw, builder.graph)
    gm, signature = builder.finish(outputs)
    count_region_shapes(s)
    _shape_stats(gm, stats)
    stats[f"depth:{s.max_depth}"] += 1
    case = GraphCase(
        gm=gm,
        signature=signature,
        inputs=tuple(builder.inputs),
        ambient_grad=ambient,
        domain=domain,
        features=dict(+stats),
        sizes=sizes,
    )
    return draw_tool_forms(draw, case) if tooled else case
