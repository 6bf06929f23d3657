"""The built-in corpus: every module exports under both grad modes and hands the pass grad
toggles; two modules record findings against torch 2.13.0's own pass."""

from __future__ import annotations

import pytest
import torch
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import verify
from fxfuzz.strategies.corpus import MODULES, capture

REAL = load_pass("set_grad")
BY_NAME = {e.name: e for e in MODULES}


def toggles(case) -> int:
    return sum(
        1
        for m in case.gm.modules()
        if isinstance(m, torch.fx.GraphModule)
        for n in m.graph.nodes
        if n.target is torch._C._set_grad_enabled
    )


@pytest.mark.parametrize("entry", MODULES, ids=lambda e: e.name)
def test_module_exports_under_both_grad_modes_with_toggles(entry):
    on, off = capture(entry, True), capture(entry, False)
    assert on.ambient_grad is True and off.ambient_grad is False
    assert toggles(on) > 0, "every corpus module must give the pass something to rewrite"
    assert on.features.get(f"corpus:{entry.name}") == 1


def test_finding_no_grad_inside_autocast_is_dropped():
    """torch 2.13.0: split_module re-enters autocast at the top of each region, so the region
    under no_grad no longer starts with its toggle and is inlined without it."""
    findings = verify(capture(BY_NAME["autocast_with_grad_blocks"], True), REAL)
    assert {f.kind for f in findings if f.oracle == "gradients"} == {"grad_value_mismatch"}


def test_finding_toggle_left_disabled_no_longer_leaks():
    """torch 2.13.0: a forward that disables grad without restoring it leaves grad disabled
    in eager; the rewritten graph wraps the region and restores the mode."""
    findings = verify(capture(BY_NAME["left_disabled"], True), REAL)
    assert "grad_mode_leak" in {f.kind for f in findings if f.oracle == "equivalence"}
