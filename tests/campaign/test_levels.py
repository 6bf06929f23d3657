"""Campaign levels: budget shares, merged results with per-level counts, ``--level`` on the CLI."""

from __future__ import annotations

import json
import os

import pytest
from fxfuzz.campaign.levels import budget_plan, merge_results, run_levels
from fxfuzz.campaign.results import Bucket, CampaignResult
from fxfuzz.cli.main import main
from fxfuzz.core.identity import identify
from fxfuzz.core.known import for_level, known_reason, load_known
from fxfuzz.core.program import Program
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.oracles import Finding
from fxfuzz.report.schema import Extras, RunInfo, build_report
from paths import HELPERS


def test_mixed_splits_the_budget_not_the_examples():
    assert budget_plan("mixed", 10.0) == [("graph", 5.0), ("program", 5.0)]
    assert budget_plan("program", 7.0) == [("program", 7.0)]
    with pytest.raises(ValueError, match="level"):
        budget_plan("everything", 1.0)


def _result(examples: int, seconds: float, bucket: str | None = None) -> CampaignResult:
    r = CampaignResult(examples=examples, duration_s=seconds, stopped_by="budget")
    r.stats["op:sin"] = examples
    if bucket:
        r.buckets.add(Bucket(bucket, Finding("equivalence", "value_mismatch", "m"), None, 2))
    return r


def test_merge_keeps_levels_apart_and_counts_each():
    merged = merge_results(
        [("graph", _result(30, 3.0, "equivalence-x")), ("program", _result(4, 2.0, "equivalence-x"))]
    )
    assert merged.examples == 34 and merged.duration_s == 5.0 and merged.stopped_by == "budget"
    assert merged.stats["level:graph:examples"] == 30 and merged.stats["level:program:examples"] == 4
    assert merged.stats["level:graph:examples_per_s"] == 10.0 and merged.stats["level:program:examples_per_s"] == 2.0
    assert merged.stats["op:sin"] == 34
    # The same oracle/kind at both levels: two buckets, since their examples differ in kind.
    assert set(merged.buckets) == {"equivalence-x", "program-equivalence-x"}


@pytest.mark.processes
def test_run_levels_mixed_runs_both_levels_in_workers(tmp_path):
    # torch's known findings are not shrunk (one at the program level took a minute to shrink),
    # nor their first examples reduced.
    known = frozenset(load_known("fxfuzz-known.txt"))
    settings = CampaignSettings(
        level="mixed",
        budget_s=300,
        max_examples=2,
        max_shrink_s=0,
        seed=3,
        known=known,
        workers=1,
        db=None,
        identity=identify("set_grad"),
    )
    run = run_levels(settings, log_dir=str(tmp_path))
    result = run.result
    assert result.stats["level:graph:examples"] == 2 and result.stats["level:program:examples"] == 2
    assert result.examples == 4
    assert [name for name, _ in run.levels] == ["graph", "program"]
    assert all(p.examples == 2 and not p.workers.errors for _, p in run.levels)


@pytest.mark.processes
def test_program_level_reports_broken_pass_with_standalone_repro(tmp_path, capsys):
    spec = os.path.join(HELPERS, "broken_passes.py") + ":drops_toggles"
    # Seed 1: its worker draws programs the broken pass is found on in two examples (seed 0's two are not).
    args = [
        "run",
        "--level",
        "program",
        "--pass",
        spec,
        "--budget",
        "120",
        "--max-examples",
        "2",
        "--no-db",
        "--max-shrink-s",
        "0",
        "--program-share",
        "0.5",
        "--seed",
        "1",
    ]
    assert main([*args, "--report-dir", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["max_shrink_s"] == 0 and "shrink_attempts" not in report["stats"] and report["program_share"] == 0.5
    assert report["level"] == "program" and report["stats"]["level:program:examples"] >= 1
    assert all(f["id"].startswith("program-") and f["details"]["level"] == "program" for f in report["findings"])
    assert "class Program(nn.Module)" in report["findings"][0]["graph_code"]
    repro = tmp_path / report["findings"][0]["repro"]
    assert repro.exists() and "torch.export.export" in repro.read_text()
    assert "level program:" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "--level", "everything"], "--level"),
        (["run", "--level", "program", "--workers", "2"], "one worker process"),
    ],
)
def test_bad_level_usage_is_one_line_and_exit_2(args, needle, refused):
    assert needle in refused(args)


@pytest.mark.parametrize("level", ["program", "mixed"])
def test_levels_refuse_a_device_they_would_ignore(level, monkeypatch, refused):
    """Program and mixed levels verify on CPU only; --device cuda must not be dropped silently.
    (CUDA is faked as present so the argument passes the parser on any machine.)"""
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert "CPU only" in refused(["run", "--level", level, "--device", "cuda", "--budget", "1"])


def test_program_failures_round_trip_through_the_database_codec():
    from fxfuzz.campaign.store import PROGRAMS
    from fxfuzz.strategies import module_programs
    from hypothesis import given, settings

    @settings(max_examples=30)
    @given(module_programs())
    def round_trip(program):
        back = PROGRAMS.loads(PROGRAMS.dumps(program))
        assert back == program and back.code() == program.code()

    round_trip()


def test_program_is_a_campaign_example():
    """What the campaign driver and the report read of an example."""
    p = Program((2,), (), (), (), (), (), (("const", 1),))
    assert p.compute_nodes() == 0 and p.domain == "export" and isinstance(p.ambient_grad, bool)
    assert "def forward(self):" in p.code()


@pytest.mark.processes
@pytest.mark.parametrize(("level", "empty"), [("program", ["program"]), ("mixed", ["graph", "program"])])
def test_a_level_that_ran_no_example_fails_loudly(tmp_path, capsys, level, empty):
    """A budget too short for one example: no level that tested nothing reads as green."""
    out = tmp_path / "r"
    assert main(["run", "--level", level, "--budget", "0.001", "--no-db", "--report-dir", str(out)]) == 3
    # Besides the progress lines, one line says why.
    (line,) = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("[")]
    assert line.startswith("fxfuzz: error: the campaign tested nothing") and all(
        f"the {n} level" in line for n in empty
    )
    report = json.loads((out / "report.json").read_text())
    assert report["examples"] == 0 and report["incomplete"] in line
    assert "❌" in (out / "report.md").read_text().splitlines()[0]


def test_a_program_bucket_is_known_by_its_own_line_or_the_graph_line_of_its_check():
    known = {"equivalence-x": "graph reason", "program-equivalence-e2e_y": "program reason"}
    assert known_reason(known, "program-equivalence-x") == "graph reason"
    assert known_reason(known, "program-equivalence-e2e_y") == "program reason"
    assert known_reason(known, "equivalence-e2e_y") is None and known_reason(known, "program-equivalence-z") is None
    # The program campaign names its buckets before the prefix: it does not shrink either.
    assert for_level(known, "program") == {"equivalence-x", "equivalence-e2e_y"}
    merged = merge_results([("graph", _result(3, 1.0, "equivalence-z")), ("program", _result(2, 1.0, "equivalence-x"))])
    run = RunInfo(pass_spec="set_grad", contract="set_grad")
    rows = {f.id: f for f in build_report(merged, run, CampaignSettings(), Extras(known=known)).findings}
    assert rows["program-equivalence-x"].known and rows["program-equivalence-x"].known_reason == "graph reason"
    assert not rows["equivalence-z"].known and rows["equivalence-z"].issue
