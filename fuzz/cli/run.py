"""``fxfuzz run``: a campaign at the graph level in worker processes, or at the program or
mixed level in this process, then the report folder and the summary."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from typing import Any

from fxfuzz.campaign.database import redact
from fxfuzz.campaign.engine import CampaignResult
from fxfuzz.cli.args import auto_workers
from fxfuzz.cli.interrupt import StopSignals, verdict_status
from fxfuzz.cli.progress import ProgressPrinter
from fxfuzz.cli.setup import CampaignSetup, campaign_setup, worker_logs
from fxfuzz.cli.summary import print_summary
from fxfuzz.core.errors import UsageError
from fxfuzz.oracles.stages import set_stage_share
from fxfuzz.report.folder import Extras, utc_now, write_all

# Exit status of a campaign that did not test what it was asked to (it ran no example, a level
# ran none, or its workers kept dying outside any example): distinct from 1 (findings) and 2
# (bad input).
EXIT_TESTED_NOTHING = 3


def command(args: argparse.Namespace) -> int:
    """Exit 0 when every finding is known (or none), 1 on new findings, 3 for an incomplete
    run, 128 + the signal for one stopped early with nothing new found."""
    if args.level != "graph":
        return _levels(args)
    setup = campaign_setup(args)  # a bad spec or path fails here, before any worker starts
    return _graph_level(args, setup)


def _graph_level(args: argparse.Namespace, setup: CampaignSetup) -> int:
    from fxfuzz.campaign.coverage import coverage_targets, summarize
    from fxfuzz.campaign.supervisor import CampaignOptions, run_parallel, to_campaign_result

    # Off by default: tracing costs about 75% more CPU per example on Python 3.11 (docs/benchmark.md).
    targets = coverage_targets(args.pass_spec, setup.pass_fn) if args.coverage else []
    workers = args.workers or auto_workers()
    logs = worker_logs(setup.report_dir, workers)
    opts = CampaignOptions(
        pass_spec=args.pass_spec,
        budget_s=setup.budget_s,
        max_examples=setup.max_examples,
        seed=args.seed,
        domain=args.domain,
        workers=workers,
        example_timeout_s=args.example_timeout,
        database=setup.database,
        shard=args.shard,
        device=args.device,
        stage_share=args.stage_share,
        max_shrink_s=args.max_shrink_s,
        known=frozenset(setup.known),
        coverage_include=[t.path for t in targets],
        log_dir=logs,
    )
    started = utc_now()
    progress = ProgressPrinter(setup.budget_s, setup.max_examples)
    # Entered after the checks: a signal before it ends a run that has done nothing yet.
    with StopSignals() as stop:
        parallel = run_parallel(opts, progress.update, stop)
        signum = stop.signum  # a signal from here on only asks to finish the report
        progress.close()
        result = to_campaign_result(parallel)
        try:
            coverage = summarize(parallel.coverage_files, targets) if targets else {"enabled": False}
        except Exception as e:  # coverage is a figure about the run: never lose the findings for it
            coverage = {"enabled": True, "error": f"{type(e).__name__}: {e}"}
        finally:
            if parallel.coverage_dir:
                shutil.rmtree(parallel.coverage_dir, ignore_errors=True)
        why = parallel.worker_errors[0] if parallel.worker_errors else "no worker ran an example"
        lost = [f"the workers kept dying outside any example ({why}); the campaign stopped after {result.examples} example(s)"]
        incomplete = _incomplete(result, signum, why, lost if result.stopped_by == "workers_lost" else [])
        extras = Extras(
            known=setup.known,
            coverage=coverage,
            timeline=parallel.timeline,
            workers={
                "restarts": parallel.restarts,
                "unrepeated_deaths": parallel.unrepeated_deaths,
                "errors": parallel.worker_errors,
                "unserializable_examples": parallel.unserializable,
                "example_timeout_s": args.example_timeout,
                "database": _database_row(setup),
                "notes": parallel.notes,
            },
            incomplete=incomplete,
        )
        meta = {
            "pass": args.pass_spec,
            "ops": args.ops,
            "domain": args.domain,
            "seed": args.seed,
            "shard": _shard(args),
            "workers": workers,
            "device": opts.device,
            "stage_share": opts.stage_share,
            "max_shrink_s": opts.max_shrink_s,
            "started": started,
        }
        report = write_all(result, meta, setup.report_dir, extras)
    print_summary(report, setup.report_dir)
    _print_notes(parallel.notes)
    return _exit_status(report, signum, logs)


def _incomplete(result: CampaignResult, signum: int | None, why: str, gaps: list[str]) -> str | None:
    """Why the run did not test what it was asked to, in one line, or None: it ran no example
    (``why``), or ``gaps`` in what it ran. A run a signal stopped is incomplete only when it ran
    nothing; its ``stopped_by`` says the rest."""
    if signum is not None:
        why = f"stopped by {signal.Signals(signum).name} before the first example"
    if not result.examples:
        return f"the campaign tested nothing: {why}"
    return None if signum is not None else "; ".join(gaps) or None


def _exit_status(report: dict[str, Any], signum: int | None, see: str) -> int:
    """0 green, 1 new findings, 3 an incomplete run (one line on stderr), 128 + the signal
    for a run stopped early that found nothing new."""
    if signum is None and report["incomplete"]:
        print(f"fxfuzz: error: {report['incomplete']} (see {see})", file=sys.stderr)
        return EXIT_TESTED_NOTHING
    return verdict_status(bool(report["new_findings"]), signum)


def _levels(args: argparse.Namespace) -> int:
    """``--level program|mixed``: an in-process campaign per level, merged into one report
    with per-level counts."""
    from fxfuzz.campaign.database import open_database
    from fxfuzz.campaign.levels import budget_plan, run_levels
    from fxfuzz.campaign.supervisor import worker_seed

    if args.workers not in (None, 1) or args.coverage:
        raise UsageError(f"--level {args.level} runs in one process: drop --workers and --coverage")
    if args.device != "cpu":
        raise UsageError(f"--level {args.level} checks on CPU only: drop --device {args.device}")
    setup = campaign_setup(args)
    started = utc_now()
    progress = ProgressPrinter(setup.budget_s, setup.max_examples)
    notes: list[str] = []
    plan = budget_plan(args.level, setup.budget_s)
    set_stage_share(args.stage_share)
    with StopSignals() as stop:
        result = run_levels(
            setup.pass_fn,
            args.level,
            budget_s=setup.budget_s,
            max_examples=setup.max_examples,
            # One process: the seed of a sharded campaign's only worker.
            seed_=worker_seed(args.seed, args.shard, 0, 0) if args.shard != (1, 1) else args.seed,
            domain=args.domain,
            database=None if setup.database is None else open_database(setup.database, notes.append),
            progress=progress,
            stop=stop,
            known=frozenset(setup.known),
            max_shrink_s=args.max_shrink_s,
        )
        signum = stop.signum
        progress.close()
        if signum is not None:
            result.stopped_by = "interrupted"
        gaps = [f"the {name} level ran no example in its {share:.1f}s of the budget" for name, share in plan if not result.stats[f"level:{name}:examples"]]
        incomplete = _incomplete(result, signum, "; ".join(gaps), gaps)
        meta = {
            "pass": args.pass_spec,
            "ops": args.ops,
            "level": args.level,
            "domain": args.domain,
            "seed": args.seed,
            "shard": _shard(args),
            "workers": 1,
            "device": "cpu",
            "stage_share": args.stage_share,
            "max_shrink_s": args.max_shrink_s,
            "started": started,
        }
        extras = Extras(known=setup.known, workers={"database": _database_row(setup), "notes": notes}, incomplete=incomplete)
        report = write_all(result, meta, setup.report_dir, extras)
    print_summary(report, setup.report_dir)
    _print_notes(notes)
    for name, _ in plan:
        n, rate = result.stats[f"level:{name}:examples"], result.stats[f"level:{name}:examples_per_s"]
        print(f"fxfuzz: level {name}: {n} examples ({rate}/s)")
    return _exit_status(report, signum, os.path.join(setup.report_dir, "report.md"))


def _shard(args: argparse.Namespace) -> str:
    k, n = args.shard
    return f"{k}/{n}"


def _database_row(setup: CampaignSetup) -> dict[str, object] | None:
    """The databases as report.json records them (Redis passwords left out)."""
    if setup.database is None:
        return None
    return {"local": setup.database.local, "shared": [redact(url) for url in setup.database.shared]}


def _print_notes(notes: list[str]) -> None:
    for note in notes:
        print(f"fxfuzz: note: {note}", file=sys.stderr)
