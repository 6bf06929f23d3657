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
    """What to measure for this pass: its registered sources, else the file defining it; for
    a pipeline, what its parts' would be, each file once."""
    parts = getattr(pass_fn, "parts", ())
    if parts and pass_spec not in REGISTRY:
        return list({t.path: t for p in parts for t in coverage_targets(p.spec, p)}.values())
    if pass_spec in REGISTRY and REGISTRY[pass_spec].sources:
        return [
            Target(
                s.module, os.path.realpath(inspect.getsourcefile(importlib.import_module(s.module)) or ""), s.functions
            )
            for s in REGISTRY[pass_spec].sources
        ]
    fn = inspect.unwrap(getattr(pass_fn, "fn", pass_fn))
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return []
    return [Target(getattr(fn, "__module__", "?"), os.path.realpath(path))] if path else []


def ratio(hit: int | None, total: int) -> dict[str, Any]:
    """``covered``, ``total`` and ``percent`` as reports show them (None: not known)."""
    percent = round(100.0 * hit / total, 1) if total and hit is not None else None
    return {"covered": hit, "total": total, "percent": percent}


def _file_row(
    module: str,
    path: str,
    scope: Any,
    lines_total: int,
    missed: list[int],
    branches_total: int,
    bmissed: list[list[int]] | None,
) -> dict[str, Any]:
    """One measured file; ``bmissed`` None where the branches missed are not known."""
    return {
        "module": module,
        "path": path,
        "scope": scope,
        "lines": ratio(lines_total - len(missed), lines_total),
        "branches": ratio(None if bmissed is None else branches_total - len(bmissed), branches_total),
        "missing_lines": sorted(missed),
        "missing_branches": None if bmissed is None else sorted(bmissed),
    }


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def total(what: str) -> dict[str, Any]:
        hits = [r[what]["covered"] for r in rows]
        return ratio(None if None in hits else sum(hits), sum(r[what]["total"] for r in rows))

    return {"enabled": True, "files": rows, "lines": total("lines"), "branches": total("branches")}


def summarize(data_files: list[str], targets: list[Target]) -> dict[str, Any]:
    """Combine the workers' data files into per-file line and branch coverage."""
    import coverage

    existing = [f for f in data_files if os.path.exists(f)]
    if not targets or not existing:
        return {"enabled": bool(targets), "files": [], "lines": ratio(0, 0), "branches": ratio(0, 0)}
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
    rows = []
    for t in targets:
        data = files.get(
            t.path, {"executed_lines": [], "missing_lines": [], "executed_branches": [], "missing_branches": []}
        )
        if not data["executed_lines"] and not data["missing_lines"]:
            data["missing_lines"] = _statements(t.path)  # never imported in a worker: all missed
        scope = t.lines()

        def keep(line: int, scope: set[int] | None = scope) -> bool:
            return scope is None or line in scope

        hit = [n for n in data["executed_lines"] if keep(n)]
        missed = [n for n in data["missing_lines"] if keep(n)]
        bhit = [b for b in data.get("executed_branches", []) if keep(b[0])]
        bmiss = [b for b in data.get("missing_branches", []) if keep(b[0])]
        path = t.path.split("site-packages" + os.sep)[-1]
        rows.append(
            _file_row(
                t.module,
                path,
                list(t.functions) or "whole file",
                len(hit) + len(missed),
                missed,
                len(bhit) + len(bmiss),
                bmiss,
            )
        )
    return _summary(rows)


def union_coverage(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The coverage of several campaigns over the same sources, in ``summarize``'s form: a line
    or branch counts as reached when any campaign that measured coverage reached it. The
    branches of a summary written before ``missing_branches`` was recorded cannot be united:
    their figures become unknown (None)."""
    measured = [c for c in summaries if c.get("enabled")]
    if len(measured) <= 1:
        return measured[0] if measured else {"enabled": False}
    errors = [c["error"] for c in measured if "error" in c]
    if errors:
        return {"enabled": True, "error": "; ".join(errors)}
    by_path: dict[str, list[dict[str, Any]]] = {}
    for c in measured:
        for f in c["files"]:
            by_path.setdefault(f["path"], []).append(f)
    rows = []
    for path, files in by_path.items():
        missed = set.intersection(*(set(f["missing_lines"]) for f in files))
        known = [{tuple(b) for b in f["missing_branches"]} for f in files if f.get("missing_branches") is not None]
        bmissed = None if len(known) < len(files) else [list(b) for b in set.intersection(*known)]
        first = files[0]
        rows.append(
            _file_row(
                first["module"],
                path,
                first["scope"],
                first["lines"]["total"],
                list(missed),
                first["branches"]["total"],
                bmissed,
            )
        )
    return _summary(rows)


def _statements(path: str) -> list[int]:
    import coverage

    cov = coverage.Coverage(branch=True, data_file=None)
    _, statements, _, _, _ = cov.analysis2(path)
    return list(statements)
