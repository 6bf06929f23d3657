"""The graph shapes torch's own tools hand a pass besides export's: the node kind ``tool_form``.

A pass that declares it (``meaning`` and ``refines`` do) gets its finished cases in up to three
forms, each a choice whose simplest value leaves the case as drawn:

- **SymInt literals**: a size argument of a call (``view``'s shape, ``expand``'s sizes, a
  factory's size; every schema argument typed ``SymInt`` or ``SymInt[]``) holds a constant
  ``torch.SymInt`` where it held an int, a size its ShapeEnv specialized, as graphs of Dynamo and
  AOTAutograd carry them (``fx_graph_cse`` reads their node for this reason);
- **a GraphModule child**: a run of calls in one grad mode outlined into ``submod_N`` and called
  by ``call_module``, its outputs read by ``getitem`` when it has several, as ``split_module``
  and the fuser's outlining leave a graph. Only pure calls are outlined: torch's
  ``Node.is_impure`` holds every GraphModule child pure (its note says users depend on it), so an
  outlined draw or update that nothing reads would be deleted by torch's own DCE. Random calls
  (``ops.RANDOM_OPS``) stay at the top level too, whatever ``is_impure`` says of them: it holds
  ``F.dropout`` pure (docs/known/dce.txt), and the ``random`` kind draws them there alone;
- **a pytree calling convention** (``_PyTreeCodeGen``), as ``ep.module()`` and
  ``symbolic_trace(concrete_args=...)`` install: the last inputs taken as keyword arguments and
  the outputs a nested structure, a dict, or a single value (a non-tuple output). The inputs stay
  callable flat, since the oracles call graphs with flat inputs.

The signature follows each form (an outlined output is its ``getitem`` now). The aten domain
draws the forms on the lowered case (lowering goes through export, which takes none of them);
the Inductor forms draw none: their calling convention is Inductor's.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.utils._pytree as pytree
from fxfuzz.core.case import GraphCase
from fxfuzz.core.rebuild import symint_literal
from fxfuzz.strategies.ops import RANDOM_OPS
from hypothesis import strategies as st
from torch import fx
from torch.export.graph_signature import ExportGraphSignature

TOOL_FORM = "tool_form"
# Calls of torch's Python functions, as Dynamo and ``symbolic_trace`` record them
# (``ops.TORCH_RANDOM_OPS``), drawn by the ``random`` step for a pass that declares this too.
TORCH_LEVEL = "torch_level"
# How the outputs are returned; shrinking moves toward the first, export's flat tuple.
_OUTPUTS = ("tuple", "nested", "dict", "single")
_RANDOM_TARGETS = frozenset(spec.target for spec in RANDOM_OPS)
_MODE_CALLS = (
    torch._C._set_grad_enabled,
    torch.amp.autocast_mode._enter_autocast,
    torch.amp.autocast_mode._exit_autocast,
)


def _symint_typed(t: Any) -> bool:
    """Is the schema type ``t`` a ``SymInt``, or a list or optional of them?"""
    while t.kind() in ("OptionalType", "ListType"):
        t = t.getElementType()
    return t.kind() == "SymIntType"


def _size_slots(node: fx.Node) -> list[int]:
    """Positions of ``node``'s arguments that its schema types ``SymInt``, ``SymInt[]`` or
    ``SymInt?`` and that hold an int somewhere."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None:
        return []
    return [
        i
        for i, (arg, a) in enumerate(zip(schema.arguments, node.args))
        if _symint_typed(arg.real_type) and any(type(x) is int for x in (a if isinstance(a, (list, tuple)) else [a]))
    ]


def _symint_literals(draw: st.DrawFn, gm: fx.GraphModule, stats: Counter) -> None:
    candidates = [n for n in gm.graph.nodes if _size_slots(n)]
    if not candidates or not draw(st.booleans()):
        return
    node = draw(st.sampled_from(candidates))
    i = draw(st.sampled_from(_size_slots(node)))
    args = list(node.args)
    args[i] = fx.node.map_aggregate(args[i], lambda x: symint_literal(x) if type(x) is int else x)
    node.args = tuple(args)
    stats["tool:symint_literal"] += 1


def _outlinable(node: fx.Node) -> bool:
    return (
        node.op == "call_function"
        and node.target not in _MODE_CALLS
        and node.target not in _RANDOM_TARGETS
        and not isinstance(node.target, torch._ops.HigherOrderOperator)
        and not node.is_impure()
        and "val" in node.meta
        and all("val" in a.meta or a.op == "get_attr" for a in node.all_input_nodes)
    )


def _call_key(node: fx.Node) -> tuple[Any, str, str]:
    # By text: a SymInt literal is unhashable.
    return node.target, repr(node.args), repr(node.kwargs)


def _runs(graph: fx.Graph) -> list[list[fx.Node]]:
    """Maximal runs of consecutive outlinable calls. A call equal to another (a ``repeat``, the
    bait of a merging pass) is left out: outlined, one of the pair would sit in a child, where
    no pass merging the top-level graph's calls meets it."""
    calls = Counter(_call_key(n) for n in graph.nodes if n.op == "call_function")
    runs: list[list[fx.Node]] = [[]]
    for node in graph.nodes:
        if _outlinable(node) and calls[_call_key(node)] == 1:
            runs[-1].append(node)
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if r]


def _outline(draw: st.DrawFn, gm: fx.GraphModule, sig: ExportGraphSignature, stats: Counter) -> None:
    runs = _runs(gm.graph)
    if not runs or not draw(st.booleans()):
        return
    run = draw(st.sampled_from(runs))
    start = draw(st.integers(0, len(run) - 1))
    region = run[start : start + draw(st.integers(1, len(run) - start))]
    inside = set(region)
    inputs = list(dict.fromkeys(a for n in region for a in n.all_input_nodes if a not in inside))
    outputs = [n for n in region if any(u not in inside for u in n.users)]
    if not outputs:
        return
    sub, env = fx.Graph(), {}
    for a in inputs:
        env[a] = sub.placeholder(a.name)
        env[a].meta.update({k: a.meta[k] for k in ("val", "tensor_meta") if k in a.meta})
    for n in region:
        env[n] = sub.node_copy(n, lambda a: env[a])
    sub.output(env[outputs[0]] if len(outputs) == 1 else tuple(env[o] for o in outputs))
    index = 0
    while hasattr(gm, f"submod_{index}"):
        index += 1
    name = f"submod_{index}"
    gm.add_submodule(name, fx.GraphModule(torch.nn.Module(), sub))
    with gm.graph.inserting_before(region[0]):
        call = gm.graph.call_module(name, tuple(inputs))
        call.meta["val"] = outputs[0].meta["val"] if len(outputs) == 1 else tuple(o.meta["val"] for o in outputs)
        if "nn_module_stack" in region[0].meta:
            call.meta["nn_module_stack"] = dict(region[0].meta["nn_module_stack"])
        results = (
            [call]
            if len(outputs) == 1
            else [gm.graph.call_function(operator.getitem, (call, i)) for i in range(len(outputs))]
        )
    renamed = {}
    for out, result in zip(outputs, results):
        if result is not call:
            result.meta.update({k: out.meta[k] for k in ("val", "tensor_meta", "nn_module_stack") if k in out.meta})
        out.replace_all_uses_with(result, delete_user_cb=lambda u: u not in inside)
        renamed[out.name] = result.name
    for n in reversed(region):
        gm.graph.erase_node(n)
    for spec in sig.output_specs:
        if getattr(spec.arg, "name", None) in renamed:
            spec.arg.name = renamed[spec.arg.name]
    gm.recompile()
    stats["tool:call_module"] += 1
    stats[f"tool:call_module_outputs:{min(len(outputs), 3)}"] += 1


def _convention(draw: st.DrawFn, gm: fx.GraphModule, stats: Counter) -> None:
    if not draw(st.booleans()):
        return
    names = [n.name for n in gm.graph.find_nodes(op="placeholder")]
    count = len(cast(Sequence[Any], gm.graph.output_node().args[0]))  # a case's graph outputs a tuple
    keywords = draw(st.integers(0, min(2, len(names))))
    positional = len(names) - keywords
    in_spec = pytree.tree_flatten((tuple(0 for _ in names[:positional]), {n: 0 for n in names[positional:]}))[1]
    shape = draw(st.sampled_from(_OUTPUTS if count == 1 else _OUTPUTS[:-1] if count > 1 else _OUTPUTS[:1]))
    structure: Any = {
        "tuple": tuple(0 for _ in range(count)),
        "nested": (0, [0] * (count - 1)),
        "dict": {f"out{i}": 0 for i in range(count)},
        "single": 0,
    }[shape]
    out_spec = pytree.tree_flatten(structure)[1]
    gm.graph._codegen = fx.graph._PyTreeCodeGen(fx.graph._PyTreeInfo(names, in_spec, out_spec))
    gm.recompile()
    stats["tool:pytree"] += 1
    stats[f"tool:pytree_output:{shape}"] += 1
    if keywords:
        stats["tool:pytree_keywords"] += 1


def draw_tool_forms(draw: st.DrawFn, case: GraphCase) -> GraphCase:
    """``case`` (its graph module and signature changed in place) in the forms drawn."""
    stats: Counter = Counter()
    _symint_literals(draw, case.gm, stats)
    _outline(draw, case.gm, case.signature, stats)
    _convention(draw, case.gm, stats)
    case.gm.recompile()
    case.features.update(stats)
    return case
