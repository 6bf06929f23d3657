"""Write a campaign's report folder: report.json (the stable, documented schema)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any

import torch

from .campaign import CampaignResult

REPORT_SCHEMA_VERSION = 1


def default_report_dir(root: str = "reports") -> str:
    """A fresh folder under ``root`` named by the UTC time."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    return os.path.join(root, stamp)


def report_dict(result: CampaignResult, meta: dict[str, Any]) -> dict[str, Any]:
    """The report.json content: run metadata, counts, findings by bucket and statistics."""
    from . import __version__

    return {
        "schema": REPORT_SCHEMA_VERSION,
        "tool": "fxfuzz",
        "version": __version__,
        "torch_version": torch.__version__,
        **meta,
        "duration_s": round(result.duration_s, 3),
        "examples": result.examples,
        "examples_per_s": round(result.examples_per_s, 2),
        "stopped_by": result.stopped_by,
        "findings": [
            {
                "id": b.id,
                "oracle": b.finding.oracle,
                "kind": b.finding.kind,
                "message": b.finding.message,
                "details": b.finding.details,
                "count": b.count,
                "known": False,
                "graph_nodes": b.graph_nodes,
                "ambient_grad": b.case.ambient_grad,
                "domain": b.case.domain,
                "graph_code": b.case.code(),
            }
            for b in result.buckets.values()
        ],
        "stats": dict(sorted(result.stats.items())),
    }


def write_report(result: CampaignResult, meta: dict[str, Any], report_dir: str) -> str:
    """Write report.json into ``report_dir`` (created if needed); return its path."""
    os.makedirs(report_dir, exist_ok=True)
    path = os.path.join(report_dir, "report.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(report_dict(result, meta), fh, indent=2, default=str)
    os.replace(tmp, path)  # never leave a half-written report behind
    return path
