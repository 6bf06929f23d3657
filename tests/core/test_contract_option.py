"""``--contract NAME``: one name table, the pass held to it wherever a pass is loaded (run and
its workers, gate both sides, repro, bench, mutate, the plugin), and recorded in reports and
repros."""

from __future__ import annotations

import json

import pytest
from fxfuzz.core.choices import CONTRACT_NAMES
from fxfuzz.core.contract import CONTRACTS, MEANING, REFINES, contract_option
from fxfuzz.core.errors import UsageError
from fxfuzz.core.identity import identify
from fxfuzz.core.passes import load_pass
from fxfuzz.repro.files import load_repro, repro_document

pytest_plugins = ["pytester"]

SHAPED = "tests/helpers/shaped_passes.py"


def test_the_torch_free_names_are_the_contracts():
    assert CONTRACT_NAMES == tuple(CONTRACTS)


def test_a_given_contract_wins_over_a_registered_and_a_default_one():
    assert load_pass("set_grad").contract_source != "given"
    held = load_pass("set_grad", contract_option("meaning"))
    assert held.contract is MEANING and held.contract_source == "given"
    plain = load_pass(f"{SHAPED}:drops_toggles")  # declares nothing
    assert plain.contract is MEANING and plain.contract_source == "default"
    assert load_pass(f"{SHAPED}:module_identity", contract_option("refines")).contract is REFINES
    assert contract_option(None) is None
    with pytest.raises(UsageError, match="unknown contract"):
        contract_option("bogus")


def test_a_callable_declares_its_contract_by_name_or_object_and_anything_else_is_one_line(tmp_path, refused):
    source = "def by_name(gm):\n    return gm\nby_name.fxfuzz_contract = 'approximates'\n"
    source += "def bogus(gm):\n    return gm\nbogus.fxfuzz_contract = 'approximately'\n"
    (tmp_path / "declared.py").write_text(source)
    held = load_pass(f"{tmp_path / 'declared.py'}:by_name")
    assert held.contract is CONTRACTS["approximates"] and held.contract_source == "declared"
    assert load_pass(f"{SHAPED}:module_identity", REFINES).contract is REFINES
    line = refused(["run", "--pass", f"{tmp_path / 'declared.py'}:bogus", "--max-examples", "1", "--no-db"])
    assert "fxfuzz_contract = 'approximately'" in line and "expected a contract name" in line


@pytest.mark.parametrize("command", ["run", "gate", "repro", "bench", "mutate"])
def test_an_unknown_contract_is_one_usage_error(refused, command):
    argv = {"repro": ["repro", "x.json"], "gate": ["gate", "--candidate", "set_grad"]}.get(command, [command])
    assert "--contract" in refused([*argv, "--contract", "bogus"])


def test_the_plugin_refuses_an_unknown_contract(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--fxfuzz-pass", "set_grad", "--fxfuzz-contract", "bogus")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fxfuzz-contract*invalid choice*bogus*"])


def test_a_repro_records_its_contract_and_refuses_a_name_outside_the_table(tmp_path):
    from fxfuzz.core.serialize import case_to_dict
    from fxfuzz.strategies.corpus import gate_corpus

    _, case = gate_corpus()[0]
    doc = repro_document("b", {"message": "m"}, case_to_dict(case), identify(f"{SHAPED}:module_identity", "refines"))
    assert doc["contract"] == "refines"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert load_repro(str(path)).contract == "refines"
    path.write_text(json.dumps({**doc, "contract": "os.system"}))
    from fxfuzz.core.errors import SerializeError

    with pytest.raises(SerializeError, match='"contract" is one of'):
        load_repro(str(path))


@pytest.mark.processes
def test_run_holds_the_pass_and_its_workers_to_the_contract_and_reports_it(tmp_path):
    """A toggle-dropping gm -> gm pass is found under refines; report.json and its repro say
    refines was given, and the repro replays under it when asked to (80 examples: the pass declares no node
    kinds, so cases keep the default mix, about half without a toggle)."""
    from fxfuzz.cli.main import main

    report_dir = tmp_path / "r"
    status = main(
        [
            "run",
            "--pass",
            f"{SHAPED}:drops_toggles",
            "--contract",
            "refines",
            "--max-examples",
            "80",
            "--seed",
            "3",
            "--workers",
            "1",
            "--no-db",
            "--max-shrink-s",
            "0",
            "--report-dir",
            str(report_dir),
        ]
    )
    report = json.loads((report_dir / "report.json").read_text())
    assert (report["contract"], report["contract_source"], report["identity"]["given"]) == (
        "refines",
        "given",
        "refines",
    )
    assert status == 1 and report["findings"], report["stats"]
    repro = report_dir / report["findings"][0]["repro"].replace(".py", ".json")
    assert json.loads(repro.read_text())["contract"] == "refines"
    assert main(["repro", str(repro), "--pass", f"{SHAPED}:drops_toggles", "--contract", "refines"]) == 1
