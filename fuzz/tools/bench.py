"""``fxfuzz bench``: what the harness costs next to the pass it checks.

All figures come from one population: the first ``graphs`` export-domain cases the default
campaign draws with ``seed`` (the same Hypothesis loop, so the harness run sees the very
cases the pass was timed on).

- ``pass_ms``: median time of the pass alone on prebuilt copies of those cases (the floor);
- ``harness_ms``: median time per example of the default loop on them: generation, the pass,
  every default oracle, bookkeeping. Findings are counted, not shrunk: shrinking is spent
  once per bucket, not per example;
- ``examples_per_s``: that loop's throughput in one process;
- ``speedup_2_workers``: the summed throughput of two processes running that loop at the
  same time over one process (each warm, started together);
- ``peak_rss_mb``: the largest peak RSS of the in-process loop and of any worker process;
- ``ms_by_step``: where the loop's time goes, per example, from ``fxfuzz.oracles.timing``'s
  wall-clock steps (no profiler); ``--profile`` adds own time by area from cProfile;
- ``exercised_*``: the share of the cases the pass changed (its result's code differs from
  the input's), and the pass and harness medians and means over those cases alone: what a
  campaign pays on the cases that can show a defect of the pass.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import resource
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, Pipe
from typing import Any

import torch
from fxfuzz.campaign import warm
from fxfuzz.campaign.engine import Hooks, Subject, run_campaign
from fxfuzz.campaign.results import CampaignResult
from fxfuzz.core.choices import DEFAULT_STAGE_SHARE
from fxfuzz.core.identity import resolve_pass
from fxfuzz.core.internal import package_part
from fxfuzz.core.passes import PassFn, generation_kinds, identity_pass
from fxfuzz.core.settings import NO_TIME_LIMIT_S, CampaignSettings
from fxfuzz.oracles import verify
from fxfuzz.oracles.timing import collecting
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.custom import op_specs, register_first

DEFAULT_GRAPHS = 200
WARMUP = 5
# graph_cases' step bound for the population: the default population (200 cases, seed 0, drawn
# for the set-grad pass's grad toggles) then has a median of 19 compute nodes, as the bench's
# issue asks (about 20). The median jumps with the bound, since Hypothesis starts small and the
# sizes spread wide (quartiles 4 / 19 / 66 at 48); reproducible draws, 2026-11-27: 40 gives 30,
# 48 19, 56 8, 64 16, 72 30, 80 15, 96 18.5, 112 19. So the run prints the median it measured.
BENCH_STEPS = 48


@dataclass
class BenchResult:
    graphs: int
    seed: int
    pass_spec: str
    median_nodes: float
    pass_ms: float
    harness_ms: float
    # Means beside the medians: the pass's time is heavy-tailed (a few graphs with many
    # regions cost tens of times the median), and the per-step breakdown is a mean.
    pass_mean_ms: float
    harness_mean_ms: float
    # The same medians in CPU time of the process, and their ratio: steadier than wall time
    # on a machine other jobs share.
    pass_cpu_ms: float
    harness_cpu_ms: float
    ratio_cpu: float
    ratio: float
    examples_per_s: float
    workers: int
    worker_examples_per_s: dict[int, float]
    speedup_2_workers: float | None
    peak_rss_mb: float
    findings: int
    load_avg: tuple[float, float, float]
    exercised_share: float
    exercised_pass_ms: float
    exercised_harness_ms: float
    exercised_pass_mean_ms: float
    exercised_harness_mean_ms: float
    time_by_area: dict[str, float] = field(default_factory=dict)
    ms_by_step: dict[str, float] = field(default_factory=dict)


def population(graphs: int, seed: int, domain: str = "export", reacts_to: tuple[str, ...] = ()) -> list[Any]:
    """The first ``graphs`` cases the default campaign of a pass reacting to ``reacts_to``
    draws with ``seed``."""
    cases: list[Any] = []

    def keep(case: Any, pass_fn: PassFn) -> list:
        cases.append(case)
        return []

    run_campaign(
        identity_pass,
        CampaignSettings(budget_s=NO_TIME_LIMIT_S, max_examples=graphs, seed=seed),
        subject=Subject(bench_cases(domain, reacts_to), keep),
    )
    return cases


def bench_cases(domain: str = "export", reacts_to: tuple[str, ...] = ()) -> Any:
    """The strategy of the population: the default graph cases, a little larger."""
    return graph_cases(domain=domain, max_steps=BENCH_STEPS, reacts_to=reacts_to)


# (wall clock, this process's CPU time) in seconds. CPU time moves less than wall time when
# other jobs share the machine; wall time is what a user waits for. Both are reported.
Stamp = tuple[float, float]


def _stamp() -> Stamp:
    return time.perf_counter(), time.process_time()


def _elapsed_ms(start: Stamp, end: Stamp) -> tuple[float, float]:
    return (end[0] - start[0]) * 1000, (end[1] - start[1]) * 1000


def pass_times_ms(cases: list[Any], pass_fn: PassFn) -> list[tuple[float, float, bool]]:
    """(wall, CPU) time of ``pass_fn`` alone on a fresh copy of each case, under its ambient
    grad mode (copies are made outside the timed region), and whether it changed the case
    (returned a graph whose code differs; a pass that raised changed nothing)."""
    times = []
    before = torch.is_grad_enabled()
    try:
        for case in cases[:WARMUP] + cases:
            work = case.copy()
            torch.set_grad_enabled(case.ambient_grad)
            start = _stamp()
            try:
                gm, _ = pass_fn(work.gm, work.signature)
            except Exception:
                gm = None  # a crashing pass is still a measured pass
            end = _stamp()
            times.append((*_elapsed_ms(start, end), gm is not None and replace(case, gm=gm).code() != case.code()))
    finally:
        torch.set_grad_enabled(before)
    return times[WARMUP:]


def harness_loop(
    graphs: int, seed: int, pass_fn: PassFn, stage_share: float = DEFAULT_STAGE_SHARE, domain: str = "export"
) -> tuple[list[tuple[float, float]], CampaignResult, int]:
    """The default campaign loop on the population (``stage_share`` of it through export's
    stages): per-example (wall, CPU) times in ms, the result, and the number of findings
    (counted, not shrunk)."""
    stamps = [_stamp()]
    found = Counter[str]()

    def check(case: Any, fn: PassFn) -> list:
        found["findings"] += len(verify(case, fn, stage_share=stage_share))
        return []

    def progress(result: CampaignResult, elapsed: float) -> None:
        stamps.append(_stamp())

    result = run_campaign(
        pass_fn,
        CampaignSettings(budget_s=NO_TIME_LIMIT_S, max_examples=graphs, seed=seed),
        hooks=Hooks(progress),
        subject=Subject(bench_cases(domain, generation_kinds(pass_fn)), check),
    )
    times = [_elapsed_ms(a, b) for a, b in zip(stamps, stamps[1:])]
    return times, result, found["findings"]


def child_main(cfg: dict[str, Any], conn: Connection) -> None:
    """One worker process of the speed-up measurement: warm up, say ``ready``, wait for ``go``,
    run the loop, send its rate and peak RSS."""
    for specs in cfg["ops"]:
        register_first(specs)
    pass_fn, _ = resolve_pass(cfg["pass"], cfg["contract"])
    harness_loop(WARMUP, cfg["seed"] + 7919, pass_fn, cfg["stage_share"])  # first-call caches
    conn.send("ready")
    conn.recv()
    _, result, _ = harness_loop(cfg["graphs"], cfg["seed"], pass_fn, cfg["stage_share"])
    conn.send({"examples_per_s": result.examples_per_s, "peak_rss_mb": _peak_rss_mb()})


def parallel_rate(
    pass_spec: str,
    workers: int,
    graphs: int,
    seed: int,
    stage_share: float = DEFAULT_STAGE_SHARE,
    contract: str | None = None,
) -> tuple[float, float]:
    """Summed examples per second of ``workers`` processes running the loop on the same
    population at the same time (started together once all are warm), and their largest peak
    RSS in MB. The same population, so that the rates compare the processes and not their
    cases: with a seed each, 30 graphs gave two workers 2.6 times the rate of one. They fork
    from the warm interpreter, as campaign workers do (``fxfuzz.campaign.warm``)."""
    # op_specs: the user operators of this process's op table, for each child to draw
    cfg = {
        "pass": pass_spec,
        "contract": contract,
        "ops": op_specs(),
        "graphs": graphs,
        "seed": seed,
        "stage_share": stage_share,
    }
    started = []
    try:
        for i in range(workers):
            conn, child_end = Pipe()
            started.append((warm.spawn(child_main, (cfg, child_end), f"fxfuzz-bench{i}"), conn))
            child_end.close()  # the child holds the only other end: EOF once it is gone
        for _, conn in started:
            try:
                ready = conn.recv()
            except EOFError:  # it died warming up
                ready = None
            if ready != "ready":
                raise RuntimeError("a bench worker failed to start")
        for _, conn in started:
            conn.send("go")
        reports = [conn.recv() for _, conn in started]
    finally:
        for proc, _ in started:
            proc.join(60)
            if proc.exitcode is None:
                proc.kill()
                proc.join()
    return sum(r["examples_per_s"] for r in reports), max(r["peak_rss_mb"] for r in reports)


def _area(filename: str) -> str:
    """Where a profiled function lives, coarsely: fxfuzz folders, Hypothesis, parts of torch."""
    own = package_part(filename)
    if own is not None:
        return own
    path = filename.replace(os.sep, "/")
    for lib, name in (
        ("hypothesis/", "hypothesis"),
        ("torch/_subclasses/", "torch fake tensors"),
        ("torch/fx/", "torch.fx"),
        ("torch/_export/", "torch._export (the pass)"),
        ("torch/autograd/", "torch.autograd"),
        ("torch/", "torch (other)"),
    ):
        if lib in path:
            return name
    return "builtins and C" if path.startswith("~") or path.startswith("<") else "other"


def time_by_area(profile: cProfile.Profile) -> dict[str, float]:
    """Share (percent) of the profiled run's own time spent in each area."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    own: Counter = Counter()
    for (filename, _, _), (_, _, tottime, _, _) in stats.items():
        own[_area(filename)] += tottime
    total = sum(own.values()) or 1.0
    return {k: round(100 * v / total, 1) for k, v in own.most_common()}


def time_by_step(steps: dict[str, float], loop_ms: list[float]) -> dict[str, float]:
    """Mean wall-clock milliseconds per example in each step of ``verify`` (from
    ``fxfuzz.oracles.timing``), and the rest of the loop: generation, Hypothesis, bookkeeping."""
    n = max(len(loop_ms), 1)
    by_step = {name: round(1000 * seconds / n, 2) for name, seconds in steps.items()}
    by_step["generation, Hypothesis and bookkeeping (the rest)"] = round(sum(loop_ms) / n - sum(by_step.values()), 2)
    return by_step


def _peak_rss_mb() -> float:
    # Linux reports ru_maxrss in KiB.
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run_bench(
    graphs: int = DEFAULT_GRAPHS,
    seed: int = 0,
    workers: int = 2,
    pass_spec: str = "set_grad",
    profile: bool = False,
    stage_share: float = DEFAULT_STAGE_SHARE,
    contract: str | None = None,
) -> BenchResult:
    """Measure the pass, the harness loop and the worker speed-up on one population, with
    ``stage_share`` of the examples through the export stages (0: none), the pass held to
    ``contract`` (None: its own)."""
    pass_fn, _ = resolve_pass(pass_spec, contract)
    cases = population(graphs, seed, reacts_to=generation_kinds(pass_fn))
    nodes = statistics.median(c.compute_nodes() for c in cases)
    pass_times, pass_cpu, changed = zip(*pass_times_ms(cases, pass_fn))
    pass_ms, pass_cpu_ms = statistics.median(pass_times), statistics.median(pass_cpu)
    with collecting() as steps:
        loop_times, result, findings = harness_loop(graphs, seed, pass_fn, stage_share)
    times, cpu = zip(*loop_times)
    harness_ms, harness_cpu_ms = statistics.median(times), statistics.median(cpu)
    # The loop judges the population's cases in its order (same strategy, same seed).
    exercised = [(p, h) for p, h, c in zip(pass_times, times, changed) if c] or [(0.0, 0.0)]
    ex_pass, ex_harness = zip(*exercised)
    # The breakdown by area comes from a second, profiled run of the same loop: cProfile slows
    # Python-heavy code (fx codegen, Hypothesis) two to three times, which would inflate
    # harness_ms and the one-process throughput if they were timed under it.
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
        harness_loop(graphs, seed, pass_fn, stage_share)
        profiler.disable()
    rates, rss = {}, [_peak_rss_mb()]
    for k in sorted({1, workers}):
        rates[k], peak = parallel_rate(pass_spec, k, graphs, seed, stage_share, contract)
        rss.append(peak)
    speedup = round(rates[workers] / rates[1], 2) if workers > 1 and rates[1] > 0 else None
    return BenchResult(
        graphs=graphs,
        seed=seed,
        pass_spec=pass_spec,
        median_nodes=nodes,
        pass_ms=round(pass_ms, 3),
        harness_ms=round(harness_ms, 3),
        pass_mean_ms=round(statistics.mean(pass_times), 3),
        harness_mean_ms=round(statistics.mean(times), 3),
        pass_cpu_ms=round(pass_cpu_ms, 3),
        harness_cpu_ms=round(harness_cpu_ms, 3),
        ratio_cpu=round(harness_cpu_ms / pass_cpu_ms, 2) if pass_cpu_ms > 0 else float("inf"),
        ratio=round(harness_ms / pass_ms, 2) if pass_ms > 0 else float("inf"),
        examples_per_s=round(result.examples_per_s, 1),
        workers=workers,
        worker_examples_per_s={k: round(v, 1) for k, v in rates.items()},
        speedup_2_workers=speedup if workers == 2 else None,
        peak_rss_mb=max(rss),
        findings=findings,
        load_avg=tuple(round(x, 2) for x in os.getloadavg()),  # type: ignore[arg-type]
        exercised_share=round(sum(changed) / len(changed), 3),
        exercised_pass_ms=round(statistics.median(ex_pass), 3),
        exercised_harness_ms=round(statistics.median(ex_harness), 3),
        exercised_pass_mean_ms=round(statistics.mean(ex_pass), 3),
        exercised_harness_mean_ms=round(statistics.mean(ex_harness), 3),
        time_by_area=time_by_area(profiler) if profiler else {},
        ms_by_step=time_by_step(steps, list(times)),
    )
