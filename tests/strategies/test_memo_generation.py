"""Generation's per-case symbolic fake mode runs without torch's fake-tensor dispatch cache
(``fxfuzz.strategies.symbolic.symbolic_mode``): the cache only made generation slower, and the
draws must be what they were with it, node for node and meta for meta."""

from __future__ import annotations

import fxfuzz.strategies.symbolic as symbolic
import torch
from fxfuzz.oracles.execute import graph_modules
from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, given, seed, settings


def _fingerprint(case) -> tuple:
    """Everything a drawn case is made of that the fake mode computes or steers: its code
    (nested graphs included), each node's fake value, and the inputs' metadata and values."""
    vals = [repr(n.meta.get("val")) for _, mod in graph_modules(case.gm) for n in mod.graph.nodes]
    inputs = [
        (tuple(x.shape), x.dtype, x.requires_grad, x.tolist()) if isinstance(x, torch.Tensor) else repr(x)
        for x in case.inputs
    ]
    return (case.code(), case.ambient_grad, tuple(vals), repr(inputs))


def _draws(cache: bool, monkeypatch) -> tuple[list[tuple], list[bool]]:
    made = []
    real = symbolic.symbolic_mode

    def mode():
        m = real()
        made.append(m.cache_enabled)
        m.cache_enabled = cache
        return m

    monkeypatch.setattr(symbolic, "symbolic_mode", mode)
    found = []

    @seed(36)
    @settings(max_examples=30, database=None, suppress_health_check=list(HealthCheck), deadline=None)
    @given(graph_cases(max_steps=30, reacts_to=("grad_toggle",)))
    def collect(case):
        found.append(_fingerprint(case))

    collect()
    return found, made


def test_generation_without_the_fake_cache_draws_the_same_cases(monkeypatch):
    without, made = _draws(cache=False, monkeypatch=monkeypatch)
    with_cache, _ = _draws(cache=True, monkeypatch=monkeypatch)
    # Symbolic cases were drawn, each from a mode handed out with the cache off.
    assert len(made) >= 5 and not any(made), made
    assert len(without) == 30 and without == with_cache
