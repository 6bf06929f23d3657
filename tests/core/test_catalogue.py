"""The catalogue of torch's own FX passes: each row loads, runs as torch calls it, does its job
on a case made for it, and is listed by ``fxfuzz passes``."""

from __future__ import annotations

import importlib
import json

import handmade as hm
import pytest
import torch
from fxfuzz.core.case import GraphCase
from fxfuzz.core.choices import CONTRACT_NAMES, DOMAIN_CHOICES
from fxfuzz.core.passes import _PT2E_ROWS, _TORCH_ROWS, REGISTRY, load_pass
from fxfuzz.oracles import verify
from fxfuzz.strategies.builder import GraphBuilder
from fxfuzz.tools.mutants import enumerate_mutants, load_pass_variant
from torch.export.graph_signature import InputKind

aten = torch.ops.aten
# What the identity promises: meaning alone, so each pass is judged on what it does.
CONTRACT = REGISTRY["identity"].contract
CATALOGUE = [r.name for r in (*_TORCH_ROWS, *_PT2E_ROWS)]
# A finding that says fxfuzz could not run or judge the pass: an adapter's fault, never torch's.
HARNESS_FAULTS = {"bad_return", "check_impossible", "signature_missing"}


def redundant_case() -> GraphCase:
    """w * (clone(sin(x)) + sin(x)), and a dead cos(x): something for every catalogue pass."""
    b = GraphBuilder(grad_mode=True)
    w = b.placeholder("p_w", torch.tensor([0.5, -1.0, 2.0], requires_grad=True), InputKind.PARAMETER, "w")
    x = b.placeholder("x", torch.tensor([1.0, 2.0, 3.0], requires_grad=True), InputKind.USER_INPUT)
    first, second = b.call(aten.sin.default, [x]), b.call(aten.sin.default, [x])
    b.call(aten.cos.default, [x])
    total = b.call(aten.add.Tensor, [b.call(aten.clone.default, [first]), second])
    gm, sig = b.finish([b.call(aten.mul.Tensor, [total, w])])
    return GraphCase(gm, sig, tuple(b.inputs))


def targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("name", CATALOGUE)
def test_each_row_loads_with_its_contract_domain_and_sources(name):
    row = REGISTRY[name]
    assert load_pass(name).contract is row.contract and row.contract.name in CONTRACT_NAMES
    assert row.domain in DOMAIN_CHOICES and row.sources
    for source in row.sources:
        module = importlib.import_module(source.module)
        assert all(hasattr(module, f) for f in source.functions)


@pytest.mark.parametrize("name", CATALOGUE)
@pytest.mark.parametrize(
    "make",
    [hm.no_grad_region_case, hm.view_output_case, hm.buffer_update_case, hm.pytree_case, redundant_case],
    ids=lambda f: f.__name__,
)
def test_each_pass_runs_through_verify_without_a_harness_fault(name, make):
    findings = verify(make(), load_pass(name), CONTRACT)
    assert not [f for f in findings if f.kind in HARNESS_FAULTS]


@pytest.mark.parametrize(
    "name, gone",
    [
        ("cse", [aten.sin.default]),
        ("aot_cse", [aten.sin.default]),
        ("dce", [aten.cos.default]),
        ("constant_folding", [aten.cos.default]),
        ("remove_effect_tokens", [aten.cos.default]),
        ("remove_noop_ops", [aten.clone.default]),
    ],
)
def test_each_pass_does_its_job(name, gone):
    """Not vacuous: each adapter reaches the real pass, which removes what it should."""
    case = redundant_case()
    gm, _ = load_pass(name)(case.gm, case.signature)
    before, after = targets(redundant_case().gm), targets(gm)
    for target in gone:
        assert after.count(target) == before.count(target) - 1
    assert len(after) == len(before) - len(gone)


@pytest.mark.parametrize("name", ["remove_effect_tokens", "move_to_device"])
def test_passes_on_an_exported_program_keep_the_calling_convention(name):
    """ExportedProgram flattens its graph's codegen; the adapter puts the original's back."""
    assert verify(hm.pytree_case(), load_pass(name), CONTRACT) == []


@pytest.mark.parametrize("name", CATALOGUE)
def test_set_grad_then_each_pass_loads_as_a_pipeline(name):
    p = load_pass(f"set_grad+{name}")
    assert p.contract.name == f"set_grad+{REGISTRY[name].contract.name}"
    assert p.takes_signature is (load_pass(name).takes_signature)  # set_grad takes it


@pytest.mark.parametrize("name", [r.name for r in _TORCH_ROWS if any(s.mutate for s in r.sources)])
def test_mutable_rows_load_their_fresh_copy_in_its_shape(name):
    assert enumerate_mutants(name)
    assert verify(redundant_case(), load_pass_variant(name), CONTRACT) == verify(
        redundant_case(), load_pass(name), CONTRACT
    )


def test_passes_lists_every_row(capsys):
    from fxfuzz.cli.main import main

    assert main(["passes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["name", "contract", "domain", "context"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == set(REGISTRY)
    assert rows["aot_cse"][1:5] == ["refines", "aten", "-", "torch._functorch.compile_utils[fx_graph_cse]*"]
    assert main(["passes", "--json"]) == 0
    listed = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["set_grad"]["contract"] == "set_grad" and listed["dce"]["sources"][0]["module"] == "torch.fx.graph"
    assert listed["split_const_subgraphs"]["domain"] == "export"  # its constants: the kind it declares


@pytest.mark.parametrize(
    ("argv", "domain"),
    [
        (["--pass", "aot_cse"], "aten"),
        (["--pass", "remove_noop_ops"], "aten"),
        (["--pass", "set_grad"], "export"),
        (["--pass", "set_grad+dce"], "export"),
        (["--pass", "aot_cse", "--domain", "export"], "export"),
        (["--pass", "fxfuzz.core.catalogue:cse"], "export"),
    ],
)
def test_a_run_draws_from_the_registered_passs_own_domain_unless_told(tmp_path, argv, domain):
    from fxfuzz.cli.main import build_parser
    from fxfuzz.cli.setup import campaign_setup

    args = build_parser().parse_args(["run", *argv, "--no-db", "--report-dir", str(tmp_path / "r")])
    assert campaign_setup(args, 1).settings.domain == domain


def test_the_gate_and_mutate_draw_both_unless_the_baseline_lives_after_dispatch():
    from fxfuzz.core.passes import default_domain

    assert [default_domain(load_pass(n), "both") for n in ("set_grad", "dce", "aot_cse", "remove_noop_ops")] == [
        "both",
        "both",
        "aten",
        "aten",
    ]
    assert default_domain(load_pass("tests/helpers/shaped_passes.py:module_identity"), "both") == "both"
