"""fxfuzz's own errors are never findings: an exception raised in fxfuzz's code while a check
runs is an InternalError (exit 70 from the CLI), one raised in torch's or the pass's code is a
finding against the pass. Decided by the frame that raised it."""

from __future__ import annotations

import handmade as hm
import pytest
from fxfuzz.cli.main import main
from fxfuzz.core.internal import EXIT_INTERNAL, InternalError, foreign, raised_by_fxfuzz
from fxfuzz.core.passes import identity_pass
from fxfuzz.oracles import checks, verify


def _bogus_stage(monkeypatch):
    # The stages row then asks fxfuzz's own stage table for a stage it lacks: a KeyError
    # raised in fxfuzz's code (oracles/stages.py), as a bug of fxfuzz would.
    monkeypatch.setattr(checks, "stages_selected", lambda code, ambient, share: ("no_such_stage",))


def test_an_error_in_fxfuzz_code_is_an_internal_error_not_a_finding(monkeypatch):
    _bogus_stage(monkeypatch)
    with pytest.raises(InternalError) as raised:
        verify(hm.no_grad_region_case(), identity_pass)
    e = raised.value
    assert e.where == "export stages" and e.exception == "KeyError"
    assert "oracles/stages.py" in e.details and "no_such_stage" in e.details


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
