"""fxfuzz's own errors are never findings: an exception raised in fxfuzz's code while a check
runs is an InternalError (exit 70 from the CLI), one raised in torch's or the pass's code is a
finding against the pass. Decided by the frame that raised it, and by the call that handed
control to the pass (``call_out``): what escapes it is the pass's, C functions included."""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys

import broken_passes as bp
import handmade as hm
import pytest
import torch
from fxfuzz.cli.main import main
from fxfuzz.core.internal import (
    EXIT_INTERNAL,
    InternalError,
    call_out,
    first_line,
    foreign,
    own_file,
    package_part,
    raised_by_fxfuzz,
)
from fxfuzz.core.passes import Pass, Sequential, identity_pass, load_pass
from fxfuzz.oracles import checks, verify
from paths import HELPERS


def _bogus_stage(monkeypatch):
    # The stages row then asks fxfuzz's own stage table for a stage it lacks: a KeyError
    # raised in fxfuzz's code (oracles/downstream.py), as a bug of fxfuzz would.
    monkeypatch.setattr(checks, "stages_selected", lambda code, ambient, share: ("no_such_stage",))


def test_an_error_in_fxfuzz_code_is_an_internal_error_not_a_finding(monkeypatch):
    _bogus_stage(monkeypatch)
    with pytest.raises(InternalError) as raised:
        verify(hm.no_grad_region_case(), identity_pass)
    e = raised.value
    assert e.where == "export stages" and e.exception == "KeyError"
    assert "oracles/downstream.py" in e.details and "no_such_stage" in e.details


def _junk_submodule(gm, sig):
    """Returns a module whose submodule table holds what is not a module: torch's own
    ``named_modules`` raises on it, inside torch, when a check walks the result."""
    gm._modules["junk"] = 42
    return gm, sig


def test_an_error_torch_raises_on_the_result_is_a_finding():
    findings = verify(hm.no_grad_region_case(), _junk_submodule)
    impossible = [f for f in findings if f.kind == "check_impossible"]
    assert impossible and all(f.details["exception"] == "AttributeError" for f in impossible)
    assert {f.oracle for f in impossible} >= {"structure"}


def test_a_verdict_fxfuzz_raises_again_is_blamed_where_it_was_first_raised():
    def torch_like():
        raise RuntimeError("from outside fxfuzz")

    try:
        torch_like()
    except RuntimeError as e:
        first = foreign(e)
    assert not raised_by_fxfuzz(first)
    try:
        raise first.with_traceback(None)  # the replay, from a frame of this test
    except RuntimeError as e:
        assert not raised_by_fxfuzz(e)


def test_the_cli_prints_the_traceback_and_one_line_and_exits_70(monkeypatch, capsys):
    import fxfuzz.cli.run as run_command

    def fails(args):
        try:
            {}["missing"]
        except KeyError as e:
            raise InternalError("planted", e) from None

    monkeypatch.setattr(run_command, "command", fails)
    assert main(["run"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'missing'" in err
    assert err.strip().splitlines()[-1].startswith("fxfuzz: internal error of fxfuzz in the planted check: KeyError")


def test_a_signature_of_the_wrong_type_is_the_passs_bad_return_not_fxfuzzs_error():
    [f] = verify(hm.no_grad_region_case(), lambda gm, sig: (gm, {"not": "a signature"}))
    assert (f.oracle, f.kind) == ("crash", "bad_return") and "dict" in f.message


# --- whose code is fxfuzz's: the package, wherever it is installed -------------------------


def test_fxfuzz_code_is_known_by_its_package_not_by_the_repository_layout():
    """Every module of the package is fxfuzz's, whichever folder holds it (a checkout maps
    strategies/ and oracles/ in beside fuzz/; a wheel puts them inside fxfuzz/:
    tests/package/test_wheel.py); its custom operators' kernels count as operator code; nothing
    outside the package is fxfuzz's."""
    import os

    import fxfuzz.core.custom_ops
    import fxfuzz.oracles.checks
    import fxfuzz.strategies.ops
    import handmade
    import torch.fx.graph

    assert [package_part(m.__file__) for m in (fxfuzz.oracles.checks, fxfuzz.strategies.ops, fxfuzz.core.internal)] == [
        "oracles",
        "strategies",
        "fuzz",
    ]
    assert own_file(fxfuzz.oracles.checks.__file__) and own_file(fxfuzz.strategies.ops.__file__)
    assert package_part(fxfuzz.core.custom_ops.__file__) == "fuzz" and not own_file(fxfuzz.core.custom_ops.__file__)
    assert not own_file(handmade.__file__) and not own_file(torch.fx.graph.__file__)
    # A folder beside the package whose name starts like one of its folders is not the package.
    assert not own_file(os.path.dirname(fxfuzz.oracles.checks.__file__) + "_copy" + os.sep + "checks.py")
    # fxfuzz bench's time split reads the same answer.
    from fxfuzz.tools.bench import _area

    assert [
        _area(m.__file__) for m in (fxfuzz.oracles.checks, fxfuzz.strategies.ops, fxfuzz.core.internal, torch.fx.graph)
    ] == ["oracles", "strategies", "fuzz", "torch.fx"]


# --- what raised, and where: C callables, the pass's call, fxfuzz's adapters -----------------


def _pass_raised(findings):
    return [(f.oracle, f.kind, f.details["exception"]) for f in findings]


@pytest.mark.parametrize(
    "pass_fn",
    # By object where its spec would be refused: operator.truediv's second parameter, b, is no
    # signature (fxfuzz.core.shapes), so "operator:truediv" is a usage error, never misrun.
    [operator.truediv, max, torch.add, "operator:neg", "operator:neg+set_grad", "set_grad+operator:neg"],
    # By name: str() of a builtin method holds its address, which differs between xdist workers.
    ids=lambda p: p if isinstance(p, str) else p.__name__,
)
def test_an_error_a_c_function_pass_raises_is_the_passs(pass_fn):
    """A pass implemented in C has no frame of its own: what it raises ends its traceback in
    the frame that called it, fxfuzz's. Called through ``call_out`` (or a ``calls_out``
    adapter: a pass of another shape, a pipeline part), it is the pass's all the same."""
    fn = load_pass(pass_fn) if isinstance(pass_fn, str) else pass_fn
    assert _pass_raised(verify(hm.no_grad_region_case(), fn)) == [("crash", "pass_raised", "TypeError")]


def test_a_c_function_raising_outside_call_out_is_still_fxfuzzs():
    """The exemption is ``call_out``'s frame alone: a C function fxfuzz's own code calls
    directly, and that raises, is fxfuzz's error."""
    try:
        operator.truediv(1, "x")
    except TypeError as e:
        assert not raised_by_fxfuzz(e)  # raised in this test's frame: not fxfuzz's code
    try:
        checks.CHECKS[0].check(None, None)  # fxfuzz's lambda reads an attribute of None
    except AttributeError as e:
        assert raised_by_fxfuzz(e)
    try:
        call_out(operator.truediv, 1, "x")
    except TypeError as e:
        assert not raised_by_fxfuzz(e)


def test_a_pipeline_part_returning_something_else_is_the_passs_bad_return():
    """A part of ``A+B`` that returns no (gm, signature) pair is reported as the pipeline's bad
    return, not raised from fxfuzz's pipeline code as its error."""

    pipeline = Pass(
        "returns_nothing+set_grad",
        Sequential((Pass("x", bp.returns_nothing, bp.real.contract), bp.real)),
        bp.real.contract,
    )
    assert [(f.oracle, f.kind) for f in verify(hm.no_grad_region_case(), pipeline)] == [("crash", "bad_return")]


def test_a_malformed_result_is_a_finding_of_the_pass_never_fxfuzzs_error():
    """A result fxfuzz cannot read (here an output node returning a bare Node, which the
    checks read as a sequence) is ``structure/malformed_result``, and no check runs on it."""

    [f] = verify(hm.no_grad_region_case(), bp.returns_bare_node)
    assert (f.oracle, f.kind) == ("structure", "malformed_result") and "returns Node" in f.message


def test_a_check_failing_in_fxfuzz_code_on_a_graph_that_fails_lint_is_malformed_result():
    """The safety net behind the up-front check: an error of fxfuzz's own code on a result
    that fails ``graph.lint()`` is the result's defect; on a result that passes, fxfuzz's."""
    from fxfuzz.core.contract import SET_GRAD

    case = hm.no_grad_region_case()
    try:
        checks.CHECKS[0].check(None, None)
    except AttributeError as e:
        error = e
    for pass_fn, malformed in ((bp.breaks_lint, True), (bp.real, False)):
        gm, sig = (
            bp.real(case.copy().gm, case.signature) if pass_fn is bp.real else pass_fn(case.copy().gm, case.signature)
        )
        ctx = checks.Observed(case, pass_fn, gm, sig, SET_GRAD, "cpu", 0.0)
        if malformed:
            [f] = checks.impossible(ctx, checks.CHECKS[1], error)
            assert (f.oracle, f.kind) == ("structure", "malformed_result") and "fails lint" in f.message
        else:
            with pytest.raises(InternalError):
                checks.impossible(ctx, checks.CHECKS[1], error)


def test_a_keyboard_interrupt_from_the_pass_is_its_finding_where_no_ctrl_c_can_arrive(monkeypatch):
    """In a worker (SIGINT ignored: only the pass can raise KeyboardInterrupt there) it is the
    pass's crash, bucketed by its own type and site, never an internal error's; in a process
    a Ctrl-C can reach, it is the user's interrupt and ends the run."""
    import signal

    from fxfuzz.campaign.engine import bucket_id

    with pytest.raises(KeyboardInterrupt):
        verify(hm.no_grad_region_case(), bp.raises_keyboard_interrupt)
    monkeypatch.setattr(
        signal, "getsignal", lambda signum: signal.SIG_IGN if signum == signal.SIGINT else signal.SIG_DFL
    )
    [f] = verify(hm.no_grad_region_case(), bp.raises_keyboard_interrupt)
    assert _pass_raised([f]) == [("crash", "pass_raised", "KeyboardInterrupt")]
    assert bucket_id(f).startswith("crash-pass_raised-") and "broken_passes.py" in f.details["frame"]
    [g] = verify(hm.no_grad_region_case(), bp.exits)
    assert _pass_raised([g]) == [("crash", "pass_raised", "SystemExit")] and bucket_id(g) != bucket_id(f)


def test_an_exception_whose_text_cannot_be_read_is_still_the_passs_crash():
    """``str()`` of the pass's exception runs the pass's code; where it raises, the message
    says so and the finding stands."""

    [f] = verify(hm.no_grad_region_case(), bp.raises_unreadable)
    assert _pass_raised([f]) == [("crash", "pass_raised", "RuntimeError")]
    assert f.message == "the pass raised RuntimeError: <its text could not be read: ValueError>"
    assert first_line(ValueError("x" * 10_000 + "\nsecond")) == "x" * 500


@pytest.mark.processes
def test_an_exception_slow_to_read_is_bounded_by_the_example_timeout(tmp_path):
    """Its text is read while the example runs, so an exception whose ``__str__`` never
    returns is the pass's hang, ended by ``--example-timeout``, not a worker busy for hours."""
    from fxfuzz.campaign.supervisor import ParallelCampaign, run_parallel
    from fxfuzz.core.identity import identify
    from fxfuzz.core.settings import CampaignSettings

    pass_ = identify("broken_passes:raises_slow_to_read")
    settings = CampaignSettings(workers=1, max_examples=1, budget_s=600, example_timeout_s=3, identity=pass_)
    result = run_parallel(ParallelCampaign(settings, log_dir=str(tmp_path)))
    assert [(b.finding.oracle, b.finding.kind) for b in result.buckets.values()] == [("crash", "hang")]
    assert not result.workers.internal_errors


# --- a worker dying of fxfuzz's own error: exit 70, never a finding, at every command ---------

PLANTED = os.path.join(HELPERS, "planted_bug.py")


def _fxfuzz(*argv, cwd):
    # A fresh interpreter: the planted bug patches fxfuzz in whatever process imports it.
    return subprocess.run([sys.executable, "-m", "fxfuzz", *argv], capture_output=True, text=True, cwd=cwd, timeout=600)


@pytest.mark.processes
def test_a_campaign_whose_worker_dies_of_fxfuzzs_error_exits_70_and_reports_no_finding(tmp_path):
    r = _fxfuzz(
        "run",
        "--pass",
        f"{PLANTED}:identity",
        "--max-examples",
        "2",
        "--workers",
        "1",
        "--no-db",
        "--report-dir",
        "r",
        cwd=tmp_path,
    )
    assert r.returncode == EXIT_INTERNAL, r.stdout + r.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    # The worker's first example met the error; its slot ends there (a bug would only repeat).
    assert report["findings"] == [] and report["examples"] == 1 and report["stopped_by"] == "internal_error"
    [error] = report["workers_detail"]["internal_errors"]
    assert "KeyError: 'no_such_stage'" in error and "worker0.log" in error
    assert "died of fxfuzz's own error, not a finding" in r.stdout
    assert r.stderr.strip().splitlines()[-1].endswith("(a bug of fxfuzz, not a finding against the pass)")
    assert "fxfuzz's own" in (tmp_path / "r" / "report.md").read_text()


@pytest.mark.processes
def test_a_gate_whose_worker_dies_of_fxfuzzs_error_exits_70_with_no_regression(tmp_path):
    (tmp_path / "corpus").mkdir()
    r = _fxfuzz(
        "gate",
        "--candidate",
        f"{PLANTED}:identity",
        "--baseline",
        "identity",
        "--max-examples",
        "1",
        "--corpus",
        "corpus",
        "--report-dir",
        "r",
        cwd=tmp_path,
    )
    assert r.returncode == EXIT_INTERNAL, r.stdout + r.stderr
    assert "REGRESSION" not in r.stdout and "not a regression" in r.stdout
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["findings"] == [] and report["workers_detail"]["internal_errors"]


@pytest.mark.processes
def test_a_repro_checked_into_fxfuzzs_error_exits_70_not_fail(tmp_path):
    from fxfuzz.core.identity import identify
    from fxfuzz.core.serialize import case_to_dict
    from fxfuzz.repro.files import repro_document, write_repro

    finding = {"oracle": "crash", "kind": "pass_raised", "message": "m", "details": {}}
    py = write_repro(
        str(tmp_path / "repros"),
        repro_document("planted", finding, case_to_dict(hm.no_grad_region_case()), identify("identity")),
    )
    r = _fxfuzz("repro", py, "--pass", f"{PLANTED}:identity", cwd=tmp_path)
    assert r.returncode == EXIT_INTERNAL, r.stdout + r.stderr
    assert "FAIL" not in r.stdout and "fixed" not in r.stdout
    assert "KeyError" in r.stderr and r.stderr.strip().splitlines()[-1].endswith(
        "(a bug of fxfuzz, not a finding against the pass)"
    )


def test_findings_take_precedence_over_an_internal_error_in_the_exit_status(capsys):
    from fxfuzz.cli.run import internal_status
    from fxfuzz.report.schema import Report, ReportFinding, RunInfo, WorkersDetail

    died = WorkersDetail(internal_errors=["worker 0 raised KeyError: 'x'"])
    new = ReportFinding(id="crash-pass_raised-00000000", oracle="crash", kind="pass_raised", message="m", count=1)
    report = Report("0", "2", RunInfo(pass_spec="p", contract="meaning"), 1.0, 1, "budget", [], {}, workers_detail=died)
    assert internal_status(report) == EXIT_INTERNAL
    report.findings = [new]
    assert internal_status(report) is None
    assert (
        internal_status(Report("0", "2", RunInfo(pass_spec="p", contract="meaning"), 1.0, 1, "budget", [], {})) is None
    )
