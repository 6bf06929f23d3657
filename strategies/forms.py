"""``aten_cases()``: post-dispatch ATen graphs, as torch lowers a pre-dispatch one for the passes
that run after dispatch (AOTAutograd's CSE, Inductor's post-grad passes, export's constant
folding and effect-token removal).

Each case is an export-domain case (``graph_cases``) with calls of an effectful operator
(``fxfuzz::logged``, ordered like ``aten::_print``) put in, lowered the way torch lowers it:
through its ExportedProgram's ``run_decompositions()``. What comes out is functional ATen:
no grad-mode or autocast toggles (lowering bakes their effect in), in-place updates turned
into mutated-input outputs, and an effect token threaded through the effectful calls
(``with_effects``, a ``TOKEN`` input and output). A case torch cannot lower is rejected (a
failure of export's, not of the pass under test). The pre-dispatch case shrinks, and with it
the lowered one.
"""

from __future__ import annotations

import copy
import warnings
from collections import Counter
from typing import Any

import torch
from fxfuzz.core.calls import exported_program
from fxfuzz.core.case import GraphCase, clone_input, copy_graph_module
from fxfuzz.strategies.effects import EFFECTFUL
from hypothesis import assume
from hypothesis import strategies as st
from torch import fx
from torch.export.graph_signature import InputKind

# Effectful calls per case: shrinks toward none, the plain lowered graph.
MAX_EFFECTS = 3


def _tensor_nodes(graph: fx.Graph) -> list[fx.Node]:
    """Top-level values an effectful call may take: tensors with a known meta."""
    return [
        n
        for n in graph.nodes
        if n.op in ("placeholder", "call_function") and isinstance(n.meta.get("val"), torch.Tensor)
    ]


def add_effects(draw: st.DrawFn, gm: fx.GraphModule, stats: Counter) -> int:
    """Put up to ``MAX_EFFECTS`` effectful calls into ``gm``'s top-level graph, each right after
    the value it takes; some feed that value's later users (the effect's result is used), the
    others are used by nothing (kept only for their effect). The number put in."""
    count = draw(st.integers(0, MAX_EFFECTS))
    for _ in range(count):
        anchor = draw(st.sampled_from(_tensor_nodes(gm.graph)))
        users = [u for u in anchor.users if u.op != "output"]
        at = anchor if anchor.op != "placeholder" else list(n for n in gm.graph.nodes if n.op == "placeholder")[-1]
        with gm.graph.inserting_after(at):
            call = gm.graph.call_function(EFFECTFUL, (anchor,))
        val = anchor.meta["val"]
        with val.fake_mode:
            call.meta["val"] = torch.empty_like(val)
        call.meta["nn_module_stack"] = dict(at.meta.get("nn_module_stack") or next(iter(_stacks(gm.graph)), {}))
        if bool(users) and draw(st.booleans()):  # bool(): else mypy types draw() by the left operand
            for user in users:
                user.replace_input_with(anchor, call)
            stats["effect:result_used"] += 1
        else:
            stats["effect:result_unused"] += 1
    gm.recompile()
    return count


def _stacks(graph: fx.Graph) -> list[dict[str, Any]]:
    return [n.meta["nn_module_stack"] for n in graph.nodes if "nn_module_stack" in n.meta]


def lower(case: GraphCase) -> GraphCase | None:
    """``case`` as torch lowers it (its ExportedProgram's ``run_decompositions()``), in the
    ``aten`` domain, with inputs for the lowered signature: the case's own by target (user
    inputs in order) and a fresh token for each token input. None where torch cannot lower it."""
    before = torch.is_grad_enabled()
    try:
        torch.set_grad_enabled(case.ambient_grad)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = exported_program(
                copy_graph_module(case.gm), copy.deepcopy(case.signature), case.inputs
            ).run_decompositions()
    except Exception:  # noqa: BLE001 - whatever export fails on is export's, not the pass's
        return None
    finally:
        torch.set_grad_enabled(before)
    by_target = {s.target: v for s, v in zip(case.signature.input_specs, case.inputs) if s.target is not None}
    users = iter(v for s, v in zip(case.signature.input_specs, case.inputs) if s.kind == InputKind.USER_INPUT)
    inputs = []
    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.TOKEN:
            inputs.append(torch.ops.prims._make_token.default())
        elif spec.kind == InputKind.USER_INPUT:
            inputs.append(clone_input(next(users)))
        else:
            inputs.append(clone_input(by_target[spec.target]))
    gm = program.graph_module
    features = dict(case.features)
    features.pop("domain:export", None)
    features["domain:aten"] = 1
    tokens = sum(s.kind == InputKind.TOKEN for s in program.graph_signature.input_specs)
    if tokens:
        features["aten:token_inputs"] = tokens
    return GraphCase(
        gm=gm,
        signature=program.graph_signature,
        inputs=tuple(inputs),
        ambient_grad=case.ambient_grad,
        domain="aten",
        features=features,
    )


@st.composite
def aten_cases(draw: st.DrawFn, export_cases: st.SearchStrategy[GraphCase]) -> GraphCase:
    """Post-dispatch ATen cases lowered from ``export_cases`` (the module docstring says how)."""
    case = draw(export_cases)
    stats: Counter = Counter()
    if add_effects(draw, case.gm, stats):
        case.features.update(stats)
    lowered = lower(case)
    assume(lowered is not None)
    assert lowered is not None
    return lowered
