"""The pass under test is resolved once per process into one ``PassIdentity``, which the settings,
the worker start, the result and report.json carry: a campaign loads its pass once in each
process, the supervisor keys the database and the repro writer holds each bucket to the
contract without loading it again."""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import fxfuzz
import fxfuzz.oracles
import fxfuzz.strategies
import pytest
from fxfuzz.cli.main import main
from fxfuzz.core.errors import ReportError
from fxfuzz.core.identity import PassIdentity, identify, resolve_pass
from fxfuzz.report.merge import load_inputs, merge_reports
from fxfuzz.report.reader import read_report
from fxfuzz.repro.files import repro_document
from paths import HELPERS

COUNTED = os.path.join(HELPERS, "counted_passes.py") + ":Counted"


@pytest.mark.processes
def test_a_campaign_loads_its_pass_once_in_each_process(tmp_path, monkeypatch):
    """``fxfuzz run`` in this process: the command, the fork that checks loading survives and
    each worker load the pass once; the supervisor (database key) and the repro writer (a repro
    per bucket) load it not at all."""
    loads = tmp_path / "loads"
    monkeypatch.setenv("FXFUZZ_TEST_LOADS", str(loads))
    out = tmp_path / "report"
    status = main(
        [
            "run", "--pass", COUNTED, "--workers", "2", "--max-examples", "6",
            "--max-shrink-s", "0", "--seed", "1", "--db", str(tmp_path / "db"), "--report-dir", str(out),
        ]
    )  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert status == 1 and len(report["findings"]) == 2, report["findings"]
    assert all(f["repro"] for f in report["findings"])
    per_process = Counter(loads.read_text().split())
    assert per_process[str(os.getpid())] == 1, per_process
    assert set(per_process.values()) == {1} and len(per_process) >= 3, per_process  # this one, two workers
    assert report["identity"]["spec"] == COUNTED
    assert read_report(str(out)).identity == identify(COUNTED)


def test_one_function_resolves_a_contract_option():
    """``contract_option`` is called in ``resolve_pass`` and nowhere else in the package."""
    roots = {Path(p).parent for p in (fxfuzz.__file__, fxfuzz.oracles.__file__, fxfuzz.strategies.__file__)}
    callers = {
        path.name
        for root in roots
        for path in root.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "contract_option"
    }
    assert callers == {"identity.py"}, callers


def test_the_identity_keys_the_database_as_loaded_passes_always_were():
    """Databases written before the identity keep replaying: its key is the one the engine
    computed from the loaded pass (``fuzz.passes:`` and the import spec)."""
    identity = identify("set_grad")
    target = "torch._export.passes.replace_set_grad_with_hop_pass:replace_set_grad_with_hop_pass"
    assert identity.target == target
    assert identity.database_key("export") == hashlib.sha384(f"fxfuzz|fuzz.passes:{target}|export".encode()).digest()
    assert identity.database_key("export") != identity.database_key("aten")


def test_the_identity_says_what_the_pass_is_held_to():
    own, given = identify("set_grad"), identify("set_grad", "refines")
    assert (own.given, own.contract, own.contract_source, own.refines) == (None, "set_grad", "registered", False)
    assert own.eliminates == ("torch._C._set_grad_enabled",)
    assert (given.given, given.contract, given.contract_source, given.refines) == ("refines", "refines", "given", True)
    assert given.eliminates == ()
    # A pipeline held to a given contract: the name given, apart from its parts' union.
    piped = identify("set_grad+dce", "refines")
    assert (piped.given, piped.contract) == ("refines", "refines+refines")
    pass_fn, identity = resolve_pass("remove_noop_ops")
    assert identity.differentiated is False and pass_fn.contract.name == identity.contract == "post_grad"


def test_the_identity_travels_as_data_and_refuses_anything_else():
    identity = identify("set_grad+dce", "refines")
    assert PassIdentity.from_data(json.loads(json.dumps(identity.to_data()))) == identity
    data = identity.to_data()
    for broken in (
        [],
        {**data, "spec": 3},
        {**data, "given": ["refines"]},
        {**data, "contract_source": "rumour"},
        {**data, "refines": "yes"},
        {**data, "eliminates": "torch._C._set_grad_enabled"},
        {k: v for k, v in data.items() if k != "target"},
    ):
        with pytest.raises(ValueError, match="pass identity"):
            PassIdentity.from_data(broken)


def test_a_repro_takes_the_contract_from_the_identity_without_loading_the_pass():
    """The writer never loads the pass: a spec no process could load still gets its repro,
    judged as the identity says."""
    from fxfuzz.campaign.gate import gate_corpus
    from fxfuzz.core.serialize import case_to_dict

    held = PassIdentity("nowhere.py:f", "nowhere.py:f", "post_grad", "post_grad", "given", True, False, ("a::b.c",))
    _, case = gate_corpus()[0]
    doc = repro_document("b", {"message": "m"}, case_to_dict(case), held)
    assert (doc["contract"], doc["refines"], doc["differentiated"], doc["eliminates"]) == (
        "post_grad",
        True,
        False,
        ["a::b.c"],
    )
    assert doc["pass"] == os.path.abspath("nowhere.py") + ":f"


def _report(folder, identity) -> str:
    folder.mkdir()
    report = {
        "schema": 2, "tool": "fxfuzz", "version": "0", "torch_version": "0", "pass": "set_grad", "domain": "export",
        "contract": "set_grad", "examples": 1, "duration_s": 1.0, "stopped_by": "max_examples", "findings": [],
        "stats": {}, "identity": identity,
    }  # fmt: skip
    (folder / "report.json").write_text(json.dumps(report))
    return str(folder)


def test_the_reader_reads_the_identity_back_typed_and_refuses_a_malformed_one(tmp_path):
    identity = identify("set_grad")
    assert read_report(_report(tmp_path / "a", identity.to_data())).identity == identity
    assert read_report(_report(tmp_path / "old", None)).identity is None
    with pytest.raises(ReportError, match="'identity'"):
        read_report(_report(tmp_path / "bad", {**identity.to_data(), "refines": "no"}))


def test_shards_of_different_passes_are_not_merged(tmp_path):
    """Two shards name the same pass and contract, but resolved them differently (another
    contract given): one campaign they are not."""
    a, same = (_report(tmp_path / name, identify("set_grad").to_data()) for name in ("a", "same"))
    b = _report(tmp_path / "b", identify("set_grad", "set_grad").to_data())
    with pytest.raises(ReportError, match="different pass"):
        merge_reports(load_inputs([a, b], str(tmp_path / "out")))
    assert merge_reports(load_inputs([a, same], str(tmp_path / "out"))).report.identity == identify("set_grad")
