"""``fxfuzz passes``: the registered passes, each with its contract, domain, call context and sources."""

from __future__ import annotations

import argparse
import json
from typing import Any

from fxfuzz.core.passes import REGISTRY, Registered


def _row(r: Registered) -> dict[str, Any]:
    return {
        "name": r.name,
        "spec": r.spec,
        "contract": r.contract.name,
        "domain": r.domain,
        "context": r.context.describe(),
        "sources": [{"module": s.module, "functions": list(s.functions), "mutate": s.mutate} for s in r.sources],
    }


def _sources(row: dict[str, Any]) -> str:
    """Each source module, its measured functions in brackets, ``*`` marking what ``fxfuzz mutate`` mutates."""
    return (
        ", ".join(
            f"{s['module']}{'[' + ','.join(s['functions']) + ']' if s['functions'] else ''}{'*' if s['mutate'] else ''}"
            for s in row["sources"]
        )
        or "-"
    )


def command(args: argparse.Namespace) -> int:
    rows = [_row(r) for r in REGISTRY.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    columns = ("name", "contract", "domain", "context")
    width = {k: max(len(k), *(len(r[k]) for r in rows)) for k in columns}
    print("  ".join(f"{k:<{width[k]}}" for k in columns) + "  sources (* mutated by fxfuzz mutate)")
    for r in rows:
        print("  ".join(f"{r[k]:<{width[k]}}" for k in columns) + f"  {_sources(r)}")
    return 0
