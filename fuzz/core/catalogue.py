"""torch's own FX passes, each called the way torch calls it, for the registry's catalogue rows.

A pass whose own signature is already a pass shape (``fx_graph_cse``, ``remove_noop_ops``) is
registered directly; these adapters supply what the others need besides the graph: an
ExportedProgram, a map of constants, a device, a quantizer and calibration inputs (built
through ``fxfuzz.core.calls``). Each adapter is one of the shapes of
``fxfuzz.core.shapes``. torch modules are imported on call: loading the registry imports none.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import importlib
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
import torch.utils._pytree as pytree
from fxfuzz.core.calls import CallerRunRaised, example_inputs, lifted, module_form, on_program
from fxfuzz.core.case import graph_module
from fxfuzz.core.inductor import fake_mode_of
from fxfuzz.core.passes import REGISTRY
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
    # toggles of the case's graph that it makes are not the pass's to answer for, nor an error
    # the graph raises without any observer in it (``verify`` tells, ``CallerRunRaised``).
    with torch.random.fork_rng(), torch.set_grad_enabled(torch.is_grad_enabled()):
        try:
            prepared(*form.args, **form.kwargs)
        except Exception as e:
            raise CallerRunRaised(f"the calibration call raised {type(e).__name__}") from e
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


# ---------------------------------------------------------------------------- Inductor


@contextlib.contextmanager
def _given(name: str, gm: fx.GraphModule) -> Iterator[dict[str, Any]]:
    """Within, the call context the row ``name`` declares (``fxfuzz.core.passes.CallContext``)
    is given: its config patches and the graph's fake mode set; yields the arguments its
    caller hands besides the graph (its ``args``, and the example inputs where it takes them)."""
    from torch._inductor import config
    from torch._inductor.virtualized import V

    context = REGISTRY[name].context
    given = dict(context.args)
    if context.inputs == "fake":  # the fake tensors the graph was traced with, as AOTAutograd hands them on
        given[context.inputs_as] = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
    elif context.inputs == "real":
        given[context.inputs_as] = list(example_inputs())
    with contextlib.ExitStack() as stack:
        fake = fake_mode_of(gm) if context.fake_mode else None
        if fake is not None:
            stack.enter_context(V.set_fake_mode(fake))
        stack.enter_context(config.patch(dict(context.config)))
        yield given


def _input_device(gm: fx.GraphModule) -> Any:
    """The device ``compile_fx`` hands the joint-graph passes: the first of its inputs' and
    metas' devices (``get_inputs_devices``)."""
    from torch._dynamo.utils import get_inputs_devices

    return get_inputs_devices([], gm)[0]


def joint_graph_passes(gm: fx.GraphModule) -> fx.GraphModule:
    """Inductor's ``joint_graph_passes`` as ``compile_fx`` calls it, through
    ``_recursive_joint_graph_passes(gm, skip_invoke_subgraph=True, input_device=...)``, which runs
    it on each nested graph first, in the graph's fake mode."""
    from torch._inductor.compile_fx import _recursive_joint_graph_passes

    with _given("joint_graph_passes", gm):
        return _recursive_joint_graph_passes(gm, skip_invoke_subgraph=True, input_device=_input_device(gm))


def _post_grad(name: str, gm: fx.GraphModule) -> None:
    """What ``compile_fx``'s ``_compile_fx_inner`` does to a graph up to and through its
    post-grad passes, in place: views become reshapes (``view_to_reshape``), fake tensors are
    propagated anew from the example inputs under no_grad (``fake_tensor_prop``), then
    ``_recursive_post_grad_passes(gm, is_inference)`` in that fake mode."""
    from torch._inductor.compile_fx import _recursive_post_grad_passes, fake_tensor_prop
    from torch._inductor.fx_passes.post_grad import view_to_reshape
    from torch._inductor.virtualized import V

    with _given(name, gm) as given:
        view_to_reshape(gm)
        with torch.no_grad():
            fake = fake_tensor_prop(gm, given["example_inputs"])
        with V.set_fake_mode(fake):
            _recursive_post_grad_passes(gm, is_inference=given["is_inference"])


def post_grad_passes(gm: fx.GraphModule) -> None:
    """Inductor's ``post_grad_passes`` on an inference graph (``is_inference=True``), as
    ``compile_fx`` runs it (``_post_grad``)."""
    _post_grad("post_grad_passes", gm)


def post_grad_passes_training(gm: fx.GraphModule) -> fx.GraphModule:
    """Inductor's ``post_grad_passes`` in training (``is_inference=False``), on the graphs
    ``compile_fx`` runs it on: the joint graph is split into forward and backward by Inductor's
    partitioner (``min_cut_rematerialization_partition(..., compiler="inductor")``, as
    ``split`` calls it), each runs through ``_post_grad``, and the pair is joined again as
    AOTAutograd runs it (``joined``). So the result computes what the joint graph does, and is
    judged against it."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    with _given("post_grad_passes_training", gm):
        forward, backward, forward_outputs = split(min_cut_rematerialization_partition, gm, compiler="inductor")
    _post_grad("post_grad_passes_training", forward)
    _post_grad("post_grad_passes_training", backward)
    return joined(gm, forward, backward, forward_outputs)


def _is_tangent(node: fx.Node) -> bool:
    """AOTAutograd's name for a placeholder of the joint graph that takes a tangent."""
    return node.name.startswith("tangents_")


def split(partition: Any, gm: fx.GraphModule, **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule, int]:
    """``partition`` (one of functorch's partitioners) on the joint graph ``gm``, called as
    AOTAutograd's ``_partition_joint_graph_into_fw_bw`` calls it: ``joint_inputs`` the pair
    (primals, tangents) of the fake values the graph was traced with, ``num_fwd_outputs`` the
    joint's outputs before its gradients (one gradient per primal), and
    ``static_lifetime_input_indices`` the empty list ``compile_fx`` hands for the graphs of
    the ``inductor_joint`` form (``fxfuzz.strategies.inductor``: no input is an
    ``nn.Parameter`` of a module Dynamo saw); ``kwargs`` besides. Returns the forward, the
    backward and the count of the joint's forward outputs."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    primals = [n.meta.get("val") for n in placeholders if not _is_tangent(n)]
    tangents = [n.meta.get("val") for n in placeholders if _is_tangent(n)]
    outputs = pytree.tree_leaves(gm.graph.output_node().args[0], is_leaf=lambda x: x is None)
    forward_outputs = len(outputs) - len(primals)
    forward, backward = partition(
        gm,
        (primals, tangents),
        num_fwd_outputs=forward_outputs,
        static_lifetime_input_indices=[],
        **kwargs,
    )
    return forward, backward, forward_outputs


def joined(
    joint: fx.GraphModule, forward: fx.GraphModule, backward: fx.GraphModule, forward_outputs: int
) -> fx.GraphModule:
    """One graph taking ``joint``'s placeholders and returning what it returns, computed as
    AOTAutograd's runtime runs a partition: ``forward`` on the primals, by position; its first
    ``forward_outputs`` outputs the joint's, the rest what it saved; ``backward`` on the
    symbolic values saved (the last ones), then the others saved, in order, then the tangents,
    by position (``runtime_wrappers``: ``*ctx_symints, *ctx_saved_tensors, *tangents``); its
    outputs the gradients. Where a graph takes another number of inputs than it is handed,
    AOTAutograd's call of it fails, and so does this graph's, when it runs. Submodules (subgraphs of cond and map) keep their names, the
    backward's renamed where the forward holds one."""
    from torch.fx.experimental.proxy_tensor import is_sym_node

    graph = fx.Graph()
    root = torch.nn.Module()
    primals: list[fx.Node] = []
    tangents: list[fx.Node] = []
    for node in joint.graph.find_nodes(op="placeholder"):
        copy_ = graph.placeholder(node.name)
        copy_.meta.update(node.meta)
        (tangents if _is_tangent(node) else primals).append(copy_)

    def ran(part: fx.GraphModule, args: list[fx.Node], prefix: str) -> list[Any]:
        """The outputs of ``part`` called on ``args``: its nodes copied in, or where it takes
        another number of inputs, a call of it as a submodule, which fails in torch's code as
        the runtime's call would (the pass's malformed result, not fxfuzz's error)."""
        placeholders = list(part.graph.find_nodes(op="placeholder"))
        if len(placeholders) != len(args):
            setattr(root, f"{prefix}module", part)
            call = graph.call_module(f"{prefix}module", tuple(args))
            count = len(pytree.tree_leaves(part.graph.output_node().args[0], is_leaf=lambda x: x is None))
            return [graph.call_function(operator.getitem, (call, i)) for i in range(count)]
        out = graph.graph_copy(part.graph, dict(zip(placeholders, args)))
        for node in list(graph.nodes):
            if node.op == "get_attr" and node not in done:
                target = str(node.target)
                name = target if not hasattr(root, target) else f"{prefix}{target}"
                setattr(root, name, _attr(part, target))
                node.target = name
                done.add(node)
        return list(pytree.tree_leaves(out, is_leaf=lambda x: x is None))

    done: set[fx.Node] = set()
    fw_out = ran(forward, primals, "forward_")
    saved = fw_out[forward_outputs:]
    symbolic = [v for v in saved if is_sym_node(v)]
    saved = [*saved[len(saved) - len(symbolic) :], *saved[: len(saved) - len(symbolic)]]
    bw_out = ran(backward, [*saved, *tangents], "backward_")
    graph.output([*fw_out[:forward_outputs], *bw_out])
    return graph_module(root, graph)


def _partition_row(name: str, partition: Any, gm: fx.GraphModule) -> fx.GraphModule:
    """The row ``name``'s partitioner on the joint graph ``gm`` as AOTAutograd calls it
    (``split``, with the row's arguments), the pair joined as AOTAutograd's runtime runs it
    (``joined``): a graph that computes what ``gm`` does where the partition is right."""
    with _given(name, gm) as given:
        forward, backward, forward_outputs = split(partition, gm, **given)
    return joined(gm, forward, backward, forward_outputs)


def default_partition(gm: fx.GraphModule) -> fx.GraphModule:
    """functorch's ``default_partition``, which AOTAutograd's own backends (``aot_eager``) use:
    the forward as the user's ``forward`` ran it, everything else in the backward."""
    from torch._functorch.partitioners import default_partition as partition

    return _partition_row("default_partition", partition, gm)


def min_cut_rematerialization_partition(gm: fx.GraphModule) -> fx.GraphModule:
    """functorch's ``min_cut_rematerialization_partition``, Inductor's partitioner (its
    ``compiler="inductor"``): what the backward recomputes rather than saves is chosen by a
    min cut."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition as partition

    return _partition_row("min_cut_rematerialization_partition", partition, gm)


def reinplace_inplaceable_ops(gm: fx.GraphModule) -> None:
    """Inductor's ``reinplace_inplaceable_ops(fake_tensor_updater, graph)`` as ``post_grad_passes``
    calls it: with a ``FakeTensorUpdater`` of the module, in the graph's fake mode."""
    from torch._inductor.fx_passes.reinplace import reinplace_inplaceable_ops as reinplace
    from torch._inductor.fx_utils import FakeTensorUpdater

    with _given("reinplace_inplaceable_ops", gm):
        reinplace(FakeTensorUpdater(gm), gm.graph)


def decompose_auto_functionalized(gm: fx.GraphModule) -> None:
    """Inductor's ``decompose_auto_functionalized(graph)`` as ``post_grad_passes`` calls it, in the graph's fake mode."""
    from torch._inductor.fx_passes.post_grad import decompose_auto_functionalized as decompose

    with _given("decompose_auto_functionalized", gm):
        decompose(gm.graph)


def freezing_passes(gm: fx.GraphModule) -> None:
    """Inductor's ``freezing_passes(gm, aot_example_inputs)`` as ``freeze`` calls it: with the
    fake example inputs, in the graph's fake mode, under ``config.freezing``."""
    from torch._inductor.fx_passes.freezing_patterns import freezing_passes as passes

    with _given("freezing_passes", gm) as given:
        passes(gm, given["aot_example_inputs"])


@dataclass(frozen=True)
class PatternList:
    """One of Inductor's pattern lists (a ``PatternMatcherPass``, which its row's ``calls``
    names), applied on its own as its pass applies it: ``patterns.apply(gm.graph)`` after its
    module's ``lazy_init`` (which registers most entries), in the row's context. Entries that
    lower to Inductor's IR (``LoweringPatternEntry``) only run inside Inductor's lowering: they
    are left out for the call (``lowerings_of`` counts them)."""

    name: str

    def pattern_list(self) -> Any:
        """The PatternMatcherPass, its module's ``lazy_init`` run first."""
        where, _, attr = REGISTRY[self.name].calls[0].partition(":")
        module = importlib.import_module(where)
        init = getattr(module, "lazy_init", None)
        if init is not None:
            init()
        name, _, index = attr.partition("[")
        patterns = getattr(module, name)
        return patterns[int(index.rstrip("]"))] if index else patterns

    def __call__(self, gm: fx.GraphModule) -> None:
        with _given(self.name, gm):
            patterns = self.pattern_list()
            kept = {key: [e for e in entries if not _lowers(e)] for key, entries in patterns.patterns.items()}
            real = patterns.patterns
            patterns.patterns = collections.defaultdict(list, kept)
            try:
                patterns.apply(gm.graph)
            finally:
                patterns.patterns = real


def _lowers(entry: Any) -> bool:
    from torch._inductor.pattern_matcher import LoweringPatternEntry

    return isinstance(entry, LoweringPatternEntry)


def lowerings_of(name: str) -> tuple[int, int]:
    """How many entries the pattern row ``name``'s list holds, and how many of them lower to
    Inductor's IR and are left out of its call."""
    entries = [e for es in PatternList(name).pattern_list().patterns.values() for e in es]
    return len(entries), sum(1 for e in entries if _lowers(e))


# The pattern rows' passes, by row name: ``fxfuzz.core.catalogue:patterns.NAME``.
patterns = SimpleNamespace(**{r.name: PatternList(r.name) for r in REGISTRY.values() if r.attr.startswith("patterns.")})
