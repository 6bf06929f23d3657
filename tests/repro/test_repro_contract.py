"""Repros are judged under the contract the campaign held the pass to, wherever they are judged:
``fxfuzz repro FILE.json``, the short program and the full script (with fxfuzz importable, and
without it, where only its compact check runs). A check the compact one does not re-implement is never
reported fixed."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.contract import MEANING
from fxfuzz.core.identity import identify
from fxfuzz.core.passes import load_pass
from fxfuzz.core.serialize import case_to_dict
from fxfuzz.oracles import verify
from fxfuzz.repro import standalone_check
from fxfuzz.repro.files import graph_repro_source, repro_document, write_repro
from fxfuzz.repro.short import is_short
from fxfuzz.strategies import from_module
from paths import HELPERS

# Runs a repro .py where fxfuzz's oracles cannot be imported, so only its compact check judges
# (the dce row's pass itself is an adapter of fxfuzz's catalogue, which stays importable).
WITHOUT_ORACLES = (
    "import runpy, sys; sys.modules['fxfuzz.oracles'] = None; runpy.run_path(sys.argv[1], run_name='__main__')"
)


class DeadIndexSelect(torch.nn.Module):
    """Reads index 7 of a 3-element tensor and drops the result: the graph raises, and dead-code
    elimination deletes the read, so its result does not. A refinement; not the same meaning."""

    def forward(self, x, i):
        x.index_select(0, i)
        return x.sin()


def dce_doc(contract: str | None) -> dict:
    """The dce pass's repro document of that case, held to ``contract`` (None: dce's own, refines)."""
    case = from_module(DeadIndexSelect(), (torch.randn(3), torch.tensor([7])))
    (finding,) = verify(case, load_pass("dce"), MEANING)
    assert finding.kind == "raises_differently"
    return repro_document(bucket_id(finding), finding.to_dict(), case_to_dict(case), identify("dce", contract))


def dce_repro(tmp_path, contract: str | None) -> str:
    """The .py of that repro, written as a campaign writes it: the short program."""
    return write_repro(str(tmp_path / (contract or "own")), dce_doc(contract))


def dce_full(tmp_path, contract: str | None) -> str:
    """The full script of that repro, as ``fxfuzz repro --full`` writes it."""
    path = tmp_path / f"full_{contract or 'own'}.py"
    path.write_text(graph_repro_source(dce_doc(contract)))
    return str(path)


def run_py(path: str, *prefix: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *prefix, path], capture_output=True, text=True, timeout=300)


def test_the_dce_case_is_excused_by_refinement_only():
    case = from_module(DeadIndexSelect(), (torch.randn(3), torch.tensor([7])))
    assert verify(case, load_pass("dce")) == []  # dce's own contract: refines
    assert verify(case, load_pass("dce"), MEANING)


@pytest.mark.processes
def test_fxfuzz_repro_of_the_json_follows_the_contract(cli, tmp_path):
    json_path = dce_repro(tmp_path, None)[: -len(".py")] + ".json"
    quiet = cli("repro", json_path)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    loud = cli("repro", json_path, "--contract", "meaning")
    assert loud.returncode == 1


@pytest.mark.processes
@pytest.mark.parametrize("fxfuzz_there", [False, True], ids=["compact check only", "with fxfuzz's oracles"])
def test_the_standalone_repro_follows_the_contract(tmp_path, fxfuzz_there):
    prefix = () if fxfuzz_there else ("-c", WITHOUT_ORACLES)
    own = run_py(dce_full(tmp_path, None), *prefix)
    assert own.returncode == 0 and "FAIL" not in own.stdout, own.stdout + own.stderr
    meaning = run_py(dce_full(tmp_path, "meaning"), *prefix)
    assert (
        meaning.returncode == 1
        and "FAIL equivalence: running the graph of the original raised IndexError" in meaning.stdout
    ), meaning.stdout + meaning.stderr
    if not fxfuzz_there:
        assert "fxfuzz oracles" not in meaning.stdout  # only the compact check ran


@pytest.mark.processes
def test_the_short_program_follows_the_contract(tmp_path):
    """The .py is the short program: under dce's own contract (refines) the original's raise
    excuses the result's run (exit 0); under ``meaning`` the same program exits 1."""
    own = run_py(dce_repro(tmp_path, None))
    assert own.returncode == 0, own.stdout + own.stderr
    meaning = run_py(dce_repro(tmp_path, "meaning"))
    assert meaning.returncode == 1 and "raised IndexError" in meaning.stdout, meaning.stdout + meaning.stderr
    assert is_short(open(dce_repro(tmp_path, "meaning")).read())


def _case_builder():
    case = from_module(DeadIndexSelect(), (torch.randn(3), torch.tensor([1])))  # index 1: nothing raises

    def build_case():
        c = case.copy()
        return c.gm, c.signature, c.inputs, c.ambient_grad

    return build_case


@pytest.mark.parametrize(
    "kind, status, says",
    [
        ("save_load_raised", 2, "not re-checked here: run `fxfuzz repro x.json`"),
        ("saved_tensors_mismatch", 2, "not re-checked here: run `fxfuzz repro x.json`"),
        ("value_mismatch", 0, "OK: every check passes (the bug is fixed)"),
    ],
)
def test_a_quiet_compact_check_says_fixed_only_for_a_check_it_reimplements(capsys, monkeypatch, kind, status, says):
    """A correct pass passes the compact check; it is called fixed only where the finding's
    check is one the compact check re-implements, and otherwise sent to the .json's replay."""
    monkeypatch.setattr(standalone_check.faulthandler, "enable", lambda: None)  # captured output has no file descriptor
    code = standalone_check.main(
        _case_builder(), f"{HELPERS}/reduce_passes.py:unchanged", [], "e", kind=kind, json_name="x.json"
    )
    out = capsys.readouterr().out
    assert code == status and says in out
    assert ("fixed" in out) == (status == 0)


@pytest.mark.processes
def test_fxfuzz_repro_full_runs_the_complete_script_under_the_contract(tmp_path, capfd):
    """``--full`` writes the full script for the .json beside a short program and runs it (in a
    child, whose output goes to the file descriptors: ``capfd``): under the pass's own contract
    (dce: refines) it passes, under ``--contract meaning`` it fails."""
    from fxfuzz.cli.main import main

    py = dce_repro(tmp_path, "meaning")
    assert is_short(open(py).read())
    json_path = py.removesuffix(".py") + ".json"
    capfd.readouterr()
    assert main(["repro", "--full", json_path]) == 0
    out = capfd.readouterr()
    assert "OK: every check passes" in out.out, out.out + out.err
    assert main(["repro", "--full", json_path, "--contract", "meaning"]) == 1
    assert "FAIL equivalence: running the graph of the original raised IndexError" in capfd.readouterr().out
