"""report.html: one static page (no scripts, no external assets) a person reads."""

from __future__ import annotations

from html import escape
from typing import Any

from fxfuzz.report.limits import shown
from fxfuzz.report.schema import Report, ReportFinding

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:70em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left}
td.n{text-align:right}pre{background:#f6f8fa;padding:.8em;overflow:auto;font-size:12px}
.new{color:#b00;font-weight:bold}.known{color:#777}.bar{background:#4a8;height:.8em;display:inline-block}
"""


def _table(header: list[str], rows: list[list[Any]], numeric: set[int] = frozenset()) -> str:  # type: ignore[assignment]
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=n' if i in numeric else ''}>{c}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _rate_chart(timeline: list[list[float]]) -> str:
    """Examples per second between successive samples, as an inline SVG polyline."""
    rates = [(t1, (n1 - n0) / (t1 - t0)) for (t0, n0), (t1, n1) in zip(timeline, timeline[1:]) if t1 > t0]
    if len(rates) < 2:
        return "<p>Too short a campaign to chart.</p>"
    w, h = 640, 160
    t_max = max(t for t, _ in rates) or 1.0
    r_max = max(r for _, r in rates) or 1.0
    points = " ".join(f"{t / t_max * w:.1f},{h - r / r_max * h:.1f}" for t, r in rates)
    return (
        f'<svg width="{w + 60}" height="{h + 30}" viewBox="-50 -10 {w + 60} {h + 30}" role="img">'
        f'<polyline fill="none" stroke="#2a6" stroke-width="2" points="{points}"/>'
        f'<line x1="0" y1="{h}" x2="{w}" y2="{h}" stroke="#999"/><line x1="0" y1="0" x2="0" y2="{h}" stroke="#999"/>'
        f'<text x="-45" y="10" font-size="11">{r_max:.1f}/s</text><text x="-45" y="{h}" font-size="11">0</text>'
        f'<text x="{w - 40}" y="{h + 15}" font-size="11">{t_max:.0f} s</text></svg>'
    )


def _coverage(cov: dict[str, Any]) -> str:
    if not cov.get("enabled"):
        return "<p>Coverage was not measured (run with <code>--coverage</code>).</p>"
    if "error" in cov:
        return f"<p>Coverage could not be summarized: {escape(cov['error'])}</p>"

    def pct(r: dict[str, Any]) -> str:
        if r["percent"] is None:
            return "n/a"
        return f'<span class=bar style="width:{r["percent"] * 0.8:.0f}px"></span> {r["percent"]}% ({r["covered"]}/{r["total"]})'

    rows = [
        [
            f"<code>{escape(f['path'])}</code>",
            escape(", ".join(f["scope"]) if isinstance(f["scope"], list) else f["scope"]),
            pct(f["lines"]),
            pct(f["branches"]),
            escape(_ranges(f["missing_lines"])),
        ]
        for f in cov["files"]
    ]
    rows.append(["<b>total</b>", "", pct(cov["lines"]), pct(cov["branches"]), ""])
    return _table(["file", "scope", "lines", "branches", "lines never run"], rows)


def _ranges(lines: list[int]) -> str:
    """[1,2,3,7] -> '1-3, 7'."""
    out: list[str] = []
    for n in lines:
        if out and out[-1].split("-")[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ", ".join(out)


def _e(value: Any) -> str:
    """Any value a report holds as HTML text: a merged report's fields come from shard files."""
    return escape(str(value))


def _finding(f: ReportFinding) -> str:
    status = (
        f"<span class=known>known{': ' + escape(f.known_reason) if f.known_reason else ''}</span>"
        if f.known
        else "<span class=new>new</span>"
    )
    repro = f'<a href="{escape(f.repro)}">{escape(f.repro)}</a>' if f.repro else "none (no example saved)"
    issue = f' Issue text: <a href="{escape(f.issue)}">{escape(f.issue)}</a>.' if f.issue else ""
    code = f"<pre>{escape(f.graph_code)}</pre>" if f.graph_code else "<p>No example was saved for this bucket.</p>"
    return (
        f'<h3 id="{escape(f.id)}"><code>{escape(f.id)}</code> — {status}</h3>'
        f"<p>{escape(f.message)}</p>"
        f"<p>{_e(f.oracle)}/{_e(f.kind)}, seen {_e(f.count)}×, minimized to {_e(f.graph_nodes)} compute nodes, "
        f"ambient grad {_e(f.ambient_grad)}, graph hash <code>{_e(f.graph_hash)}</code>. Repro: {repro}.{issue}</p>{code}"
    )


def _incomplete(reason: str | None) -> str:
    return f"<p class=new>This run is incomplete: {escape(reason)}.</p>" if reason else ""


def _internal(errors: list[str]) -> str:
    return "".join(f"<p class=new>A worker died of fxfuzz's own error, not a finding: {escape(e)}.</p>" for e in errors)


def render_html(report: Report) -> str:
    """``report.json``'s content as one self-contained HTML page (no scripts, no external assets)."""
    findings, more = shown(report.findings)
    summary = _table(
        ["bucket", "oracle/kind", "count", "nodes", "status"],
        [
            [
                f'<a href="#{escape(f.id)}"><code>{escape(f.id)}</code></a>',
                escape(f"{f.oracle}/{f.kind}"),
                _e(f.count),
                _e(f.graph_nodes),
                "known" if f.known else "<span class=new>new</span>",
            ]
            for f in findings
        ],
        {2, 3},
    )
    stats = _table(["feature", "count"], [[_e(k), _e(v)] for k, v in report.stats.items()], {1})
    facts = (
        f"<p>Pass <code>{_e(report.run.pass_spec)}</code>, torch {_e(report.torch_version)}, "
        f"fxfuzz {_e(report.tool_version)}, domain {_e(report.run.domain)}, seed {_e(report.run.seed)}, "
        f"{_e(report.run.workers)} worker(s), started {_e(report.run.started)}.<br>"
        f"{report.examples} examples in {report.duration_s:.1f} s ({report.examples_per_s}/s), "
        f"stopped by {_e(report.stopped_by)}; {report.new_findings} new and "
        f"{len(report.findings) - report.new_findings} known finding bucket(s).</p>"
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>fxfuzz report: {escape(report.run.pass_spec)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>fxfuzz report</h1>{_incomplete(report.incomplete)}{_internal(report.internal_errors)}{facts}"
        f"<h2>Findings</h2>{summary if findings else '<p>No findings.</p>'}"
        + (f"<p>{escape(more)}.</p>" if more else "")
        + "".join(_finding(f) for f in findings)
        + f"<h2>Examples per second over time</h2>{_rate_chart(report.timeline)}"
        f"<h2>Coverage of the pass's source</h2>{_coverage(report.coverage)}"
        f"<h2>Feature statistics</h2>{stats}</body></html>\n"
    )
