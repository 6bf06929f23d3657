"""``fxfuzz bench``: what the harness costs next to the pass it checks (figures in
docs/benchmark.md)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from fxfuzz.cli.setup import check_survives
from fxfuzz.core.errors import UsageError
from fxfuzz.core.user_code import exits_refused
from fxfuzz.strategies.custom import register_ops
from fxfuzz.tools.bench import run_bench


def command(args: argparse.Namespace) -> int:
    """``fxfuzz bench``: print the figures; with ``--json`` the last line is one JSON object."""
    check_survives([("--pass", args.pass_spec)], args.ops)
    register_ops(args.ops, "--op")  # run_bench hands them to its worker processes
    # The pass runs in this process, timed alone: one that would end it has no figures.
    with exits_refused(f"the pass {args.pass_spec}", UsageError, "while it was measured"):
        r = run_bench(
            args.graphs, args.seed, args.workers, args.pass_spec, args.profile, args.stage_share, args.contract
        )
    print(f"population: {r.graphs} export-domain graph cases, seed {r.seed}, median {r.median_nodes:g} compute nodes")
    print(f"pass alone        {r.pass_ms:8.2f} ms/case (median)")
    print(f"harness loop      {r.harness_ms:8.2f} ms/example (median)  ratio {r.ratio:.2f}")
    print(f"means             pass {r.pass_mean_ms:.2f} ms, harness {r.harness_mean_ms:.2f} ms")
    print(
        f"cases it changed   {100 * r.exercised_share:.0f}%: pass {r.exercised_pass_ms:.2f} ms, harness {r.exercised_harness_ms:.2f} ms (medians);"
        f" {r.exercised_pass_mean_ms:.2f} ms, {r.exercised_harness_mean_ms:.2f} ms (means)"
    )
    print(f"CPU time medians  pass {r.pass_cpu_ms:.2f} ms, harness {r.harness_cpu_ms:.2f} ms  ratio {r.ratio_cpu:.2f}")
    print(f"throughput        {r.examples_per_s:8.1f} examples/s in one process; workers: {r.worker_examples_per_s}")
    print(f"speed-up, 2 workers {r.speedup_2_workers}   peak RSS {r.peak_rss_mb} MB   load average {r.load_avg}")
    print("where an example's time goes (ms per example, means, wall clock, not profiled):")
    for step, ms in r.ms_by_step.items():
        print(f"  {ms:8.2f}  {step}")
    if r.time_by_area:
        print("own time by area (percent, profiled):")
    for area, pct in r.time_by_area.items():
        print(f"  {pct:5.1f}%  {area}")
    if args.json:
        print(json.dumps(asdict(r)))
    return 0
