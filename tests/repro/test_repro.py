"""Serialized cases round-trip; repros rebuild the case standalone and fail while the bug is there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from fxfuzz.cli.main import main
from fxfuzz.core.case import GraphCase
from fxfuzz.core.identity import identify
from fxfuzz.core.passes import load_pass
from fxfuzz.core.serialize import case_from_dict, case_to_dict
from fxfuzz.oracles import verify
from fxfuzz.repro.files import graph_repro_source, load_repro, repro_document, write_repro
from fxfuzz.strategies import graph_cases
from handmade import PLANTED, independent_outputs_case, no_grad_region_case, raising_case, run_standalone
from hypothesis import assume, given, settings
from paths import DATA, HELPERS

real = load_pass("set_grad")


def _round_trip(case: GraphCase) -> GraphCase:
    return case_from_dict(json.loads(json.dumps(case_to_dict(case))))


def _findings(case: GraphCase) -> list[dict]:
    return [f.to_dict() for f in verify(case, real)]


@settings(max_examples=25)
@given(graph_cases())
def test_round_trip_keeps_code_signature_and_findings(case):
    back = _round_trip(case)
    assert back.code() == case.code()
    assert str(back.signature) == str(case.signature)
    assert back.ambient_grad == case.ambient_grad
    stacks = [[n.meta.get("nn_module_stack") for n in c.gm.graph.nodes] for c in (case, back)]
    assert stacks[0] == stacks[1]
    assert all(torch.equal(a, b) and a.requires_grad == b.requires_grad for a, b in zip(case.inputs, back.inputs))
    assert _findings(back) == _findings(case)


@settings(max_examples=10)
@given(graph_cases())
def test_round_trip_of_the_pass_output_keeps_nested_hop_subgraphs(case):
    """The real pass's output has get_attr submodules and HOP calls: the format must carry them."""
    work = case.copy()
    try:
        with torch.set_grad_enabled(case.ambient_grad):
            gm, sig = real(work.gm, work.signature)
    except Exception:
        assume(False)  # a crash of the real pass is the oracles' business, not this test's
    out = GraphCase(gm, sig, case.inputs, case.ambient_grad)
    back = _round_trip(out)
    assert back.code() == out.code()
    assert [n for n, _ in back.gm.named_children()] == [n for n, _ in out.gm.named_children()]


def test_repro_file_names_hold_no_character_artifact_stores_refuse(tmp_path):
    """CUDA-side kinds put a colon in the bucket id; upload-artifact (and Windows) refuse it."""
    case = no_grad_region_case(ambient=True)
    finding = {"oracle": "equivalence", "kind": "cuda:value_mismatch", "message": "m", "details": {}}
    doc = repro_document("equivalence-cuda:value_mismatch-0123abcd", finding, case_to_dict(case), identify("set_grad"))
    py = write_repro(str(tmp_path / "repros"), doc)
    assert sorted(os.listdir(tmp_path / "repros")) == [
        "equivalence-cuda_value_mismatch-0123abcd.json",
        "equivalence-cuda_value_mismatch-0123abcd.py",
    ]
    assert (
        load_repro(py[:-3] + ".json").finding["kind"] == "cuda:value_mismatch"
        and load_repro(py).case.code() == case.code()
    )


def _planted_repro(tmp_path, suffix: str = "") -> tuple[str, str, GraphCase]:
    """(spec, repro .py path, case) of the planted bug (``suffix`` appended to its spec)."""
    pass_file = tmp_path / "planted.py"
    pass_file.write_text(PLANTED)
    spec = f"{pass_file}:drop_toggles{suffix}"
    case = no_grad_region_case(ambient=True)
    found = verify(case, load_pass(spec))
    assert found, "the planted bug must show on this case"
    doc = repro_document("planted-bug", found[0].to_dict(), case_to_dict(case), identify(spec))
    return spec, write_repro(str(tmp_path / "repros"), doc), case


@pytest.mark.processes
def test_standalone_repro_fails_while_the_bug_is_there_and_fxfuzz_repro_agrees(tmp_path):
    spec, py, case = _planted_repro(tmp_path)
    pass_file = tmp_path / "planted.py"

    run = run_standalone(py)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAIL" in run.stdout and "ModuleNotFoundError" not in run.stderr

    # Both forms load back to the same graph, and replay through the CLI.
    for path in (py, py[:-3] + ".json"):
        back = load_repro(path)
        assert back.case.code() == case.code() and back.pass_spec == spec and back.device == "cpu"
    assert main(["repro", py]) == 1
    assert main(["repro", py[:-3] + ".json", "--pass", "set_grad"]) == 0

    # Fix the pass (delegate to torch's real one): the same standalone file now passes.
    pass_file.write_text(
        "from torch._export.passes.replace_set_grad_with_hop_pass import replace_set_grad_with_hop_pass\n"
        "def drop_toggles(gm, sig):\n    return replace_set_grad_with_hop_pass(gm, sig)\n"
    )
    run = run_standalone(py)
    assert run.returncode == 0 and "OK" in run.stdout, run.stdout + run.stderr


@pytest.mark.processes
def test_a_repro_whose_original_graph_raises_gives_fxfuzz_repros_verdict(tmp_path):
    """Both graphs raise IndexError, so the oracles find nothing; the standalone file must say
    the same (with or without fxfuzz to import), not print the original's traceback."""
    case = raising_case()
    assert verify(case, real) == []
    finding = {"oracle": "equivalence", "kind": "value_mismatch", "message": "m", "details": {}}
    doc = repro_document("raises", finding, case_to_dict(case), identify("set_grad"))
    py = write_repro(str(tmp_path / "repros"), doc)  # the short program
    assert main(["repro", py]) == 0
    short = subprocess.run([sys.executable, py], capture_output=True, text=True, timeout=300)
    assert short.returncode == 0 and "Traceback" not in short.stderr, short.stdout + short.stderr
    full = tmp_path / "full.py"  # the full script, as fxfuzz repro --full writes it
    full.write_text(graph_repro_source(doc))
    with_fxfuzz = subprocess.run([sys.executable, str(full)], capture_output=True, text=True, timeout=300)
    for run in (run_standalone(str(full)), with_fxfuzz):
        assert run.returncode == 0 and "OK" in run.stdout and "Traceback" not in run.stderr, run.stdout + run.stderr


@pytest.mark.processes
@pytest.mark.parametrize("exit_call", ["sys.exit(0)", "os._exit(0)"])
def test_a_repro_that_exits_on_its_own_is_never_read_as_fixed(tmp_path, capfd, exit_call):
    """fxfuzz repro runs the file only in its child, and reads the verdict from the replay, not
    from the child's exit status: a file that exits 0 when loaded gets no verdict."""
    case = no_grad_region_case(ambient=True)
    finding = {"oracle": "structure", "kind": "leftover_call", "message": "m", "details": {}}
    (tmp_path / "planted.py").write_text(PLANTED)
    py = write_repro(
        str(tmp_path / "repros"),
        repro_document("exits", finding, case_to_dict(case), identify(f"{tmp_path}/planted.py:drop_toggles")),
    )
    assert main(["repro", py]) == 1  # the planted bug, while the file is well-behaved
    with open(py, "a") as fh:
        fh.write(f"\nimport os, sys\n{exit_call}\n")
    capfd.readouterr()
    assert main(["repro", py]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fxfuzz: error:") and "exited with status 0" in err[0], err


@pytest.mark.processes
@pytest.mark.parametrize(
    ("body", "verdict"),
    [
        ("ctypes.string_at(0)", "FAIL the process running the pass was killed by SIGSEGV"),
        ("time.sleep(600)", "FAIL the process running the pass did not return within 3s"),
        # SystemExit escaping the pass's call is its crash (fxfuzz.oracles), judged in the child.
        ("sys.exit(0)", "FAIL [crash/pass_raised] the pass raised SystemExit: 0"),
        ("raise KeyboardInterrupt", "FAIL the process running the pass exited with status 1"),
    ],
)
def test_a_pass_that_kills_or_hangs_the_replay_fails_it(tmp_path, capfd, body, verdict):
    (tmp_path / "bad.py").write_text(f"import ctypes, sys, time\ndef bad(gm, sig):\n    {body}\n")
    py = write_repro(
        str(tmp_path / "repros"),
        repro_document(
            "b",
            {"oracle": "crash", "kind": "k", "message": "m"},
            case_to_dict(no_grad_region_case()),
            identify("set_grad"),
        ),
    )
    assert main(["repro", py, "--pass", f"{tmp_path}/bad.py:bad", "--example-timeout", "3"]) == 1
    assert f"fxfuzz repro: {verdict}" in capfd.readouterr().out


@pytest.mark.processes
def test_a_downstream_finding_replays_through_its_stage_whatever_share_the_case_hashes_to(tmp_path, capfd):
    """A campaign takes a share of cases through export's stages, by a hash of each case's
    code, and forces them while a downstream bucket shrinks: the minimized case need not hash
    into the share. Its replay still runs the stage, so it is never "fixed" while the bug is
    there (``fxfuzz repro`` and the full script alike)."""
    case = no_grad_region_case(ambient=True)
    spec = f"{HELPERS}/broken_passes.py:unsaveable"
    assert verify(case, load_pass(spec)) == []  # outside the share
    finding = {"oracle": "downstream", "kind": "save_load_raised", "message": "m", "details": {}}
    doc = repro_document("d", finding, case_to_dict(case), identify(spec))
    py = write_repro(str(tmp_path / "repros"), doc)
    capfd.readouterr()
    assert main(["repro", py[:-3] + ".json", "--pass", spec]) == 1
    assert "FAIL [downstream/save_load_raised]" in capfd.readouterr().out
    full = tmp_path / "full.py"
    full.write_text(graph_repro_source(doc))
    run = subprocess.run([sys.executable, str(full)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "save_load" in run.stdout, run.stdout + run.stderr


@pytest.mark.processes
def test_a_repro_is_judged_under_the_passs_own_contract_not_the_one_it_records(tmp_path, capfd):
    """The recorded contract is the sender's word: a .json saying post_grad (never
    differentiated) cannot turn a wrong derivative into "fixed". --contract still asks for it."""
    finding = {"oracle": "gradients", "kind": "tangent_value_mismatch", "message": "m"}
    doc = repro_document(
        "b", finding, case_to_dict(independent_outputs_case(ambient=False)), identify("set_grad", "post_grad")
    )
    path = write_repro(str(tmp_path / "repros"), doc)[:-3] + ".json"
    wrong = f"{HELPERS}/broken_passes.py:wrong_sin_grad"
    capfd.readouterr()
    assert main(["repro", path, "--pass", wrong]) == 1
    out = capfd.readouterr().out
    assert "note: recorded under --contract post_grad; judged under set_grad" in out and "FAIL [gradients/" in out, out
    assert main(["repro", path, "--pass", wrong, "--contract", "post_grad"]) == 0


@pytest.mark.processes
def test_malformed_repro_is_one_line_exit_2(tmp_path, capsys):
    bad_case = tmp_path / "bad.json"
    bad_case.write_text(
        '{"case": {"format": "fxfuzz-case/1", "graph": {"nodes": [{"op": "call_function"}]}}, "pass": "set_grad", "finding": {}}'
    )
    not_json = tmp_path / "x.json"
    not_json.write_text("{nope")
    not_repro = tmp_path / "r.py"
    not_repro.write_text("x = 1\n")
    for path in (bad_case, not_json, not_repro, tmp_path / "missing.py", tmp_path / "notes.txt"):
        capsys.readouterr()
        assert main(["repro", str(path)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith("fxfuzz: error:"), err


@pytest.mark.processes
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the repro would replay there")
def test_a_cuda_finding_is_never_called_fixed_where_cuda_is_missing(tmp_path, capsys):
    """A cuda: finding shows only on CUDA; replaying it on CPU alone would pass and say
    "fixed". The repro records the device: fxfuzz refuses to replay it without CUDA, and the
    standalone file says it cannot judge (exit 2) instead of passing."""
    case = no_grad_region_case(ambient=True)
    finding = {"oracle": "equivalence", "kind": "cuda:value_mismatch", "message": "m", "details": {}}
    bucket = "equivalence-cuda:value_mismatch-0123abcd"
    doc = repro_document(bucket, finding, case_to_dict(case), identify("set_grad"), "cuda")
    py = write_repro(str(tmp_path / "repros"), doc)
    assert load_repro(py).device == load_repro(py[:-3] + ".json").device == "cuda"
    for path in (py, py[:-3] + ".json"):
        assert main(["repro", path]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "CUDA" in err[0], err
    run = run_standalone(py)
    assert run.returncode == 2 and "UNDECIDED" in run.stdout, run.stdout + run.stderr
    assert verify(case, real) == []  # what the CPU-only checks alone would have concluded


@pytest.mark.processes
def test_a_repro_written_before_the_fxfuzz_namespace_replays_after_it(capfd):
    """Written by the code of the fuzz/strategies/oracles top-level packages: the repro format
    and bucket ids did not change with the move, so the finding still replays as itself."""
    path = os.path.join(DATA, "repro_before_namespace.json")
    back = load_repro(path)
    assert back.pass_spec == "set_grad" and len(back.case.gm.graph.nodes) > 0
    assert main(["repro", path]) == 1
    assert "FAIL [structure/def_use_inconsistent]" in capfd.readouterr().out


@pytest.mark.processes
def test_a_pipeline_repro_records_its_spec_and_replays_every_part(tmp_path):
    """A repro of ``planted+autocast`` names the pipeline, and both the standalone file (torch
    only) and ``fxfuzz repro`` run its parts in sequence."""
    spec, py, _ = _planted_repro(tmp_path, "+autocast")
    assert load_repro(py).pass_spec == spec == load_repro(py[:-3] + ".json").pass_spec
    run = run_standalone(py)
    assert run.returncode == 1 and "FAIL" in run.stdout, run.stdout + run.stderr
    # A .json names a pass file for information only: it replays once the user gives it.
    assert main(["repro", py[:-3] + ".json"]) == 2
    assert main(["repro", py[:-3] + ".json", "--pass", spec]) == 1
    assert main(["repro", py[:-3] + ".json", "--pass", "set_grad+autocast"]) == 0
