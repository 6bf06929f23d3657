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
from handmade import FIXED
from paths import DATA, ROOT
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.dialect.common.cse_pass import CSEPass, get_CSE_banned_ops

KNOWN = os.path.join(ROOT, "docs", "known", "cse.txt")


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
    case = load_repro(os.path.join(DATA, "cse", "equivalence-meta_mismatch-19aff044.json")).case
    assert "equivalence-meta_mismatch-19aff044" in {bucket_id(f) for f in verify(case, load_pass("cse"))}
    assert "equivalence-meta_mismatch-19aff044" in load_known(KNOWN)


def _equal_regions_nested(x):
    with torch.autocast("cpu", dtype=torch.float16, enabled=False, cache_enabled=False):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with torch.autocast("cpu", dtype=torch.float16, enabled=False, cache_enabled=False):
                pass
    return x + 1


def _autocast_state():
    return torch.get_autocast_dtype("cpu"), torch.is_autocast_cache_enabled(), torch.is_autocast_enabled("cpu")


def test_csepass_merges_an_inner_region_into_an_equal_outer_one_and_leaves_autocast_changed():
    """The same merge with a region between two equal ones (found by a 600 s set_grad+cse
    campaign, 2026-11-27; its 7-node case is tests/data/cse/): the innermost enter becomes the
    outermost, and so do their exits, so one exit is lost and the call leaves the autocast
    dtype and cache as the outer region set them."""
    x = torch.randn(2)
    gm = make_fx(_equal_regions_nested, pre_dispatch=True)(x)
    before = _autocast_state()
    try:
        gm(x)
        assert _autocast_state() == before
        CSEPass(get_CSE_banned_ops())(gm).graph_module(x)
        if _autocast_state() == before:
            raise AssertionError(FIXED.format(known="docs/known/cse.txt"))
        assert _autocast_state() == (torch.float16, False, before[2])
    finally:
        torch.set_autocast_dtype("cpu", before[0])
        torch.set_autocast_cache_enabled(before[1])
    assert "equivalence-autocast_state_leak-71f39855" in load_known(KNOWN)
