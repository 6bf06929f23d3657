"""``fxfuzz run``: a campaign in worker processes (at the graph, program or mixed level), then
the report folder and the summary."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from typing import Any

from fxfuzz.campaign.results import CampaignResult, StopReason
from fxfuzz.campaign.supervisor import ParallelCampaign, Supervisor
from fxfuzz.cli.args import auto_workers
from fxfuzz.cli.interrupt import StopSignals, verdict_status
from fxfuzz.cli.progress import ProgressPrinter
from fxfuzz.cli.setup import CampaignSetup, campaign_setup, worker_logs
from fxfuzz.cli.summary import print_summary
from fxfuzz.core.errors import UsageError
from fxfuzz.core.internal import EXIT_INTERNAL, internal_line
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.report.folder import ReportFolder, utc_now, write_all
from fxfuzz.report.schema import Extras, Report, RunInfo

# Exit status of a campaign that did not test what it was asked to (it ran no example, a level
# ran none, or its workers kept dying outside any example): distinct from 1 (findings) and 2
# (bad input).
EXIT_TESTED_NOTHING = 3
# Exit status of a command that could not write all of its report folder (a full disk, a
# folder gone read-only): whatever it found, its summary is printed and the status is never 1,
# which CI reads as findings in a report it would upload.
EXIT_REPORT_UNWRITTEN = 4


def command(args: argparse.Namespace) -> int:
    """Exit 0 when every finding is known (or none), 1 on new findings, 3 for an incomplete
    run, 4 for a report that could not be written in full, 128 + the signal for one stopped
    early with nothing new found."""
    if args.level != "graph":
        return _levels(args)
    setup = campaign_setup(
        args, args.workers or auto_workers()
    )  # a bad spec or path fails here, before any worker starts
    return _graph_level(args, setup)


def _graph_level(args: argparse.Namespace, setup: CampaignSetup) -> int:
    from fxfuzz.campaign.coverage import coverage_targets, summarize

    settings = setup.settings
    # Off by default: tracing costs about 75% more CPU per example on Python 3.11 (docs/benchmark.md).
    targets = coverage_targets(args.pass_spec, setup.pass_fn) if settings.coverage else []
    log_dir = worker_logs(setup.folder)
    campaign = ParallelCampaign(settings, log_dir=log_dir, coverage_include=tuple(t.path for t in targets))
    started = utc_now()
    progress = ProgressPrinter(settings.budget_s, settings.max_examples)
    # Entered after the checks: a signal before it ends a run that has done nothing yet.
    with StopSignals() as stop:
        supervisor = Supervisor(campaign)
        result = supervisor.run(progress.update, stop)
        signum = stop.signum  # a signal from here on only asks to finish the report
        progress.close()
        try:
            coverage = summarize(supervisor.coverage_files, targets) if targets else {"enabled": False}
        except Exception as e:  # coverage is a figure about the run: never lose the findings for it
            coverage = {"enabled": True, "error": f"{type(e).__name__}: {e}"}
        finally:
            if supervisor.coverage_dir:
                shutil.rmtree(supervisor.coverage_dir, ignore_errors=True)
        why = result.workers.errors[0] if result.workers.errors else "no worker ran an example"
        lost = [
            f"the workers kept dying outside any example ({why}); the campaign stopped after {result.examples} example(s)"
        ]
        incomplete = _incomplete(result, signum, why, lost if result.stopped_by == StopReason.WORKERS_LOST else [])
        extras = Extras(setup.known, coverage=coverage, notes=_notes(result, setup.folder), incomplete=incomplete)
        written = write_all(result, run_info(args, settings, started), settings, setup.folder, extras)
    report = written.report
    print_summary(report, written.where, written.unwritten)
    _print_notes(extras.notes)
    return unwritten_status(written.unwritten, written.where) or _exit_status(
        report, signum, os.path.join(written.where, "logs")
    )


def _notes(result: CampaignResult, folder: ReportFolder) -> list[str]:
    """The workers' notes, naming where ``folder`` ends up."""
    return [folder.final(n) for n in result.notes]


def run_info(args: argparse.Namespace, settings: CampaignSettings, started: str, **more: Any) -> RunInfo:
    """report.json's run metadata (``RunInfo.of``) of a run of ``args``, the pass as the
    settings' identity resolved it; ``more``: see there."""
    identity = settings.pass_identity()
    return RunInfo.of(identity.spec, identity.contract, identity.contract_source, args.ops, settings, started, **more)


def _incomplete(result: CampaignResult, signum: int | None, why: str, gaps: list[str]) -> str | None:
    """Why the run did not test what it was asked to, in one line, or None: it ran no example
    (``why``), or ``gaps`` in what it ran. A run a signal stopped is incomplete only when it ran
    nothing; its ``stopped_by`` says the rest."""
    if signum is not None:
        why = f"stopped by {signal.Signals(signum).name} before the first example"
    if not result.examples:
        return f"the campaign tested nothing: {why}"
    return None if signum is not None else "; ".join(gaps) or None


def _exit_status(report: Report, signum: int | None, see: str) -> int:
    """0 green, 1 new findings, 70 a worker that died of fxfuzz's own error, 3 an incomplete
    run (one line on stderr each), 128 + the signal for a run stopped early that found
    nothing new."""
    status = internal_status(report)
    if status is not None:
        return status
    if signum is None and report.incomplete:
        print(f"fxfuzz: error: {report.incomplete} (see {see})", file=sys.stderr)
        return EXIT_TESTED_NOTHING
    return verdict_status(bool(report.new_findings), signum)


def _levels(args: argparse.Namespace) -> int:
    """``--level program|mixed``: a campaign per level in a worker process, as the graph
    level's, merged into one report with per-level counts."""
    from fxfuzz.campaign.levels import budget_plan, run_levels

    if args.workers not in (None, 1) or args.coverage:
        raise UsageError(f"--level {args.level} runs in one worker process: drop --workers and --coverage")
    if args.device != "cpu":
        raise UsageError(f"--level {args.level} checks on CPU only: drop --device {args.device}")
    setup = campaign_setup(args, 1)
    settings = setup.settings
    log_dir = worker_logs(setup.folder)
    started = utc_now()
    progress = ProgressPrinter(settings.budget_s, settings.max_examples)
    plan = budget_plan(settings.level, settings.budget_s)
    with StopSignals() as stop:
        run = run_levels(settings, log_dir=log_dir, progress=progress.update, stop=stop)
        signum = stop.signum
        progress.close()
        result = run.result
        if signum is not None:
            result.stopped_by = StopReason.INTERRUPTED
        gaps = [
            f"the {name} level ran no example in its {share:.1f}s of the budget"
            for name, share in plan
            if not result.stats[f"level:{name}:examples"]
        ]
        gaps += [
            f"the {name} level's worker kept dying outside any example ({(p.workers.errors or ['no worker ran an example'])[0]})"
            for name, p in run.levels
            if p.stopped_by == StopReason.WORKERS_LOST
        ]
        incomplete = _incomplete(result, signum, "; ".join(gaps), gaps)
        extras = Extras(setup.known, notes=_notes(result, setup.folder), incomplete=incomplete)
        info = run_info(args, settings, started, level=settings.level, program_share=settings.program_share)
        written = write_all(result, info, settings, setup.folder, extras)
    report = written.report
    print_summary(report, written.where, written.unwritten)
    _print_notes(extras.notes)
    for name, _ in plan:
        n, rate = result.stats[f"level:{name}:examples"], result.stats[f"level:{name}:examples_per_s"]
        print(f"fxfuzz: level {name}: {n} examples ({rate}/s)")
    return unwritten_status(written.unwritten, written.where) or _exit_status(
        report, signum, os.path.join(written.where, "logs")
    )


def internal_status(report: Report) -> int | None:
    """EXIT_INTERNAL, after one line on stderr, when a worker died of fxfuzz's own error and
    nothing new was found (findings take precedence: exit 1); else None."""
    internal = report.internal_errors
    if not internal or report.new_findings:
        return None
    print(
        internal_line(
            f"internal error: {internal[0]}" + (f" (and {len(internal) - 1} more)" if len(internal) > 1 else "")
        ),
        file=sys.stderr,
    )
    return EXIT_INTERNAL


def unwritten_status(unwritten: list[str], report_dir: str) -> int | None:
    """EXIT_REPORT_UNWRITTEN, after one line naming each file of ``report_dir`` that could not
    be written and why, when there is one; else None."""
    if not unwritten:
        return None
    print(
        f"fxfuzz: error: the report in {report_dir} is incomplete: could not write {'; '.join(unwritten)}",
        file=sys.stderr,
    )
    return EXIT_REPORT_UNWRITTEN


def _print_notes(notes: list[str]) -> None:
    for note in notes:
        print(f"fxfuzz: note: {note}", file=sys.stderr)
