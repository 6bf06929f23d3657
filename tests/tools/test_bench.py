"""fxfuzz bench in smoke mode: the figures exist and are positive (no timing is asserted)."""

from __future__ import annotations

import json
import time

import pytest
import torch
from fxfuzz.cli.main import main
from fxfuzz.core.case import copy_graph_module, graph_module
from fxfuzz.core.passes import generation_kinds, load_pass
from fxfuzz.oracles.timing import collecting, step
from fxfuzz.tools.bench import harness_loop, population
from torch import fx

KEYS = (
    "pass_ms",
    "harness_ms",
    "ratio",
    "examples_per_s",
    "speedup_2_workers",
    "peak_rss_mb",
    "pass_cpu_ms",
    "harness_cpu_ms",
    "ratio_cpu",
)


@pytest.mark.processes
def test_bench_json_smoke(capsys):
    assert main(["bench", "--graphs", "6", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in KEYS:
        assert figures[key] > 0, (key, figures)
    assert figures["graphs"] == 6 and figures["median_nodes"] >= 0
    # The set-grad pass changes every case holding a grad toggle: nearly all of them now.
    assert 0 < figures["exercised_share"] <= 1
    for key in ("exercised_pass_ms", "exercised_harness_ms", "exercised_pass_mean_ms", "exercised_harness_mean_ms"):
        assert figures[key] > 0, (key, figures)
    steps = figures["ms_by_step"]
    assert steps["the pass"] > 0 and steps["reference runs (original graph)"] > 0
    # The rest is the loop's time outside verify's steps: negative would mean steps overlap.
    assert all(ms >= 0 for ms in steps.values()), steps


def test_steps_are_timed_only_while_collecting():
    with step("outside"):
        pass
    with collecting() as outer:
        with step("a"):
            time.sleep(0.01)
        with collecting() as inner, step("b"):
            pass
        with step("a"):
            pass
    assert list(outer) == ["a"] and outer["a"] >= 0.01 and list(inner) == ["b"]


def test_harness_loop_sees_the_population(monkeypatch):
    """Same seed, same cases: the harness loop checks the very cases the pass was timed on."""
    seen = []
    monkeypatch.setattr("fxfuzz.tools.bench.verify", lambda case, pass_fn, **kw: seen.append(case.code()) or [])
    harness_loop(5, 3, load_pass("identity"))
    assert seen == [c.code() for c in population(5, seed=3, reacts_to=generation_kinds(load_pass("identity")))]
    assert seen != [c.code() for c in population(5, seed=4)]


def test_bench_rejects_bad_counts(capsys):
    assert main(["bench", "--graphs", "0"]) == 2
    assert "--graphs" in capsys.readouterr().err


def _nested(depth: int) -> fx.GraphModule:
    """sin(x) wrapped in ``depth`` graphs that each call the next as a submodule."""
    g = fx.Graph()
    x = g.placeholder("x")
    root = torch.nn.Module()
    if depth == 0:
        g.output(g.call_function(torch.sin, (x,)))
    else:
        root.sub = _nested(depth - 1)
        g.output(g.call_module("sub", (x,)))
    return graph_module(root, g)


def test_nested_graphs_compile_once_when_built_and_copied(monkeypatch):
    """fx.GraphModule's constructor recompiles every nested graph again (six compiles for
    three nested graphs); graph_module and copy_graph_module compile each graph once, and
    the copy has the same code and output."""
    compiled = []
    recompile = fx.GraphModule.recompile
    monkeypatch.setattr(fx.GraphModule, "recompile", lambda self: compiled.append(self) or recompile(self))
    gm = _nested(2)
    assert len(compiled) == 3
    copy = copy_graph_module(gm)
    assert len(compiled) == 6
    assert [m.code for m in copy.modules()] == [m.code for m in gm.modules()]
    x = torch.randn(3)
    assert torch.equal(copy(x), gm(x)) and torch.equal(gm(x), x.sin())


def test_a_case_counts_as_exercised_only_when_the_pass_changed_its_code():
    from fxfuzz.tools.bench import pass_times_ms

    cases = population(4, seed=0, reacts_to=("grad_toggle",))
    assert cases and not any(changed for *_, changed in pass_times_ms(cases, load_pass("identity")))
    assert any(changed for *_, changed in pass_times_ms(cases, load_pass("set_grad")))


def test_the_speedup_compares_workers_on_the_same_population(monkeypatch):
    """Every process of the speed-up measurement draws the same cases: with a seed each, the
    rates compared different cases (30 graphs gave two workers 2.6 times the rate of one on
    2 cores). The children stand in as threads that report a rate of 1."""
    import os
    import threading
    from multiprocessing.connection import Connection

    from fxfuzz.tools import bench

    seeds = []

    class Done:
        exitcode = 0

        def join(self, timeout=None):
            pass

    def spawn(target, args, name):
        cfg, end = args
        seeds.append(cfg["seed"])
        conn = Connection(os.dup(end.fileno()))  # the caller closes its copy once started

        def child():
            conn.send("ready")
            conn.recv()
            conn.send({"examples_per_s": 1.0, "peak_rss_mb": 10.0})

        threading.Thread(target=child, daemon=True).start()
        return Done()

    monkeypatch.setattr(bench.warm, "spawn", spawn)
    assert bench.parallel_rate("set_grad", 2, graphs=3, seed=5) == (2.0, 10.0)
    assert seeds == [5, 5]
