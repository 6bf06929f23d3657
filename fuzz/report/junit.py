"""junit.xml for CI test reporting: one test case per finding bucket, plus the campaign."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any


def render_junit(report: dict[str, Any]) -> str:
    """New findings are failures, known ones skipped; the campaign is one more case, an error
    when the run was incomplete (it tested nothing, or lost its workers)."""
    findings = report["findings"]
    incomplete = report.get("incomplete")
    suite = ET.Element(
        "testsuite",
        name=f"fxfuzz {report['pass']}",
        tests=str(len(findings) + 1),
        failures=str(report["new_findings"]),
        errors=str(int(bool(incomplete))),
        skipped=str(len(findings) - report["new_findings"]),
        time=str(report["duration_s"]),
        timestamp=str(report.get("started", "")),
    )
    campaign = ET.SubElement(suite, "testcase", classname="fxfuzz.campaign", name="campaign", time=str(report["duration_s"]))
    ET.SubElement(campaign, "system-out").text = (
        f"{report['examples']} examples, {report['examples_per_s']}/s, stopped by {report['stopped_by']}"
    )
    if incomplete:
        ET.SubElement(campaign, "error", message=incomplete, type="fxfuzz/incomplete").text = incomplete
    for f in findings:
        case = ET.SubElement(suite, "testcase", classname=f"fxfuzz.{f['oracle']}", name=f["id"], time="0")
        body = f"{f['message']}\nseen {f['count']} time(s); repro: {f['repro'] or 'none'}\n\n{f['graph_code'] or ''}"
        if f["known"]:
            ET.SubElement(case, "skipped", message=f"known finding: {f['known_reason'] or f['message']}")
        else:
            ET.SubElement(case, "failure", message=f["message"], type=f"{f['oracle']}/{f['kind']}").text = body
    suites = ET.Element("testsuites")
    suites.append(suite)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
