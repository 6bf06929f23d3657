"""``inductor_cases()``: export's graph cases lowered the way torch.compile's Inductor backend
lowers them, in one of Inductor's forms (``fxfuzz.core.inductor``): ``inductor`` (inference),
``inductor_joint`` (the joint forward and backward graph) and ``inductor_frozen`` (weights as
``get_attr`` constants).

Each case starts from an export-domain case (``graph_cases``). Its graph is compiled the way a
user's code is: ``torch.compile`` (Dynamo, static shapes, one full graph) with Inductor's
backend ``compile_fx``, called on the case's inputs, under no_grad for inference and freezing,
with grad for the joint graph (floating-point parameters then require grad, as
``nn.Parameter``s do); for the frozen form the case's parameters and buffers are the module's
own, as Dynamo needs them to freeze them. Dynamo fakes the inputs in a fake mode with a
ShapeEnv, prunes what the graph never reads and returns constants and passed-through inputs
itself; ``compile_fx`` builds the form's graph (AOTAutograd with Inductor's decomposition table,
``copy_`` epilogues for mutated inputs) and is stopped where it hands that graph to its first
pass (``fxfuzz.core.inductor.lowering_capture``). That graph, untouched, is the case; its
inputs are the real values its placeholders read (AOTAutograd's ``arg{i}_1``, ``primals_*``,
traced back through Dynamo's sources), and for the joint graph tangents drawn from a seed. A
case torch.compile cannot lower is rejected (torch's failure, not the pass's). The export case
shrinks, and with it the lowered one. ``tests/strategies/test_inductor.py`` checks the graph equal, node
for node, to the one Inductor's public hook ``config.joint_custom_pre_pass`` receives under
``torch.compile(backend="inductor")``.

Every form is judged as a function run without grad (``fxfuzz.core.contract.on_form``): the
joint graph returns the forward outputs and then the gradients, so a broken gradient is a
wrong output.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import torch
from fxfuzz.core.case import GraphCase, clone_input, copy_graph_module
from fxfuzz.core.inductor import FROZEN, JOINT, compile_to_form, placeholder_source
from fxfuzz.strategies.builder import node_argument
from hypothesis import assume
from hypothesis import strategies as st
from torch import fx
from torch.export.graph_signature import (
    ConstantArgument,
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
)

# Export's inputs that a module holds as its own state: under freezing, Dynamo makes them
# attributes of the graph it hands compile_fx, and AOTAutograd then sees them as parameters.
_STATE = (InputKind.PARAMETER, InputKind.BUFFER)
# The attribute names of that state: the prefix, then the case input's position.
STATE_PREFIX = "fxfuzz_state_"


def compile_input(case: GraphCase, form: str) -> tuple[fx.GraphModule, list[Any]]:
    """``case``'s graph and inputs as the callable ``torch.compile`` is given in ``form``:
    inputs as training (``_trained``) or inference (``_plain``) has them; frozen, the
    parameters and buffers the module's own (``STATE_PREFIX`` and the input's position), read
    by ``get_attr``, and only the others arguments."""
    gm = copy_graph_module(case.gm)
    values = [
        _trained(s.kind, v) if form == JOINT else _plain(v) for s, v in zip(case.signature.input_specs, case.inputs)
    ]
    if form != FROZEN:
        return gm, values
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")
    state = set()
    for i, (spec, node, value) in enumerate(zip(case.signature.input_specs, placeholders, values)):
        if spec.kind not in _STATE or not isinstance(value, torch.Tensor):
            continue
        name = f"{STATE_PREFIX}{i}"
        if spec.kind == InputKind.PARAMETER:
            gm.register_parameter(name, torch.nn.Parameter(value, requires_grad=value.requires_grad))
        else:
            gm.register_buffer(name, value)
        with gm.graph.inserting_before(first):
            read = gm.graph.get_attr(name)
        read.meta = dict(node.meta)
        node.replace_all_uses_with(read)
        gm.graph.erase_node(node)
        state.add(i)
    gm.recompile()
    return gm, [v for i, v in enumerate(values) if i not in state]


def case_positions(case: GraphCase, sources: list[str]) -> list[int]:
    """The case input each Dynamo source (``Compiled.sources``) is: a state attribute by the
    position its name carries, an argument by the placeholder it names."""
    names = [n.name for n in case.gm.graph.nodes if n.op == "placeholder"]
    state = re.compile(re.escape(STATE_PREFIX) + r"(\d+)")
    positions = []
    for source in sources:
        m = state.search(source)
        positions.append(int(m.group(1)) if m else names.index(source))
    return positions


def _trained(kind: InputKind, value: Any) -> Any:
    """An input as training hands it: a floating-point parameter requires grad (an
    ``nn.Parameter`` does); every other input keeps its drawn flag."""
    if kind == InputKind.PARAMETER and isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
        return clone_input(value).requires_grad_(True)
    return clone_input(value)


def _plain(value: Any) -> Any:
    """An input as inference hands it: without grad."""
    return clone_input(value).detach() if isinstance(value, torch.Tensor) else value


def _trains(gm: fx.GraphModule, args: list[Any]) -> bool:
    """Whether AOTAutograd can build a joint graph of ``gm`` on ``args``: some output is
    computed with grad (not an input passed through), run eagerly under grad. A filter that spares compile_fx's work only: the joint
    graph's presence is compile_fx's to say (``lower_with_compile_fx``)."""
    from torch.utils import _pytree as pytree

    try:
        with torch.enable_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outputs = gm(*[clone_input(a) for a in args])
    except Exception:  # noqa: BLE001 - a graph that cannot run cannot be lowered either
        return False
    return any(isinstance(o, torch.Tensor) and o.grad_fn is not None for o in pytree.tree_leaves(outputs))


def lower_inductor(case: GraphCase, form: str, seed: int = 0) -> GraphCase | None:
    """``case`` in Inductor's ``form`` (module docstring), tangents drawn from ``seed``; None
    where compile_fx cannot lower it."""
    gm, args = compile_input(case, form)
    if form == JOINT and not _trains(gm, args):
        return None
    try:
        with torch.set_grad_enabled(form == JOINT), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = compile_to_form(gm, args, form)
    except Exception:  # noqa: BLE001 - whatever torch.compile fails on is torch's, not the pass's
        return None
    lowered = compiled.gm
    inputs = _inputs(lowered, [case.inputs[i] for i in case_positions(case, compiled.sources)], seed)
    if inputs is None:
        return None
    features = dict(case.features)
    features.pop("domain:export", None)
    features[f"domain:{form}"] = 1
    prims = sum(1 for n in lowered.graph.nodes if n.op == "call_function" and str(n.target).startswith("prims."))
    if prims:
        features[f"{form}:prims_calls"] = prims
    signature = _signature(lowered)
    if form == JOINT:
        # fxfuzz calls a graph on flat inputs; the joint graph's (primals, tangents) convention
        # is its caller's, not a node of it. Its forward outputs come first, then gradients.
        codegen = lowered.graph._codegen
        out_spec = codegen.pytree_info.out_spec if isinstance(codegen, fx.graph._PyTreeCodeGen) else None
        assert out_spec is not None  # is_joint said it is AOTAutograd's (outputs, gradients)
        features["inductor_joint:forward_outputs"] = out_spec.children()[0].num_leaves
        lowered.graph._codegen = fx.graph.CodeGen()
        lowered.recompile()
    return GraphCase(
        gm=lowered, signature=signature, inputs=tuple(inputs), ambient_grad=False, domain=form, features=features
    )


def _inputs(gm: fx.GraphModule, flat: list[Any], seed: int) -> list[Any] | None:
    """The values ``gm``'s placeholders read: AOTAutograd's flat arguments ``flat`` by position,
    without grad, and tangents of random values from ``seed``; None for a placeholder of another name."""
    generator = torch.Generator().manual_seed(seed)
    values = []
    for ph in (n for n in gm.graph.nodes if n.op == "placeholder"):
        source = placeholder_source(ph.name)
        if source is None:
            return None
        kind, i = source
        if kind == "arg":
            values.append(_plain(flat[i]))
            continue
        meta = ph.meta["val"]
        tangent = (
            torch.randn(tuple(meta.shape), generator=generator)
            if meta.dtype.is_floating_point or meta.dtype.is_complex
            else torch.zeros(tuple(meta.shape))
        )
        values.append(tangent.to(meta.dtype))
    return values


def _signature(gm: fx.GraphModule) -> ExportGraphSignature:
    """The signature of a graph Inductor is handed: every placeholder an input, every output
    leaf a user output (Inductor's passes take no signature; the oracles read one)."""
    from torch.utils import _pytree as pytree

    inputs = [InputSpec(InputKind.USER_INPUT, node_argument(n), None) for n in gm.graph.nodes if n.op == "placeholder"]
    leaves = pytree.tree_leaves(gm.graph.output_node().args[0], is_leaf=lambda x: x is None)
    outputs = [node_argument(x) if isinstance(x, fx.Node) else ConstantArgument("", x) for x in leaves]
    return ExportGraphSignature(inputs, [OutputSpec(OutputKind.USER_OUTPUT, a, None) for a in outputs])


@st.composite
def inductor_cases(draw: st.DrawFn, export_cases: st.SearchStrategy[GraphCase], form: str) -> GraphCase:
    """Cases of Inductor's ``form`` lowered from ``export_cases`` (the module docstring says how)."""
    case = draw(export_cases)
    seed = draw(st.integers(0, 2**16)) if form == JOINT else 0
    lowered = lower_inductor(case, form, seed)
    assume(lowered is not None)
    assert lowered is not None
    return lowered
