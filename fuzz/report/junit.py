"""junit.xml for CI test reporting: one test case per finding bucket, plus the campaign."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from fxfuzz.report.limits import shown
from fxfuzz.report.markdown import first_line
from fxfuzz.report.schema import Report

# Characters XML 1.0 cannot hold even escaped (most control characters): an exception message
# may carry them, and one would leave the whole file unreadable to CI.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _x(value: Any) -> str:
    """Any value a report holds as XML text (ElementTree escapes markup, not these)."""
    return _NOT_XML.sub("\ufffd", str(value))


def render_junit(report: Report) -> str:
    """New findings are failures, known ones skipped; the campaign is one more case, an error
    when the run was incomplete (it tested nothing, or lost its workers), and one for each
    error of fxfuzz's own a worker died of. Findings past those shown (``limits.shown``) are one
    case more, a failure when any of them is new."""
    findings, more = shown(report.findings)
    rest = report.findings[len(findings) :]
    incomplete = report.incomplete
    internal = report.internal_errors
    failures = sum(1 for f in findings if not f.known) + any(not f.known for f in rest)
    cases = len(findings) + bool(more)
    suite = ET.Element(
        "testsuite",
        name=_x(f"fxfuzz {report.run.pass_spec}"),
        tests=str(cases + 1),
        failures=str(failures),
        errors=str(int(bool(incomplete)) + len(internal)),
        skipped=str(cases - failures),
        time=str(report.duration_s),
        timestamp=_x(report.run.started),
    )
    campaign = ET.SubElement(
        suite, "testcase", classname="fxfuzz.campaign", name="campaign", time=str(report.duration_s)
    )
    ET.SubElement(campaign, "system-out").text = _x(
        f"{report.examples} examples, {report.examples_per_s}/s, stopped by {report.stopped_by}"
    )
    if incomplete:
        ET.SubElement(campaign, "error", message=_x(incomplete), type="fxfuzz/incomplete").text = _x(incomplete)
    for error in internal:
        ET.SubElement(campaign, "error", message=_x(error), type="fxfuzz/internal_error").text = _x(error)
    for f in findings:
        case = ET.SubElement(suite, "testcase", classname=_x(f"fxfuzz.{f.oracle}"), name=_x(f.id), time="0")
        body = f"{f.message}\nseen {f.count} time(s); repro: {f.repro or 'none'}\n\n{f.graph_code or ''}"
        if f.known:
            ET.SubElement(case, "skipped", message=_x(f"known finding: {first_line(f.known_reason or f.message, 300)}"))
        else:
            ET.SubElement(
                case, "failure", message=_x(first_line(f.message, 300)), type=_x(f"{f.oracle}/{f.kind}")
            ).text = _x(body)
    if more:
        case = ET.SubElement(suite, "testcase", classname="fxfuzz.campaign", name="more findings", time="0")
        ET.SubElement(case, "failure" if any(not f.known for f in rest) else "skipped", message=more)
    suites = ET.Element("testsuites")
    suites.append(suite)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
