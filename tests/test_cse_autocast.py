"""CSEPass merges nested autocast regions: two ``_enter_autocast`` calls with equal arguments
become one, so the inner region's exit ends the outer one and what follows runs without
autocast (docs/known-findings.md, docs/known/cse.txt). Found once the ``cse`` row drew
effectful calls beside its toggles (the campaign's 11-node case is tests/data/cse/)."""

from __future__ import annotations

import os

import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.known import load_known
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import verify
from fxfuzz.repro.files import load_repro
from test_catalogue_findings import FIXED
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.dialect.common.cse_pass import CSEPass, get_CSE_banned_ops

HERE = os.path.dirname(os.path.abspath(__file__))
KNOWN = os.path.join(os.path.dirname(HERE), "docs", "known", "cse.txt")


def _nested(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pass
        return torch.mm(x, x)


def test_csepass_merges_nested_autocast_regions():
    x = torch.randn(2, 2)
    gm = make_fx(_nested, pre_dispatch=True)(x)
    assert gm(x).dtype == torch.bfloat16
    result = CSEPass(get_CSE_banned_ops())(gm).graph_module
    if result(x).dtype == torch.bfloat16:
        raise AssertionError(FIXED.format(known="docs/known/cse.txt"))
    assert len(result.graph.find_nodes(op="call_function", target=torch.amp.autocast_mode._enter_autocast)) == 1


def test_the_oracles_find_it_on_the_campaigns_case_as_a_known_bucket():
    case = load_repro(os.path.join(HERE, "data", "cse", "equivalence-meta_mismatch-19aff044.json")).case
    assert "equivalence-meta_mismatch-19aff044" in {bucket_id(f) for f in verify(case, load_pass("cse"))}
    assert "equivalence-meta_mismatch-19aff044" in load_known(KNOWN)
