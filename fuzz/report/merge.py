"""One report from many report folders (shards of a campaign, or campaigns of the same pass
under the same versions): counts summed, buckets deduplicated, the smallest repro kept.

``merge_reports`` is a pure function over report dicts; ``load_inputs`` reads and checks the
folders (as untrusted input: ``fxfuzz.report.reader``), ``write_merged`` writes the merged folder with the same documents ``fxfuzz run``
writes. Anything that cannot be merged raises ``ReportError`` (one line, exit status 2).
"""

from __future__ import annotations

import functools
import os
import reprlib
import shutil
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fxfuzz.campaign.coverage import union_coverage
from fxfuzz.campaign.levels import add_level_rates
from fxfuzz.core.errors import ReportError, UsageError
from fxfuzz.core.identity import PassIdentity
from fxfuzz.core.shards import parse_shard
from fxfuzz.report.folder import ReportFolder, Written, attempt, placed, sort_findings, write_documents
from fxfuzz.report.reader import inside_problem, pass_identity, read_report
from fxfuzz.repro.files import repro_stem

# What makes two reports parts of one campaign: they must agree on all of these.
IDENTITY = (
    "tool",
    "schema",
    "version",
    "torch_version",
    "python_version",
    "pass",
    "contract",
    "ops",
    "level",
    "domain",
    "device",
)
# workers_detail fields that add up over campaigns, and those that are lists to concatenate;
# any other field keeps its common value.
_SUMMED = ("restarts", "unserializable_examples", "excused_deaths")
_CONCATENATED = ("errors", "unrepeated_deaths", "internal_errors")
# Keys merge_reports computes itself; every other key keeps its common value.
_COMPUTED = {
    "started", "seed", "workers", "duration_s", "examples", "examples_per_s", "stopped_by", "new_findings",
    "findings", "coverage", "stats", "timeline", "workers_detail", "repro_errors", "shard", "shards", "merged_from",
    "incomplete",
}  # fmt: skip


@dataclass
class Merged:
    """The merged report and, per bucket with a repro, the input folder and the .py there
    (relative to it) that it keeps."""

    report: dict[str, Any]
    repro_sources: dict[str, tuple[str, str]] = field(default_factory=dict)


def load_inputs(folders: list[str], out_dir: str) -> list[tuple[str, dict[str, Any]]]:
    """(folder, report) for each folder, in order; refuses a folder given twice and an output
    folder that is one of the inputs (the merge would overwrite what it reads)."""
    seen: dict[str, str] = {}
    out = os.path.realpath(out_dir)
    for folder in folders:
        real = os.path.realpath(folder)
        if real == out:
            raise ReportError(f"--report-dir {out_dir} is one of the folders to merge: choose another output folder")
        if real in seen:
            raise ReportError(f"{folder} is given twice (as {seen[real]}): its counts would be added twice")
        seen[real] = folder
    return [(os.path.normpath(folder), read_report(folder)) for folder in folders]


def merge_reports(inputs: list[tuple[str, dict[str, Any]]]) -> Merged:
    """One report from (folder, report) pairs of one campaign's parts. Examples, durations,
    workers and statistics add up (rates are derived again); buckets are deduplicated by id,
    counts summed, each keeping its smallest example that has a repro; a bucket is known only
    when every input that saw it lists it as known."""
    if not inputs:
        raise ReportError("no report folders to merge")
    reports = [r for _, r in inputs]
    _check_compatible(inputs)
    merged_from = [entry for folder, r in inputs for entry in _sources(folder, r)]
    shards = _shards(merged_from)
    findings, repro_sources = _merge_findings(inputs)
    examples = sum(r["examples"] for r in reports)
    duration = sum(r["duration_s"] for r in reports)
    reasons = [r["stopped_by"] for r in reports]
    report: dict[str, Any] = {k: _common([r.get(k) for r in reports]) for k in _keys(reports) if k not in _COMPUTED}
    report.update(
        started=min((str(r["started"]) for r in reports if r.get("started")), default=""),
        seed=_common([r.get("seed") for r in reports]),
        workers=sum(r.get("workers", 1) for r in reports),
        duration_s=round(duration, 3),
        examples=examples,
        examples_per_s=round(examples / duration, 2) if duration else 0.0,
        # Interrupted anywhere: the merged campaign did not run its course.
        stopped_by=next(
            (s for s in ("interrupted", "internal_error", "workers_lost", "budget") if s in reasons), reasons[0]
        ),
        incomplete=_incomplete(inputs, examples, findings),
        new_findings=sum(1 for f in findings if not f["known"]),
        findings=findings,
        coverage=union_coverage([r.get("coverage", {"enabled": False}) for r in reports]),
        stats=_merge_stats([r["stats"] for r in reports]),
        timeline=_timeline(reports),
        workers_detail=_merge_workers([r.get("workers_detail") or {} for r in reports]),
        repro_errors=[e for r in reports for e in r.get("repro_errors", [])],
        merged_from=merged_from,
        **({"shards": shards} if shards else {}),
    )
    return Merged(report, repro_sources)


def _incomplete(inputs: list[tuple[str, dict[str, Any]]], examples: int, findings: list[Any]) -> str | None:
    """Why the merged campaign did not test what it was asked to: each incomplete input, by
    folder (one incomplete shard leaves the campaign incomplete), or that none tested anything."""
    reasons = [f"{folder}: {r['incomplete']}" for folder, r in inputs if r.get("incomplete")]
    if not reasons and not examples and not findings:
        reasons = ["the merged campaigns tested nothing"]
    return "; ".join(reasons) or None


def _keys(reports: list[dict[str, Any]]) -> list[str]:
    """Every top-level key of the reports, in first-seen order."""
    return list(dict.fromkeys(k for r in reports for k in r))


def _common(values: list[Any]) -> Any:
    """The value all inputs agree on, else the distinct values in input order."""
    distinct: list[Any] = []
    for v in values:
        if v not in distinct:
            distinct.append(v)
    return distinct[0] if len(distinct) == 1 else distinct


def _check_compatible(inputs: list[tuple[str, dict[str, Any]]]) -> None:
    (first, r0), *rest = inputs
    for folder, r in inputs:
        if r.get("command") == "gate":
            raise ReportError(f"{folder} is an fxfuzz gate report: fxfuzz merge takes fxfuzz run report folders")
    for folder, r in rest:
        for key in IDENTITY:
            a, b = _identity(r0, key), _identity(r, key)
            if a != b:
                raise ReportError(f"cannot merge {first} and {folder}: different {key} ({a} vs {b})")
        # The pass as each resolved it: the same spec may name another file's pass, or the same
        # contract name come from elsewhere.
        a, b = (pass_identity(x) for x in (r0, r))
        if a != b:
            raise ReportError(f"cannot merge {first} and {folder}: different pass ({_shown(a)} vs {_shown(b)})")


def _shown(identity: PassIdentity | None) -> str:
    if identity is None:
        return "not recorded"
    return f"{identity.target} held to {identity.contract} ({identity.contract_source})"


def _identity(report: dict[str, Any], key: str) -> Any:
    # A report without "level" is a graph-level one, one without "ops" drew no user operator;
    # one without python_version predates it.
    default = {"level": "graph", "ops": []}.get(key, "not recorded")
    return report.get(key, default)


def _sources(folder: str, report: dict[str, Any]) -> list[dict[str, Any]]:
    """The merged_from entries of one input: itself, or what it was merged from."""
    if isinstance(report.get("merged_from"), list):
        return report["merged_from"]
    return [{"path": folder, "shard": report.get("shard"), "seed": report.get("seed"), "examples": report["examples"]}]


def _shards(merged_from: list[dict[str, Any]]) -> list[str]:
    """The inputs' shards ("K/N") in order; refuses a shard given twice, shards of different
    splits and splits ``fxfuzz run --shard`` would refuse."""
    parsed = []
    for e in merged_from:
        if e.get("shard") is not None:
            try:
                parsed.append(parse_shard(e["shard"]))
            except UsageError as err:
                raise ReportError(f"malformed shard {reprlib.repr(e['shard'])} in {e['path']}: {err}") from None
    splits = sorted({n for _, n in parsed})
    if len(splits) > 1:
        raise ReportError(f"cannot merge shards of different splits: {splits[0]} and {splits[1]} shards")
    twice = sorted(s for s, times in Counter(parsed).items() if times > 1)
    if twice:
        raise ReportError(f"shard {twice[0][0]}/{twice[0][1]} is given twice: its counts would be added twice")
    return [f"{k}/{n}" for k, n in sorted(parsed)]


def missing_shards(report: dict[str, Any]) -> list[str]:
    """Shards of the merged report's split that none of its inputs was."""
    shards = report.get("shards") or []
    if not shards:
        return []
    n = int(shards[0].split("/")[1])
    return [f"{k}/{n}" for k in range(1, n + 1) if f"{k}/{n}" not in shards]


def _merge_findings(
    inputs: list[tuple[str, dict[str, Any]]],
) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]]]:
    seen: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for i, (_, r) in enumerate(inputs):
        for f in r["findings"]:
            seen.setdefault(f["id"], []).append((i, f))
    findings, sources = [], {}
    for bid, rows in seen.items():
        # The smallest example that has a repro; an example without a size counts as largest.
        i, best = min(
            rows,
            key=lambda row: (
                not row[1].get("repro"),
                row[1].get("graph_nodes") is None,
                row[1].get("graph_nodes") or 0,
                row[0],
            ),
        )
        known = all(f["known"] for _, f in rows)
        reason = next((f.get("known_reason") for _, f in rows if f.get("known_reason")), None)
        row = {
            **best,
            "count": sum(f["count"] for _, f in rows),
            "known": known,
            "known_reason": reason if known else None,
            "repro": f"repros/{repro_stem(bid)}.py" if best.get("repro") else None,
            "issue": None,  # set by sort_findings
        }
        if best.get("repro"):
            sources[bid] = (inputs[i][0], best["repro"])
        findings.append(row)
    return sort_findings(findings), sources


def _merge_stats(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """Counters summed; the per-level rates (summed too) derived again from the summed counters."""
    total: Counter = Counter()
    for s in stats:
        total.update(s)
    add_level_rates(total)
    return dict(sorted(total.items()))


def _timeline(reports: list[dict[str, Any]]) -> list[list[float]]:
    """The inputs' timelines end to end, as their durations add up: each shifted by the
    seconds and examples of the inputs before it."""
    out: list[list[float]] = []
    t0, n0 = 0.0, 0
    for r in reports:
        out += [[round(t + t0, 3), n + n0] for t, n in r.get("timeline", [])]
        t0, n0 = t0 + r["duration_s"], n0 + r["examples"]
    return out


def _merge_workers(details: list[dict[str, Any]]) -> dict[str, Any]:
    present = [d for d in details if d]
    merged: dict[str, Any] = {}
    for key in _keys(present):
        values = [d[key] for d in present if key in d]
        if key in _SUMMED:
            merged[key] = sum(values)
        elif key in _CONCATENATED:
            merged[key] = [v for vs in values for v in vs]
        elif key == "notes":  # a lost shared database is said once, however many shards lost it
            merged[key] = list(dict.fromkeys(v for vs in values for v in vs))
        else:
            merged[key] = _common(values)
    return merged


def write_merged(merged: Merged, folder: ReportFolder) -> Written:
    """The merged report folder: each kept repro (.py and, for graph cases, .json) copied from
    its input, then report.json, the issue texts, report.md, report.html and junit.xml, written into ``folder.work`` and moved into place. What could not be
    written, and why (a full disk), is listed: the rest is written all the same."""
    out_dir = folder.work
    unwritten: list[str] = []
    for f in merged.report["findings"]:
        if f["repro"]:
            shard_dir, repro = merged.repro_sources[f["id"]]
            for ext in (".py", ".json"):
                source = repro.removesuffix(".py") + ext
                # Checked again as it is copied: only files inside the input folder are.
                if inside_problem(shard_dir, source) is None:
                    target = os.path.join(out_dir, f["repro"].removesuffix(".py") + ext)
                    attempt(
                        unwritten,
                        os.path.relpath(target, out_dir),
                        functools.partial(_copy, os.path.join(shard_dir, source), target),
                    )
    return placed(folder, merged.report, unwritten + write_documents(merged.report, out_dir))


def _copy(source: str, target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(os.path.realpath(source), target)
