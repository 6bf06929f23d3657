"""Oracles: checks a pass's output against the case it was given. Entry point: ``verify``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from strategies.case import GraphCase

from .contract import PassContract, contract_of
from .crash import crash_finding
from .equivalence import check_equivalence
from .execute import run_graph
from .finding import ORACLES, Finding
from .gradients import check_gradients
from .signature import check_signature
from .structure import check_structure

PassFn = Callable[[Any, Any], tuple[Any, Any]]

__all__ = ["Finding", "ORACLES", "PassContract", "verify", "apply_pass"]


def apply_pass(case: GraphCase, pass_fn: PassFn) -> tuple[Any, Any]:
    """Run the pass on an independent copy of the case under the case's ambient grad mode."""
    work = case.copy()
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(case.ambient_grad)
    try:
        return pass_fn(work.gm, work.signature)
    finally:
        torch.set_grad_enabled(before)


def verify(case: GraphCase, pass_fn: PassFn, contract: PassContract | None = None) -> list[Finding]:
    """Run ``pass_fn`` on a copy of ``case`` and return every check that failed.

    The original and the transformed graph each execute on their own copies of the inputs,
    under the ambient grad mode the pass ran in.
    """
    contract = contract or contract_of(pass_fn)
    try:
        gm, sig = apply_pass(case, pass_fn)
    except Exception as e:
        return [crash_finding(e)]
    findings = check_structure(gm, contract) + check_signature(gm, sig, case.signature)
    ref = run_graph(case.gm, case.inputs, case.ambient_grad)
    got = run_graph(gm, case.inputs, case.ambient_grad)
    findings += check_equivalence(ref, got)
    findings += check_gradients(ref, got)
    return findings
