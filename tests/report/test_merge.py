"""fxfuzz merge: one report from many report folders, and the issue texts of new buckets.

Hand-made report dicts pin the merge rules; two small real campaigns (the session fixture
``shard_campaigns``) pin the command end to end.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import xml.etree.ElementTree as ET

import pytest
from fxfuzz.campaign.coverage import union_coverage
from fxfuzz.cli.main import main
from fxfuzz.core.errors import ReportError
from fxfuzz.report.folder import write_documents
from fxfuzz.report.issue import expected_behaviour, render_issue
from fxfuzz.report.merge import merge_reports, missing_shards, read_report
from fxfuzz.report.schema import Report, ReportFinding

# The shard campaigns (a session fixture) are built once, in one xdist worker (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("shard_campaigns")


def _row(bid, nodes, *, known=False, count=1, repro=True):
    return {
        "id": bid, "oracle": "equivalence", "kind": "value_mismatch", "message": f"{bid}: output 0 differs",
        "details": {"where": "output 0"}, "count": count, "known": known, "known_reason": "accepted" if known else None,
        "repro": f"repros/{bid}.py" if repro else None, "graph_nodes": nodes, "graph_hash": "h", "ambient_grad": True,
        "domain": "export", "graph_code": "def forward(self, x):\n    return (x,)", "issue": None,
    }  # fmt: skip


def _merge(inputs):
    """``merge_reports`` of (folder, report.json content) pairs."""
    return merge_reports([(folder, Report.from_data(data)) for folder, data in inputs])


def _report(findings, **changes):
    report = {
        "schema": 2, "tool": "fxfuzz", "version": "0.1.0", "torch_version": "2.13.0", "python_version": "3.11.0",
        "pass": "p", "contract": "meaning", "domain": "export", "seed": 0, "workers": 2, "device": "cpu", "started": "2026-01-02T00:00:00+00:00",
        "duration_s": 10.0, "examples": 40, "examples_per_s": 4.0, "stopped_by": "budget",
        "new_findings": sum(not f["known"] for f in findings), "findings": findings, "coverage": {"enabled": False},
        "stats": {"op:sin": 3, "level:graph:examples": 40, "level:graph:duration_ms": 10000, "level:graph:examples_per_s": 4.0},
        "timeline": [[0.0, 0], [10.0, 40]],
        "workers_detail": {"restarts": 1, "errors": ["worker 0 died"], "unserializable_examples": 0,
                           "example_timeout_s": 60.0, "database": "db"},
        "repro_errors": [],
    }  # fmt: skip
    report.update(changes)
    return report


def test_counts_add_up_and_rates_are_derived_again():
    a = _report([_row("x", 5, count=2), _row("y", 2)], shard="1/3", seed=1)
    b = _report(
        [_row("x", 3, count=4)], shard="3/3", seed=2, examples=20, duration_s=30.0, stopped_by="interrupted",
        started="2026-01-01T00:00:00+00:00", stats={"op:sin": 1, "op:cos": 2, "level:graph:examples": 20,
        "level:graph:duration_ms": 30000, "level:graph:examples_per_s": 0.67}, timeline=[[0.0, 0], [30.0, 20]],
        workers_detail={"restarts": 2, "errors": ["worker 1 died"], "unserializable_examples": 1,
                        "example_timeout_s": 60.0, "database": "db"},
    )  # fmt: skip
    merged = _merge([("A", a), ("B", b)])
    r = merged.report.to_data()
    assert (r["examples"], r["duration_s"], r["examples_per_s"], r["workers"]) == (60, 40.0, 1.5, 4)
    assert r["stopped_by"] == "interrupted" and r["started"] == "2026-01-01T00:00:00+00:00"
    assert r["seed"] == [1, 2] and r["pass"] == "p" and r["torch_version"] == "2.13.0"
    # Counters add up; the per-level rate is derived from them, not summed (4.0 + 0.67).
    assert r["stats"] == {"level:graph:duration_ms": 40000, "level:graph:examples": 60,
                          "level:graph:examples_per_s": 1.5, "op:cos": 2, "op:sin": 4}  # fmt: skip
    assert r["workers_detail"] == {"restarts": 3, "errors": ["worker 0 died", "worker 1 died"],
                                   "unserializable_examples": 1, "example_timeout_s": 60.0, "database": "db"}  # fmt: skip
    # The inputs laid end to end, as their durations add up.
    assert r["timeline"] == [[0.0, 0], [10.0, 40], [10.0, 40], [40.0, 60]]
    assert r["merged_from"] == [{"path": "A", "shard": "1/3", "seed": 1, "examples": 40},
                                {"path": "B", "shard": "3/3", "seed": 2, "examples": 20}]  # fmt: skip
    assert r["shards"] == ["1/3", "3/3"] and "shard" not in r and missing_shards(merged.report) == ["2/3"]
    # One row per bucket: counts summed, the smallest example kept with its repro.
    rows = {f["id"]: f for f in r["findings"]}
    assert [f["id"] for f in r["findings"]] == ["x", "y"] and r["new_findings"] == 2
    assert (rows["x"]["count"], rows["x"]["graph_nodes"], rows["x"]["repro"]) == (6, 3, "repros/x.py")
    assert merged.repro_sources == {"x": ("B", "repros/x.py"), "y": ("A", "repros/y.py")}
    assert rows["x"]["issue"] == "issues/x.md"


def test_the_smallest_example_with_a_repro_is_kept():
    merged = _merge([("A", _report([_row("x", 2, repro=False)])), ("B", _report([_row("x", 7)]))])
    (row,) = merged.report.to_data()["findings"]
    assert row["graph_nodes"] == 7 and merged.repro_sources == {"x": ("B", "repros/x.py")}


def test_a_bucket_is_known_only_when_every_input_that_saw_it_knows_it():
    merged = _merge(
        [("A", _report([_row("x", 1, known=True), _row("y", 1, known=True)])), ("B", _report([_row("x", 1)]))]
    )
    rows = {f["id"]: f for f in merged.report.to_data()["findings"]}
    assert (rows["x"]["known"], rows["x"]["known_reason"], rows["x"]["issue"]) == (False, None, "issues/x.md")
    assert (rows["y"]["known"], rows["y"]["known_reason"], rows["y"]["issue"]) == (True, "accepted", None)
    assert merged.report.new_findings == 1


@pytest.mark.parametrize(
    "key, value",
    [("pass", "q"), ("version", "0.2.0"), ("torch_version", "2.12.0"), ("schema", 3), ("python_version", "3.12.1"),
     ("level", "program"), ("domain", "adversarial"), ("device", "cuda")],
)  # fmt: skip
def test_reports_of_different_campaigns_are_refused(key, value):
    with pytest.raises(ReportError, match=f"cannot merge A and B: different {key}"):
        _merge([("A", _report([])), ("B", _report([], **{key: value}))])


@pytest.mark.parametrize(
    "changes, needle",
    [
        ([{"command": "gate"}, {"command": "gate"}], "gate report"),
        ([{"shard": "1/2"}, {"shard": "1/2"}], "shard 1/2 is given twice"),
        ([{"shard": "1/2"}, {"shard": "2/3"}], "different splits"),
        ([{"shard": "1/2"}, {"shard": "half"}], "malformed shard"),
    ],
)
def test_folders_that_would_double_count_or_mix_splits_are_refused(changes, needle):
    with pytest.raises(ReportError, match=needle):
        _merge([(name, _report([], **c)) for name, c in zip("AB", changes)])


def test_unreadable_report_folders_are_refused(tmp_path):
    with pytest.raises(ReportError, match="no report.json"):
        read_report(str(tmp_path))
    (tmp_path / "report.json").write_text("{oops")
    with pytest.raises(ReportError, match="not readable as JSON"):
        read_report(str(tmp_path))
    for broken, field in [
        ({"findings": 3}, "findings"),
        ({"examples": True}, "examples"),
        ({"findings": [{**_row("x", 1), "count": "2"}]}, "count"),
    ]:
        (tmp_path / "report.json").write_text(json.dumps({**_report([]), **broken}))
        with pytest.raises(ReportError, match=f"malformed field '{field}'"):
            read_report(str(tmp_path))
    # A repro file gone from the folder: the bucket is kept, its repro dropped, and said so.
    (tmp_path / "report.json").write_text(json.dumps(_report([_row("x", 1)])))
    report = read_report(str(tmp_path))
    assert report.findings[0].repro is None and "repros/x.py is missing" in report.repro_errors[0]


def _cov(missing_lines, missing_branches, branches_total=4):
    lines = {"covered": 10 - len(missing_lines), "total": 10, "percent": None}
    branches = {"covered": None, "total": branches_total, "percent": None}
    row = {"module": "m", "path": "m.py", "scope": "whole file", "lines": lines, "branches": branches,
           "missing_lines": missing_lines, "missing_branches": missing_branches}  # fmt: skip
    return {"enabled": True, "files": [row], "lines": lines, "branches": branches}


def test_coverage_of_merged_campaigns_is_the_union_of_what_each_reached():
    union = union_coverage([_cov([1, 2, 3], [[4, 5], [6, -1]]), {"enabled": False}, _cov([2, 3, 9], [[6, -1]])])
    (row,) = union["files"]
    assert row["missing_lines"] == [2, 3] and row["lines"] == {"covered": 8, "total": 10, "percent": 80.0}
    assert row["missing_branches"] == [[6, -1]] and union["branches"] == {"covered": 3, "total": 4, "percent": 75.0}
    # A summary without missing_branches (written before they were recorded): branches unknown.
    old = _cov([1], None)
    assert union_coverage([old, _cov([1], [])])["branches"] == {"covered": None, "total": 4, "percent": None}
    assert union_coverage([{"enabled": False}, old]) is old


def test_expected_behaviour_per_oracle_and_kind_family():
    assert "computes what the original computes" in expected_behaviour("equivalence", "value_mismatch")
    assert expected_behaviour("equivalence", "cuda:value_mismatch").endswith("This holds on CUDA as on CPU.")
    assert "on CUDA as on CPU (within" in expected_behaviour("equivalence", "cpu_vs_cuda:value_mismatch")
    assert "without raising, killing the process or hanging" in expected_behaviour("crash", "process_died")
    assert "`torch.export` exports this module" in expected_behaviour("crash", "export_raised")
    assert "`ep.module()`" in expected_behaviour("equivalence", "e2e_value_mismatch")
    assert "baseline pass passes" in expected_behaviour("structure", "vs_baseline_lint_failed")
    assert expected_behaviour("novel", "thing") == "The pass's output passes fxfuzz's `novel` check."


def test_issue_text_of_a_program_finding_without_a_repro():
    # A program-level finding records the grad mode that showed it in its details.
    row = {**_row("program-x", 4, repro=False), "ambient_grad": True, "details": {"ambient_grad": False, "level": "program"},
           "message": "first line\nsecond line", "graph_code": "x = 1  # ```"}  # fmt: skip
    text = render_issue(Report.from_data(_report([row])), ReportFinding.from_data(row), None)
    assert (
        text.startswith("# p: equivalence/value_mismatch: first line\n") and "| ambient grad mode | disabled |" in text
    )
    # The fence outlasts the backticks inside the code, and with no .py the graph stands alone.
    assert (
        "````python\nx = 1  # ```\n````" in text
        and "No standalone repro script" in text
        and "## How to run" not in text
    )


# ------------------------------------------------------------------ real campaigns


def _load(folder):
    return json.loads((folder / "report.json").read_text())


def test_the_shard_campaign_tests_share_one_worker(request):
    """--dist loadgroup sends every test of the group to one worker, which builds the shard
    campaigns once. pytest 9.2 with pytest-xdist 3.8 drops the group without a word
    (pytest-dev/pytest-xdist#1386) and both workers built them (constraints.txt pins pytest)."""
    if not hasattr(request.config, "workerinput") or not request.config.getvalue("loadgroup"):
        pytest.skip("only under pytest-xdist with --dist loadgroup")
    assert request.node.nodeid.endswith("@shard_campaigns"), request.node.nodeid


@pytest.mark.processes
def test_a_run_folder_holds_an_issue_text_per_new_bucket(shard_campaigns):
    a, _, known_id = shard_campaigns
    report = _load(a)
    assert report["python_version"] == platform.python_version()
    # --max-shrink-s 0 reached the worker: its new buckets kept their first examples.
    assert report["max_shrink_s"] == 0 and "shrink_attempts" not in report["stats"]
    rows = {f["id"]: f for f in report["findings"]}
    assert rows[known_id]["known"] and any(not f["known"] for f in rows.values())
    assert sorted(p.name for p in (a / "issues").iterdir()) == sorted(
        f"{b}.md" for b, f in rows.items() if not f["known"]
    )
    for f in rows.values():
        if f["known"]:
            assert f["issue"] is None
            continue
        text = (a / f["issue"]).read_text()
        assert text.startswith(
            f"# {report['pass']}: {f['oracle']}/{f['kind']}: {f['message'][:40]}"
        )  # long ones are cut
        assert report["torch_version"] in text and f"| Python | {platform.python_version()} |" in text
        assert (a / f["repro"]).read_text().rstrip() in text and f"fxfuzz repro {f['repro']}" in text
        assert expected_behaviour(f["oracle"], f["kind"]) in text and f"`{f['id']}`" in text
        assert f"([issue]({f['issue']}))" in (a / "report.md").read_text()


@pytest.mark.processes
def test_merge_of_two_real_campaigns(shard_campaigns, tmp_path, capsys):
    a, b, known_id = shard_campaigns
    out = tmp_path / "merged"
    assert main(["merge", str(a), str(b), "--report-dir", str(out)]) == 1
    ra, rb, merged = _load(a), _load(b), _load(out)
    assert merged["examples"] == ra["examples"] + rb["examples"] == 60
    assert merged["duration_s"] == pytest.approx(ra["duration_s"] + rb["duration_s"], abs=0.01)
    assert merged["seed"] == 7 and sorted(merged["shards"]) == ["1/2", "2/2"]
    assert [e["path"] for e in merged["merged_from"]] == [str(a), str(b)]
    inputs = {}
    for folder, r in ((a, ra), (b, rb)):
        for f in r["findings"]:
            inputs.setdefault(f["id"], []).append((folder, f))
    rows = {f["id"]: f for f in merged["findings"]}
    assert rows.keys() == inputs.keys()
    for bid, seen in inputs.items():
        row = rows[bid]
        assert row["count"] == sum(f["count"] for _, f in seen)
        assert row["known"] == all(f["known"] for _, f in seen)
        folder, smallest = min(seen, key=lambda s: s[1]["graph_nodes"])
        assert row["graph_nodes"] == smallest["graph_nodes"]
        assert (out / row["repro"]).read_text() == (folder / smallest["repro"]).read_text()
        assert (out / row["repro"]).with_suffix(".json").is_file()
    # Both campaigns saw the saved-tensors bucket and list it as known: the merge keeps it known.
    assert len(inputs) >= 2 and rows[known_id]["known"] and merged["new_findings"] >= 1
    new = [f for f in merged["findings"] if not f["known"]]
    assert merged["new_findings"] == len(new)
    assert sorted(p.name for p in (out / "issues").iterdir()) == sorted(f"{f['id']}.md" for f in new)
    # The regenerated documents agree with the merged counts.
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == (str(len(rows) + 1), str(len(new)))
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert f"**{len(new)} new finding(s)**" in md and f"{merged['examples']} examples in" in md
    assert f"{merged['examples']} examples in" in html and all(f'id="{bid}"' in html for bid in rows)
    assert "fxfuzz merge: 2 report folder(s)" in capsys.readouterr().out


@pytest.mark.processes
def test_merge_refusals_are_one_line_and_exit_2(shard_campaigns, tmp_path, refused):
    a, b, _ = shard_campaigns
    for key, value in (("pass", "set_grad"), ("version", "9.9.9")):
        other = tmp_path / key
        shutil.copytree(b, other)
        (other / "report.json").write_text(json.dumps({**_load(b), key: value}))
        assert f"different {key}" in refused(["merge", str(a), str(other), "--report-dir", str(tmp_path / "out")])
    (tmp_path / "empty").mkdir()
    assert "no report.json" in refused(
        ["merge", str(a), str(tmp_path / "empty"), "--report-dir", str(tmp_path / "out")]
    )
    assert "is one of the folders to merge" in refused(["merge", str(a), str(b), "--report-dir", str(a)])
    assert "given twice" in refused(["merge", str(a), str(a) + "/", "--report-dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()  # refused before anything was written
    assert _load(a)["examples"] == 30  # the input is untouched


def test_merge_without_new_findings_exits_0(tmp_path, capsys):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        write_documents(Report.from_data(_report([_row("x", 1, known=True, repro=False)])), str(tmp_path / name))
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--report-dir", str(tmp_path / "out")]) == 0
    merged = _load(tmp_path / "out")
    assert (
        merged["new_findings"] == 0
        and merged["findings"][0]["count"] == 2
        and not (tmp_path / "out" / "issues").exists()
    )


def test_a_merge_with_an_incomplete_input_is_incomplete(tmp_path, capsys):
    """A shard whose workers could not start makes the merged campaign incomplete: exit 3 and
    a red report, not a green merge of the shards that did run."""
    why = "the campaign tested nothing: worker 0 exited with 7 before its first example"
    for name, incomplete in (("a", why), ("b", None)):
        (tmp_path / name).mkdir()
        report = _report([], examples=0 if incomplete else 40, incomplete=incomplete)
        write_documents(Report.from_data(report), str(tmp_path / name))
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--report-dir", str(tmp_path / "out")]) == 3
    (line,) = capsys.readouterr().err.strip().splitlines()
    merged = _load(tmp_path / "out")
    assert merged["incomplete"] == f"{tmp_path / 'a'}: {why}" and line == f"fxfuzz: error: {merged['incomplete']}"
    assert "❌" in (tmp_path / "out" / "report.md").read_text().splitlines()[0]


def test_a_merge_into_a_folder_that_holds_a_report_refuses_and_changes_nothing(tmp_path, refused, capsys):
    for name, known in (("new", False), ("known", True)):
        (tmp_path / name).mkdir()
        write_documents(Report.from_data(_report([_row("x", 1, known=known, repro=False)])), str(tmp_path / name))
    out = tmp_path / "out"
    assert main(["merge", str(tmp_path / "new"), "--report-dir", str(out)]) == 1
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert f"--report-dir: {out} is not empty" in refused(["merge", str(tmp_path / "known"), "--report-dir", str(out)])
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before and (out / "issues" / "x.md").is_file()
    assert sorted(os.listdir(tmp_path)) == ["known", "new", "out"]
