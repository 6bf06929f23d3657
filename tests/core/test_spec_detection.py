"""Spec detection never misruns a pass: torch's own entry points, named exactly, are either
called as their callers call them or refused in one line saying how to run them instead
(issue 51's 32 entry points; the ones with context of their own are refused until a catalogue
row gives it)."""

from __future__ import annotations

import os

import pytest
import torch
from fxfuzz.core.errors import PassSpecError
from fxfuzz.core.passes import REGISTRY, load_pass
from fxfuzz.core.shapes import NoShape, Shape, shape_of
from fxfuzz.oracles import verify
from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, given, settings
from paths import HELPERS
from torch import fx

INDUCTOR = "torch._inductor.fx_passes"
PT2E = "torchao.quantization.pt2e.quantize_pt2e"

# Issue 51's 32 entry points, named exactly: each either loads in the shape its caller calls it
# in (a Shape), or is refused in one line (a str the line holds). Those a catalogue row calls
# with the context their caller gives are refused naming the row.
RUN_BY_SHAPE = {
    f"{INDUCTOR}.joint_graph:constant_fold_uniform_value": Shape.MODULE,
    f"{INDUCTOR}.post_grad:remove_noop_ops": Shape.GRAPH,
    f"{INDUCTOR}.post_grad:remove_assert_ops": Shape.GRAPH,
    f"{INDUCTOR}.post_grad:reorder_for_locality": Shape.GRAPH,
    f"{INDUCTOR}.post_grad:view_to_reshape": Shape.MODULE,
    "torch._inductor.pattern_matcher:stable_topological_sort": Shape.GRAPH,
    "torch._export.passes.remove_runtime_assertions:_RemoveRuntimeAssertionsPass": Shape.PASS_BASE,
    "torch._export.passes.replace_view_ops_with_view_copy_ops_pass:ReplaceViewOpsWithViewCopyOpsPass": Shape.PASS_BASE,
    "torch._export.passes.functionalize_side_effectful_ops_pass:_FunctionalizeSideEffectfulOpsPass": Shape.PASS_BASE,
    "torch._export.passes.replace_quantized_ops_with_standard_ops_pass:replace_quantized_ops_with_standard_ops": Shape.MODULE,
    "torch._functorch.compile_utils:raise_getitems": Shape.MODULE,
    "torch._functorch.compile_utils:strip_overloads": Shape.MODULE,
    "torch._functorch.partitioners:reordering_to_mimic_autograd_engine": Shape.MODULE,
    f"{INDUCTOR}.pre_grad:remove_identity": Shape.MODULE,
    "torch._export.passes.constant_folding:constant_fold": Shape.MODULE,  # constraint_fn keeps its default
    f"{INDUCTOR}.group_batch_fusion:group_batch_fusion_passes": Shape.GRAPH,  # as pre_grad_passes calls it
    f"{INDUCTOR}.pre_grad:fuse_conv_bn": Shape.MODULE,
    f"{INDUCTOR}.micro_pipeline_tp:patterns.apply": Shape.GRAPH,  # a post-grad pattern list with no row
}

REFUSED = {
    f"{INDUCTOR}.joint_graph:joint_graph_passes": "catalogue row joint_graph_passes",
    f"{PT2E}:convert_pt2e": "catalogue row pt2e_x86 or pt2e_x86_qat or pt2e_xnnpack",
    f"{PT2E}:prepare_pt2e": "catalogue row pt2e_x86 or pt2e_x86_qat or pt2e_xnnpack",
    f"{INDUCTOR}.post_grad:post_grad_passes": "catalogue row post_grad_passes",
    f"{INDUCTOR}.reinplace:reinplace_inplaceable_ops": "catalogue row reinplace_inplaceable_ops",
    f"{INDUCTOR}.freezing_patterns:freezing_passes": "catalogue row freezing_passes",
    f"{INDUCTOR}.joint_graph:early_patterns.apply": "catalogue row joint_early_patterns",
    f"{INDUCTOR}.post_grad:decompose_auto_functionalized": "catalogue row decompose_auto_functionalized",
    "torch.export._remove_auto_functionalized_pass:unsafe_remove_auto_functionalized_pass": "catalogue row remove_auto_functionalized",
    "torch._functorch.partitioners:default_partition": "catalogue row default_partition",
    "torch._functorch.partitioners:min_cut_rematerialization_partition": "catalogue row min_cut_rematerialization_partition",
    # no row: refused saying how to run them
    f"{INDUCTOR}.pre_grad:pre_grad_passes": "example inputs as 'example_inputs'",
    f"{INDUCTOR}.pre_grad:fuse_fx": "second required parameter 'example_inputs'",
    "torch._inductor.freezing:freeze": "does not take (gm, graph_signature), (gm) or (graph)",
}  # fmt: skip


def test_the_issues_32_entry_points_are_all_here():
    assert len(RUN_BY_SHAPE) + len(REFUSED) == 32


@pytest.mark.parametrize("spec, shape", RUN_BY_SHAPE.items())
def test_torch_entry_points_are_called_in_their_own_shape(spec, shape):
    assert load_pass(spec).takes_signature is (shape is Shape.SIGNATURE)
    from fxfuzz.core.passes import resolve_attr

    assert shape_of(resolve_attr(spec))[0] is shape


@pytest.mark.parametrize("spec, message", REFUSED.items())
def test_entry_points_fxfuzz_cannot_call_alone_exit_2_in_one_line_saying_how_to_run_them(
    spec, message, tmp_path, capsys
):
    from fxfuzz.cli.main import main

    with pytest.raises(PassSpecError) as e:
        load_pass(spec)
    line = str(e.value)
    assert message in line and "catalogue row" in line and "\n" not in line
    assert main(["run", "--pass", spec, "--no-db", "--report-dir", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "r").exists()


@pytest.mark.parametrize("spec", [s for s, m in REFUSED.items() if m.startswith("catalogue row ")])
def test_each_refused_entry_point_with_a_row_loads_by_the_rows_name(spec):
    rows = REFUSED[spec].rpartition("catalogue row ")[2].split(" or ")
    assert all(spec.partition("@")[0] in REGISTRY[r].calls for r in rows)
    for row in rows:
        assert load_pass(row).registered is REGISTRY[row]


def test_user_callables_are_told_apart_by_annotation_and_name():
    def named_graph(graph):
        graph.lint()

    def annotated(gm: fx.GraphModule, graph_signature: torch.export.graph_signature.ExportGraphSignature):
        return gm, graph_signature

    def by_name(gm, sig):
        return gm, sig

    def extra(gm, is_inference):
        return gm

    assert shape_of(named_graph)[0] is Shape.GRAPH
    assert shape_of(annotated)[0] is Shape.SIGNATURE
    assert shape_of(by_name)[0] is Shape.SIGNATURE
    with pytest.raises(NoShape, match="'is_inference'"):
        shape_of(extra)


class _Counting:
    """A pass of Inductor's kind: rewrites the graph in place and returns how many nodes it
    rewrote (broken when ``flip``: every add becomes a sub; else it only counts them)."""

    def __init__(self, flip: bool) -> None:
        self.flip = flip

    def __call__(self, graph: fx.Graph) -> int:
        adds = [n for n in graph.nodes if n.op == "call_function" and n.target is torch.ops.aten.add.Tensor]
        for node in adds if self.flip else ():
            node.target = torch.ops.aten.sub.Tensor
        return len(adds)


def _counting(flip: bool):
    from fxfuzz.core.shapes import adapt

    return adapt(*shape_of(_Counting(flip)))


@settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(graph_cases())
def test_a_pass_returning_a_count_changed_its_input_in_place(case):
    """A count is no bad return: the graph it changed in place is what is judged."""
    assert verify(case, _counting(flip=False)) == []


class _Adds(torch.nn.Module):
    def forward(self, x):
        return x + x


def test_the_graph_a_counting_pass_changed_in_place_is_judged():
    from fxfuzz.strategies import from_module

    findings = verify(from_module(_Adds(), (torch.ones(2),)), _counting(flip=True))
    assert findings and all(f.kind != "bad_return" for f in findings)


def test_an_inductor_pattern_list_runs_and_returns_a_graph():
    gm = fx.symbolic_trace(lambda x: x.permute(1, 0).permute(1, 0) + 1)
    pass_fn = load_pass(f"{INDUCTOR}.micro_pipeline_tp:patterns")  # a list no row calls
    from torch.export.graph_signature import ExportGraphSignature

    result = pass_fn(gm, ExportGraphSignature([], []))
    assert isinstance(result[0], fx.GraphModule)


SHAPED = os.path.join(HELPERS, "shaped_passes.py")


def test_pass_shape_says_how_to_call_a_pass_fxfuzz_would_misread():
    """``sorts_nodes(g)`` takes a Graph: read by its parameter as a module pass it crashes (what
    --pass-shape is for), called as --pass-shape graph says it runs clean."""
    from fxfuzz.core.passes import with_shape

    case = _Adds_case()
    misread = verify(case, load_pass(f"{SHAPED}:sorts_nodes"))
    assert [f.kind for f in misread if f.oracle == "crash"]
    assert verify(case, load_pass(with_shape(f"{SHAPED}:sorts_nodes", "graph"))) == []


def _Adds_case():
    from fxfuzz.strategies import from_module

    return from_module(_Adds(), (torch.ones(2),))


def test_an_ambiguous_pass_exits_2_naming_pass_shape_and_runs_once_told(tmp_path, capsys):
    from fxfuzz.cli.main import main

    argv = ["run", "--pass", f"{SHAPED}:optional_signature", "--no-db", "--workers", "1", "--max-examples", "2"]
    assert main([*argv, "--report-dir", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "--pass-shape" in err and err.count("\n") == 1
    assert main([*argv, "--report-dir", str(tmp_path / "b"), "--pass-shape", "signature"]) == 0
    assert main([*argv, "--report-dir", str(tmp_path / "c"), "--pass-shape", "cube"]) == 2
    assert "unknown pass shape 'cube'" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["dce", f"{SHAPED}:module_identity+dce"])
def test_pass_shape_is_for_one_import_spec(spec):
    from fxfuzz.core.passes import with_shape

    with pytest.raises(PassSpecError, match="--pass-shape names how to call one"):
        with_shape(spec, "module")


def test_a_standalone_repro_calls_the_pass_in_the_shape_given():
    from fxfuzz.repro.standalone_check import load_pass_spec as repro_load

    case = _Adds_case()
    gm, _ = repro_load(f"{SHAPED}:sorts_nodes@graph")(case.gm, case.signature)
    assert isinstance(gm, fx.GraphModule)
    with pytest.raises(AttributeError):
        repro_load(f"{SHAPED}:sorts_nodes")(case.copy().gm, case.signature)


def test_gate_carries_pass_shape_to_the_candidate_and_an_import_spec_baseline():
    """Gate's --pass-shape reaches the specs the workers load (``@SHAPE``): the candidate's, and
    the baseline's where it is an import spec; a registered baseline is called as its row says."""
    from fxfuzz.cli.main import _shaped, build_parser

    spec = f"{SHAPED}:sorts_nodes"
    args = build_parser().parse_args(["gate", "--candidate", spec, "--pass-shape", "graph"])
    _shaped(args)
    assert (args.candidate, args.baseline) == (f"{spec}@graph", "set_grad")
    args = build_parser().parse_args(["gate", "--candidate", spec, "--baseline", spec, "--pass-shape", "graph"])
    _shaped(args)
    assert args.candidate == args.baseline == f"{spec}@graph"


def test_repro_carries_pass_shape_to_the_pass_it_names_and_needs_one(capsys):
    from fxfuzz.cli.main import _shaped, build_parser, main

    spec = f"{SHAPED}:sorts_nodes"
    args = build_parser().parse_args(["repro", "r.json", "--pass", spec, "--pass-shape", "graph"])
    _shaped(args)
    assert args.pass_spec == f"{spec}@graph"
    assert main(["repro", "r.json", "--pass-shape", "graph"]) == 2
    err = capsys.readouterr().err
    assert "give --pass too" in err and err.count("\n") == 1
    assert main(["gate", "--candidate", "dce", "--pass-shape", "graph"]) == 2
    assert "--pass-shape names how to call one" in capsys.readouterr().err
