"""The built-in corpus: every module exports, carries grad toggles, and the real pass is clean
on it except for the findings recorded as known."""

from __future__ import annotations

import pytest
import torch

from fuzz.passes import load_pass
from oracles import verify
from strategies.corpus import MODULES, capture

REAL = load_pass("set_grad")


def toggles(case) -> int:
    return sum(
        1
        for m in case.gm.modules()
        if isinstance(m, torch.fx.GraphModule)
        for n in m.graph.nodes
        if n.target is torch._C._set_grad_enabled
    )


@pytest.mark.parametrize("entry", MODULES, ids=lambda e: e.name)
def test_module_exports_with_toggles_and_real_pass_verdict(entry):
    on, off = capture(entry, True), capture(entry, False)
    assert on.ambient_grad is True and off.ambient_grad is False
    assert toggles(on) > 0, "every corpus module must give the pass something to rewrite"
    findings = verify(on, REAL) + verify(off, REAL)
    if entry.known:
        assert findings, f"known finding gone (fixed in this torch?): {entry.known}"
    else:
        assert findings == []
