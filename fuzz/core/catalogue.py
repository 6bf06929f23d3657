"""torch's own FX passes, each called the way torch calls it, for the registry's catalogue rows.

A pass whose own signature is already a pass shape (``fx_graph_cse``, ``remove_noop_ops``) is
registered directly; these adapters supply what the others need besides the graph: an
ExportedProgram, a map of constants, a device, a quantizer and calibration inputs (built
through ``fxfuzz.core.calls``). Each adapter is one of the shapes of
``fxfuzz.core.shapes``. torch modules are imported on call: loading the registry imports none.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from fxfuzz.core.calls import example_inputs, lifted, module_form, on_program
from torch import fx
from torch.export.graph_signature import ExportGraphSignature, InputKind, OutputKind


def eliminate_dead_code(graph: fx.Graph) -> None:
    """``Graph.eliminate_dead_code()`` with torch's own impurity rule; its bool (whether anything
    was removed) is not a result."""
    graph.eliminate_dead_code()


def cse(gm: fx.GraphModule) -> Any:
    """torch.fx's dialect-agnostic ``CSEPass``, with the ops its docstring says a functional
    dialect must ban (random and in-place ones: ``get_CSE_banned_ops``)."""
    from torch.fx.passes.dialect.common.cse_pass import CSEPass, get_CSE_banned_ops

    return CSEPass(get_CSE_banned_ops())(gm)


def split_const_subgraphs(gm: fx.GraphModule) -> fx.GraphModule:
    """``const_fold.split_const_subgraphs`` with its defaults: a FoldedGraphModule that computes
    the constant part on its first call."""
    from torch.fx.experimental.const_fold import split_const_subgraphs as split

    return split(gm)


def constant_fold(gm: fx.GraphModule) -> None:
    """torch.export's ``constant_fold`` (``torch._export.passes.constant_folding``), in place,
    with no constraint, in the environment its caller has: pt2e quantization, with the
    quantization operators its ``is_impure`` names registered. torch 2.13 registers the
    ``quantized_decomposed`` ones on import of ``torch.ao.quantization.fx._decomposed``, and
    nothing (torchao 0.18 included) registers ``pt2e_quant::dequantize_affine``, so without
    them the pass raises on the first node it would fold, a known defect that hid all of its
    folding (docs/known-findings.md). That one is defined here, schema only (drawn graphs
    never call it), for the pass's run alone: the process is left as it was."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
    from torch._export.passes.constant_folding import constant_fold as fold

    lib = None
    if not hasattr(torch.ops.pt2e_quant, "dequantize_affine"):
        lib = torch.library.Library("pt2e_quant", "FRAGMENT")
        lib.define("dequantize_affine(Tensor input) -> Tensor")
    try:
        fold(gm)
    finally:
        if lib is not None:
            lib._destroy()


def lift_constants(
    gm: fx.GraphModule, graph_signature: ExportGraphSignature
) -> tuple[fx.GraphModule, ExportGraphSignature]:
    """``lift_constants_pass(gm, graph_signature, constant_attrs)`` as torch.export calls it.

    ``constant_attrs`` maps each tensor the graph reads by ``get_attr`` to its name, as export
    gathers a module's tensor attributes, except the tensors read through ``lift_fresh_copy``:
    those are made in ``forward`` (``torch.tensor([...])``), which no attribute holds, and the
    pass names them itself (``lifted_tensor_N``).

    The pass turns each constant into a ``CONSTANT_TENSOR`` input and returns the table its
    caller feeds them from (``ExportedProgram.constants``; ``ExportedProgram.module()`` feeds
    input *i* the value of input spec *i*'s target). The result is handed back in the input's
    convention, fed the same way: each input the pass added becomes a read of the value its
    table holds for the target of the spec at the same position. So the result runs on the
    case's inputs, and a placeholder out of step with its spec, or a table entry under the
    wrong name, reads the wrong tensor. It changes ``gm`` and ``graph_signature`` in place."""
    from torch._export.passes.lift_constants_pass import ConstantAttrMap, lift_constants_pass

    constants = ConstantAttrMap()
    # Each constant's read as the input had it (its nn_module_stack, which the pass drops), by
    # identity: the table holds the very tensors.
    reads: dict[int, dict[str, Any]] = {}
    for node in gm.graph.find_nodes(op="get_attr"):
        value = _attr(gm, node.target)
        reads.setdefault(id(value), dict(node.meta))
        made_in_forward = bool(node.users) and all(u.target in _LIFT_FRESH for u in node.users)
        if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter) and not made_in_forward:
            constants.add(value, node.target)
    given = {id(spec) for spec in graph_signature.input_specs}
    table = lift_constants_pass(gm, graph_signature, constants)
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    if len(placeholders) != len(graph_signature.input_specs):
        return gm, graph_signature  # out of step: fed by position, it cannot run; the oracles judge it
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")
    for node, spec in zip(placeholders, list(graph_signature.input_specs)):
        if id(spec) in given or spec.target not in table:
            continue  # a spec the case had, or one the table lacks: left for the oracles to judge
        value = table[spec.target]
        name = _fresh_attr(gm, spec.target)
        setattr(gm, name, value)
        with gm.graph.inserting_before(first):
            read = gm.graph.get_attr(name)
        read.meta.update(reads.get(id(value), node.meta))
        node.replace_all_uses_with(read)
        gm.graph.erase_node(node)
        graph_signature.input_specs.remove(spec)
        for out in graph_signature.output_specs:
            if getattr(out.arg, "name", None) == node.name:
                out.arg.name = read.name
    gm.recompile()
    return gm, graph_signature


# How make_fx reads a tensor made in forward (lift_constants_pass._unused_constant looks for them).
_LIFT_FRESH = (torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default)


def _fresh_attr(gm: fx.GraphModule, target: str) -> str:
    name = target.replace(".", "_")
    while hasattr(gm, name):
        name += "_"
    return name


def remove_effect_tokens(
    gm: fx.GraphModule, graph_signature: ExportGraphSignature
) -> tuple[fx.GraphModule, ExportGraphSignature]:
    """torch.export's ``_remove_effect_tokens`` on the ExportedProgram of the graph.

    The pass takes the effect tokens out of the calling convention: its caller
    (``ExportedProgram.module()``) then stops passing a token in and drops the token out. The
    result is handed back in the input's convention, as that caller sees it: a token input the
    result ignores where the input took one, and a fresh token (``prims._make_token``) out where
    the input returned one, at the same positions. Only where the pass removed every token: a
    token left behind stays for the oracles to judge. Such plumbing (a token input nothing
    reads, a token out made by ``_make_token``) is taken out again before the pass runs, so
    the pass applied to its own result sees what its caller would hand it a second time."""
    from torch.export._remove_effect_tokens_pass import _remove_effect_tokens

    token_inputs = [
        (i, copy.deepcopy(s)) for i, s in enumerate(graph_signature.input_specs) if s.kind == InputKind.TOKEN
    ]
    token_outputs = [
        (i, copy.deepcopy(s)) for i, s in enumerate(graph_signature.output_specs) if s.kind == OutputKind.TOKEN
    ]
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    returned: Any = gm.graph.output_node().args[0]
    metas = {i: dict(placeholders[i].meta) for i, _ in token_inputs}
    out_metas = {i: dict(returned[i].meta) for i, _ in token_outputs}
    _strip_plumbing(gm, graph_signature)
    gm, sig = on_program(_remove_effect_tokens, gm, graph_signature)
    if any(s.kind == InputKind.TOKEN for s in sig.input_specs) or any(
        s.kind == OutputKind.TOKEN for s in sig.output_specs
    ):
        return gm, sig
    for i, in_spec in token_inputs:
        present = list(gm.graph.find_nodes(op="placeholder"))
        with gm.graph.inserting_before(
            present[i] if i < len(present) else next(n for n in gm.graph.nodes if n.op != "placeholder")
        ):
            node = gm.graph.placeholder(in_spec.arg.name)
        node.meta.update(metas[i])
        in_spec.arg.name = node.name
        sig.input_specs.insert(i, in_spec)
    output = gm.graph.output_node()
    values: list[Any] = list(output.args[0])  # type: ignore[arg-type]  # the output node's one argument: a tuple
    for i, out_spec in token_outputs:
        with gm.graph.inserting_before(output):
            node = gm.graph.call_function(torch.ops.prims._make_token.default, ())
        node.meta.update(out_metas[i])
        out_spec.arg.name = node.name
        values.insert(i, node)
        sig.output_specs.insert(i, out_spec)
    output.args = (tuple(values),)
    gm.recompile()
    return gm, sig


def _strip_plumbing(gm: fx.GraphModule, sig: ExportGraphSignature) -> None:
    """Take out of ``gm`` and ``sig`` in place the token plumbing ``remove_effect_tokens`` puts
    back: token inputs nothing reads, token outputs made by ``prims._make_token``."""
    output = gm.graph.output_node()
    values: list[Any] = list(output.args[0])  # type: ignore[arg-type]  # the output node's one argument: a tuple
    made = [
        i
        for i, s in enumerate(sig.output_specs)
        if s.kind == OutputKind.TOKEN and values[i].target is torch.ops.prims._make_token.default
    ]
    dropped = [values[i] for i in made]
    for i in reversed(made):
        del sig.output_specs[i]
        del values[i]
    output.args = (tuple(values),)
    for node in dropped:
        if not node.users:
            gm.graph.erase_node(node)
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    unread = [i for i, s in enumerate(sig.input_specs) if s.kind == InputKind.TOKEN and not placeholders[i].users]
    for i in reversed(unread):
        del sig.input_specs[i]
        gm.graph.erase_node(placeholders[i])
    gm.recompile()


def move_to_cpu(
    gm: fx.GraphModule, graph_signature: ExportGraphSignature
) -> tuple[fx.GraphModule, ExportGraphSignature]:
    """torch.export's ``move_to_device_pass`` to ``"cpu"`` on the ExportedProgram of a CPU graph:
    it must change nothing the graph does."""
    from torch.export.passes import move_to_device_pass

    return on_program(lambda program: move_to_device_pass(program, "cpu"), gm, graph_signature)


def _attr(gm: fx.GraphModule, target: Any) -> Any:
    obj: Any = gm
    for part in str(target).split("."):
        obj = getattr(obj, part, None)
    return obj


def unsafe_remove_auto_functionalized(
    gm: fx.GraphModule, graph_signature: ExportGraphSignature
) -> tuple[fx.GraphModule, ExportGraphSignature]:
    """torch.export's ``unsafe_remove_auto_functionalized_pass`` on the ExportedProgram of the
    graph (``fxfuzz.core.calls.on_program``), as its callers hand it an ExportedProgram."""
    from torch.export._remove_auto_functionalized_pass import unsafe_remove_auto_functionalized_pass

    return on_program(unsafe_remove_auto_functionalized_pass, gm, graph_signature)


def _x86(qat: bool) -> Any:
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    return X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config(is_qat=qat))


def _xnnpack(qat: bool) -> Any:
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_qat=qat))


def _pt2e(
    quantizer: Any, qat: bool, gm: fx.GraphModule, sig: ExportGraphSignature
) -> tuple[fx.GraphModule, ExportGraphSignature]:
    """torchao's pt2e flow as its tutorials run it: ``prepare_pt2e`` (``prepare_qat_pt2e``) of
    the program's module form with ``quantizer``, one calibration call on the case's example
    inputs (``fxfuzz.core.calls.example_inputs``; the observers see exactly the values the
    oracles then run), and ``convert_pt2e`` with its defaults (quantized weights folded). The
    result comes back in the case's convention (``calls.lifted``)."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

    form = module_form(gm, sig, example_inputs())
    prepared = (prepare_qat_pt2e if qat else prepare_pt2e)(form.model, quantizer)
    # Calibration is the caller's run of its model, not the pass: the random draws and grad
    # toggles of the case's graph that it makes are not the pass's to answer for.
    with torch.random.fork_rng(), torch.set_grad_enabled(torch.is_grad_enabled()):
        prepared(*form.args, **form.kwargs)
    return lifted(form, convert_pt2e(prepared), sig)


def pt2e_x86(gm: fx.GraphModule, graph_signature: ExportGraphSignature) -> tuple[fx.GraphModule, ExportGraphSignature]:
    """pt2e post-training quantization with torchao's ``X86InductorQuantizer`` and its default config."""
    return _pt2e(_x86(False), False, gm, graph_signature)


def pt2e_x86_qat(
    gm: fx.GraphModule, graph_signature: ExportGraphSignature
) -> tuple[fx.GraphModule, ExportGraphSignature]:
    """pt2e quantization-aware preparation (``prepare_qat_pt2e``) with the X86 Inductor quantizer's QAT config."""
    return _pt2e(_x86(True), True, gm, graph_signature)


def pt2e_xnnpack(
    gm: fx.GraphModule, graph_signature: ExportGraphSignature
) -> tuple[fx.GraphModule, ExportGraphSignature]:
    """pt2e post-training quantization with torchao's XNNPACK-style quantizer (symmetric config)."""
    return _pt2e(_xnnpack(False), False, gm, graph_signature)


def joint_graph_passes(gm: fx.GraphModule) -> fx.GraphModule:
    """Inductor's ``joint_graph_passes(graph, input_device=None)`` on a GraphModule, as
    ``compile_fx`` calls it: its optional second parameter makes its shape ambiguous."""
    from torch._inductor.fx_passes.joint_graph import joint_graph_passes as passes

    return passes(gm)


def post_grad_passes(gm: fx.GraphModule) -> None:
    """Inductor's ``post_grad_passes(gm, is_inference)`` on an inference graph, in place, as
    ``compile_fx`` calls it for one."""
    from torch._inductor.fx_passes.post_grad import post_grad_passes as passes

    passes(gm, is_inference=True)
