"""Short repros (fxfuzz.repro.short): a known finding's repro .py is a program of plain torch,
at most 40 lines, no fxfuzz; it exits 1 while the bug is there, and the graph it builds shows
the same finding when fxfuzz judges it. Each known finding with a short program is listed in
``SHORT``, by the case that shows it (tests/helpers/short_cases.py); the others, and why, in
docs/known-findings.md#short-repros, and ``LONG`` pins that they keep the full script."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest
import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.campaign.reduce import reduce_case
from fxfuzz.core.case import GraphCase
from fxfuzz.core.identity import identify
from fxfuzz.core.passes import load_pass
from fxfuzz.core.serialize import case_to_dict
from fxfuzz.oracles import verify
from fxfuzz.repro.files import load_repro, replayed, repro_document, write_repro
from fxfuzz.repro.short import MAX_LINES, is_short, short_program
from fxfuzz.strategies import from_module
from grad_merge import GRAD_MERGE, first_example
from paths import DATA, HELPERS, ROOT, TESTS
from programs import run_program
from short_cases import CASES
from torch.export import graph_signature as gs
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

# (case of tests/short_cases.py, known bucket) for every known finding that has a short program.
SHORT = [
    ("cond_under_no_grad", "equivalence-requires_grad_mismatch-ce6d8dfe"),
    ("cond_under_no_grad", "gradients-grad_presence_mismatch-66e5ff94"),
    ("cond_under_no_grad", "gradients-jvp_raises_differently-e49618fd"),
    ("no_grad_inside_autocast", "equivalence-requires_grad_mismatch-ce6d8dfe"),
    ("saves_for_backward", "gradients-saved_tensors_mismatch-bbec7ec7"),
    ("cond_added_under_no_grad", "gradients-grad_value_mismatch-7964935e"),
    ("cond_under_enable_grad", "gradients-jvp_raises_differently-e49618fd"),
    ("region_read_twice", "structure-def_use_inconsistent-99b0f75b"),
    ("users_map", "structure-def_use_inconsistent-99b0f75b"),
    ("nested_map", "crash-pass_raised-2b2fc5ab"),
    ("nested_cond", "crash-pass_raised-7c297f0d"),
    ("buffer_update", "structure-dead_code_elimination_changes_meaning-72cda7b9"),
    ("autocast_cond", "structure-leftover_call-c9af2c8b"),
    ("export_autocast_cond", "structure-leftover_call-c9af2c8b"),
    ("cse_two_regions", "equivalence-requires_grad_mismatch-ce6d8dfe"),
    ("cse_two_regions", "gradients-grad_value_mismatch-7964935e"),
    ("cse_across_toggle", "equivalence-aliasing_mismatch-16544f3e"),
    ("cse_autocast", "equivalence-meta_mismatch-19aff044"),
    ("cse_grad_leak", "equivalence-grad_mode_leak-dcf08181"),
    ("cse_grad_fn", "equivalence-grad_fn_mismatch-fd46f87f"),
    ("cse_backward", "gradients-backward_raises_differently-3bd93a99"),
    ("split_dead_code", "structure-dead_code_elimination_changes_meaning-72cda7b9"),
    ("split_after_toggle", "crash-pass_raised-b24beb5c"),
    ("fold_updated", "structure-cleanup_failed-d8725f23"),
    ("inductor_reread", "crash-pass_raised-74602ed9"),
    ("noop_alias", "equivalence-identity_mismatch-fde2bfe2"),
    ("dce_after_set_grad", "crash-pass_raised-9a4e04cc"),
    ("dce_update", "equivalence-value_mismatch-6ac4edc4"),
    ("cse_two_draws", "rng-rng_state_mismatch-b11593a3"),
    ("cse_two_draws", "equivalence-value_mismatch-6ac4edc4"),
    ("lift_unused_read", "crash-pass_raised-90500411"),
    ("x86_linear", "equivalence-state_leak-6cbae9b6"),
    ("x86_qat_linear", "equivalence-state_leak-6cbae9b6"),
    ("xnnpack_linear", "equivalence-state_leak-6cbae9b6"),
    ("x86_integer_mul", "crash-pass_raised-de3fedaf"),
    ("x86_qat_integer_mul", "crash-pass_raised-b9dfc585"),
    ("xnnpack_nan_calibration", "crash-pass_raised-d828124b"),
    ("x86_cond_in_map", "crash-pass_raised-dfccb06c"),
]


def found(case: GraphCase, spec: str) -> dict:
    return {bucket_id(f): f for f in verify(case, load_pass(spec))}


def written(tmp_path, name: str, bid: str) -> tuple[str, str, str]:
    """(spec, the repro .py's path, its source) of bucket ``bid`` on case ``name``, written as
    a campaign writes it."""
    spec, build = CASES[name]
    case = build()
    findings = found(case, spec)
    assert bid in findings, (name, sorted(findings))
    py = write_repro(str(tmp_path), repro_document(bid, findings[bid].to_dict(), case_to_dict(case), identify(spec)))
    with open(py) as fh:
        return spec, py, fh.read()


def case_of_program(source: str, exported: bool = False) -> GraphCase:
    """The graph and inputs a short program builds, as a case fxfuzz judges: the program up to
    the pass's call, its graph given metas by fake propagation where it gave none, and the
    signature its call writes (else one of user inputs)."""
    namespace: dict = {}
    exec(compile(source.split("\nnew = copy.deepcopy(gm)")[0], "short.py", "exec"), namespace)
    gm, inputs, grad = namespace["gm"], namespace["inputs"], namespace["AMBIENT_GRAD"]
    if exported:  # a pass whose caller exports the module first (pt2e): the graph export hands it
        with torch.set_grad_enabled(grad):
            return from_module(gm, tuple(inputs))
    if any("val" not in n.meta for n in gm.graph.nodes if n.op != "output"):
        mode = torch._subclasses.FakeTensorMode(allow_non_fake_inputs=True)
        with torch.set_grad_enabled(grad):
            FakeTensorProp(gm, mode).propagate(*inputs)
    written_sig = re.search(r"^\s*sig = (.*)$", source, re.M)
    if written_sig:
        signature = eval(written_sig.group(1), namespace)
    else:
        (out,) = gm.graph.find_nodes(op="output")
        signature = gs.ExportGraphSignature(
            [gs.InputSpec(gs.InputKind.USER_INPUT, gs.TensorArgument(n.name), None) for n in gm.graph.find_nodes(op="placeholder")],
            [gs.OutputSpec(gs.OutputKind.USER_OUTPUT, gs.TensorArgument(o.name) if isinstance(o, torch.fx.Node) else gs.ConstantArgument("", o), None) for o in out.args[0]],
        )  # fmt: skip
    return GraphCase(gm, signature, tuple(inputs), grad)


def assert_short(source: str) -> None:
    imported = {
        alias.name.partition(".")[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert is_short(source) and source.count("\n") <= MAX_LINES and "fxfuzz" not in imported, source


@pytest.mark.processes
@pytest.mark.parametrize(("name", "bid"), SHORT, ids=[f"{n}-{b}" for n, b in SHORT])
def test_a_known_findings_repro_is_a_short_program_that_recreates_it(tmp_path, name, bid):
    """The repro .py of the known finding: short, no fxfuzz, exit 1 on the installed torch; the
    graph it builds, judged by fxfuzz under the same pass, shows the same bucket."""
    spec, py, source = written(tmp_path, name, bid)
    assert_short(source)
    run = run_program(py, tmp_path, 600)
    assert run.returncode == 1, run.stdout + run.stderr
    assert bid in found(case_of_program(source, exported=spec.startswith("pt2e")), spec)


def test_a_pt2e_short_program_exports_a_module_owning_the_parameters(tmp_path):
    """pt2e's caller exports its own module: the short program's module owns the case's
    parameters (what a quantizer annotates as a layer's weight) rather than taking them as
    inputs, so its export has the case's inputs, kind for kind."""
    _, _, source = written(tmp_path, "xnnpack_nan_calibration", "crash-pass_raised-d828124b")
    case = CASES["xnnpack_nan_calibration"][1]()

    def kinds(c: GraphCase) -> list:
        return [(s.kind, s.target) for s in c.signature.input_specs]

    assert kinds(case_of_program(source, exported=True)) == kinds(case)


def test_every_short_case_is_a_known_finding():
    """Each bucket of ``SHORT`` is a line of the known file of its pass."""
    from fxfuzz.core.known import load_known

    def known(spec: str) -> set:
        name = spec.replace("/", "_")
        path = os.path.join(ROOT, "docs", "known", f"{name}.txt")
        files = [os.path.join(ROOT, "fxfuzz-known.txt")] + ([path] if os.path.isfile(path) else [])
        return set().union(*(load_known(p) for p in files))

    assert [(n, b) for n, b in SHORT if b not in known(CASES[n][0])] == []


# Known findings whose repro stays the full script: a custom operator of fxfuzz's in the case,
# a check the short program does not re-implement (docs/known-findings.md#short-repros).
LONG = [
    ("set_grad", "cse/equivalence-autocast_state_leak-71f39855.json"),
    ("cse", "cse/structure-rerun_changes_meaning-4082287d.json"),
    ("cse", "cse/downstream-run_decompositions_raised-1cab78ce.json"),
]


@pytest.mark.parametrize(("spec", "path"), LONG, ids=[p for _, p in LONG])
def test_a_finding_no_short_program_shows_keeps_the_full_script(spec, path):
    doc = load_repro_doc(os.path.join(DATA, path))
    assert short_program(doc) is None


def load_repro_doc(path: str) -> dict:
    import json

    with open(path) as fh:
        return json.load(fh)


@pytest.mark.processes
@pytest.mark.parametrize("seed", [3, 4])
def test_a_cse_findings_short_repro_recreates_it_and_passes_once_fixed(tmp_path, seed):
    """A campaign's first example of CSEPass's grad-mode merge, reduced: its repro .py is the
    short program, which exits 1; with CSEPass's two defects fixed (tests/helpers/fixed_cse.py) it
    exits 0."""
    cse = load_pass("cse")
    bid, case = first_example(cse, seed, GRAD_MERGE)
    reduced = reduce_case(case, lambda c: bid in {bucket_id(f) for f in verify(c, cse)}, max_steps=400).case
    finding = {bucket_id(f): f for f in verify(reduced, cse)}[bid]
    py = write_repro(str(tmp_path), repro_document(bid, finding.to_dict(), case_to_dict(reduced), identify("cse")))
    source = open(py).read()
    assert_short(source)
    run = run_program(py, tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert bid in {bucket_id(f) for f in verify(case_of_program(source), cse)}
    call = "new = CSEPass(get_CSE_banned_ops())(new).graph_module"
    assert call in source
    fixed = tmp_path / "fixed.py"
    fixed.write_text(
        source.replace(call, f"sys.path.insert(0, {HELPERS!r}); from fixed_cse import fixed_cse; new = fixed_cse(new)")
    )
    run = run_program(str(fixed), tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_short_program_is_replayed_through_its_json(tmp_path):
    """``fxfuzz repro`` of a short .py replays the .json beside it (the program holds no case
    fxfuzz reads); without that .json, one line says so."""
    doc = {
        "bucket": "b",
        "pass": "cse",
        "eliminates": [],
        "refines": True,  # as repro_document records cse's contract
        "differentiated": True,
        "device": "cpu",
        "finding": {"oracle": "equivalence", "kind": "value_mismatch", "message": "m"},
        "case": _identity_case(),
    }
    py = write_repro(str(tmp_path), doc)
    assert is_short(open(py).read())
    assert replayed(py) == py.removesuffix(".py") + ".json"
    assert load_repro(replayed(py)).pass_spec == "cse"
    os.remove(py.removesuffix(".py") + ".json")
    from fxfuzz.core.errors import SerializeError

    with pytest.raises(SerializeError, match="short program"):
        replayed(py)


def _identity_case() -> dict:
    graph = {"nodes": [{"name": "x", "op": "placeholder", "target": "x", "args": {"tuple": []}, "kwargs": {"dict": []}},
                       {"name": "output", "op": "output", "target": "output", "args": {"tuple": [{"tuple": [{"node": "x"}]}]}, "kwargs": {"dict": []}}]}  # fmt: skip
    signature = {
        "inputs": [{"kind": "USER_INPUT", "arg": {"type": "TensorArgument", "name": "x"}, "target": None, "persistent": None}],
        "outputs": [{"kind": "USER_OUTPUT", "arg": {"type": "TensorArgument", "name": "x"}, "target": None}],
    }  # fmt: skip
    return {
        "format": "fxfuzz-case/1",
        "graph": graph,
        "signature": signature,
        "inputs": [{"dtype": "float32", "shape": [1], "values": [1.0], "requires_grad": False}],
        "ambient_grad": True,
    }


def test_no_short_program_where_the_case_or_the_pass_does_not_allow_one():
    doc = {
        "bucket": "b",
        "pass": "cse",
        "refines": True,  # as repro_document records cse's contract
        "differentiated": True,
        "device": "cpu",
        "finding": {"oracle": "equivalence", "kind": "value_mismatch", "message": "m"},
    }
    case = _identity_case()
    graph = case["graph"]
    assert short_program(doc | {"case": case}) is not None
    assert short_program(doc | {"case": case, "pass": "identity"}) is None  # a pass with no plain call written
    assert short_program(doc | {"case": case, "finding": {"oracle": "downstream", "kind": "save_load_raised"}}) is None
    assert short_program(doc | {"case": case | {"custom_ops": {"fxfuzz::cube": "fxfuzz.core.custom_ops"}}}) is None
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
    # An operator name that is no identifier path is never written as code: no program.
    call = {"name": "y", "op": "call_function", "target": "aten::sin.default; import os", "args": {"tuple": [{"node": "x"}]}, "kwargs": {"dict": []}}  # fmt: skip
    evil = {**graph, "nodes": [graph["nodes"][0], call, graph["nodes"][1]]}
    assert short_program(doc | {"case": case | {"graph": evil}}) is None


@pytest.mark.processes
def test_fxfuzz_repro_full_imports_no_operator_source_the_user_did_not_name(tmp_path):
    """The full script imports the sources of the case's operators: one the .json names that no
    ``--op`` gave is refused in one line, before anything runs."""
    import json

    case = _identity_case() | {"custom_ops": {"userops::scale": "user_ops"}}
    doc = {"bucket": "b", "pass": "set_grad", "eliminates": [], "device": "cpu", "case": case}
    path = tmp_path / "user.json"
    path.write_text(json.dumps(doc | {"finding": {"oracle": "equivalence", "kind": "value_mismatch", "message": "m"}}))
    argv = [sys.executable, "-m", "fxfuzz", "repro", "--full", str(path), "--op", os.path.join(HELPERS, "user_ops.py")]
    run = subprocess.run(argv, capture_output=True, text=True, cwd=TESTS, timeout=300)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "user_ops" in run.stderr, run.stderr


def test_the_issue_text_embeds_the_short_program_and_says_how_to_run_it():
    """Where the .py is the short program, the issue text shows it whole (no full script
    folded below it) and names the .json replay and ``--full``."""
    from fxfuzz.report.issue import render_issue
    from fxfuzz.report.schema import Report, ReportFinding
    from handmade import report_with

    row = {"id": "b", "oracle": "equivalence", "kind": "value_mismatch", "message": "m", "details": {}, "count": 1,
           "known": False, "repro": "repros/b.py", "graph_nodes": 3, "graph_code": "x", "ambient_grad": True}  # fmt: skip
    short = "FINDING = 'b: ```'\nimport sys\nsys.exit(1)\n"
    text = render_issue(Report.from_data(report_with([row])), ReportFinding.from_data(row), None, short)
    assert "````python\n" + short + "````" in text and "<details>" not in text
    assert "## How to run" in text and "fxfuzz repro --full repros/b.json" in text
