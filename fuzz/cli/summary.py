"""The end-of-run summary a person reads on the terminal."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fxfuzz.report.markdown import percent
from fxfuzz.report.schema import Report

# Control characters (escape sequences among them) in quoted text would drive the terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def terminal_line(text: Any) -> str:
    """Quoted text (a pass's exception, a field of a merged shard report) as one printable line."""
    return _CONTROL.sub("?", " ".join(str(text).split()))


def print_summary(report: Report, report_dir: str, unwritten: Sequence[str] = ()) -> None:
    """The end-of-run summary on stdout: throughput, why it stopped, each bucket with its repro;
    where the report went, unless some of it could not be written (``unwritten``)."""
    print(
        f"fxfuzz: {report.examples} examples in {report.duration_s:.1f}s "
        f"({report.examples_per_s:.1f}/s, {report.run.workers} worker(s)), stopped by {terminal_line(report.stopped_by)}"
    )
    if not report.findings:
        print("fxfuzz: no findings")
    for f in report.findings:
        size = f"minimized to {f.graph_nodes} nodes" if f.graph_nodes is not None else "no example saved"
        print(f"  {f.id}{' (known)' if f.known else ''}: {f.count}x, {size}: {terminal_line(f.message)}")
        if f.repro:
            print(f"    repro: {report_dir}/{f.repro}")
    for death in report.workers_detail.unrepeated_deaths or []:
        print(f"fxfuzz: restarted a worker, not a finding: {terminal_line(death)}")
    for error in report.internal_errors:
        print(f"fxfuzz: a worker died of fxfuzz's own error, not a finding: {terminal_line(error)}")
    cov = report.coverage
    if cov.get("enabled") and "lines" in cov:
        print(f"fxfuzz: coverage of the pass: lines {percent(cov['lines'])}, branches {percent(cov['branches'])}")
    for error in report.repro_errors:
        print(f"fxfuzz: {terminal_line(error)}")
    if not unwritten:
        print(f"fxfuzz: report written to {report_dir}/report.json (.md, .html, junit.xml)")
