"""The report folder: known-findings baseline, report.json fields, markdown, HTML, JUnit."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest
from fxfuzz.cli.main import main
from fxfuzz.core.errors import KnownFileError
from fxfuzz.core.known import load_known
from fxfuzz.report.html import render_html
from fxfuzz.report.junit import render_junit
from fxfuzz.report.markdown import render_markdown
from fxfuzz.report.schema import Report
from handmade import report_with
from paths import HELPERS

CRASHER = "def crasher(gm, sig):\n    raise ValueError('planted')\n"

SCHEMA = {
    "tool",
    "version",
    "torch_version",
    "pass",
    "domain",
    "seed",
    "workers",
    "started",
    "duration_s",
    "examples",
    "examples_per_s",
    "findings",
    "coverage",
    "stats",
}
FINDING = {"id", "oracle", "kind", "message", "count", "known", "repro", "graph_nodes"}


def test_known_file_forms(tmp_path):
    text = tmp_path / "known.txt"
    text.write_text("# accepted\ncrash-pass_raised-0123abcd  upstream issue 1\n\nstructure-lint-99 \n")
    assert load_known(str(text)) == {"crash-pass_raised-0123abcd": "upstream issue 1", "structure-lint-99": ""}
    text.write_text("crash-pass_raised-0123abcd\tupstream issue 1\nstructure-lint-99\t\t# tabs separate too\n")
    assert load_known(str(text)) == {"crash-pass_raised-0123abcd": "upstream issue 1", "structure-lint-99": ""}
    listed = tmp_path / "known.json"
    listed.write_text('{"known": [{"id": "a-b-1", "reason": "r"}, {"id": "c-d-2"}]}')
    assert load_known(str(listed)) == {"a-b-1": "r", "c-d-2": ""}
    report = tmp_path / "report.json"
    report.write_text('{"findings": [{"id": "x-y-3", "count": 2}]}')
    assert load_known(str(report)) == {"x-y-3": ""}
    for bad in ("crash/pass?raised reason\n", '{"known": 3}', "{oops"):
        (tmp_path / "bad").write_text(bad)
        with pytest.raises(KnownFileError):
            load_known(str(tmp_path / "bad"))


def test_every_bucket_id_fxfuzz_makes_can_be_listed_as_known(tmp_path):
    from fxfuzz.campaign.engine import bucket_id
    from fxfuzz.oracles import Finding

    ids = [
        bucket_id(Finding("equivalence", "value_mismatch", "m")),
        bucket_id(Finding("equivalence", "cuda:value_mismatch", "m")),
        bucket_id(Finding("gradients", "cpu_vs_cuda:grad_value_mismatch", "m")),
        bucket_id(Finding("crash", "pass_raised", "m", {"exception": "KeyError", "frame": "torch/x.py:1:f"})),
        "program-" + bucket_id(Finding("equivalence", "requires_grad_mismatch", "m")),
    ]
    text = tmp_path / "known.txt"
    text.write_text("".join(f"{i} reason\n" for i in ids))
    assert load_known(str(text)) == {i: "reason" for i in ids}


@pytest.mark.processes
def test_known_findings_keep_the_campaign_green_but_are_reported(tmp_path, capsys):
    pass_file = tmp_path / "crasher.py"
    pass_file.write_text(CRASHER)
    run = [
        "run",
        "--pass",
        f"{pass_file}:crasher",
        "--max-examples",
        "3",
        "--budget",
        "120",
        "--no-db",
        "--workers",
        "1",
    ]
    assert main([*run, "--coverage", "--report-dir", str(tmp_path / "first")]) == 1
    first = json.loads((tmp_path / "first" / "report.json").read_text())
    assert SCHEMA <= first.keys() and first["workers"] == 1 and first["examples"] == 3
    # The pass file's own coverage, its module-level def included (measured from before import).
    (measured,) = first["coverage"]["files"]
    assert measured["path"].endswith("crasher.py") and measured["lines"] == {"covered": 2, "total": 2, "percent": 100.0}
    (finding,) = first["findings"]
    assert FINDING <= finding.keys() and finding["known"] is False and finding["count"] == 3
    assert (tmp_path / "first" / finding["repro"]).is_file()

    # The previous report as the baseline: same bucket, now known, exit status 0.
    known = tmp_path / "known.txt"
    known.write_text(f"{finding['id']} accepted for this test\n")
    assert main([*run, "--known", str(known), "--report-dir", str(tmp_path / "second")]) == 0
    second = json.loads((tmp_path / "second" / "report.json").read_text())
    assert [(f["id"], f["known"], f["count"]) for f in second["findings"]] == [(finding["id"], True, 3)]
    assert second["new_findings"] == 0
    assert "(known)" in capsys.readouterr().out


def test_unreadable_baseline_is_one_line_exit_2(tmp_path, capsys):
    assert main(["run", "--known", str(tmp_path / "missing.txt"), "--max-examples", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fxfuzz: error:") and len(err.strip().splitlines()) == 1


def _finding(bid, known):
    return {
        "id": bid,
        "oracle": "equivalence",
        "kind": "value_mismatch",
        "message": "output 0 <differs> | x",
        "count": 2,
        "known": known,
        "known_reason": "r" if known else None,
        "repro": f"repros/{bid}.py",
        "graph_nodes": 3,
        "graph_hash": "h",
        "ambient_grad": True,
        "graph_code": "def forward(self, x):\n    return (x,)",
    }


def test_renderers_show_new_and_known_findings():
    report = Report.from_data(report_with([_finding("new-1", False), _finding("old-2", True)]))
    suite = ET.fromstring(render_junit(report)).find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["new-1"].find("failure") is not None and cases["old-2"].find("skipped") is not None

    md = render_markdown(report)
    assert "**1 new finding(s)**" in md and "`new-1`" in md and "\\|" in md and "def forward" in md

    html = render_html(report)
    assert "&lt;differs&gt;" in html and "<svg" in html and "3-5, 9" in html and 'id="old-2"' in html


def test_clean_report_renders_green():
    report = Report.from_data(report_with([]))
    assert "**no new findings**" in render_markdown(report)
    suite = ET.fromstring(render_junit(report)).find("testsuite")
    assert suite.get("failures") == "0" and len(list(suite.iter("testcase"))) == 1
    assert "No findings." in render_html(report)


BRANCHY = "def pick(x):\n    if x:\n        return 1\n    return 2\n"


def test_coverage_merges_the_workers_data_files(tmp_path):
    """Two workers each took one side of a branch: combined, both sides are covered."""
    import coverage
    from fxfuzz.campaign.coverage import Target, summarize

    src = tmp_path / "branchy.py"
    src.write_text(BRANCHY)
    files = []
    for i, arg in enumerate((True, False)):
        data = str(tmp_path / f".coverage.w{i}")
        cov = coverage.Coverage(data_file=data, branch=True, include=[str(src)])
        cov.start()
        namespace: dict = {}
        exec(compile(BRANCHY, str(src), "exec"), namespace)
        namespace["pick"](arg)
        cov.stop()
        cov.save()
        files.append(data)
    one = summarize(files[:1], [Target("branchy", str(src))])
    both = summarize(files, [Target("branchy", str(src))])
    assert one["branches"]["percent"] == 50.0 and one["lines"]["covered"] == 3
    assert both["branches"] == {"covered": 2, "total": 2, "percent": 100.0} and both["lines"]["percent"] == 100.0
    # What each missed, by branch, so that fxfuzz merge can unite campaigns' coverage.
    (row,) = one["files"]
    assert len(row["missing_branches"]) == 1 and both["files"][0]["missing_branches"] == []


def _tree(root):
    """Every file and folder under ``root`` with its bytes (None for a folder)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


@pytest.mark.processes
def test_a_second_run_into_a_report_folder_refuses_and_leaves_the_first_report(tmp_path, refused, capsys):
    """``fxfuzz run --report-dir reports`` twice in a row: the first run's report stands as
    written ("report written" stays true), the second refuses in one line (exit 2) before any
    work, and nothing in the folder, the user's files included, is removed or changed."""
    out = tmp_path / "r"
    crashes = os.path.join(HELPERS, "broken_passes.py") + ":crashes"
    assert (
        main(["run", "--pass", crashes, "--max-examples", "2", "--workers", "2", "--no-db", "--report-dir", str(out)])
        == 1
    )
    assert os.listdir(out / "repros") and os.listdir(out / "issues")  # the crash's .py, .json and issue text
    assert {"worker0.log", "worker1.log"} <= set(os.listdir(out / "logs"))
    (out / "notes.txt").write_text("the user's")
    before = _tree(tmp_path)
    capsys.readouterr()

    line = refused(
        ["run", "--pass", "identity", "--max-examples", "1", "--workers", "1", "--no-db", "--report-dir", str(out)]
    )
    assert f"--report-dir: {out} is not empty" in line
    assert _tree(tmp_path) == before  # not even a work folder beside it is left


def test_a_report_is_written_beside_its_folder_and_moved_into_place(tmp_path):
    from fxfuzz.report.folder import place, report_folder

    target = tmp_path / "reports" / "r"
    folder = report_folder(str(target))
    # Beside the target (one rename, same file system), as a folder made by hand would be.
    assert os.path.dirname(folder.work) == str(target.parent) and not target.exists()
    (tmp_path / "by_hand").mkdir()
    assert oct(os.stat(folder.work).st_mode) == oct(os.stat(tmp_path / "by_hand").st_mode)
    (tmp_path / "reports" / "x").mkdir()
    with open(os.path.join(folder.work, "report.json"), "w") as fh:
        fh.write("{}")
    assert (
        place(folder) is None
        and sorted(os.listdir(tmp_path / "reports")) == ["r", "x"]
        and os.listdir(target) == ["report.json"]
    )
    # An existing empty folder (one CI made with mkdir -p) takes the report too.
    empty = tmp_path / "empty"
    empty.mkdir()
    folder = report_folder(str(empty))
    assert place(folder) is None and not os.path.exists(folder.work) and empty.is_dir()


def test_a_report_folder_filled_meanwhile_keeps_both_reports(tmp_path):
    """Two campaigns started into the same new folder: the one that ends first places its
    report; the other finds the folder filled, replaces nothing and says where its report is."""
    from fxfuzz.report.folder import place, report_folder

    target = tmp_path / "r"
    first, second = report_folder(str(target)), report_folder(str(target))
    for folder, name in ((first, "first"), (second, "second")):
        with open(os.path.join(folder.work, "report.json"), "w") as fh:
            fh.write(name)
    assert place(first) is None
    problem = place(second)
    assert problem is not None and str(target) in problem and second.work in problem
    assert (target / "report.json").read_text() == "first"
    assert open(os.path.join(second.work, "report.json")).read() == "second"


@pytest.mark.processes
def test_a_run_whose_folder_was_filled_meanwhile_exits_4_and_names_where_its_report_is(tmp_path, monkeypatch, capsys):
    from fxfuzz.cli import run as run_cli

    out = tmp_path / "r"
    write_all = run_cli.write_all

    def other_run_first(result, run, settings, folder, extras):  # another campaign into --report-dir ends first
        out.mkdir()
        (out / "report.json").write_text("the other run's")
        return write_all(result, run, settings, folder, extras)

    monkeypatch.setattr(run_cli, "write_all", other_run_first)
    assert (
        main(
            ["run", "--pass", "identity", "--max-examples", "1", "--workers", "1", "--no-db", "--report-dir", str(out)]
        )
        == 4
    )
    captured = capsys.readouterr()
    (line,) = [x for x in captured.err.splitlines() if x.startswith("fxfuzz: error:")]
    (work,) = [p for p in tmp_path.iterdir() if p.name.startswith("r.fxfuzz-")]
    assert f"this report is in {work}" in line and "report written" not in captured.out
    assert (out / "report.json").read_text() == "the other run's" and os.listdir(out) == ["report.json"]
    assert json.loads((work / "report.json").read_text())["examples"] == 1


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_report_dir_that_is_a_file_or_holds_anything_is_refused(tmp_path, kind, refused):
    out = tmp_path / "r"
    if kind == "file":
        out.write_text("x")
    else:
        out.mkdir()
        (out / ".fxfuzz-files").write_text("notes/todo.txt\n")
    before = _tree(tmp_path)
    line = refused(["run", "--pass", "identity", "--max-examples", "1", "--no-db", "--report-dir", str(out)])
    assert str(out) in line and ("is not a directory" if kind == "file" else "is not empty") in line
    assert _tree(tmp_path) == before
