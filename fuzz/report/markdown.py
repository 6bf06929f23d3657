"""report.md: what a person reads on a pull request (sized for a comment).

Every text a report quotes (messages and exceptions of the pass under test, fields of a merged
shard report) is escaped: it renders as the characters it holds, never as markdown or HTML.
"""

from __future__ import annotations

import re
from typing import Any

from fxfuzz.report.limits import shown
from fxfuzz.report.schema import Report

# What could make quoted text markup: code spans, emphasis, links and images, HTML tags and
# entities, table cells' pipes, and the backslash that escapes them. Underscores stay as they
# are, for the raw text's sake: inside a word (value_mismatch) they are no markup, elsewhere
# they can only italicize.
_MARKUP = re.compile(r"([\\`*\[\]<>|&])")


def percent(r: dict[str, Any]) -> str:
    return "n/a" if r.get("percent") is None else f"{r['percent']}% ({r['covered']}/{r['total']})"


def text(value: Any) -> str:
    """``value`` as one line of markdown that renders as the characters it holds: markup
    characters backslash-escaped, line breaks as spaces (also safe in a table cell)."""
    return _MARKUP.sub(r"\\\1", " ".join(str(value).split()))


def first_line(message: str, width: int = 120) -> str:
    """The first line of ``message``, cut to ``width`` characters: a title, a table cell."""
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def code(value: Any) -> str:
    """``value`` as one inline code span, delimited by more backticks than it holds in a row
    (in a table cell, pass it through ``cell``)."""
    line = " ".join(str(value).split())
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", line)), default=0) + 1)
    return f"{ticks} {line} {ticks}" if "`" in line else f"{ticks}{line}{ticks}"


def cell(span: str) -> str:
    """A ``code`` span as a table cell: a table splits its cells at pipes before it reads code
    spans, so those inside one are escaped too (``text`` escapes its own)."""
    return span.replace("|", "\\|")


def fenced(value: str, lang: str = "") -> str:
    """``value`` as a fenced code block longer than any run of backticks in it, so it cannot
    close the block."""
    longest = max((len(m) for m in re.findall(r"`+", value)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{value.rstrip()}\n{fence}"


def render_markdown(report: Report) -> str:
    """report.md: verdict, run facts, the findings table and pass coverage."""
    new = report.new_findings
    known = len(report.findings) - new
    verdict = f"**{new} new finding(s)**" if new else "**no new findings**"
    if report.incomplete:  # red, and first: no finding count makes this run green
        verdict = f"❌ **{text(report.incomplete)}**" + (f", {new} new finding(s)" if new else "")
    internal = report.internal_errors
    if internal:  # fxfuzz's own bug: never green, never a finding
        verdict = f"❌ **{len(internal)} worker(s) died of an error of fxfuzz's own ({text(internal[0])})**" + (
            f", {new} new finding(s)" if new else ""
        )
    lines = [
        f"## fxfuzz: {verdict} against {code(report.run.pass_spec)}",
        "",
        f"{report.examples} examples in {report.duration_s:.0f}s ({report.examples_per_s}/s) "
        f"on {report.run.workers} worker(s), domain {code(report.run.domain)}, seed {text(report.run.seed)}, "
        f"torch {text(report.torch_version)}, stopped by {text(report.stopped_by)}."
        + (f" {known} known finding(s) still seen." if known else "")
        + (
            f" Held to the {code(report.run.contract)} contract, the default for a pass fxfuzz does not know."
            if report.run.contract_source == "default"
            else ""
        ),
        "",
    ]
    findings, more = shown(report.findings)
    if findings:
        lines += [
            "| bucket | oracle/kind | count | nodes | known | message | repro |",
            "| --- | --- | ---: | ---: | --- | --- | --- |",
        ]
        for f in findings:
            nodes = f.graph_nodes if f.graph_nodes is not None else "–"
            repro = code(f.repro) if f.repro else "–"
            status = "yes" if f.known else "**new**" + (f" ([issue]({f.issue}))" if f.issue else "")
            lines.append(
                f"| {cell(code(f.id))} | {text(f.oracle)}/{text(f.kind)} | {f.count} | {nodes} "
                f"| {status} | {text(first_line(f.message, 300))} | {cell(repro)} |"
            )
        lines += ["", *([f"{more}.", ""] if more else [])]
        first = next(((f.id, f.graph_code) for f in findings if not f.known and f.graph_code), None)
        if first:
            lines += [
                f"<details><summary>Minimized graph of <code>{first[0]}</code></summary>",
                "",
                fenced(first[1], "python"),
                "</details>",
                "",
            ]
    cov = report.coverage
    if cov.get("enabled") and "lines" in cov:
        lines.append(f"Pass coverage: lines {percent(cov['lines'])}, branches {percent(cov['branches'])}.")
        lines.append("")
    lines.append(
        "Full report: `report.html`; repros run with `python repros/<bucket>.py` or `fxfuzz repro`; "
        "each new bucket has an issue text to file upstream in `issues/<bucket>.md`."
    )
    return "\n".join(lines) + "\n"
