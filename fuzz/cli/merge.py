"""``fxfuzz merge``: one report folder from the report folders of a campaign's shards."""

from __future__ import annotations

import argparse
import sys

from fxfuzz.cli.run import EXIT_TESTED_NOTHING, unwritten_status
from fxfuzz.cli.summary import print_summary, terminal_line
from fxfuzz.report.folder import default_report_dir, report_folder
from fxfuzz.report.merge import load_inputs, merge_reports, missing_shards, write_merged


def command(args: argparse.Namespace) -> int:
    """Exit 0 when the merged report has no new finding, 1 when it has; 3 when it is
    incomplete (an input was, or none tested anything); 4 when it could not be written in full."""
    out_dir = args.report_dir or default_report_dir()
    merged = merge_reports(load_inputs(args.folders, out_dir))  # every refusal comes before any write
    written = write_merged(merged, report_folder(out_dir))
    report, unwritten, out_dir = written.report, written.unwritten, written.where
    shards = f" (shards {', '.join(report.shards)})" if report.shards else ""
    print(f"fxfuzz merge: {len(report.merged_from or [])} report folder(s){shards}")
    missing = missing_shards(report)
    if missing:
        print(f"fxfuzz merge: no report from shard(s) {', '.join(missing)}", file=sys.stderr)
    print_summary(report, out_dir, unwritten)
    status = unwritten_status(unwritten, out_dir)
    if status is not None:
        return status
    if report.incomplete:
        print(f"fxfuzz: error: {terminal_line(report.incomplete)}", file=sys.stderr)
        return EXIT_TESTED_NOTHING
    return 1 if report.new_findings else 0
