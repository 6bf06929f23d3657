"""Short repros (fxfuzz.repro.short): the reduced graph of a finding written as a program of plain
torch, at most 40 lines, no fxfuzz; it exits 1 while the bug is there and 0 under a fixed pass,
and the graph it builds shows the same finding when fxfuzz judges it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.campaign.reduce import reduce_case
from fxfuzz.core.case import GraphCase
from fxfuzz.core.passes import load_pass
from fxfuzz.core.serialize import case_to_dict
from fxfuzz.oracles import verify
from fxfuzz.repro.files import repro_document, write_repro
from fxfuzz.repro.short import SHORT, short_program
from grad_merge import GRAD_MERGE, first_example
from paths import HELPERS
from torch.export import graph_signature as gs
from torch.fx.passes.fake_tensor_prop import FakeTensorProp


def case_of_program(source: str) -> GraphCase:
    """The graph and inputs a short program builds, as a case fxfuzz judges: the program runs
    up to its exit, its graph gets metas by fake propagation and a signature of user inputs."""
    namespace: dict = {}
    with pytest.raises(SystemExit):
        exec(compile(source, "short.py", "exec"), namespace)
    gm, inputs = namespace["gm"], namespace["inputs"]
    with torch.set_grad_enabled(namespace["AMBIENT_GRAD"]):
        FakeTensorProp(gm).propagate(*inputs)
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    (out,) = gm.graph.find_nodes(op="output")
    outputs = out.args[0]
    signature = gs.ExportGraphSignature(
        [gs.InputSpec(gs.InputKind.USER_INPUT, gs.TensorArgument(p), None) for p in placeholders],
        [
            gs.OutputSpec(
                gs.OutputKind.USER_OUTPUT,
                gs.TensorArgument(o.name) if isinstance(o, torch.fx.Node) else gs.ConstantArgument("", o),
                None,
            )
            for o in outputs
        ],
    )
    return GraphCase(gm, signature, tuple(inputs), namespace["AMBIENT_GRAD"])


@pytest.mark.processes
# Seeds whose reduced case a program without fxfuzz can build: seed 5's keeps fxfuzz's own
# custom operator split_sign, which only the full .py defines, so it has no short program.
@pytest.mark.parametrize("seed", [3, 4])
def test_a_cse_findings_short_repro_recreates_it_and_passes_once_fixed(tmp_path, seed):
    cse = load_pass("cse")
    bid, case = first_example(cse, seed, GRAD_MERGE)
    reduced = reduce_case(case, lambda c: bid in {bucket_id(f) for f in verify(c, cse)}, max_steps=400).case
    finding = {bucket_id(f): f for f in verify(reduced, cse)}[bid]
    py = write_repro(str(tmp_path), repro_document(bid, finding.to_dict(), case_to_dict(reduced), "cse"))
    short_path = py[: -len(".py")] + SHORT
    source = open(short_path).read()
    assert source.count("\n") <= 40 and "fxfuzz" not in source.replace(bid, ""), source
    run = subprocess.run([sys.executable, short_path], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert bid in {bucket_id(f) for f in verify(case_of_program(source), cse)}
    # The same program with CSEPass's two defects fixed (tests/helpers/fixed_cse.py) exits 0.
    fixed = tmp_path / "fixed.py"
    call = "new = CSEPass(get_CSE_banned_ops())(copy.deepcopy(gm)).graph_module"
    assert call in source
    fixed.write_text(
        source.replace(
            call,
            f"sys.path.insert(0, {HELPERS!r}); from fixed_cse import fixed_cse; new = fixed_cse(copy.deepcopy(gm))",
        )
    )
    run = subprocess.run([sys.executable, str(fixed)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_no_short_program_where_the_case_or_the_pass_does_not_allow_one():
    doc = {
        "bucket": "b",
        "pass": "cse",
        "device": "cpu",
        "finding": {"oracle": "equivalence", "kind": "value_mismatch", "message": "m"},
    }
    graph = {"nodes": [{"name": "x", "op": "placeholder", "target": "x", "args": {"tuple": []}, "kwargs": {"dict": []}},
                       {"name": "output", "op": "output", "target": "output", "args": {"tuple": [{"tuple": [{"node": "x"}]}]}, "kwargs": {"dict": []}}]}  # fmt: skip
    case = {
        "graph": graph,
        "inputs": [{"dtype": "float32", "shape": [1], "values": [1.0], "requires_grad": False}],
        "ambient_grad": True,
    }
    assert short_program(doc | {"case": case}) is not None
    assert short_program(doc | {"case": case, "pass": "set_grad"}) is None  # a pass with no plain call written
    assert short_program(doc | {"case": case, "finding": {"oracle": "downstream", "kind": "save_load_raised"}}) is None
    nested = case | {"graph": graph | {"submodules": {"body": graph}}}
    assert short_program(doc | {"case": nested}) is None
    # A node name from the data is written with repr: quotes and newlines stay inside the literal.
    hostile = {
        **graph,
        "nodes": [
            {**graph["nodes"][0], "name": "x'\nimport os"},
            graph["nodes"][1] | {"args": {"tuple": [{"tuple": [{"node": "x'\nimport os"}]}]}},
        ],
    }
    source = short_program(doc | {"case": case | {"graph": hostile}})
    assert source is not None and "\nimport os" not in source
