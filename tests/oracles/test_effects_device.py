"""Ordered effects on a second device: the device row compares the result's effect logs with
the original's there too, as ``<device>:<kind>`` where CPU did not already show that kind. CPU
stands in for the second device (as in test_oracles_cuda.py), with an effect lost only while
the stand-in's runs are made; on a CUDA machine the same is checked on CUDA."""

from __future__ import annotations

import effect_passes as ep
import pytest
import torch
from effect_cases import BROKEN, MODULES, SwappableTwo, UnusedFirst, lowered
from fxfuzz.core.contract import contract_by_name
from fxfuzz.core.custom_ops import EFFECT_LOG
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import apply_pass, verify
from fxfuzz.oracles.checks import Needs, Observed, _device

WITH_EFFECTS = torch.ops.higher_order.with_effects
IDENTITY = load_pass("identity")
_STANDIN = {"active": False}


def _with_effects_but_silent_on_second(token, op, *args):
    """``with_effects``, except that on the stand-in device the call's effect is undone (its
    log entry taken back): the same values and autograd, one effect fewer."""
    out = WITH_EFFECTS(token, op, *args)
    if _STANDIN["active"]:
        EFFECT_LOG.pop()
    return out


def drops_effects_on_second(gm):
    """Broken on the second device only: every effectful call keeps its value there but logs
    nothing."""
    for node in list(gm.graph.find_nodes(op="call_function", target=WITH_EFFECTS)):
        node.target = _with_effects_but_silent_on_second
    gm.recompile()
    return gm


def _device_row(case, pass_fn, contract="meaning"):
    """The device row's findings with CPU standing in for the device, its effects made silent
    by ``drops_effects_on_second`` while the stand-in runs."""
    gm, sig = apply_pass(case, pass_fn)
    ctx = Observed(case, pass_fn, gm, sig, contract_by_name(contract), "cpu", 0.0)
    ctx.build(Needs.REFERENCE | Needs.RESULT)
    assert ctx.traced is not None
    _STANDIN["active"] = True
    try:
        return {(f.oracle, f.kind) for f in _device(ctx, ctx.traced)}
    finally:
        _STANDIN["active"] = False


@pytest.mark.parametrize("contract", ["meaning", "refines"])
def test_an_effect_lost_only_on_the_device_is_found_there(contract):
    case = lowered(UnusedFirst)
    broken = load_pass(f"{__file__}:drops_effects_on_second")
    assert not [f for f in verify(case, broken) if f.oracle == "effects"]  # CPU alone sees nothing
    assert _device_row(case, broken, contract) == {("effects", "cpu:effects_lost")}


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("name", ["identity", "remove_effect_tokens", "aot_cse"])
def test_quiet_on_correct_passes(module, name):
    assert not {k for k in _device_row(lowered(module, requires_grad=True), load_pass(name)) if k[0] == "effects"}


def test_an_effect_lost_on_both_devices_is_reported_once():
    case = lowered(UnusedFirst)
    broken = load_pass(f"{BROKEN}:{ep.drops_unused_effect.__name__}")
    assert ("effects", "effects_lost") in {(f.oracle, f.kind) for f in verify(case, broken)}
    assert not {k for k in _device_row(case, broken) if k[0] == "effects"}


cuda_only = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)"
)


@cuda_only
@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_cuda_effects_quiet_on_identity(module):
    assert not [f for f in verify(lowered(module), IDENTITY, device="cuda") if f.oracle == "effects"]


@cuda_only
def test_a_reorder_on_both_devices_is_reported_once_on_cuda():
    reorder = load_pass(f"{BROKEN}:{ep.reorders_effects.__name__}")
    kinds = {f.kind for f in verify(lowered(SwappableTwo), reorder, device="cuda") if f.oracle == "effects"}
    assert kinds == {"effects_reordered"}
