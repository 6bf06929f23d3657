"""The end-of-campaign summary printed to stdout."""

from __future__ import annotations

from .campaign import CampaignResult


def print_summary(result: CampaignResult, report_path: str) -> None:
    print(
        f"fxfuzz: {result.examples} examples in {result.duration_s:.1f}s "
        f"({result.examples_per_s:.1f}/s), stopped by {result.stopped_by}"
    )
    if not result.buckets:
        print("fxfuzz: no findings")
    for b in result.buckets.values():
        print(f"  {b.id}: {b.count}x, minimized to {b.graph_nodes} nodes: {b.finding.message}")
    print(f"fxfuzz: report written to {report_path}")
