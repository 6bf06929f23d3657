"""fxfuzz bench in smoke mode: the figures exist and are positive (no timing is asserted)."""

from __future__ import annotations

import json

from fuzz.bench import harness_loop, population
from fuzz.cli import main
from fuzz.passes import load_pass

KEYS = ("pass_ms", "harness_ms", "ratio", "examples_per_s", "speedup_2_workers", "peak_rss_mb")


def test_bench_json_smoke(capsys):
    assert main(["bench", "--graphs", "6", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in KEYS:
        assert figures[key] > 0, (key, figures)
    assert figures["graphs"] == 6 and figures["median_nodes"] >= 0


def test_harness_loop_sees_the_population(monkeypatch):
    """Same seed, same cases: the harness loop checks the very cases the pass was timed on."""
    seen = []
    monkeypatch.setattr("oracles.verify", lambda case, pass_fn: seen.append(case.code()) or [])
    harness_loop(5, 3, load_pass("identity"))
    assert seen == [c.code() for c in population(5, seed=3)]
    assert seen != [c.code() for c in population(5, seed=4)]


def test_bench_rejects_bad_counts(capsys):
    assert main(["bench", "--graphs", "0"]) == 2
    assert "--graphs" in capsys.readouterr().err
