"""report.json as typed data: ``Report`` (with its run metadata, ``RunInfo``, its findings,
``ReportFinding``, and its workers' account, ``WorkersDetail``), built from a campaign's result
by ``build_report`` alone, turned into report.json's JSON by ``Report.to_data`` and back by
``Report.from_data`` (which ``fxfuzz.report.reader`` calls once it has checked every field of a
report someone else may have written). The renderers, the summary, the merge and the repro
writer read these types, never report.json's keys.

A field that is None and marked ``absent`` is left out of report.json (a gate's ``candidate``
in a run's report, a field an older report lacks), so reports keep the keys they always had.
"""

from __future__ import annotations

import dataclasses
import platform
from dataclasses import dataclass, field
from typing import Any, Self

from fxfuzz.campaign.results import NO_EXAMPLE, Bucket, CampaignResult, Size
from fxfuzz.core.identity import PassIdentity
from fxfuzz.core.known import known_reason
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.report.limits import SHOWN
from fxfuzz.repro.files import repro_stem

REPORT_SCHEMA_VERSION = 2

# A field's metadata: its JSON key where that is not its name, and whether None leaves it out.
_PASS = {"key": "pass"}
_ABSENT: dict[str, Any] = {"absent": True}


def _to_data(value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        v = getattr(value, f.name)
        if f.metadata.get("absent") and v is None or f.metadata.get("transient"):
            continue
        out[f.metadata.get("key", f.name)] = v
    return out


def _from_data(cls: Any, data: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``cls`` from ``data``'s keys (fields it lacks keep their default)."""
    return {
        f.name: data[f.metadata.get("key", f.name)]
        for f in dataclasses.fields(cls)
        if f.metadata.get("key", f.name) in data
    }


class _Fields:
    """A dataclass written to report.json field by field, and read back from it."""

    def to_data(self) -> dict[str, Any]:
        return _to_data(self)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Self:
        return cls(**_from_data(cls, data))


@dataclass
class RunInfo(_Fields):
    """What was run, how, and when: the pass and what it was held to, the settings whole and the
    fields report.json has always had beside them (built once, ``RunInfo.of``). A merged
    report holds, where its inputs differ on a field that is not part of a campaign's identity,
    the list of their values."""

    # The pass under test and its contract (``contract_source``: ``given`` by --contract, or
    # the registry's or the default for a pass fxfuzz does not know).
    pass_spec: str = field(metadata=_PASS)
    contract: str
    contract_source: str | list[Any] | None = field(default=None, metadata=_ABSENT)
    command: str | None = field(default=None, metadata=_ABSENT)  # "gate"; absent: fxfuzz run
    candidate: str | None = field(default=None, metadata=_ABSENT)
    baseline: str | None = field(default=None, metadata=_ABSENT)
    ops: list[str] = field(default_factory=list)
    level: str | None = field(default=None, metadata=_ABSENT)
    program_share: float | list[Any] | None = field(default=None, metadata=_ABSENT)
    domain: str = "export"
    seed: Any = None  # a merged report's are a list
    shard: str | None = field(default=None, metadata=_ABSENT)
    workers: int = 1
    device: str | None = field(default=None, metadata=_ABSENT)
    stage_share: float | list[Any] | None = field(default=None, metadata=_ABSENT)
    max_shrink_s: float | list[Any] | None = field(default=None, metadata=_ABSENT)
    started: str = ""
    settings: dict[str, Any] | list[Any] | None = field(default=None, metadata=_ABSENT)

    @staticmethod
    def of(
        pass_spec: str,
        contract: str,
        contract_source: str,
        ops: list[str],
        settings: CampaignSettings,
        started: str,
        **more: Any,
    ) -> RunInfo:
        """The run metadata of a campaign of ``settings`` against ``pass_spec``; ``more``: a
        gate's ``command``, ``candidate`` and ``baseline``, or a ``level`` and its ``program_share``."""
        k, n = settings.shard
        return RunInfo(
            pass_spec,
            contract,
            contract_source,
            ops=ops,
            domain=settings.domain,
            seed=settings.seed,
            shard=f"{k}/{n}",
            workers=settings.workers,
            device=settings.device,
            stage_share=settings.stage_share,
            max_shrink_s=settings.max_shrink_s,
            started=started,
            settings=settings.report_form(),
            **more,
        )

    @property
    def given_contract(self) -> str | None:
        """The contract given by --contract (None: the pass's own or the default), which a
        repro replays under."""
        return self.contract if self.contract_source == "given" else None


@dataclass(kw_only=True)
class ReportFinding(_Fields):
    """One bucket as report.json lists it: its finding, counts, verdict against the baseline,
    repro and issue text, and what the report shows of its smallest example (``graph_nodes``
    and the rest are None for a bucket without one)."""

    id: str
    oracle: str
    kind: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    count: int
    known: bool = False
    known_reason: str | None = None
    repro: str | None = None  # the .py, relative to the report folder
    issue: str | None = None  # the issue text, relative to the report folder (new buckets the documents show)
    graph_nodes: int | None = None
    graph_hash: str | None = None
    ambient_grad: bool | None = None
    graph_code: str | None = None
    domain: str | None = None
    # The example's serialized bytes and their digest (``Size``); None in older reports.
    example_bytes: int | None = None
    example_digest: str | None = None
    # The report folder a merge read this row from (it copies the repro from there); never written.
    origin: str | None = field(default=None, compare=False, metadata={"transient": True})

    @staticmethod
    def of(b: Bucket, known: dict[str, str], repro: str | None) -> ReportFinding:
        reason = known_reason(known, b.id)
        row = ReportFinding(
            id=b.id,
            oracle=b.finding.oracle,
            kind=b.finding.kind,
            message=b.finding.message,
            details=b.finding.details,
            count=b.count,
            known=reason is not None,
            known_reason=reason,
            repro=repro,
        )
        example = b.example
        if example is not None:
            row.graph_nodes, row.graph_hash = example.size.nodes, example.graph_hash()
            row.ambient_grad, row.domain, row.graph_code = example.ambient_grad, example.domain, example.code
            row.example_bytes, row.example_digest = example.size.nbytes, example.size.digest
        return row

    @property
    def size(self) -> Size:
        """Its example's ``Size``: one without a repro cannot be replayed; one an older report
        recorded no bytes of counts as the largest of its compute nodes."""
        if self.graph_nodes is None:
            return NO_EXAMPLE
        nbytes = self.example_bytes if self.example_bytes is not None else NO_EXAMPLE.nbytes
        return Size(not self.repro, self.graph_nodes, nbytes, self.example_digest or "")

    def take(self, smaller: ReportFinding) -> None:
        """Show ``smaller``'s example, and the finding and repro that came with it (``Buckets``);
        the count and the verdict are the merge's."""
        for f in dataclasses.fields(self):
            if f.name not in ("id", "count", "known", "known_reason", "issue"):
                setattr(self, f.name, getattr(smaller, f.name))


@dataclass
class WorkersDetail(_Fields):
    """What the worker processes did besides judging examples (``CampaignResult.workers``),
    with the settings a reader of it needs; a field an older report lacks is None."""

    restarts: int | None = field(default=None, metadata=_ABSENT)
    unrepeated_deaths: list[str] | None = field(default=None, metadata=_ABSENT)
    errors: list[str] | None = field(default=None, metadata=_ABSENT)
    internal_errors: list[str] | None = field(default=None, metadata=_ABSENT)
    unserializable_examples: int | None = field(default=None, metadata=_ABSENT)
    excused_deaths: int | None = field(default=None, metadata=_ABSENT)
    example_timeout_s: float | list[Any] | None = field(default=None, metadata=_ABSENT)
    database: Any = field(default=None, metadata=_ABSENT)
    notes: list[str] | None = field(default=None, metadata=_ABSENT)


@dataclass
class Report:
    """One report.json. ``shards`` and ``merged_from`` are a merged report's; ``corpus_cases``
    and ``corpus_s`` a gate's."""

    tool_version: str = field(metadata={"key": "version"})
    torch_version: str
    run: RunInfo
    duration_s: float
    examples: int
    stopped_by: str
    findings: list[ReportFinding]
    stats: dict[str, Any]
    incomplete: str | None = None  # why the run did not test what it was asked to (written even when None)
    schema: int = REPORT_SCHEMA_VERSION
    tool: str = "fxfuzz"
    python_version: str | None = field(default=None, metadata=_ABSENT)
    coverage: dict[str, Any] = field(default_factory=lambda: {"enabled": False})
    timeline: list[list[float]] = field(default_factory=list)
    workers_detail: WorkersDetail = field(default_factory=WorkersDetail)
    repro_errors: list[str] = field(default_factory=list)
    corpus_cases: int | None = field(default=None, metadata=_ABSENT)
    corpus_s: float | None = field(default=None, metadata=_ABSENT)
    shards: list[str] | None = field(default=None, metadata=_ABSENT)
    merged_from: list[dict[str, Any]] | None = field(default=None, metadata=_ABSENT)
    # The pass as the campaign resolved it (fxfuzz.core.identity); None in a report written
    # before reports recorded it.
    identity: PassIdentity | None = None

    @property
    def examples_per_s(self) -> float:
        return round(self.examples / self.duration_s, 2) if self.duration_s else 0.0

    @property
    def new_findings(self) -> int:
        return sum(1 for f in self.findings if not f.known)

    @property
    def internal_errors(self) -> list[str]:
        """The errors of fxfuzz's own that the report's workers died of (none in older reports)."""
        return list(self.workers_detail.internal_errors or [])

    def to_data(self) -> dict[str, Any]:
        """report.json's content (see docs/ci.md's table of its fields)."""
        data = {
            "schema": self.schema,
            "tool": self.tool,
            "version": self.tool_version,
            "torch_version": self.torch_version,
            **({"python_version": self.python_version} if self.python_version is not None else {}),
            **self.run.to_data(),
            "identity": None if self.identity is None else self.identity.to_data(),
            "duration_s": round(self.duration_s, 3),
            "examples": self.examples,
            "examples_per_s": self.examples_per_s,
            "stopped_by": self.stopped_by,
            "incomplete": self.incomplete,
            "new_findings": self.new_findings,
            "findings": [f.to_data() for f in self.findings],
            "coverage": self.coverage,
            "stats": self.stats,
            "timeline": self.timeline,
            "workers_detail": self.workers_detail.to_data(),
            "repro_errors": self.repro_errors,
        }
        for name in ("corpus_cases", "corpus_s", "shards", "merged_from"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return data

    @staticmethod
    def from_data(data: dict[str, Any]) -> Report:
        """A report from report.json's content, checked already (``fxfuzz.report.reader``)."""
        rest = _from_data(
            Report, {k: v for k, v in data.items() if k not in ("findings", "workers_detail", "identity")}
        )
        identity = data.get("identity")
        return Report(
            **{**rest, "run": RunInfo.from_data(data)},
            identity=None if identity is None else PassIdentity.from_data(identity),
            findings=[ReportFinding.from_data(f) for f in data["findings"]],
            workers_detail=WorkersDetail.from_data(data.get("workers_detail") or {}),
        )


@dataclass
class Extras:
    """What a report adds to a campaign's result: the baseline (bucket id -> reason), repros
    (bucket id -> .py path relative to the report), coverage, the workers' notes as the user
    reads them, buckets whose repro could not be written and why, a gate's corpus (cases,
    seconds), and why the run did not test what it was asked to (nothing at all, or workers
    lost on the way), one line; None for a run whose verdict stands."""

    known: dict[str, str] = field(default_factory=dict)
    repros: dict[str, str] = field(default_factory=dict)
    coverage: dict[str, Any] = field(default_factory=lambda: {"enabled": False})
    notes: list[str] = field(default_factory=list)
    repro_errors: list[str] = field(default_factory=list)
    corpus: tuple[int, float] | None = None
    incomplete: str | None = None


def issue_path(bucket: str) -> str:
    """Where a bucket's issue text goes, relative to the report folder."""
    return f"issues/{repro_stem(bucket)}.md"


def sort_findings(findings: list[ReportFinding]) -> list[ReportFinding]:
    """Report order: new buckets first, then by count (most seen first), then by id; each new
    bucket the documents show (``limits.shown``) gets the path of its issue text."""
    ordered = sorted(findings, key=lambda f: (f.known, -f.count, f.id))
    for i, f in enumerate(ordered):
        f.issue = issue_path(f.id) if not f.known and i < SHOWN else None
    return ordered


def build_report(result: CampaignResult, run: RunInfo, settings: CampaignSettings, extras: Extras) -> Report:
    """The report of ``result`` (a campaign of ``settings``, run as ``run`` says): the one
    place a report is made from a campaign."""
    import torch
    from fxfuzz import __version__

    w = result.workers
    return Report(
        __version__,
        torch.__version__,
        run,
        result.duration_s,
        result.examples,
        result.stopped_by,
        sort_findings([ReportFinding.of(b, extras.known, extras.repros.get(b.id)) for b in result.buckets.values()]),
        dict(sorted(result.stats.items())),
        incomplete=extras.incomplete,
        python_version=platform.python_version(),
        coverage=extras.coverage,
        timeline=[list(p) for p in result.timeline],
        workers_detail=WorkersDetail(
            w.restarts,
            w.unrepeated_deaths,
            w.errors,
            w.internal_errors,
            w.unserializable,
            w.excused_deaths,
            settings.example_timeout_s,
            settings.report_form()["db"],
            extras.notes,
        ),
        repro_errors=extras.repro_errors,
        corpus_cases=extras.corpus[0] if extras.corpus is not None else None,
        corpus_s=round(extras.corpus[1], 3) if extras.corpus is not None else None,
        identity=settings.identity,
    )
