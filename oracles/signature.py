"""The rewritten ExportGraphSignature must still describe the rewritten graph, and the
user-visible calling convention must not change."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from fxfuzz.oracles.finding import Finding
from torch import fx
from torch.export.graph_signature import (
    ConstantArgument,
    ExportGraphSignature,
    InputKind,
    SymBoolArgument,
    SymFloatArgument,
    SymIntArgument,
    TensorArgument,
)

# Output spec arguments that name a graph node (a ConstantArgument's name is no node's).
_NODE_ARGUMENTS = (TensorArgument, SymIntArgument, SymFloatArgument, SymBoolArgument)


def _spec_name(spec: Any) -> str | None:
    return getattr(spec.arg, "name", None)


def _output_arg(spec: Any) -> tuple[str, object]:
    """What an output spec promises: a named tensor, or a constant with its value."""
    if isinstance(spec.arg, ConstantArgument):
        return ("constant", repr(spec.arg.value))
    return (type(spec.arg).__name__, None)


def calling_convention(gm: fx.GraphModule) -> tuple[str, object]:
    """The codegen class and its pytree info (argument names, in/out specs), which decide
    how users call the module and what structure it returns."""
    codegen = gm.graph._codegen
    info = getattr(codegen, "pytree_info", None)
    return (type(codegen).__name__, None if info is None else (tuple(info.orig_args), info.in_spec, info.out_spec))


def _names_match_graph(gm: fx.GraphModule, sig: ExportGraphSignature) -> list[Finding]:
    findings = []
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    input_names = [_spec_name(s) for s in sig.input_specs]
    if placeholders != input_names:
        findings.append(
            Finding(
                "signature",
                "input_names_mismatch",
                f"input specs name {input_names} but the graph's placeholders are {placeholders}",
                {"specs": input_names, "placeholders": placeholders},
            )
        )
    outputs = list(cast(Sequence[Any], gm.graph.output_node().args[0]))  # export outputs a tuple
    if len(outputs) != len(sig.output_specs):
        findings.append(
            Finding(
                "signature",
                "output_count_mismatch",
                f"{len(sig.output_specs)} output specs for {len(outputs)} graph outputs",
                {"specs": len(sig.output_specs), "outputs": len(outputs)},
            )
        )
    for i, (arg, spec) in enumerate(zip(outputs, sig.output_specs)):
        named = isinstance(spec.arg, _NODE_ARGUMENTS)
        if isinstance(arg, fx.Node) != named or (named and arg.name != spec.arg.name):
            findings.append(
                Finding(
                    "signature",
                    "output_name_mismatch",
                    f"output {i} is {getattr(arg, 'name', arg)!r} but its spec names {_spec_name(spec)!r}",
                    {"index": i, "node": getattr(arg, "name", repr(arg)), "spec": _spec_name(spec)},
                )
            )
    return findings


def _unchanged(kind: str, what: str, before: Any, after: Any) -> list[Finding]:
    if before == after:
        return []
    return [Finding("signature", kind, f"the pass changed {what}", {"before": str(before), "after": str(after)})]


def check_signature(
    gm: fx.GraphModule,
    sig: ExportGraphSignature | None,
    original: ExportGraphSignature,
    original_gm: fx.GraphModule | None = None,
    names_promised: bool = True,
) -> list[Finding]:
    """Spec names equal placeholder/output node names in order; spec counts, input kinds,
    targets and persistence, output kinds, targets and constants, user input names and the
    pytree calling convention are those of the original. A pass never handed the signature
    (``names_promised`` False: fxfuzz carried it by position) is not held to user input names."""
    if sig is None:
        return [Finding("signature", "signature_missing", "the pass returned no graph signature")]
    findings = _names_match_graph(gm, sig)
    findings += _unchanged(
        "spec_count_changed",
        "the number of input or output specs",
        (len(original.input_specs), len(original.output_specs)),
        (len(sig.input_specs), len(sig.output_specs)),
    )
    findings += _unchanged(
        "input_specs_changed",
        "input kinds, targets or persistence",
        [(s.kind, s.target, s.persistent) for s in original.input_specs],
        [(s.kind, s.target, s.persistent) for s in sig.input_specs],
    )
    findings += _unchanged(
        "output_specs_changed",
        "output kinds, targets or constant values",
        [(s.kind, s.target, _output_arg(s)) for s in original.output_specs],
        [(s.kind, s.target, _output_arg(s)) for s in sig.output_specs],
    )
    if names_promised:
        findings += _unchanged(
            "user_inputs_renamed",
            "the names users pass inputs by",
            [_spec_name(s) for s in original.input_specs if s.kind == InputKind.USER_INPUT],
            [_spec_name(s) for s in sig.input_specs if s.kind == InputKind.USER_INPUT],
        )
    if original_gm is not None:
        findings += _unchanged(
            "calling_convention_changed",
            "the pytree calling convention (codegen, in/out specs)",
            calling_convention(original_gm),
            calling_convention(gm),
        )
    return findings
