"""Generation levels: ``graph`` (generated FX graphs), ``program`` (random nn.Modules through
the real torch.export pipeline) and ``mixed`` (both, each with a share of the time budget).

A program-level example costs tens of graph-level ones (two exports and eager runs under
each grad mode), so ``mixed`` splits the *budget*, not the examples: a split by examples
would spend nearly all the time on programs.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase

from .campaign import GRAPH_CASES, Bucket, CampaignResult, Check, Codec, Progress, run_campaign
from .passes import PassFn

LEVELS = ("graph", "program", "mixed")
# The program level's share of a mixed campaign's budget.
PROGRAM_SHARE = 0.5


def _program_dumps(program: Any) -> bytes:
    from strategies.program_model import to_data

    return json.dumps(to_data(program)).encode()


def _program_loads(raw: bytes) -> Any:
    from strategies.program_model import from_data

    return from_data(json.loads(raw))


# How a program-level failure is kept in the example database, to replay first next time.
PROGRAMS = Codec(_program_dumps, _program_loads)


def level_strategy(level: str, domain: str = "export") -> tuple[st.SearchStrategy[Any], Check, Codec]:
    """The strategy, the check and the database codec of one level (``graph`` or ``program``)."""
    if level == "graph":
        from oracles import verify
        from strategies import graph_cases

        return graph_cases(domain=domain), verify, GRAPH_CASES
    if level == "program":
        from oracles.program import check_program
        from strategies import module_programs

        return module_programs(), check_program, PROGRAMS
    raise ValueError(f"unknown level {level!r}; expected graph or program")


def budget_plan(level: str, budget_s: float) -> list[tuple[str, float]]:
    """(level, seconds) for each level a campaign of ``level`` runs, in order."""
    if level == "mixed":
        return [("graph", budget_s * (1 - PROGRAM_SHARE)), ("program", budget_s * PROGRAM_SHARE)]
    if level in LEVELS:
        return [(level, budget_s)]
    raise ValueError(f"unknown level {level!r}; expected one of {', '.join(LEVELS)}")


def _rekeyed(level: str, bucket: Bucket) -> Bucket:
    # A program-level bucket's example is a Program, not a graph: its own id keeps it apart
    # from the graph-level bucket of the same oracle and kind.
    if level == "graph":
        return bucket
    return dataclasses.replace(bucket, id=f"{level}-{bucket.id}")


def merge_results(results: list[tuple[str, CampaignResult]]) -> CampaignResult:
    """One CampaignResult from the per-level ones, with per-level counts in ``stats``:
    ``level:<name>:examples``, ``level:<name>:duration_ms`` and ``level:<name>:examples_per_s``."""
    merged = CampaignResult()
    for level, r in results:
        merged.examples += r.examples
        merged.duration_s += r.duration_s
        merged.stats.update(r.stats)
        merged.stats[f"level:{level}:examples"] += r.examples
        merged.stats[f"level:{level}:duration_ms"] += round(r.duration_s * 1000)
        for b in r.buckets.values():
            b = _rekeyed(level, b)
            if b.id in merged.buckets:
                merged.buckets[b.id].count += b.count
            else:
                merged.buckets[b.id] = b
    for level, _ in results:
        ms = merged.stats[f"level:{level}:duration_ms"]
        merged.stats[f"level:{level}:examples_per_s"] = round(merged.stats[f"level:{level}:examples"] * 1000 / ms, 2) if ms else 0
    merged.stopped_by = "budget" if any(r.stopped_by == "budget" for _, r in results) else results[-1][1].stopped_by
    return merged


def run_levels(
    pass_fn: PassFn,
    level: str = "graph",
    *,
    budget_s: float = 60.0,
    max_examples: int = 1_000_000,
    seed_: int = 0,
    domain: str = "export",
    database: ExampleDatabase | None = None,
    progress: Progress | None = None,
    on_level: Callable[[str, CampaignResult], None] | None = None,
) -> CampaignResult:
    """Run ``pass_fn``'s campaign at ``level``; ``mixed`` runs the graph level, then the
    program level, each for its share of ``budget_s`` (time one level leaves unused passes
    to the next). ``max_examples`` caps each level."""
    results: list[tuple[str, CampaignResult]] = []
    planned = spent = 0.0
    for name, share in budget_plan(level, budget_s):
        planned += share
        strategy, check, codec = level_strategy(name, domain)
        r = run_campaign(
            pass_fn,
            budget_s=max(planned - spent, 0.001),
            max_examples=max_examples,
            seed_=seed_,
            # Keeps each level's saved examples apart in the database.
            domain=domain if name == "graph" else f"{domain}:{name}",
            database=database,
            progress=progress,
            strategy=strategy,
            check=check,
            codec=codec,
        )
        spent += r.duration_s
        results.append((name, r))
        if on_level:
            on_level(name, r)
    return merge_results(results)


def write_program_repros(result: CampaignResult, report_dir: str) -> dict[str, str]:
    """``repros/<bucket>.py`` for every bucket whose example is a program: its standalone
    source (module, export call, end-to-end check); bucket id -> path relative to the report."""
    from strategies.program_model import Program
    from strategies.program_render import repro_source

    from .repro import repro_stem

    out = {}
    for b in result.buckets.values():
        if not isinstance(b.case, Program):
            continue
        path = os.path.join(report_dir, "repros", f"{repro_stem(b.id)}.py")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(repro_source(b.case, f"{b.id}: {b.finding}"))
        out[b.id] = os.path.relpath(path, report_dir)
    return out


def levels_command(args: Any) -> int:
    """``fxfuzz run --level program|mixed``: an in-process campaign per level, merged into
    one report with per-level counts. Exit 0 when every finding is known (or none), 1 on new
    findings."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    from .html_report import render_html
    from .junit import render_junit
    from .progress import ProgressPrinter
    from .report import Extras, report_dict, utc_now, write_report
    from .run_command import CommandError, campaign_setup
    from .summary import print_summary, render_markdown

    if args.workers != 1 or args.coverage:
        raise CommandError(f"--level {args.level} runs in one process: drop --workers and --coverage")
    if args.device != "cpu":
        raise CommandError(f"--level {args.level} checks on CPU only: drop --device {args.device}")
    setup = campaign_setup(args)
    started = utc_now()
    progress = ProgressPrinter(setup.budget_s, setup.max_examples)
    result = run_levels(
        setup.pass_fn,
        args.level,
        budget_s=setup.budget_s,
        max_examples=setup.max_examples,
        seed_=args.seed,
        domain=args.domain,
        database=None if args.no_db else DirectoryBasedExampleDatabase(args.db),
        progress=progress,
    )
    progress.close()
    extras = Extras(known=setup.known, repros=write_program_repros(result, setup.report_dir))
    meta = {
        "pass": args.pass_spec,
        "level": args.level,
        "domain": args.domain,
        "seed": args.seed,
        "workers": 1,
        "started": started,
    }
    write_report(result, meta, setup.report_dir, extras)
    report = report_dict(result, meta, extras)
    # write_all's other files; its repros step serializes graph cases only, so ours differ.
    for name, render in (("report.md", render_markdown), ("report.html", render_html), ("junit.xml", render_junit)):
        with open(os.path.join(setup.report_dir, name), "w") as fh:
            fh.write(render(report))
    print_summary(report, setup.report_dir)
    for name, _ in budget_plan(args.level, setup.budget_s):
        n, rate = result.stats[f"level:{name}:examples"], result.stats[f"level:{name}:examples_per_s"]
        print(f"fxfuzz: level {name}: {n} examples ({rate}/s)")
    return 1 if report["new_findings"] else 0
