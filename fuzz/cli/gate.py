"""``fxfuzz gate``: exit 1 when the candidate pass regresses against the baseline, 3 when a
worker could not do its share, 4 when its report could not be written in full, else 0 (or
128 + the signal when a signal stopped it early)."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from fxfuzz.campaign.gate import run_gate_parallel, shown_as_found
from fxfuzz.campaign.limits import campaign_limits
from fxfuzz.campaign.results import StopReason
from fxfuzz.cli.interrupt import StopSignals, exit_status
from fxfuzz.cli.progress import ProgressPrinter
from fxfuzz.cli.run import EXIT_TESTED_NOTHING, internal_status, unwritten_status
from fxfuzz.cli.setup import check_survives, worker_logs
from fxfuzz.core.identity import identify, resolve_pass
from fxfuzz.core.known import load_known_files
from fxfuzz.core.passes import default_domain
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.report.folder import default_report_dir, report_folder, utc_now, write_all
from fxfuzz.report.schema import Extras, RunInfo
from fxfuzz.repro.files import Corpus, saved_cases
from fxfuzz.strategies.custom import register_ops


def command(a: argparse.Namespace) -> int:
    """Judge the corpus and fresh cases for the budget in worker processes, until the first
    final regression (``run_gate_parallel``); write the report; print each regression."""
    # A bad spec fails here, in one line, before any worker starts.
    check_survives([("--candidate", a.candidate), ("--baseline", a.baseline)], a.ops)
    candidate = identify(a.candidate, a.contract)
    baseline, _ = resolve_pass(a.baseline, a.contract)
    register_ops(a.ops, "--op")  # the workers register them too (the supervisor hands them over)
    corpus = saved_cases(a.corpus, a.example_timeout_s) if a.corpus else Corpus([], [], [])
    saved, notes = corpus.cases, corpus.untrusted + corpus.unloadable  # files left out stay where they are
    known = load_known_files(a.known)
    budget_s, max_examples = campaign_limits(a.budget, a.max_examples)
    domain = a.domain or default_domain(baseline, "both")
    settings = CampaignSettings.from_options(
        a, budget_s=budget_s, max_examples=max_examples, known=frozenset(known), domain=domain, identity=candidate
    )
    folder = report_folder(a.report_dir or default_report_dir())  # last: a refusal above leaves no folder behind
    progress = ProgressPrinter(budget_s, max_examples)
    started = utc_now()
    log_dir = worker_logs(folder)  # the corpus's worker is worker 0
    with StopSignals() as stop:
        result = run_gate_parallel(a.baseline, saved, settings, progress=progress.update, log_dir=log_dir, stop=stop)
        signum = stop.signum  # a signal from here on only asks to finish the report
        progress.close()
        if signum is not None:
            result.campaign.stopped_by = StopReason.INTERRUPTED
        result.campaign.stats.update(skipped_untrusted=len(corpus.untrusted), unloadable=len(corpus.unloadable))
        for b in result.buckets.values():
            b.example = shown_as_found(b)  # the repro replays under the grad mode that showed the regression
        # What both sides were held to, and whether fxfuzz chose that for a pass it does not know.
        run = RunInfo.of(
            a.candidate,
            candidate.contract,
            candidate.contract_source,
            a.ops,
            settings,
            started,
            command="gate",
            candidate=a.candidate,
            baseline=a.baseline,
        )
        account = result.campaign.workers
        # Part of the gate never ran: no regression found is not a pass, and the report says so.
        # (A gate that stopped at a final regression ended its workers on purpose.)
        cut_short = signum is not None or result.campaign.stopped_by is StopReason.STOPPED
        incomplete = (
            f"the gate did not judge all its cases: {account.errors[0]}" if account.errors and not cut_short else None
        )
        extras = Extras(known, notes=notes, corpus=(result.corpus_cases, result.corpus_s), incomplete=incomplete)
        written = write_all(result.campaign, run, settings, folder, extras)
    report, report_dir = written.report, written.where
    new = [f for f in report.findings if not f.known]
    print(
        f"fxfuzz gate: {result.corpus_cases} corpus cases in {result.corpus_s:.1f}s, "
        f"{result.campaign.examples} fresh cases (each under both grad modes)"
    )
    if result.campaign.stopped_by is StopReason.STOPPED:
        print(f"fxfuzz gate: stopped early, {result.campaign.duration_s:.1f}s in: a regression was found and minimized")
    for f in report.findings:
        where = result.buckets[f.id].source or "a fresh case"
        label = "known" if f.known else "REGRESSION"
        print(f"  {label} {f.id}: {f.count}x, on {where}, {f.graph_nodes} nodes: {f.message}")
        print(f"    repro: {os.path.join(report_dir, f.repro)}" if f.repro else "    (no repro)")
    if account.excused_deaths:
        print(
            f"fxfuzz gate: {account.excused_deaths} case(s) killed a worker where the baseline "
            "crashed or died itself: not regressions"
        )
    status = unwritten_status(written.unwritten, report_dir)
    if status is not None:
        return status
    print(f"fxfuzz gate: report written to {os.path.join(report_dir, 'report.json')}")
    for note in notes:
        print(f"fxfuzz: note: {note}", file=sys.stderr)
    for error in account.internal_errors:
        print(f"fxfuzz gate: a worker died of fxfuzz's own error, not a regression: {error}")
    if new:
        return 1
    internal = internal_status(report)
    if internal is not None:
        return internal
    if signum is not None:
        print(f"fxfuzz gate: stopped early by {signal.Signals(signum).name}: no new regression in what it judged")
        return exit_status(signum)
    if incomplete:
        print(f"fxfuzz: error: {incomplete} (see {os.path.join(report_dir, 'logs')})", file=sys.stderr)
        return EXIT_TESTED_NOTHING
    print(f"fxfuzz gate: no new regression of {a.candidate} against {a.baseline}")
    return 0
