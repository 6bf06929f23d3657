"""The constant form (``fxfuzz.strategies.constants``): torch.export's tensor constants before it
lifts them, drawn for the catalogue rows that lift or fold constants, and the ``lift_constants``
adapter that feeds the lifted constants back as ``ExportedProgram.module()`` does."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from fxfuzz.core.case import GraphCase
from fxfuzz.core.passes import generation_kinds, load_pass
from fxfuzz.oracles import verify
from fxfuzz.strategies.builder import GraphBuilder
from fxfuzz.strategies.constants import constant_only
from fxfuzz.tools.bench import pass_times_ms, population
from torch.export.graph_signature import InputKind

aten = torch.ops.aten
ROWS = ("lift_constants", "split_const_subgraphs", "constant_folding")
SAMPLE = 24


@pytest.fixture(scope="module")
def samples():
    """Each row's share of bench's population (seed 1), drawn for the row's generation kinds.
    Cases with an op on constants alone, of 24 for lift_constants' kinds, measured 2026-11-28:
    15, 15 and 15 at seeds 1 to 3, 7 at seed 0 (an outlier, since export's rows draw ATen random
    calls alone)."""
    drawn: dict[tuple[str, ...], list] = {}
    for row in ROWS:
        kinds = generation_kinds(load_pass(row))
        if kinds not in drawn:
            drawn[kinds] = population(SAMPLE, 1, "export", kinds)
    return {row: drawn[generation_kinds(load_pass(row))] for row in ROWS}


def _constant_reads(case):
    return [n for n in case.gm.graph.find_nodes(op="get_attr") if isinstance(getattr(case.gm, n.target), torch.Tensor)]


@pytest.mark.parametrize("row", ROWS)
def test_the_rows_draw_constants_between_their_toggles(row):
    """Torch-level calls only for torch.fx's folder, which symbolic_trace's graphs reach: export's
    folder and lifting are handed ATen graphs alone."""
    generic = {"constant", "grad_toggle", "across_toggle", "motif", "random", "tool_form"}
    torch_level = {"torch_level"} if row == "split_const_subgraphs" else set()
    assert set(generation_kinds(load_pass(row))) == generic | torch_level


def test_the_form_is_drawn_as_export_traces_it(samples):
    cases = samples["lift_constants"]
    folded = [c for c in cases if any(n.op == "call_function" and constant_only(n) for n in c.gm.graph.nodes)]
    assert len(folded) >= SAMPLE // 3, "an op on constants alone in many cases"
    reads = [n for c in cases for n in _constant_reads(c)]
    # Plain tensors (no parameter, no buffer), named as make_fx names them, static, needing no grad.
    assert reads and all(str(n.target).startswith("_tensor_constant") for n in reads)
    assert not any(isinstance(getattr(n.graph.owning_module, n.target), torch.nn.Parameter) for n in reads)
    assert not any(n.meta["val"].requires_grad for n in reads)
    # Some read twice (a get_attr per use), some torch.tensor literals read through a fresh copy.
    assert any(len({n.name for n in _constant_reads(c)}) > len({n.target for n in _constant_reads(c)}) for c in cases)
    assert any(c.gm.graph.find_nodes(op="call_function", target=aten.lift_fresh_copy.default) for c in cases)
    assert any(c.gm.graph.find_nodes(op="call_function", target=torch._C._set_grad_enabled) for c in folded)


def test_a_pass_that_does_not_declare_constants_gets_none():
    """Export hands every other pass its constants lifted: the export domain draws no get_attr
    tensor for them (their draws stay as they were)."""
    cases = population(SAMPLE, 0, "export", generation_kinds(load_pass("dce")))
    assert not any(_constant_reads(c) for c in cases)
    assert not any(k.startswith("constant:") for c in cases for k in c.features)


@pytest.mark.parametrize("row", ["lift_constants", "split_const_subgraphs"])
def test_the_form_exercises_the_row(samples, row):
    """The share of cases whose code the row changes (docs/own-pass.md's measure), 0 on the
    export domain before the form."""
    changed = [c for _, _, c in pass_times_ms(samples[row], load_pass(row))]
    assert sum(changed) / len(changed) > 0.1


def test_constant_fold_reaches_its_folding(samples):
    """The row folds: constant_fold replaces computations on constants alone by frozen
    constants (``_frozen_param<N>``) in a sixth or more of the drawn cases (5 of 24 when
    written; it leaves views, fresh copies and in-place updates of constants unfolded). Called bare it raises on the first
    node it would fold (a known torch defect: the quantization operators its is_impure names
    are registered by nothing), so the row runs it where they are, and the process is left
    without them, as before (the defect stays pinned in test_catalogue_findings.py)."""
    fold = load_pass("constant_folding")
    assert not hasattr(torch.ops.pt2e_quant, "dequantize_affine")
    folded = 0
    for case in samples["constant_folding"]:
        work = case.copy()
        gm, _ = fold(work.gm, work.signature)
        folded += any(str(n.target).startswith("_frozen_param") for n in gm.graph.find_nodes(op="get_attr"))
    assert folded >= SAMPLE // 6, folded
    assert not hasattr(torch.ops.pt2e_quant, "dequantize_affine")


def constants_case() -> GraphCase:
    """x * c0 + sin(c1) + c1 + tensor([...]): two module constants of one shape (c1 read twice)
    and a tensor made in forward, as export traces them before lifting."""
    b = GraphBuilder(grad_mode=True)
    x = b.placeholder("x", torch.tensor([1.0, 2.0, 3.0], requires_grad=True), InputKind.USER_INPUT)

    def read(name, value=None):
        node = b.get_attr(name, value) if value is not None else b.graph.get_attr(name)
        node.meta["val"] = b.fake_mode.from_tensor(b.attrs[name], static_shapes=True)
        return node

    c0 = read("_tensor_constant0", torch.tensor([0.5, -1.0, 2.0]))
    c1 = read("_tensor_constant1", torch.tensor([3.0, 4.0, -5.0]))
    literal = b.call(
        aten.detach_.default,
        [b.call(aten.lift_fresh_copy.default, [read("_tensor_constant2", torch.tensor([7.0, 8.0, 9.0]))])],
    )
    total = b.call(aten.add.Tensor, [b.call(aten.mul.Tensor, [x, c0]), b.call(aten.sin.default, [c1])])
    total = b.call(aten.add.Tensor, [b.call(aten.add.Tensor, [total, read("_tensor_constant1")]), literal])
    gm, sig = b.finish([total])
    return GraphCase(gm, sig, tuple(b.inputs))


def test_lifted_constants_are_fed_back_and_judged_quiet():
    case = constants_case()
    gm, sig = load_pass("lift_constants")(case.copy().gm, case.copy().signature)
    # Lifted (the two reads of c1 now one input), then fed from the pass's table: one read each.
    assert [s.kind for s in sig.input_specs] == [InputKind.USER_INPUT]
    assert len(gm.graph.find_nodes(op="get_attr")) == 3
    assert replace(case, gm=gm).code() != case.code()
    assert verify(case, load_pass("lift_constants")) == []


def test_a_table_under_the_wrong_names_is_found(monkeypatch):
    """The adapter feeds each lifted input the value the pass's table holds for its spec's
    target: a pass that files the constants under each other's names computes other values."""
    import torch._export.passes.lift_constants_pass as lcp

    real = lcp.lift_constants_pass

    def swapped(gm, sig, attrs):
        table = real(gm, sig, attrs)
        return dict(zip(table, reversed(list(table.values()))))

    monkeypatch.setattr(lcp, "lift_constants_pass", swapped)
    findings = verify(constants_case(), load_pass("lift_constants"))
    assert any(f.oracle == "equivalence" for f in findings), findings


def test_the_form_survives_the_serializer(samples):
    """Cases are saved (example database, repro files) as data: constants and the literal's
    ``lift_fresh_copy`` come back as they were."""
    from fxfuzz.core.serialize import case_from_dict, case_to_dict

    cases = [c for c in samples["lift_constants"] if _constant_reads(c)]
    assert any(c.gm.graph.find_nodes(op="call_function", target=aten.lift_fresh_copy.default) for c in cases)
    for case in cases:
        back = case_from_dict(case_to_dict(case))
        assert back.code() == case.code()
        assert all(torch.equal(getattr(back.gm, n.target), getattr(case.gm, n.target)) for n in _constant_reads(case))


def test_a_functional_graph_reads_a_literal_without_detaching_it_in_place():
    """make_fx's functional trace of ``torch.tensor(...)`` has no ``detach_``: the functional
    domain, drawn for the constant kind, holds no node with a mutable schema."""
    cases = population(SAMPLE, 0, "functional", ("constant",))
    literals = [
        n for c in cases for n in c.gm.graph.find_nodes(op="call_function", target=aten.lift_fresh_copy.default)
    ]
    assert literals, "the sample draws literals"
    mutating = [
        n
        for c in cases
        for n in c.gm.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
    ]
    assert mutating == []
