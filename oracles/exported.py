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

from fxfuzz.core import calls
from fxfuzz.core.internal import first_line
from fxfuzz.oracles.execute import release_frames
from fxfuzz.oracles.finding import Finding
from torch import fx
from torch.export.graph_signature import ExportGraphSignature

# One of export's checks: raises on a graph it rejects.
ExportCheck = Callable[[fx.GraphModule, ExportGraphSignature, Sequence[Any]], object]


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


def _after_export_strips(check: Callable[[fx.GraphModule], None]) -> ExportCheck:
    def run(gm: fx.GraphModule, sig: ExportGraphSignature, inputs: Sequence[Any]) -> None:
        with _boundary_metadata_stripped(gm):
            check(gm)

    return run


@functools.cache
def export_checks() -> dict[str, ExportCheck]:
    """name -> a check that raises on rejection; export runs the first three right after its
    passes. Built when first asked for: their module imports all of dynamo, over a second of
    CPU that a process only reading repros or supervising workers never needs (the warm
    interpreter imports it for the workers, ``fxfuzz.campaign.worker.PRELOAD``)."""
    # On copies: ``gm`` may be the case's original, which later checks and the baseline's
    # judgement reuse.
    checks: dict[str, ExportCheck] = {"exported_program": functools.partial(calls.exported_program, copy=True)}
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


def export_rejection(
    name: str, gm: fx.GraphModule, sig: ExportGraphSignature, inputs: Sequence[Any]
) -> BaseException | None:
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
