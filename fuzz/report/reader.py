"""Reading a report folder written by ``fxfuzz run`` or ``fxfuzz merge`` as untrusted input.

Shard report folders reach a merge as CI artifacts that anyone able to change a job's files
may have edited, so nothing in them is taken on trust: report.json is read only from inside
its folder and only up to ``MAX_FILE_BYTES``, nested no deeper than ``MAX_DEPTH``, every field
the merge or the renderers use is checked for its type and bounds, and a finding's repro is
taken only from where fxfuzz writes it (``repros/<bucket>.py`` of that folder, a regular file,
not a link out of it). A report that fails a check is a ReportError (one line, exit status 2);
a repro that fails one is dropped with a note in ``repro_errors``, its bucket still counted.
"""

from __future__ import annotations

import json
import math
import os
import re
import reprlib
from collections.abc import Callable
from typing import Any

from fxfuzz.core.choices import CONTRACT_NAMES
from fxfuzz.core.errors import ReportError
from fxfuzz.core.fileio import read_bounded, refusal
from fxfuzz.core.identity import PassIdentity
from fxfuzz.core.known import is_bucket_id
from fxfuzz.report.schema import Report
from fxfuzz.repro.files import repro_stem

# Far above any real report (a 45-minute nightly shard writes well under 1 MiB) and any real
# repro, far below what a merge could not hold in memory.
MAX_FILE_BYTES = 64 << 20
# A report nests about six deep (coverage -> files -> row -> missing_branches -> pair); a
# finding's details a few more.
MAX_DEPTH = 32
# Entries in any one list (findings, timeline samples, coverage rows and their lines).
MAX_ITEMS = 100_000
# Counts and seconds: 2**53 is where a float stops holding every integer (rates divide them).
MAX_COUNT = 2**53
MAX_SECONDS = 1e9
# Characters of a name a report records (the pass spec, a version, an oracle, a path): longer is
# no report fxfuzz wrote. Each issue text repeats the report's names, so they stay short.
MAX_NAME = 4096
# Characters of the free text a merge carries (a message, a reason, a note; the JSON of a
# finding's details) and of a finding's graph code: above real ones (torch's longest messages
# run to a few thousand characters, a minimized graph to a few hundred lines), far below what,
# quoted in every document, makes a merge slow and its output large. Longer text is cut, with a
# note saying how much.
MAX_TEXT = 10_000
MAX_CODE = 50_000
# Findings of one report: a real campaign has tens of buckets.
MAX_FINDINGS = 10_000

# Whether one value of a report field is acceptable.
Validator = Callable[[Any], bool]
# Paired surrogates decode to one character; any left is alone.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _int(v: Any) -> bool:
    # bool is an int to isinstance: a count of True is no count.
    return isinstance(v, int) and not isinstance(v, bool) and -MAX_COUNT <= v <= MAX_COUNT


def _count(v: Any) -> bool:
    return _int(v) and v >= 0


def _number(v: Any) -> bool:
    return _count(v) or (isinstance(v, float) and math.isfinite(v) and 0 <= v <= MAX_COUNT)


def _seconds(v: Any) -> bool:
    return _number(v) and v <= MAX_SECONDS


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _name(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= MAX_NAME


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, bool) or _int(v) or _number(v) or _name(v)


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _dict(v: Any) -> bool:
    return isinstance(v, dict)


def _optional(check: Validator) -> Validator:
    return lambda v: v is None or check(v)


def _either(*checks: Validator) -> Validator:
    return lambda v: any(c(v) for c in checks)


def _list(check: Validator) -> Validator:
    return lambda v: isinstance(v, list) and len(v) <= MAX_ITEMS and all(check(x) for x in v)


def _pair(first: Validator, second: Validator) -> Validator:
    return lambda v: isinstance(v, list) and len(v) == 2 and first(v[0]) and second(v[1])


def _values(check: Validator) -> Validator:
    return lambda v: isinstance(v, dict) and all(check(x) for x in v.values())


def _fields(required: dict[str, Validator], optional: dict[str, Validator] | None = None) -> Validator:
    """An object with every ``required`` field and any of the ``optional`` ones, each passing its
    check; other fields are not looked at."""
    optional = optional or {}

    def check(v: Any) -> bool:
        return (
            isinstance(v, dict)
            and all(k in v and c(v[k]) for k, c in required.items())
            and all(c(v[k]) for k, c in optional.items() if k in v)
        )

    return check


_SEED = _either(_optional(_int), _list(_optional(_int)))  # a merged report's seeds are a list
_RATIO = _fields({"covered": _optional(_count), "total": _count, "percent": _optional(_number)})
_COVERAGE_FILE = _fields(
    {
        "module": _name,
        "path": _name,
        "scope": _either(_name, _list(_name)),
        "lines": _RATIO,
        "branches": _RATIO,
        "missing_lines": _list(_count),
    },
    {"missing_branches": _optional(_list(_pair(_int, _int)))},
)
_COVERAGE = _either(
    _fields({"enabled": lambda v: v is False}),
    _fields({"enabled": lambda v: v is True, "error": _name}),
    _fields({"enabled": lambda v: v is True, "files": _list(_COVERAGE_FILE), "lines": _RATIO, "branches": _RATIO}),
)
# A run's settings (``CampaignSettings.report_form``) and database: names, numbers and lists of
# them, one level of objects (the database's).
_SETTING = _either(_scalar, _list(_scalar))
_SETTINGS = lambda v: _values(_either(_SETTING, _values(_SETTING)))(v) and all(_name(k) for k in v)  # noqa: E731
# The workers_detail fields a merge adds up or concatenates, and those that keep a common value.
WORKERS_DETAIL: dict[str, Validator] = {
    "restarts": _count, "unserializable_examples": _count, "excused_deaths": _count, "errors": _list(_str),
    "unrepeated_deaths": _list(_str), "internal_errors": _list(_str), "notes": _list(_str), "example_timeout_s": _optional(_seconds),
    "database": _either(_SETTING, _values(_SETTING)),
}  # fmt: skip


def _pass_identity(v: Any) -> bool:
    try:
        PassIdentity.from_data(v)
    except ValueError:
        return False
    return all(_name(x) for x in (v["spec"], v["target"], v["contract"], *v["eliminates"]))


_MERGED_FROM = _fields({"path": _name, "shard": _optional(_name), "seed": _SEED, "examples": _count})

# Every field a merge carries: those every report.json has, and those it may lack (a report
# written before they were recorded). Any other field is dropped as the report is read: nothing
# unchecked reaches the merged report or its documents.
REQUIRED: dict[str, Validator] = {
    "schema": _count, "tool": _name, "version": _name, "torch_version": _name, "pass": _name, "domain": _name,
    "contract": lambda v: v in CONTRACT_NAMES, "examples": _count, "duration_s": _seconds, "stopped_by": _name,
    "findings": lambda v: isinstance(v, list) and len(v) <= MAX_FINDINGS,
    "stats": lambda v: _values(_number)(v) and len(v) <= MAX_ITEMS and all(_name(k) for k in v),
}  # fmt: skip
OPTIONAL: dict[str, Validator] = {
    "python_version": _name, "ops": _list(_name), "level": _name, "device": _name, "command": _name, "started": _name,
    "contract_source": _name, "stage_share": _optional(_number), "program_share": _optional(_number),
    "max_shrink_s": _optional(_seconds), "settings": _SETTINGS,
    "seed": _SEED, "workers": _count, "shard": _optional(_name), "incomplete": _optional(_str),
    "repro_errors": _list(_str), "timeline": _list(_pair(_seconds, _count)), "coverage": _COVERAGE,
    "workers_detail": _optional(_fields({}, WORKERS_DETAIL)), "merged_from": _list(_MERGED_FROM),
    "identity": _optional(_pass_identity),
}  # fmt: skip
FINDING: dict[str, Validator] = {
    "id": is_bucket_id, "oracle": _name, "kind": _name, "message": _str, "details": _dict, "count": _count,
    "known": _bool, "known_reason": _optional(_str), "repro": _optional(_name), "graph_nodes": _optional(_count),
    "graph_hash": _optional(_name), "ambient_grad": _optional(_bool), "graph_code": _optional(_str),
}  # fmt: skip
FINDING_OPTIONAL: dict[str, Validator] = {
    "domain": _optional(_name), "example_bytes": _optional(_count), "example_digest": _optional(_name),
}  # fmt: skip


def read_report(folder: str) -> Report:
    """``folder``'s report.json, checked for every field a merge carries and holding only those,
    its free text cut to ``MAX_TEXT`` (graph code to ``MAX_CODE``) with a note. A finding whose
    repro is missing from the folder, or is anything but fxfuzz's ``repros/<bucket>.py`` there,
    keeps its counts, loses its repro and gets a note in ``repro_errors``."""
    path = os.path.join(folder, "report.json")
    problem = inside_problem(folder, "report.json")
    if problem == "is missing":
        raise ReportError(f"{folder}: no report.json (not a report folder written by fxfuzz run)")
    if problem:
        raise ReportError(f"{path} {problem}")
    report = _parse(path)
    if not isinstance(report, dict) or report.get("tool") != "fxfuzz":
        raise ReportError(f"{path}: not an fxfuzz report")
    _check_fields(path, report, REQUIRED, OPTIONAL)
    report = _only(report, REQUIRED, OPTIONAL)
    report["findings"] = [_finding(path, folder, f, report) for f in report["findings"]]
    if report.get("incomplete"):
        report["incomplete"] = cut(report["incomplete"])
    report["repro_errors"] = [cut(e) for e in report.get("repro_errors", [])]
    if report.get("workers_detail"):
        detail = _only(report["workers_detail"], {}, WORKERS_DETAIL)
        for key in ("errors", "unrepeated_deaths", "notes"):
            if key in detail:
                detail[key] = [cut(e) for e in detail[key]]
        report["workers_detail"] = detail
    return Report.from_data(report)


def _finding(path: str, folder: str, f: Any, report: dict[str, Any]) -> dict[str, Any]:
    """One finding of ``report``, checked, holding only the fields a merge carries, its text cut."""
    if not isinstance(f, dict):
        raise ReportError(f"{path}: a finding is not an object")
    _check_fields(f"{path}: finding {reprlib.repr(f.get('id', '?'))}", f, FINDING, FINDING_OPTIONAL)
    f = _only(f, FINDING, FINDING_OPTIONAL)
    problem = f["repro"] and _repro_problem(folder, f["id"], f["repro"])
    if problem:
        report.setdefault("repro_errors", []).append(f"no repro for {f['id']}: {problem}")
        f["repro"] = None
    f["message"] = cut(f["message"])
    if f["known_reason"] is not None:
        f["known_reason"] = cut(f["known_reason"])
    if f["graph_code"] is not None:
        f["graph_code"] = cut(f["graph_code"], MAX_CODE)
    size = len(json.dumps(f["details"]))
    if size > MAX_TEXT:  # kept: the grad mode an issue text states
        grad = (
            {"ambient_grad": f["details"]["ambient_grad"]} if isinstance(f["details"].get("ambient_grad"), bool) else {}
        )
        f["details"] = {"cut": f"details of {size} characters cut by fxfuzz merge", **grad}
    return f


def cut(text: str, limit: int = MAX_TEXT) -> str:
    """``text``, or its first ``limit`` characters and a note of how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} more characters cut by fxfuzz merge]"


def _only(data: dict[str, Any], *fields: dict[str, Validator]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if any(k in f for f in fields)}


def _parse(path: str) -> Any:
    def refuse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a number JSON allows")

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"{reprlib.repr(text)} is out of a float's range")
        return value

    try:
        data = read_bounded(path, MAX_FILE_BYTES)
    except OSError as e:  # RefusedFile too: swapped for a FIFO, a device or a larger file since inside_problem looked
        raise ReportError(f"{path}: {e.strerror or e}: not a report fxfuzz wrote") from None
    try:
        report = json.loads(data, parse_constant=refuse_constant, parse_float=finite)
    except RecursionError:
        raise ReportError(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # bad JSON, bad UTF-8, an integer of too many digits
        raise ReportError(f"{path}: not readable as JSON: {e}") from None
    _check_tree(path, report)
    return report


def _check_tree(path: str, value: Any) -> None:
    """Refuse ``value`` nested deeper than MAX_DEPTH, or holding a string no file can: a lone
    surrogate (``"\\ud800"`` in JSON) fails every write and print of it. Walked without
    recursion."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                raise ReportError(f"{path}: a string holds a lone UTF-16 surrogate: {reprlib.repr(v)}")
        elif isinstance(v, (dict, list)):
            if depth == MAX_DEPTH:
                raise ReportError(f"{path}: nested deeper than {MAX_DEPTH} levels")
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
            if isinstance(v, dict):
                stack.extend((k, depth + 1) for k in v)


def _check_fields(
    where: str, data: dict[str, Any], required: dict[str, Validator], optional: dict[str, Validator]
) -> None:
    for key, check in required.items():
        if key not in data or not check(data[key]):
            raise ReportError(f"{where}: missing or malformed field {key!r}")
    for key, check in optional.items():
        if key in data and not check(data[key]):
            raise ReportError(f"{where}: malformed field {key!r}")


def _repro_problem(folder: str, bucket: str, repro: str) -> str | None:
    """Why ``repro`` (a finding's field) is not a repro this merge may read, or None."""
    expected = f"repros/{repro_stem(bucket)}.py"
    if repro != expected:
        return f"its repro {reprlib.repr(repro)} is not {expected}, where fxfuzz writes it: refused"
    problem = inside_problem(folder, repro)
    return problem and f"{repro} {problem} (in {folder})"


def inside_problem(folder: str, relative: str) -> str | None:
    """Why ``folder/relative`` is not a regular file of at most MAX_FILE_BYTES inside
    ``folder`` (links resolved), or None when it is one. ``relative`` is fxfuzz's own
    ``report.json`` or ``repros/...`` name, never a report's text."""
    root = os.path.realpath(folder)
    real = os.path.realpath(os.path.join(root, relative))
    if os.path.commonpath([root, real]) != root:
        return "is a link out of its folder"
    try:
        st = os.stat(real)
    except OSError:
        return "is missing"
    problem = refusal(st, MAX_FILE_BYTES)  # a FIFO or device would block or never end
    return problem and f"is {problem}"
