"""What export's constant_fold does once it reaches its folding (the row's adapter supplies the
quantization operator its is_impure names, fxfuzz.core.catalogue.constant_fold): it folds a
computation whose result the graph then updates in place, so the module's folded constant is
updated by every call (docs/known-findings.md, docs/known/constant_folding.txt). Pinned on
``export(...).module()``, the graph pt2e quantization hands it, and through the oracles on the
triage campaign's cases (tests/data/constant_folding)."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.catalogue import constant_fold
from fxfuzz.core.known import load_known
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import verify
from fxfuzz.repro.files import load_repro
from handmade import FIXED
from paths import DATA, ROOT

KNOWN = os.path.join(ROOT, "docs", "known", "constant_folding.txt")


class ScaledLiteral(torch.nn.Module):
    def forward(self, x):
        return torch.tensor([1.0, 2.0, 3.0]).mul_(x)


class ShiftedBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("c", torch.zeros(3))

    def forward(self, x):
        return self.c.sigmoid().add_(x)


def test_a_folded_literal_updated_in_place_accumulates_across_calls():
    x = torch.full((3,), 2.0)
    gm = torch.export.export(ScaledLiteral(), (x,)).module()
    assert torch.equal(gm(x), torch.tensor([2.0, 4.0, 6.0]))
    constant_fold(gm)
    first, second = gm(x).clone(), gm(x).clone()
    if torch.equal(first, second):
        raise AssertionError(FIXED.format(known="docs/known/constant_folding.txt"))
    assert torch.equal(second, first * 2)  # the folded [1, 2, 3] took each call's mul_


def test_a_folded_constant_updated_by_an_input_needing_grad_breaks_deepcopy():
    x = torch.full((3,), 2.0, requires_grad=True)
    gm = torch.export.export(ShiftedBuffer(), (x,)).module()
    constant_fold(gm)
    gm(x)
    try:
        copy.deepcopy(gm)
    except RuntimeError as e:
        assert "deepcopy protocol" in str(e), e
    else:
        raise AssertionError(FIXED.format(known="docs/known/constant_folding.txt"))


@pytest.mark.parametrize("name", ["equivalence-value_mismatch-6ac4edc4", "structure-cleanup_failed-d8725f23"])
def test_the_oracles_find_the_campaigns_buckets_and_they_are_known(name):
    case = load_repro(os.path.join(DATA, "constant_folding", f"{name}.json")).case
    assert name in {bucket_id(f) for f in verify(case, load_pass("constant_folding"))}
    assert name in load_known(KNOWN)
