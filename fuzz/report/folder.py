"""Write a campaign's report folder: report.json (the stable, documented schema), repros/,
issues/ (an upstream-ready issue text per new bucket), report.md, report.html and junit.xml."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from fxfuzz.campaign.results import Bucket, CampaignResult
from fxfuzz.campaign.store import PROGRAM_FORM
from fxfuzz.core.errors import SerializeError, UsageError
from fxfuzz.core.identity import PassIdentity
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.report.html import render_html
from fxfuzz.report.issue import render_issue
from fxfuzz.report.junit import render_junit
from fxfuzz.report.markdown import render_markdown
from fxfuzz.report.schema import Extras, Report, ReportFinding, RunInfo, build_report
from fxfuzz.repro.files import repro_document, repro_stem, write_program_repro, write_repro
from fxfuzz.repro.short import is_short


def default_report_dir(root: str = "reports") -> str:
    """A fresh folder under ``root`` named by the UTC time."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return os.path.join(root, stamp)


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second, as reports stamp it."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class ReportFolder:
    """Where a report goes (``target``, the ``--report-dir``) and the fresh folder beside it,
    on the same file system, that the run writes into (worker logs, repros, documents) until
    ``place`` renames it to ``target`` whole. Nothing already in a folder is ever removed or
    replaced: ``target`` must be new or empty when the run starts, and a run that finds it
    filled when it ends (another run into the same folder) keeps its report in ``work``."""

    target: str
    work: str

    def final(self, text: str) -> str:
        """``text`` (a note naming a file of the run, such as a worker log) naming it where
        ``place`` puts it."""
        return text.replace(self.work, self.target)


def report_folder(target: str, option: str = "--report-dir") -> ReportFolder:
    """A ReportFolder for ``target``, its work folder created: UsageError (one line, exit 2)
    when ``target`` is a file or holds anything, or nothing can be created beside it."""
    target = os.path.normpath(target)
    if os.path.lexists(target) and not os.path.isdir(target):
        raise UsageError(f"{option}: {target} is not a directory")
    try:
        if os.path.isdir(target):
            with os.scandir(target) as entries:
                held = any(entries)
        else:
            held = False
    except OSError as e:
        raise UsageError(f"{option}: cannot read {target}: {e.strerror or e}") from None
    if held:
        raise UsageError(
            f"{option}: {target} is not empty (an earlier report?): fxfuzz writes a report only into a new or "
            "empty folder and never replaces one; name another folder, or remove this one first"
        )
    parent = os.path.dirname(os.path.abspath(target))
    try:
        os.makedirs(parent, exist_ok=True)
        work = tempfile.mkdtemp(prefix=os.path.basename(os.path.abspath(target)) + ".fxfuzz-", dir=parent)
        os.chmod(work, 0o777 & ~_umask())  # as a folder made by hand would be, not mkdtemp's 0700
    except OSError as e:
        raise UsageError(f"{option}: cannot create a folder in {parent}: {e.strerror or e}") from None
    return ReportFolder(target, work)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def place(folder: ReportFolder) -> str | None:
    """Rename ``folder.work`` to ``folder.target`` (which rename(2) does only while the target
    is missing or empty); None once done, else why not, as ``Written.unwritten`` lists it: the
    report then stays whole in ``folder.work``."""
    try:
        os.rename(folder.work, folder.target)
    except OSError as e:
        return (
            f"{folder.target} ({e.strerror or e}: another run wrote there meanwhile?); this report is in {folder.work}"
        )
    return None


@dataclass
class Written:
    """A report as written: its report.json content, each file that could not be written
    (``"report.md: No space left on device"``; the others were) and the folder it is in."""

    report: Report
    unwritten: list[str]
    where: str


def placed(folder: ReportFolder, report: Report, unwritten: list[str]) -> Written:
    """The report written into ``folder.work``, moved to its target (``place``)."""
    problem = place(folder)
    return Written(report, unwritten + ([problem] if problem else []), folder.work if problem else folder.target)


def attempt(unwritten: list[str], name: str, write: Callable[[], object]) -> bool:
    """``write()``; an OSError (a full disk, a folder gone read-only) is noted in ``unwritten``
    under ``name`` instead of raised, so the writing goes on with the next file."""
    try:
        write()
        return True
    except OSError as e:
        unwritten.append(_failure(name, e))
        return False


def _failure(name: str, e: OSError) -> str:
    return f"{name}: {e.strerror or e}"


def _write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    try:
        # Quoted exception text may hold what UTF-8 cannot (a lone surrogate): kept, escaped.
        with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
        os.replace(tmp, path)  # never leave a half-written file behind
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def write_repros(
    result: CampaignResult, report_dir: str, identity: PassIdentity, device: str = "cpu"
) -> tuple[dict[str, str], list[str], list[str]]:
    """``repros/<bucket>.py`` (and ``.json`` for graph cases) for every bucket with an example,
    against the pass ``identity`` as it was held: bucket id -> .py path relative to
    ``report_dir``, why any bucket got none, and the repros that could not be written (as
    ``attempt`` lists them)."""
    directory = os.path.join(report_dir, "repros")
    out: dict[str, str] = {}
    errors: list[str] = []
    unwritten: list[str] = []
    for b in result.buckets.values():
        try:
            path = _write_repro(b, directory, identity, device)
        except SerializeError as e:  # the finding is still reported, without a .py
            errors.append(f"no repro for {b.id}: {e}")
            continue
        except OSError as e:  # named as the write names it: the .json fails before the .py
            failed = (
                os.path.relpath(e.filename, report_dir)
                if isinstance(e.filename, str)
                else f"repros/{repro_stem(b.id)}.py"
            )
            unwritten.append(_failure(failed, e))
            errors.append(f"no repro for {b.id}: {unwritten[-1]}")
            continue
        if path is not None:
            out[b.id] = os.path.relpath(path, report_dir)
    return out, errors, unwritten


def _write_repro(b: Bucket, directory: str, identity: PassIdentity, device: str) -> str | None:
    """The repro of one bucket, its .py path; None for a bucket without a serialized example."""
    data = b.example.data() if b.example is not None else None
    if data is None:
        return None
    if b.example is not None and b.example.level == "program":
        return write_program_repro(directory, b.id, str(b.finding), PROGRAM_FORM.from_data(data))
    return write_repro(directory, repro_document(b.id, b.finding.to_dict(), data, identity, device))


def write_documents(report: Report, report_dir: str) -> list[str]:
    """Everything a report folder holds besides its repros (which must be in place: the issue
    texts quote them): report.json first, so the findings are saved whatever fails later, then
    ``issues/<bucket>.md`` for each new bucket, report.md, report.html and junit.xml. Returns
    what could not be written (``attempt``): each file is tried whatever failed before it."""
    unwritten: list[str] = []

    def write(name: str, render: Callable[[], str]) -> None:
        attempt(unwritten, name, lambda: _write_atomic(os.path.join(report_dir, name), render()))

    write("report.json", lambda: json.dumps(report.to_data(), indent=2, default=str))
    for f in report.findings:
        if f.issue:
            write(f.issue, functools.partial(_issue_text, report, report_dir, f))
    write("report.md", lambda: render_markdown(report))
    write("report.html", lambda: render_html(report))
    write("junit.xml", lambda: render_junit(report))
    return unwritten


def _issue_text(report: Report, report_dir: str, finding: ReportFinding) -> str:
    os.makedirs(os.path.join(report_dir, "issues"), exist_ok=True)
    source = short = None
    if finding.repro:
        with open(os.path.join(report_dir, finding.repro), encoding="utf-8", errors="replace") as fh:
            source = fh.read()
        if is_short(source):
            source, short = None, source
    return render_issue(report, finding, source, short)


def write_all(
    result: CampaignResult, run: RunInfo, settings: CampaignSettings, folder: ReportFolder, extras: Extras
) -> Written:
    """Repros first (the report links them: against the pass of ``settings.identity``), then the report (``build_report``) and its
    documents (``write_documents``), into ``folder.work``, then the folder moved into place;
    what cannot be written (a full disk) is listed, and the rest written all the same."""
    extras.repros, extras.repro_errors, repros_unwritten = write_repros(
        result, folder.work, settings.pass_identity(), settings.device or "cpu"
    )
    report = build_report(result, run, settings, extras)
    return placed(folder, report, repros_unwritten + write_documents(report, folder.work))
