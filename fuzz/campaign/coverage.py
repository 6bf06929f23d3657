"""Line and branch coverage (coverage.py) of the pass under test and its helpers.

Workers record into their own data files; ``summarize`` combines them and reports, per
source file, the lines and branches the campaign reached. For a module the pass uses only
in part (torch._export.utils), the count is limited to the helper functions it calls.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from fxfuzz.core.passes import REGISTRY


@dataclass
class Target:
    """One measured source file, limited to ``functions`` when given."""

    module: str
    path: str
    functions: tuple[str, ...] = ()

    def lines(self) -> set[int] | None:
        """Line numbers in scope, or None for the whole file."""
        if not self.functions:
            return None
        module = importlib.import_module(self.module)
        scope: set[int] = set()
        for name in self.functions:
            src, start = inspect.getsourcelines(getattr(module, name))
            scope.update(range(start, start + len(src)))
        return scope


def coverage_targets(pass_spec: str, pass_fn: Any) -> list[Target]:
    """What to measure for this pass: its registered sources, else the file defining it."""
    if pass_spec in REGISTRY and REGISTRY[pass_spec].sources:
        return [
            Target(s.module, os.path.realpath(inspect.getsourcefile(importlib.import_module(s.module)) or ""), s.functions)
            for s in REGISTRY[pass_spec].sources
        ]
    fn = inspect.unwrap(getattr(pass_fn, "fn", pass_fn))
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return []
    return [Target(getattr(fn, "__module__", "?"), os.path.realpath(path))] if path else []


def _ratio(hit: int, total: int) -> dict[str, Any]:
    return {"covered": hit, "total": total, "percent": round(100.0 * hit / total, 1) if total else None}


def summarize(data_files: list[str], targets: list[Target]) -> dict[str, Any]:
    """Combine the workers' data files into per-file line and branch coverage."""
    import coverage

    existing = [f for f in data_files if os.path.exists(f)]
    if not targets or not existing:
        return {"enabled": bool(targets), "files": [], "lines": _ratio(0, 0), "branches": _ratio(0, 0)}
    with tempfile.TemporaryDirectory() as tmp:
        cov = coverage.Coverage(data_file=os.path.join(tmp, ".coverage"), branch=True)
        cov.combine(existing, keep=True)
        cov.save()
        out = os.path.join(tmp, "cov.json")
        try:
            cov.json_report(outfile=out, include=[t.path for t in targets], ignore_errors=True)
            with open(out) as fh:
                files = {os.path.realpath(k): v for k, v in json.load(fh)["files"].items()}
        except coverage.exceptions.NoDataError:
            files = {}  # no measured file ever ran: every line counts as missed
    rows, sums = [], {"lh": 0, "lt": 0, "bh": 0, "bt": 0}
    for t in targets:
        data = files.get(t.path, {"executed_lines": [], "missing_lines": [], "executed_branches": [], "missing_branches": []})
        if not data["executed_lines"] and not data["missing_lines"]:
            data["missing_lines"] = _statements(t.path)  # never imported in a worker: all missed
        scope = t.lines()

        def keep(line: int, scope: set[int] | None = scope) -> bool:
            return scope is None or line in scope

        hit = [n for n in data["executed_lines"] if keep(n)]
        missed = [n for n in data["missing_lines"] if keep(n)]
        bhit = [b for b in data.get("executed_branches", []) if keep(b[0])]
        bmiss = [b for b in data.get("missing_branches", []) if keep(b[0])]
        rows.append(
            {
                "module": t.module,
                "path": t.path.split("site-packages" + os.sep)[-1],
                "scope": list(t.functions) or "whole file",
                "lines": _ratio(len(hit), len(hit) + len(missed)),
                "branches": _ratio(len(bhit), len(bhit) + len(bmiss)),
                "missing_lines": sorted(missed),
            }
        )
        sums["lh"] += len(hit)
        sums["lt"] += len(hit) + len(missed)
        sums["bh"] += len(bhit)
        sums["bt"] += len(bhit) + len(bmiss)
    return {
        "enabled": True,
        "files": rows,
        "lines": _ratio(sums["lh"], sums["lt"]),
        "branches": _ratio(sums["bh"], sums["bt"]),
    }


def _statements(path: str) -> list[int]:
    import coverage

    cov = coverage.Coverage(branch=True, data_file=None)
    _, statements, _, _, _ = cov.analysis2(path)
    return list(statements)
