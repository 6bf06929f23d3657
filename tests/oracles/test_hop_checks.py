"""torch's run-time mutation check of cond/map, traced once per distinct call within ``verify``
(``fxfuzz.oracles.hop_checks``): the same verdicts, raised or not, and the same findings."""

from __future__ import annotations

import contextlib

import fxfuzz.oracles as oracles
import pytest
import torch
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles.hop_checks import memoized_hop_checks
from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, given, seed, settings
from torch import fx
from torch._higher_order_ops.cond import cond_op
from torch._higher_order_ops.map import map_impl


class Sin(torch.nn.Module):
    def forward(self, x, y):
        return (x.sin() + y,)


class Cos(torch.nn.Module):
    def forward(self, x, y):
        return (x.cos() + y,)


class WritesY(torch.nn.Module):
    def forward(self, x, y):
        y.add_(1)
        return (x * y,)


class MapWritesPosArg(torch.nn.Module):
    def forward(self, xs, y):
        y.add_(1)
        return (xs * y,)


@pytest.fixture
def traces(monkeypatch):
    """How many times torch's own ``gen_schema`` of cond and map traced."""
    count = {"n": 0}
    for op in (cond_op, map_impl):
        real = type(op).gen_schema

        def counted(self, *args, _real=real, **kwargs):
            count["n"] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(type(op), "gen_schema", counted)
    return count


def _operands(requires_grad=True, n=3):
    return (torch.randn(n, requires_grad=requires_grad) * 1, torch.randn(n))


def _cond(true_fn, false_fn, operands):
    return cond_op(torch.tensor(True), fx.symbolic_trace(true_fn), fx.symbolic_trace(false_fn), operands)


def test_a_repeated_call_traces_once_and_any_other_call_traces_again(traces):
    with memoized_hop_checks() as memo:
        for _ in range(3):
            _cond(Sin(), Cos(), _operands())
        assert traces["n"] == 1 and len(memo) == 1
        _cond(Sin(), Cos(), _operands(n=4))  # other shapes
        _cond(Cos(), Sin(), _operands())  # other code
        _cond(
            Sin(), Cos(), (torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True))
        )  # other requires_grad
        with torch.enable_grad(), torch.autograd.forward_ad.dual_level():
            _cond(Sin(), Cos(), _operands())  # same call again: memoized
        assert traces["n"] == 4
    _cond(Sin(), Cos(), _operands())  # outside: torch's own path
    assert traces["n"] == 5


class Where(torch.nn.Module):
    def forward(self, x, mask):
        return (torch.where(mask, x, -x),)


def test_bool_operands_are_keyed_by_value(traces):
    """torch clones a bool operand for the trace instead of faking it: its values are part of
    the key."""
    x = torch.randn(2, 2, requires_grad=True) * 1
    masks = [
        torch.tensor([[True, False], [False, True]]),
        torch.tensor([[True, False], [False, True]]),
        torch.ones(2, 2, dtype=torch.bool),
    ]
    with memoized_hop_checks():
        outs = [_cond(Where(), Where(), (x, m))[0] for m in masks]
    assert traces["n"] == 2
    assert torch.equal(outs[2], x) and torch.equal(outs[0], torch.where(masks[0], x, -x))


def test_calls_the_trace_could_be_seen_from_still_trace_every_time(traces):
    """Saved-tensor hooks see the tensors the trace saves, and the trace empties autocast's
    cache of casts: memoized there, a run would show what torch's never does."""
    with memoized_hop_checks():
        for _ in range(2):
            with torch.autograd.graph.save_on_cpu():
                _cond(Sin(), Cos(), _operands())
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                _cond(Sin(), Cos(), _operands())
    assert traces["n"] == 4


def test_a_branch_writing_its_input_raises_on_every_call_as_without_the_memo(traces):
    """The verdict is kept, not the check skipped: a pass whose cond writes its operand while
    training still makes every run raise torch's error."""
    errors = []
    for memoized in (False, True):
        with memoized_hop_checks() if memoized else contextlib.nullcontext():
            for _ in range(2):
                with pytest.raises(RuntimeError) as e:
                    _cond(WritesY(), Cos(), _operands())
                errors.append(str(e.value))
    assert len(set(errors)) == 1 and "in-place input or buffer mutations" in errors[0]
    assert traces["n"] == 3


def test_a_trace_that_raises_raises_again_on_every_call(traces):
    """What torch raises (torch 2.13: map cannot mutate pos_args; 2.11, whose map has no
    gen_schema of its own, another error), the memo raises on every call, from one trace."""
    body = fx.symbolic_trace(MapWritesPosArg())
    errors = []
    for memoized in (False, True):
        with memoized_hop_checks() if memoized else contextlib.nullcontext():
            for _ in range(2):
                with pytest.raises(RuntimeError) as e:
                    map_impl(body, (torch.randn(2, 3, requires_grad=True),), (torch.randn(3),))
                errors.append(str(e.value))
    assert len(set(errors)) == 1 and traces["n"] == 3


def _has_hop(case):
    return case.features.get("hop:cond", 0) + case.features.get("hop:map", 0) > 0


@pytest.mark.slow
def test_verify_finds_the_same_with_and_without_the_memo_on_a_seeded_sample(monkeypatch, traces):
    """On seeded cases holding cond or map, every finding (oracle, kind and message) is the
    same with the memo as with torch tracing on every call, and the memo did spare traces.
    (Measured on more: the 200 bench cases and 200 adversarial ones, docs/benchmark.md.)"""
    real = load_pass("set_grad")
    cases = []

    @seed(11)
    @settings(max_examples=100, database=None, suppress_health_check=list(HealthCheck), deadline=None)
    @given(graph_cases(max_steps=30))
    def collect(case):
        if _has_hop(case):
            cases.append(case)

    collect()
    assert len(cases) >= 15
    found, traced = {}, {}
    for memoized in (True, False):
        if not memoized:
            monkeypatch.setattr(oracles, "memoized_hop_checks", lambda: contextlib.nullcontext({}))
        before = traces["n"]
        found[memoized] = [[(f.oracle, f.kind, f.message) for f in oracles.verify(c, real)] for c in cases]
        traced[memoized] = traces["n"] - before
    assert found[True] == found[False]
    assert 0 < traced[True] < traced[False], traced
