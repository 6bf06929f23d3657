"""One report from many report folders (shards of a campaign, or campaigns of the same pass
under the same versions): counts summed, buckets deduplicated, the smallest example kept (by
``Size``, as a campaign keeps its buckets' examples: ``Buckets``).

``merge_reports`` is a pure function over typed reports; ``load_inputs`` reads and checks the
folders (as untrusted input: ``fxfuzz.report.reader``), ``write_merged`` writes the merged folder with the same documents ``fxfuzz run``
writes. Anything that cannot be merged raises ``ReportError`` (one line, exit status 2).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import reprlib
import shutil
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fxfuzz.campaign.coverage import union_coverage
from fxfuzz.campaign.levels import add_level_rates
from fxfuzz.campaign.results import Buckets
from fxfuzz.core.errors import ReportError, UsageError
from fxfuzz.core.identity import PassIdentity
from fxfuzz.core.shards import parse_shard
from fxfuzz.report.folder import ReportFolder, Written, attempt, placed, write_documents
from fxfuzz.report.reader import inside_problem, read_report
from fxfuzz.report.schema import Report, ReportFinding, RunInfo, WorkersDetail, sort_findings
from fxfuzz.repro.files import repro_stem

# The RunInfo fields merge_reports computes itself; every other one keeps its common value.
_COMPUTED_RUN = ("seed", "workers", "started", "shard")
# WorkersDetail fields that add up over campaigns, and those that are lists to concatenate;
# any other field keeps its common value.
_SUMMED = ("restarts", "unserializable_examples", "excused_deaths")
_CONCATENATED = ("errors", "unrepeated_deaths", "internal_errors")


@dataclass
class Merged:
    """The merged report and, per bucket with a repro, the input folder and the .py there
    (relative to it) that it keeps."""

    report: Report
    repro_sources: dict[str, tuple[str, str]] = field(default_factory=dict)


def load_inputs(folders: list[str], out_dir: str) -> list[tuple[str, Report]]:
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


def merge_reports(inputs: list[tuple[str, Report]]) -> Merged:
    """One report from (folder, report) pairs of one campaign's parts. Examples, durations,
    workers and statistics add up (rates are derived again); buckets are deduplicated by id,
    counts summed, each keeping its smallest example (one with a repro before one without); a
    bucket is known only when every input that saw it lists it as known."""
    if not inputs:
        raise ReportError("no report folders to merge")
    reports = [r for _, r in inputs]
    _check_compatible(inputs)
    merged_from = [entry for folder, r in inputs for entry in _sources(folder, r)]
    shards = _shards(merged_from)
    findings, repro_sources = _merge_findings(inputs)
    examples = sum(r.examples for r in reports)
    duration = sum(r.duration_s for r in reports)
    reasons = [r.stopped_by for r in reports]
    runs = [r.run for r in reports]
    run = RunInfo(
        **{
            f.name: _common([getattr(info, f.name) for info in runs])
            for f in dataclasses.fields(RunInfo)
            if f.name not in _COMPUTED_RUN
        },
        seed=_common([info.seed for info in runs]),
        workers=sum(info.workers for info in runs),
        started=min((info.started for info in runs if info.started), default=""),
    )
    report = Report(
        _common([r.tool_version for r in reports]),
        _common([r.torch_version for r in reports]),
        run,
        round(duration, 3),
        examples,
        # Interrupted anywhere: the merged campaign did not run its course.
        next((s for s in ("interrupted", "internal_error", "workers_lost", "budget") if s in reasons), reasons[0]),
        findings,
        _merge_stats([r.stats for r in reports]),
        incomplete=_incomplete(inputs, examples, findings),
        schema=_common([r.schema for r in reports]),
        tool=_common([r.tool for r in reports]),
        python_version=_common([r.python_version for r in reports]),
        coverage=union_coverage([r.coverage for r in reports]),
        timeline=_timeline(reports),
        workers_detail=_merge_workers([r.workers_detail for r in reports]),
        repro_errors=[e for r in reports for e in r.repro_errors],
        shards=shards or None,
        merged_from=merged_from,
        identity=reports[0].identity,  # the same in every input (_check_compatible)
    )
    return Merged(report, repro_sources)


def _incomplete(inputs: list[tuple[str, Report]], examples: int, findings: list[Any]) -> str | None:
    """Why the merged campaign did not test what it was asked to: each incomplete input, by
    folder (one incomplete shard leaves the campaign incomplete), or that none tested anything."""
    reasons = [f"{folder}: {r.incomplete}" for folder, r in inputs if r.incomplete]
    if not reasons and not examples and not findings:
        reasons = ["the merged campaigns tested nothing"]
    return "; ".join(reasons) or None


def _common(values: list[Any]) -> Any:
    """The value all inputs agree on, else the distinct values in input order."""
    distinct: list[Any] = []
    for v in values:
        if v not in distinct:
            distinct.append(v)
    return distinct[0] if len(distinct) == 1 else distinct


def _identity(r: Report) -> dict[str, Any]:
    """What makes two reports parts of one campaign: they must agree on all of these. A report
    without a level is a graph-level one, one without ops drew no user operator; one without
    python_version or device predates it."""
    return {
        "tool": r.tool,
        "schema": r.schema,
        "version": r.tool_version,
        "torch_version": r.torch_version,
        "python_version": r.python_version or "not recorded",
        "pass": r.run.pass_spec,
        "contract": r.run.contract,
        "ops": r.run.ops,
        "level": r.run.level or "graph",
        "domain": r.run.domain,
        "device": r.run.device or "not recorded",
    }


def _check_compatible(inputs: list[tuple[str, Report]]) -> None:
    (first, r0), *rest = inputs
    for folder, r in inputs:
        if r.run.command == "gate":
            raise ReportError(f"{folder} is an fxfuzz gate report: fxfuzz merge takes fxfuzz run report folders")
    for folder, r in rest:
        for (key, a), b in zip(_identity(r0).items(), _identity(r).values()):
            if a != b:
                raise ReportError(f"cannot merge {first} and {folder}: different {key} ({a} vs {b})")
        # The pass as each resolved it: the same spec may name another file's pass, or the same
        # contract name come from elsewhere.
        a, b = r0.identity, r.identity
        if a != b:
            raise ReportError(f"cannot merge {first} and {folder}: different pass ({_shown(a)} vs {_shown(b)})")


def _shown(identity: PassIdentity | None) -> str:
    if identity is None:
        return "not recorded"
    return f"{identity.target} held to {identity.contract} ({identity.contract_source})"


def _sources(folder: str, report: Report) -> list[dict[str, Any]]:
    """The merged_from entries of one input: itself, or what it was merged from."""
    if report.merged_from is not None:
        return report.merged_from
    return [{"path": folder, "shard": report.run.shard, "seed": report.run.seed, "examples": report.examples}]


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


def missing_shards(report: Report) -> list[str]:
    """Shards of the merged report's split that none of its inputs was."""
    shards = report.shards or []
    if not shards:
        return []
    n = int(shards[0].split("/")[1])
    return [f"{k}/{n}" for k in range(1, n + 1) if f"{k}/{n}" not in shards]


def _merge_findings(inputs: list[tuple[str, Report]]) -> tuple[list[ReportFinding], dict[str, tuple[str, str]]]:
    rows: Buckets[ReportFinding] = Buckets()
    known: dict[str, bool] = {}
    reasons: dict[str, str | None] = {}
    for folder, r in inputs:
        for f in r.findings:
            known[f.id] = known.get(f.id, True) and f.known
            reasons[f.id] = reasons.get(f.id) or f.known_reason
            rows.add(dataclasses.replace(f, origin=folder))  # a copy: the merge adds to it
    findings, sources = [], {}
    for bid, row in rows.items():
        row.known = known[bid]
        row.known_reason = reasons[bid] if row.known else None
        row.issue = None  # set by sort_findings
        if row.repro and row.origin is not None:
            sources[bid] = (row.origin, row.repro)
        row.repro = f"repros/{repro_stem(bid)}.py" if bid in sources else None
        findings.append(row)
    return sort_findings(findings), sources


def _merge_stats(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """Counters summed; the per-level rates (summed too) derived again from the summed counters."""
    total: Counter = Counter()
    for s in stats:
        total.update(s)
    add_level_rates(total)
    return dict(sorted(total.items()))


def _timeline(reports: list[Report]) -> list[list[float]]:
    """The inputs' timelines end to end, as their durations add up: each shifted by the
    seconds and examples of the inputs before it."""
    out: list[list[float]] = []
    t0, n0 = 0.0, 0
    for r in reports:
        out += [[round(t + t0, 3), n + n0] for t, n in r.timeline]
        t0, n0 = t0 + r.duration_s, n0 + r.examples
    return out


def _merge_workers(details: list[WorkersDetail]) -> WorkersDetail:
    merged: dict[str, Any] = {}
    for f in dataclasses.fields(WorkersDetail):
        values = [getattr(d, f.name) for d in details if getattr(d, f.name) is not None]
        if not values:
            continue
        if f.name in _SUMMED:
            merged[f.name] = sum(values)
        elif f.name in _CONCATENATED:
            merged[f.name] = [v for vs in values for v in vs]
        elif f.name == "notes":  # a lost shared database is said once, however many shards lost it
            merged[f.name] = list(dict.fromkeys(v for vs in values for v in vs))
        else:
            merged[f.name] = _common(values)
    return WorkersDetail(**merged)


def write_merged(merged: Merged, folder: ReportFolder) -> Written:
    """The merged report folder: each kept repro (.py and, for graph cases, .json) copied from
    its input, then report.json, the issue texts, report.md, report.html and junit.xml, written into ``folder.work`` and moved into place. What could not be
    written, and why (a full disk), is listed: the rest is written all the same."""
    out_dir = folder.work
    unwritten: list[str] = []
    for f in merged.report.findings:
        if f.repro:
            shard_dir, repro = merged.repro_sources[f.id]
            for ext in (".py", ".json"):
                source = repro.removesuffix(".py") + ext
                # Checked again as it is copied: only files inside the input folder are.
                if inside_problem(shard_dir, source) is None:
                    target = os.path.join(out_dir, f.repro.removesuffix(".py") + ext)
                    attempt(
                        unwritten,
                        os.path.relpath(target, out_dir),
                        functools.partial(_copy, os.path.join(shard_dir, source), target),
                    )
    return placed(folder, merged.report, unwritten + write_documents(merged.report, out_dir))


def _copy(source: str, target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(os.path.realpath(source), target)
