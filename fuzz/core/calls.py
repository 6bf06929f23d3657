"""What a real caller hands a pass besides the graph, built from a case: its ExportedProgram
(``exported_program``), that program's module form (``module_form``, what pt2e quantization
takes) and the case's example inputs (``example_inputs``, set by ``fxfuzz.oracles.verify``
around every call of the pass). Public: catalogue adapters and users' own adapters
(docs/own-pass.md) build the same things the same way.
"""

from __future__ import annotations

import copy as _copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from fxfuzz.core.case import clone_input, copy_graph_module, graph_module
from torch import fx
from torch.export.exported_program import ExportedProgram, ModuleCallEntry, ModuleCallSignature
from torch.export.graph_signature import ExportGraphSignature, InputKind

_INPUTS: ContextVar[tuple[Any, ...] | None] = ContextVar("fxfuzz_example_inputs", default=None)


@contextmanager
def given_inputs(inputs: Sequence[Any]) -> Iterator[None]:
    """Within it, ``example_inputs()`` gives copies of ``inputs`` (the case's, in signature order)."""
    token = _INPUTS.set(tuple(inputs))
    try:
        yield
    finally:
        _INPUTS.reset(token)


def example_inputs() -> tuple[Any, ...]:
    """Fresh copies of the example inputs of the case the pass is being called on, in signature
    order (parameters, buffers, constants, user inputs): what a caller that calibrates or
    traces the model has. RuntimeError outside ``fxfuzz.oracles.verify`` (a standalone repro's
    compact check has none to give)."""
    inputs = _INPUTS.get()
    if inputs is None:
        raise RuntimeError(
            "this pass needs the case's example inputs, which fxfuzz gives only inside verify (fxfuzz.core.calls)"
        )
    return tuple(clone_input(t) for t in inputs)


def _state(sig: ExportGraphSignature, inputs: Sequence[Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state dict and constants table of the lifted inputs: their values, or without
    ``inputs`` empty stand-ins (a pass that sees only the graph never reads them)."""
    state: dict[str, Any] = {}
    constants: dict[str, Any] = {}
    for i, spec in enumerate(sig.input_specs):
        if spec.target is None:
            continue  # a user input or a token: no state
        value = inputs[i] if inputs is not None else torch.empty(0)
        plain = value.detach() if isinstance(value, torch.Tensor) else value
        if spec.kind == InputKind.PARAMETER and isinstance(value, torch.Tensor):
            state[spec.target] = torch.nn.Parameter(
                plain, requires_grad=value.requires_grad if inputs is not None else True
            )
        elif spec.kind == InputKind.BUFFER and spec.persistent:
            state[spec.target] = plain
        elif spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            constants[spec.target] = plain
    return state, constants


def _module_call_graph(gm: fx.GraphModule, sig: ExportGraphSignature) -> list[ModuleCallEntry]:
    info = getattr(gm.graph._codegen, "pytree_info", None)
    in_spec = pytree.tree_flatten((tuple(0 for _ in sig.user_inputs), {}))[1]
    out_spec = pytree.tree_flatten(tuple(0 for _ in sig.output_specs))[1]
    if info is not None and info.in_spec is not None:
        out_spec = info.out_spec
        # The program's convention is over its user inputs: the graph's, where it spans more
        # placeholders (parameters and buffers too), is not one a program could have.
        if info.in_spec.num_leaves == len(sig.user_inputs):
            in_spec = info.in_spec
    return [ModuleCallEntry("", ModuleCallSignature(inputs=[], outputs=[], in_spec=in_spec, out_spec=out_spec))]


def _range_constraints(gm: fx.GraphModule) -> dict[Any, Any]:
    """Each symbol of the placeholders' sizes with its range, as export records them: what
    ``ep.module()`` checks a call's sizes against, and what save/load and decompositions carry."""
    ranges: dict[Any, Any] = {}
    for n in gm.graph.find_nodes(op="placeholder"):
        val = n.meta.get("val")
        for d in val.shape if isinstance(val, torch.Tensor) else ():
            if isinstance(d, torch.SymInt):
                env = d.node.shape_env
                ranges.update({s: env.var_to_range[s] for s in d.node.expr.free_symbols if s in env.var_to_range})
    return ranges


def exported_program(
    gm: fx.GraphModule, sig: ExportGraphSignature, inputs: Sequence[Any] | None = None, *, copy: bool = False
) -> ExportedProgram:
    """The ExportedProgram torch.export would build for ``gm`` and ``sig``; its constructor runs
    torch.export's training-IR verifier, which accepts pre-dispatch graphs.

    ``inputs`` (in signature order) give the state dict and constants their values; without
    them they hold empty stand-ins (the graph reads them as inputs, so a pass that only
    rewrites the graph never sees their values). The constructor rewrites the graph it is
    given and, through common-getitem elimination, every nested graph of its root in place:
    with ``copy`` it gets copies of both (the caller keeps ``gm`` as it was); without, the
    program owns ``gm``'s graph, as a pass on the program would."""
    from torch._export.verifier import TrainingIRVerifier

    root, graph = gm, gm.graph
    if copy:
        root = copy_graph_module(gm)
        graph = fx.Graph()
        graph.output(graph.graph_copy(root.graph, {}))
        sig = _copy.deepcopy(sig)
    state, constants = _state(sig, inputs)
    return ExportedProgram(
        root=root,
        graph=graph,
        graph_signature=sig,
        state_dict=state,
        range_constraints=_range_constraints(gm),
        module_call_graph=_module_call_graph(gm, sig),
        constants=constants,
        verifiers=[TrainingIRVerifier],
    )


def on_program(
    run: Callable[[ExportedProgram], ExportedProgram], gm: fx.GraphModule, sig: ExportGraphSignature
) -> tuple[fx.GraphModule, ExportGraphSignature]:
    """``run`` (a pass on an ExportedProgram) on the program of ``gm``; its graph module and
    signature. The program keeps the pytree calling convention in its call graph, its graph
    flat (the constructor resets the codegen): the result gets ``gm``'s codegen back, as
    ``ExportedProgram.module()`` would put it."""
    codegen = _copy.deepcopy(gm.graph._codegen)
    program = run(exported_program(gm, sig))
    program.graph_module.graph._codegen = codegen
    program.graph_module.recompile()
    return program.graph_module, program.graph_signature


class CallerRunRaised(Exception):
    """Raised by a pass's call, from what the run its caller makes of the model around the pass
    (pt2e's calibration call) raised. Where the case's graph raises too, the caller never gets
    to apply the pass to this case, and ``verify`` gives no verdict on it; where it runs, the
    error (``__cause__``) is the pass's, as if it had escaped the call."""


@dataclass
class ModuleForm:
    """``torch.export.export(...).module()`` of a case (``module_form``): the model, the user
    inputs to call it with (``args``, ``kwargs`` of its calling convention), and what ``lifted``
    needs to hand a pass's result back in the case's convention (the case's codegen and its
    placeholders' metas, taken before the program took its graph)."""

    model: fx.GraphModule
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    codegen: Any
    metas: dict[str, dict[str, Any]]


def module_form(gm: fx.GraphModule, sig: ExportGraphSignature, inputs: Sequence[Any]) -> ModuleForm:
    """The module form pt2e quantization and other module-level callers take: parameters,
    buffers and constants as attributes holding ``inputs``' values. It owns ``gm``'s graph:
    pass a copy to keep ``gm``."""
    users = [v for s, v in zip(sig.input_specs, inputs) if s.kind == InputKind.USER_INPUT]
    codegen = _copy.deepcopy(gm.graph._codegen)
    metas = {n.name: dict(n.meta) for n in gm.graph.find_nodes(op="placeholder")}
    info = getattr(codegen, "pytree_info", None)
    model = exported_program(gm, sig, inputs).module()
    if info is not None and info.in_spec is not None:
        args, kwargs = pytree.tree_unflatten(users, info.in_spec)
        return ModuleForm(model, tuple(args), dict(kwargs), codegen, metas)
    return ModuleForm(model, tuple(users), {}, codegen, metas)


def lifted(
    form: ModuleForm, result: fx.GraphModule, sig: ExportGraphSignature
) -> tuple[fx.GraphModule, ExportGraphSignature]:
    """``result``, what a pass made of ``form.model``, back in the case's convention: each
    parameter, buffer and constant read by ``get_attr`` becomes the placeholder of its input
    spec again (with the case's meta), in signature order before the user inputs, and the
    graph gets the case's codegen back; the signature names the placeholders and outputs by
    position. Attributes the pass added (folded weights, scales) stay attributes: they are
    what it made."""
    from fxfuzz.core.shapes import by_position

    graph = result.graph
    users = list(graph.find_nodes(op="placeholder"))
    first = users[0] if users else next(iter(graph.nodes))
    for spec in sig.input_specs:
        if spec.kind not in _LIFTED:
            continue
        with graph.inserting_before(first):
            node = graph.placeholder(spec.arg.name)
        node.meta.update(form.metas.get(spec.arg.name, {}))
        for read in list(graph.find_nodes(op="get_attr", target=spec.target)):
            read.replace_all_uses_with(node)
            graph.erase_node(read)
    graph._codegen = _copy.deepcopy(form.codegen)
    # A module of its own: ``ep.module()``'s hooks check calls against the program's inputs.
    module = graph_module(result, graph)
    return module, by_position(sig, module)


# The inputs ``ExportedProgram.module()`` turns into attributes.
_LIFTED = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ)
