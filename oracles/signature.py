"""The rewritten ExportGraphSignature must still describe the rewritten graph."""

from __future__ import annotations

from torch import fx
from torch.export.graph_signature import ExportGraphSignature, TensorArgument

from .finding import Finding


def _spec_name(spec) -> str | None:
    return getattr(spec.arg, "name", None)


def check_signature(
    gm: fx.GraphModule, sig: ExportGraphSignature | None, original: ExportGraphSignature
) -> list[Finding]:
    """Input/output spec names equal the placeholder/output node names, in order, and the
    specs' kinds, targets and persistence are those of the original signature."""
    if sig is None:
        return [Finding("signature", "signature_missing", "the pass returned no graph signature")]
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
    outputs = list(gm.graph.output_node().args[0])
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
        named = isinstance(spec.arg, TensorArgument)
        if isinstance(arg, fx.Node) != named or (named and arg.name != spec.arg.name):
            findings.append(
                Finding(
                    "signature",
                    "output_name_mismatch",
                    f"output {i} is {getattr(arg, 'name', arg)!r} but its spec names {_spec_name(spec)!r}",
                    {"index": i, "node": getattr(arg, "name", repr(arg)), "spec": _spec_name(spec)},
                )
            )
    before = [(s.kind, s.target, s.persistent) for s in original.input_specs]
    after = [(s.kind, s.target, s.persistent) for s in sig.input_specs]
    if before != after:
        findings.append(
            Finding(
                "signature",
                "input_specs_changed",
                "the pass changed input kinds, targets or persistence",
                {"before": [str(x) for x in before], "after": [str(x) for x in after]},
            )
        )
    if [s.kind for s in original.output_specs] != [s.kind for s in sig.output_specs]:
        findings.append(Finding("signature", "output_kinds_changed", "the pass changed output spec kinds"))
    return findings
