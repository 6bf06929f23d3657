"""report.md: what a person reads on a pull request (sized for a comment)."""

from __future__ import annotations

from typing import Any


def percent(r: dict[str, Any]) -> str:
    return "n/a" if r.get("percent") is None else f"{r['percent']}% ({r['covered']}/{r['total']})"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    """report.md: verdict, run facts, the findings table and pass coverage."""
    new = report["new_findings"]
    known = len(report["findings"]) - new
    verdict = f"**{new} new finding(s)**" if new else "**no new findings**"
    if report.get("incomplete"):  # red, and first: no finding count makes this run green
        verdict = f"❌ **{report['incomplete']}**" + (f", {new} new finding(s)" if new else "")
    lines = [
        f"## fxfuzz: {verdict} against `{report['pass']}`",
        "",
        f"{report['examples']} examples in {report['duration_s']:.0f}s ({report['examples_per_s']}/s) "
        f"on {report['workers']} worker(s), domain `{report['domain']}`, seed {report['seed']}, "
        f"torch {report['torch_version']}, stopped by {report['stopped_by']}."
        + (f" {known} known finding(s) still seen." if known else "")
        + (
            f" Held to the `{report['contract']}` contract, the default for a pass fxfuzz does not know."
            if report.get("contract_source") == "default"
            else ""
        ),
        "",
    ]
    if report["findings"]:
        lines += [
            "| bucket | oracle/kind | count | nodes | known | message | repro |",
            "| --- | --- | ---: | ---: | --- | --- | --- |",
        ]
        for f in report["findings"]:
            nodes = f["graph_nodes"] if f["graph_nodes"] is not None else "–"
            repro = f"`{f['repro']}`" if f["repro"] else "–"
            status = "yes" if f["known"] else "**new**" + (f" ([issue]({f['issue']}))" if f.get("issue") else "")
            lines.append(
                f"| `{f['id']}` | {f['oracle']}/{f['kind']} | {f['count']} | {nodes} "
                f"| {status} | {_cell(f['message'])} | {repro} |"
            )
        lines.append("")
        first = next((f for f in report["findings"] if not f["known"] and f["graph_code"]), None)
        if first:
            lines += [
                f"<details><summary>Minimized graph of <code>{first['id']}</code></summary>",
                "",
                "```python",
                first["graph_code"],
                "```",
                "</details>",
                "",
            ]
    cov = report.get("coverage", {})
    if cov.get("enabled") and "lines" in cov:
        lines.append(f"Pass coverage: lines {percent(cov['lines'])}, branches {percent(cov['branches'])}.")
        lines.append("")
    lines.append(
        "Full report: `report.html`; repros run with `python repros/<bucket>.py` or `fxfuzz repro`; "
        "each new bucket has an issue text to file upstream in `issues/<bucket>.md`."
    )
    return "\n".join(lines) + "\n"
