"""fxfuzz gate: regressions of a candidate pass against a baseline, on the corpus and fresh cases."""

from __future__ import annotations

import json
import operator
import os
import xml.etree.ElementTree as ET

import broken_passes as bp
import pytest
from broken_passes import DIES_IN_WORKERS
from fxfuzz.campaign.gate import _final_regression, fresh_cases, run_gate, run_gate_parallel
from fxfuzz.campaign.protocol import Task, WorkerStart
from fxfuzz.campaign.results import Bucket, Buckets, CampaignResult, StopReason
from fxfuzz.campaign.supervisor import ParallelCampaign, Supervisor, run_parallel
from fxfuzz.campaign.worker import example_check
from fxfuzz.core.contract import MEANING, SET_GRAD
from fxfuzz.core.identity import identify
from fxfuzz.core.passes import load_pass
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.oracles import Finding
from fxfuzz.oracles.differential import regressions, regressions_both_modes
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.corpus import gate_corpus
from fxfuzz.tools.mutants import load_pass_variant
from handmade import no_grad_region_case
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from paths import HELPERS

REAL = load_pass("set_grad")

# Candidates with real faults: the first call kills the process, or never returns.
FAULTY = """
import os, signal, time

def segfaults(gm, sig):
    os.kill(os.getpid(), signal.SIGSEGV)

def hangs(gm, sig):
    while True:
        time.sleep(0.05)

def _first_call_anywhere():
    flag = os.path.join(os.path.dirname(__file__), "called")
    first = not os.path.exists(flag)
    open(flag, "w").close()
    return first

# Kill the first process that calls them (of all processes), or keep it past the example
# timeout (a machine slow once), then are the real pass.
def segfaults_once(gm, sig):
    if _first_call_anywhere():
        os.kill(os.getpid(), signal.SIGSEGV)
    from fxfuzz.core.passes import load_pass
    return load_pass("set_grad")(gm, sig)

def slow_once(gm, sig):
    if _first_call_anywhere():
        time.sleep(60)
    from fxfuzz.core.passes import load_pass
    return load_pass("set_grad")(gm, sig)
"""


@pytest.fixture(scope="module")
def corpus():
    return gate_corpus()


def _sin_grad_times(k: float):
    """Like broken_passes.wrong_sin_grad, with the wrong derivative scaled by ``k``."""
    aten = bp.aten

    def build(g, x):
        d = g.call_function(aten.detach.default, (x,))
        z = g.call_function(aten.mul.Tensor, (g.call_function(aten.sub.Tensor, (x, d)), k))
        return g.call_function(aten.add.Tensor, (g.call_function(aten.sin.default, (d,)), z))

    def pass_(gm, sig):
        gm, sig = REAL(gm, sig)
        return bp._rewrite(gm, aten.sin.default, build), sig

    return pass_


@pytest.mark.slow
def test_fresh_copy_of_the_real_pass_has_no_regression(corpus):
    """The unmutated pass, re-executed from torch's source into fresh modules, against the
    installed one: same behaviour on the whole corpus and on fresh cases in both grad modes."""
    copy = load_pass_variant("set_grad")
    assert copy is not REAL
    result = run_gate(copy, REAL, corpus, CampaignSettings(budget_s=1e9, max_examples=5))  # a count, not a time limit
    assert result.corpus_cases == len(corpus) and result.campaign.examples == 5
    assert result.buckets == {}


def test_broken_candidate_regresses_on_the_corpus(corpus):
    result = run_gate(bp.drops_toggles, REAL, corpus, CampaignSettings(budget_s=1e9, max_examples=1))
    oracles = {b.finding.oracle for b in result.buckets.values()}
    assert {"equivalence", "gradients"} <= oracles
    assert all(b.source in dict(corpus) for b in result.buckets.values())


def test_fix_is_not_a_regression():
    """The candidate passes what the baseline fails: no regression, whichever way round."""
    case = no_grad_region_case(True)
    assert regressions(case, REAL, bp.drops_toggles) == []
    assert regressions(case, bp.drops_toggles, REAL) != []


def test_both_failing_but_disagreeing_is_a_regression():
    case = no_grad_region_case(True)
    assert regressions(case, _sin_grad_times(2.0), _sin_grad_times(2.0)) == []
    kinds = {f.kind for f in regressions(case, _sin_grad_times(3.0), _sin_grad_times(2.0))}
    assert "vs_baseline_grad_value_mismatch" in kinds and all(k.startswith("vs_baseline_") for k in kinds)


def test_fresh_cases_are_judged_under_both_grad_modes():
    case = no_grad_region_case(True)
    modes = {f.details["ambient_grad"] for f in regressions_both_modes(case, bp.drops_toggles, REAL)}
    assert modes == {True, False}


@pytest.mark.processes
def test_cli_broken_candidate_exits_1_and_its_repros_replay(tmp_path, cli):
    spec = os.path.join(HELPERS, "broken_passes.py") + ":drops_toggles"
    r = cli(
        "gate", "--candidate", spec, "--max-examples", "3", "--max-shrink-s", "0", "--report-dir", str(tmp_path / "r")
    )
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["candidate"] == spec and report["baseline"] == "set_grad" and report["findings"]
    # Unminimized regressions (--max-shrink-s 0 reached the fresh cases' worker) replay all the same.
    assert report["max_shrink_s"] == 0 and "shrink_attempts" not in report["stats"]
    repros = sorted((tmp_path / "r" / "repros").glob("*.json"))
    assert len(repros) == len(report["findings"])
    # Each regression has its issue text, naming the baseline it regressed against.
    for f in report["findings"]:
        assert "| baseline pass | `set_grad` |" in (tmp_path / "r" / f["issue"]).read_text()
    # The saved repros are a regression corpus: the broken pass still fails them, the real one not.
    r2 = cli(
        "gate",
        "--candidate",
        "set_grad",
        "--corpus",
        str(tmp_path / "r" / "repros"),
        "--max-examples",
        "1",
        "--report-dir",
        str(tmp_path / "r2"),
    )
    assert r2.returncode == 0, r2.stdout + r2.stderr
    report2 = json.loads((tmp_path / "r2" / "report.json").read_text())
    # the saved repros, every module under both grad modes, and the pytree-convention pair
    assert report2["corpus_cases"] == len(repros) + 2 * len(corpus_modules()) + 2


def test_worker_example_check_is_the_gates():
    """What a gate worker loads by name judges as the in-process gate does: both grad
    modes, regressions only (the real pass against itself has none)."""
    heard = []
    task = Task("fxfuzz.campaign.gate:gate_check", {"baseline": "set_grad"})
    judge = example_check(WorkerStart(CampaignSettings(identity=identify("set_grad")), task, [], 0.0, 0), heard.append)
    case = no_grad_region_case(True)
    assert judge(case, REAL) == []
    assert heard == [False, True, False, True]  # per grad mode: the baseline, then the candidate
    assert judge(case, bp.drops_toggles) == regressions_both_modes(case, bp.drops_toggles, REAL) != []


def test_a_death_is_the_candidates_only_once_the_baseline_survived():
    """The baseline runs first; the worker's supervisor hears that the candidate is running
    only after the baseline ran without crashing, and never where the baseline crashes."""
    case = no_grad_region_case(True)
    events = []

    def calls(name, fn):
        return lambda gm, sig: (events.append(name), fn(gm, sig))[1]

    regressions(case, calls("candidate", REAL), calls("baseline", REAL), events.append)
    first, blamed = events.index(False), events.index(True)
    assert first == 0 and events.index("baseline") < blamed < events.index("candidate")
    assert "baseline" not in events[blamed:]
    events.clear()
    regressions(case, calls("candidate", REAL), bp.crashes, events.append)
    assert True not in events and "candidate" in events


@pytest.mark.processes
def test_cli_parallel_gate_regresses_on_fresh_cases_and_passes_the_real_pass(tmp_path, cli):
    """--workers 2: every fresh case of a crashing candidate is a regression found in a worker
    (its bucket counts the corpus cases and the fresh ones), with a repro; the real pass
    against itself has none."""
    spec = os.path.join(HELPERS, "broken_passes.py") + ":crashes"
    r = cli(
        "gate",
        "--candidate",
        spec,
        "--workers",
        "2",
        "--max-examples",
        "2",
        "--max-shrink-s",
        "0",
        "--report-dir",
        str(tmp_path / "r"),
    )
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    # The first regression is final (nothing shrinks), so the gate stops there.
    assert report["workers"] == 2 and report["examples"] <= 2 and report["stopped_by"] == "stopped"
    assert "stopped early" in r.stdout and "did not judge all" not in r.stdout + r.stderr
    [finding] = report["findings"]
    assert finding["oracle"] == "crash" and finding["count"] >= 1
    assert (tmp_path / "r" / finding["repro"]).is_file()
    ok = cli(
        "gate", "--candidate", "set_grad", "--workers", "2", "--max-examples", "2", "--report-dir", str(tmp_path / "ok")
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads((tmp_path / "ok" / "report.json").read_text())["examples"] == 2
    # The corpus's worker logs to worker0.log, the one drawing fresh cases beside it to its own.
    assert sorted(os.listdir(tmp_path / "ok" / "logs")) == ["worker0.log", "worker1.log"]


BUDGET_S, TIMEOUT_S = 2, 3
# Worker starts the gate may make per worker slot on a fatal candidate: the first, the
# replacement that runs the fatal case again (a death counts once it repeats), and the one
# after it, begun before the gate's stop reaches it (seen: 2 with one worker, 4 with two);
# more means deaths re-run or workers replaced without end.
STARTS_PER_SLOT = 3


@pytest.mark.processes
@pytest.mark.parametrize(
    "fault, workers, kind",
    [
        ("segfaults", [], "process_died"),
        ("segfaults", ["--workers", "2"], "process_died"),
        ("hangs", ["--workers", "1"], "hang"),
        ("hangs", ["--workers", "2"], "hang"),
    ],
)
def test_cli_gate_reports_a_crashing_or_hanging_candidate_within_bounded_work(
    tmp_path, cli, fault, workers, kind, monkeypatch
):
    """A candidate that segfaults or hangs on its first call is a crash regression with a
    repro, whatever the workers: the corpus is judged in a worker too (with two, alongside
    fresh cases, which may meet the fault first). The gate ends after a bounded number of
    worker starts (a replacement worker runs the fatal case again before it counts; its stop
    reason is the budget or that final regression, as the worker's start-up and the budget
    race on a loaded machine). The starts are counted in this process (the CLI runs here) and
    one past the bound fails the test at once: with a repeated death re-run instead of
    settled, it failed at the seventh start."""
    (tmp_path / "faulty.py").write_text(FAULTY)
    out = tmp_path / "r"
    starts = []
    spawn = Supervisor._spawn

    def counted(self, *args, **kwargs):
        starts.append(args)
        assert len(starts) <= bound, f"{len(starts)} worker starts"
        return spawn(self, *args, **kwargs)

    slots = 2 if "2" in workers else 1
    bound = STARTS_PER_SLOT * slots
    monkeypatch.setattr(Supervisor, "_spawn", counted)
    r = cli(
        "gate", "--candidate", f"{tmp_path / 'faulty.py'}:{fault}", "--budget", str(BUDGET_S),
        "--example-timeout", str(TIMEOUT_S), "--report-dir", str(out), *workers,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((out / "report.json").read_text())
    assert len(starts) <= bound
    [finding] = report["findings"]
    assert finding["oracle"] == "crash" and finding["kind"] == kind and not finding["known"]
    # With one worker the corpus comes first; with two the first fatal case may be a fresh one,
    # and the gate stops there.
    judged = report["corpus_cases"] + (report["examples"] if "2" in workers else 0)
    assert judged >= 1 and finding["count"] >= 1
    assert (out / finding["repro"]).is_file() and (out / finding["repro"]).with_suffix(".json").is_file()
    assert (out / "report.md").stat().st_size > 0
    assert int(ET.parse(out / "junit.xml").getroot().find("testsuite").get("failures")) == 1


@pytest.mark.processes
def test_fresh_cases_are_judged_while_the_corpus_is():
    """With two workers, fresh cases start with the corpus: a budget spent before the corpus
    is judged still gives them the corpus's time (with one worker it would give them none),
    and the corpus is judged whole."""
    settings = CampaignSettings(budget_s=0.001, max_examples=2, workers=2, identity=identify("set_grad"))
    result = run_gate_parallel("set_grad", [], settings)
    assert result.corpus_cases == len(gate_corpus()) and result.campaign.examples >= 1
    assert not result.buckets and not result.campaign.workers.errors


@pytest.mark.processes
@pytest.mark.parametrize("workers", [1, 2])
def test_the_gate_stops_at_its_first_final_regression(workers, corpus):
    """A regression on a corpus case is final (nothing shrinks it): the gate ends there, with
    no budget or example limit reached and the corpus not judged whole."""
    spec = os.path.join(HELPERS, "broken_passes.py") + ":crashes"
    result = run_gate_parallel("set_grad", [], CampaignSettings(budget_s=1e9, workers=workers, identity=identify(spec)))
    assert result.campaign.stopped_by is StopReason.STOPPED
    assert [b.finding.oracle for b in result.buckets.values()] == ["crash"]
    assert result.corpus_cases < len(corpus)


def _record(source=None, kind="pass_raised"):
    return Buckets({"crash-x": Bucket("crash-x", Finding("crash", kind, ""), None, 3, source)})


def test_a_fresh_regression_is_final_once_minimized():
    """What lets the gate stop: a corpus case's regression at once, a fresh case's once its
    shrinking is over (or off), a worker's death at once; a known bucket never."""
    defaults = CampaignSettings()
    fresh = CampaignResult(buckets=_record())
    assert not _final_regression(fresh, defaults)
    assert _final_regression(fresh, CampaignSettings(max_shrink_s=0))
    fresh.minimized.add("crash-x")
    assert _final_regression(fresh, defaults)
    assert not _final_regression(fresh, CampaignSettings(known=frozenset({"crash-x"})))
    assert _final_regression(CampaignResult(buckets=_record(source="corpus_case[True]")), defaults)
    assert _final_regression(CampaignResult(buckets=_record(kind="process_died")), defaults)


@pytest.mark.processes
def test_a_worker_says_when_a_buckets_shrinking_is_over():
    """The supervisor hears from the worker when a fresh bucket is minimized (the engine's
    ``on_minimized``), which is what makes a fresh regression final."""
    spec = os.path.join(HELPERS, "broken_passes.py") + ":crashes"
    settings = CampaignSettings(budget_s=1e9, max_examples=3, max_shrink_s=5, identity=identify(spec))
    result = run_parallel(ParallelCampaign(settings))
    assert result.buckets and set(result.minimized) == set(result.buckets)


def test_fresh_cases_draw_the_baselines_node_kinds_in_half_the_cases():
    """A candidate under review declares no kinds: the gate draws half its fresh cases for the
    baseline's (set_grad: grad toggles), so more hold a toggle than today's mix gives, and
    some are of the mix. A baseline that declares nothing keeps the mix."""

    def without_toggle(strategy) -> int:
        cases = []

        @seed(0)
        @settings(
            max_examples=60,
            derandomize=False,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(strategy)
        def collect(case):
            cases.append(case)

        collect()
        return sum(not any(k.startswith("toggle:") for k in c.features) for c in cases)

    mix, gate = without_toggle(graph_cases(domain="export")), without_toggle(fresh_cases("export", REAL))
    assert 0 < gate < mix, (gate, mix)
    # A baseline that declares no kinds, held to set_grad's contract (as this one declares, and
    # as mutants are), keeps the mix alone; held to meaning it draws meaning's kinds for half.
    crashes = os.path.join(HELPERS, "broken_passes.py") + ":crashes"
    assert (
        repr(fresh_cases("export", bp.crashes))
        == repr(fresh_cases("export", load_pass(crashes, SET_GRAD)))
        == repr(graph_cases(domain="export"))
    )
    assert repr(fresh_cases("export", load_pass(crashes, MEANING))) == repr(
        st.one_of(graph_cases(domain="export"), graph_cases(domain="export", reacts_to=MEANING.reacts_to))
    )


@pytest.mark.processes
@pytest.mark.parametrize("fault", ["segfaults_once", "slow_once"])
def test_the_corpus_goes_on_after_the_case_that_killed_its_worker(tmp_path, corpus, fault):
    """The replacement worker judges the fatal case again, then the rest of the corpus; a
    death or a timeout that does not repeat there (an outside kill, a loaded machine) is a
    restart, no finding."""
    (tmp_path / "faulty.py").write_text(FAULTY)
    candidate = identify(f"{tmp_path / 'faulty.py'}:{fault}")
    result = run_gate_parallel(
        "set_grad", [], CampaignSettings(budget_s=1e9, max_examples=1, example_timeout_s=5, identity=candidate)
    )
    assert (
        result.corpus_cases == len(corpus) and result.campaign.workers.restarts == 1 and result.campaign.examples == 1
    )
    assert not result.buckets


@pytest.mark.processes
def test_cli_gate_candidate_dying_where_the_baseline_crashes_is_no_regression(tmp_path, cli):
    (tmp_path / "faulty.py").write_text(FAULTY)
    r = cli(
        "gate", "--candidate", f"{tmp_path / 'faulty.py'}:segfaults", "--baseline", f"{HELPERS}/broken_passes.py:crashes",
        "--budget", str(BUDGET_S), "--report-dir", str(tmp_path / "r"),
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["findings"] == [] and report["workers_detail"]["excused_deaths"] >= 1


@pytest.mark.processes
def test_cli_gate_whose_worker_cannot_start_fails_loudly(tmp_path, cli):
    """A candidate whose import kills every worker (not the CLI process): the corpus was never
    judged, so no regression found is no pass."""
    (tmp_path / "dies.py").write_text(DIES_IN_WORKERS)
    r = cli(
        "gate", "--candidate", f"{tmp_path / 'dies.py'}:fine", "--budget", "30", "--report-dir", str(tmp_path / "r")
    )
    assert r.returncode == 3, r.stdout + r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("fxfuzz: error:")]
    assert "did not judge all its cases" in line and "exited with 7" in line
    assert (tmp_path / "r" / "report.json").is_file()


def test_judging_leaves_the_case_as_it_was():
    """The gate judges the candidate, then the baseline, on the same case object: verify
    must not change it. torch's ExportedProgram constructor (the export verifier check)
    eliminates duplicate getitems in every nested graph of the root it is given, which was
    the case's own graph module."""
    from fxfuzz.oracles.execute import graph_modules
    from fxfuzz.strategies.corpus import MODULES, capture

    case = capture(next(e for e in MODULES if e.name == "cond_with_grad_block"), True)
    branch = case.gm.true_graph_0.graph
    with branch.inserting_before(branch.output_node()):
        x = next(iter(branch.nodes))
        top = branch.call_function(bp.aten.max.dim, (x, 0))
        branch.call_function(operator.getitem, (top, 0))
        branch.call_function(operator.getitem, (top, 0))

    def snapshot():
        graphs = [
            (name, [(n.name, n.target, n.args, sorted(n.meta)) for n in m.graph.nodes])
            for name, m in graph_modules(case.gm)
        ]
        return graphs, str(case.signature)

    before = snapshot()
    assert regressions(case, REAL, REAL) == []
    assert snapshot() == before
    regressions(case, bp.drops_toggles, REAL)
    assert snapshot() == before


def corpus_modules():
    from fxfuzz.strategies.corpus import MODULES

    return MODULES


@pytest.mark.parametrize(
    "args, needle",
    [
        (["gate"], "--candidate"),
        (["gate", "--candidate", "no_such_module:fn"], "no_such_module"),
        (["gate", "--candidate", "set_grad", "--baseline", "bogus"], "unknown pass"),
        (["gate", "--candidate", "set_grad", "--budget", "5", "--max-examples", "3"], "not allowed with"),
        (["gate", "--candidate", "set_grad", "--budget", "-1"], "--budget"),
        (["gate", "--candidate", "set_grad", "--corpus", "/no/such/dir"], "corpus directory not found"),
        (["gate", "--candidate", "set_grad", "--known", "/no/such/known.json"], "known-findings file"),
        (["gate", "--candidate", "set_grad", "--domain", "nonsense"], "--domain"),
        (["gate", "--candidate", "set_grad", "--example-timeout", "0"], "--example-timeout"),
        (["mutate", "--domain", "nonsense"], "--domain"),
        (["mutate", "--only", "no_such_mutant"], "no mutant"),
        (
            ["mutate", "--pass", "identity"],
            "registered passes set_grad, autocast, export, aot_cse, remove_noop_ops, remove_assert_ops, reorder_for_locality, inductor_constant_fold, view_copy only",
        ),
        (["gate", "--candidate", "set_grad+", "--baseline", "set_grad+autocast"], "empty part"),
        (
            ["gate", "--candidate", "set_grad", "--baseline", "set_grad+bogus"],
            "in pass pipeline 'set_grad+bogus': unknown pass",
        ),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(args, needle, refused):
    assert needle in refused(args)


def test_missing_corpus_folder_is_a_usage_error(tmp_path, cli):
    """A malformed file in the folder is skipped with a note and kept (tests/core/test_trust_cases.py)."""
    r = cli("gate", "--candidate", "set_grad", "--corpus", str(tmp_path / "nowhere"))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "nowhere" in lines[0], r.stderr


def test_metadata_keys_and_signature_names_must_match_the_baseline():
    """Two mutants of torch's pass that behave identically but drop the HOP's torch_fn
    metadata, or keep getitem names instead of the names of the values they carry."""
    from fxfuzz.strategies.corpus import MODULES, capture
    from fxfuzz.tools.mutants import enumerate_mutants

    mutants = {m.id: m for m in enumerate_mutants("set_grad")}
    case = capture(next(e for e in MODULES if e.name == "two_outputs_from_no_grad"), True)
    no_torch_fn = load_pass_variant(
        "set_grad", mutants["replace_with_hop_pass_util._replace_with_hop_helper:38:remove:5"]
    )
    no_rename = load_pass_variant(
        "set_grad", mutants["replace_with_hop_pass_util._replace_with_hop_helper:82:remove:27"]
    )
    assert {f.kind for f in regressions(case, no_torch_fn, REAL)} == {"vs_baseline_metadata_differs"}
    assert {f.kind for f in regressions(case, no_rename, REAL)} == {"vs_baseline_signature_differs"}


@pytest.mark.processes
def test_gate_against_a_pipeline_rejects_the_old_node_inline_on_its_corpus(tmp_path, corpus, cli):
    """pytorch#140589: node_inline_ before PR #141169 overwrote the parent's ``submod_1`` when
    autocast ran after set_grad. The set-grad part alone passes the whole corpus; the
    sequence, gated against the sequence, regresses on it (`fxfuzz gate` exits 1 at once)."""
    from fxfuzz.campaign.gate import judge_corpus

    assert not judge_corpus(bp.inline_overwrites_submod_set_grad_only, REAL, corpus).buckets
    spec = os.path.join(HELPERS, "broken_passes.py") + ":inline_overwrites_submod"
    r = cli(
        "gate",
        "--candidate",
        spec,
        "--baseline",
        "set_grad+autocast",
        "--max-examples",
        "1",
        "--max-shrink-s",
        "0",
        "--report-dir",
        str(tmp_path),
    )
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["baseline"] == "set_grad+autocast"
    # Found on the corpus, whatever the budget.
    assert report["findings"] and "on autocast_with_grad_blocks[" in r.stdout, r.stdout


@pytest.mark.processes
@pytest.mark.parametrize("share, regresses", [("1", True), ("0", False)])
def test_gate_stage_share_decides_which_cases_go_through_the_export_stages(tmp_path, share, regresses, cli):
    """A candidate whose every result torch.export.save refuses: with every case through the
    stages the gate finds that on its corpus; with none, no stage runs (the gate's interface
    check still sees the metadata this pass adds: only the downstream rows are compared)."""
    spec = os.path.join(HELPERS, "broken_passes.py") + ":unsaveable"
    r = cli(
        "gate",
        "--candidate",
        spec,
        "--max-examples",
        "1",
        "--max-shrink-s",
        "0",
        "--stage-share",
        share,
        "--report-dir",
        str(tmp_path),
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["stage_share"] == float(share)
    downstream = [f for f in report["findings"] if f["oracle"] == "downstream" and not f["known"]]
    assert bool(downstream) == regresses, r.stdout + r.stderr
