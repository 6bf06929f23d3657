"""The pass's output must still wrap as an ExportedProgram that torch's own verifier accepts.

torch.export, right after running the pass, checks the graph (nn_module_stack, stack traces,
placeholder names) and builds an ExportedProgram whose constructor runs the training-IR
verifier. A graph case need not carry everything a real export does (nn_module_stack, for
one), so the check compares verdicts: only a rejection of the transformed graph where the
original is accepted is a finding.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.utils._pytree as pytree
from fxfuzz.core.case import copy_graph_module
from fxfuzz.core.internal import first_line
from fxfuzz.oracles.execute import release_frames
from fxfuzz.oracles.finding import Finding
from torch import fx
from torch.export.exported_program import ExportedProgram, ModuleCallEntry, ModuleCallSignature
from torch.export.graph_signature import ExportGraphSignature, InputKind

try:
    from torch._export.verifier import TrainingIRVerifier as _Verifier
except ImportError:  # pragma: no cover - depends on the torch version
    from torch._export.verifier import Verifier as _Verifier  # type: ignore[assignment]


def _state(sig: ExportGraphSignature, inputs: Sequence[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state dict and constants table an ExportedProgram needs for the lifted inputs."""
    state: dict[str, Any] = {}
    constants: dict[str, Any] = {}
    for spec, value in zip(sig.input_specs, inputs):
        if spec.target is None:
            continue  # a user input or a token: no state
        if spec.kind == InputKind.PARAMETER and isinstance(value, torch.Tensor):
            state[spec.target] = torch.nn.Parameter(value.detach(), requires_grad=value.requires_grad)
        elif spec.kind == InputKind.BUFFER and spec.persistent:
            state[spec.target] = value.detach() if isinstance(value, torch.Tensor) else value
        elif spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            constants[spec.target] = value.detach() if isinstance(value, torch.Tensor) else value
    return state, constants


def _module_call_graph(gm: fx.GraphModule, sig: ExportGraphSignature) -> list[ModuleCallEntry]:
    info = getattr(gm.graph._codegen, "pytree_info", None)
    if info is not None and info.in_spec is not None:
        in_spec, out_spec = info.in_spec, info.out_spec
    else:
        in_spec = pytree.tree_flatten((tuple(0 for _ in sig.user_inputs), {}))[1]
        out_spec = pytree.tree_flatten(tuple(0 for _ in sig.output_specs))[1]
    return [ModuleCallEntry("", ModuleCallSignature(inputs=[], outputs=[], in_spec=in_spec, out_spec=out_spec))]


def exported_program(gm: fx.GraphModule, sig: ExportGraphSignature, inputs: Sequence[Any]) -> ExportedProgram:
    """Build the ExportedProgram export would build; its constructor runs the verifier.
    The constructor rewrites the graph it is given and, through common-getitem elimination,
    every nested graph of its root in place: it gets copies of both, since ``gm`` may be the
    case's original, which later checks and the baseline's judgement reuse."""
    import copy

    root = copy_graph_module(gm)
    graph = fx.Graph()
    graph.output(graph.graph_copy(root.graph, {}))
    sig = copy.deepcopy(sig)
    state, constants = _state(sig, inputs)
    return ExportedProgram(
        root=root,
        graph=graph,
        graph_signature=sig,
        state_dict=state,
        range_constraints=_range_constraints(gm),
        module_call_graph=_module_call_graph(gm, sig),
        constants=constants,
        verifiers=[_Verifier],
    )


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


Check = Callable[[fx.GraphModule, ExportGraphSignature, Sequence[Any]], object]

@contextmanager
def _boundary_metadata_stripped(gm: fx.GraphModule) -> Iterator[None]:
    """What export does right after its passes, before its checks: ``nn_module_stack`` and
    ``stack_trace`` go from every placeholder and output of every graph module
    (``torch/export/_trace.py``, ``_produce_aten_artifact``). Restored afterwards, since the
    later oracles still read the graph."""
    popped = []
    for mod in gm.modules():
        if isinstance(mod, fx.GraphModule):
            for node in mod.graph.nodes:
                if node.op in ("placeholder", "output"):
                    for key in ("nn_module_stack", "stack_trace"):
                        if key in node.meta:
                            popped.append((node, key, node.meta.pop(key)))
    try:
        yield
    finally:
        for node, key, value in popped:
            node.meta[key] = value


def _after_export_strips(check: Callable[[fx.GraphModule], None]) -> Check:
    def run(gm: fx.GraphModule, sig: ExportGraphSignature, inputs: Sequence[Any]) -> None:
        with _boundary_metadata_stripped(gm):
            check(gm)

    return run


@functools.cache
def export_checks() -> dict[str, Check]:
    """name -> a check that raises on rejection; export runs the first three right after its
    passes. Built when first asked for: their module imports all of dynamo, over a second of
    CPU that a process only reading repros or supervising workers never needs (the warm
    interpreter imports it for the workers, ``fxfuzz.campaign.worker.PRELOAD``)."""
    checks: dict[str, Check] = {"exported_program": exported_program}
    try:  # private helpers, absent in some torch versions
        from torch.export._trace import _verify_nn_module_stack, _verify_placeholder_names, _verify_stack_trace
    except ImportError:  # pragma: no cover - depends on the torch version
        return checks
    return {
        "nn_module_stack": _after_export_strips(_verify_nn_module_stack),
        "stack_trace": _after_export_strips(_verify_stack_trace),
        "placeholder_names": lambda gm, sig, inputs: _verify_placeholder_names(gm, sig),
        **checks,
    }


def export_rejection(name: str, gm: fx.GraphModule, sig: ExportGraphSignature, inputs: Sequence[Any]) -> BaseException | None:
    """What export's check ``name`` says about ``gm``: the exception it raises, or None."""
    try:
        export_checks()[name](gm, sig, inputs)
    except Exception as e:
        return release_frames(e)
    return None


def check_exported(
    gm: fx.GraphModule,
    sig: ExportGraphSignature | None,
    original_gm: fx.GraphModule,
    original_sig: ExportGraphSignature,
    inputs: Sequence[Any],
) -> list[Finding]:
    """A finding for each of export's checks that rejects the transformed graph but accepts
    the original (a case may lack metadata a real export has, which makes a check moot)."""
    if sig is None:
        return []  # reported as signature_missing
    findings = []
    for name in export_checks():
        got = export_rejection(name, gm, sig, inputs)
        if got is None or export_rejection(name, original_gm, original_sig, inputs) is not None:
            continue
        first = first_line(got)
        findings.append(
            Finding(
                "signature",
                "export_verifier_rejects",
                f"torch.export's {name} check rejects the result but accepts the original: {type(got).__name__}: {first}",
                {"check": name, "exception": type(got).__name__},
            )
        )
    return findings
