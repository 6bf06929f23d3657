"""Spec detection never misruns a pass: torch's own entry points, named exactly, are either
called as their callers call them or refused in one line saying how to run them instead
(issue 51's 32 entry points; the ones with context of their own are refused until a catalogue
row gives it)."""

from __future__ import annotations

import pytest
import torch
from fxfuzz.core.errors import PassSpecError
from fxfuzz.core.passes import load_pass
from fxfuzz.core.shapes import NoShape, Shape, shape_of
from fxfuzz.oracles import verify
from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, given, settings
from torch import fx

INDUCTOR = "torch._inductor.fx_passes"

RUN_BY_SHAPE = {
    f"{INDUCTOR}.post_grad:decompose_auto_functionalized": Shape.GRAPH,  # unannotated, named graph
    f"{INDUCTOR}.post_grad:remove_noop_ops": Shape.GRAPH,
    f"{INDUCTOR}.post_grad:remove_assert_ops": Shape.GRAPH,
    f"{INDUCTOR}.post_grad:reorder_for_locality": Shape.GRAPH,
    f"{INDUCTOR}.post_grad:view_to_reshape": Shape.MODULE,
    f"{INDUCTOR}.joint_graph:constant_fold_uniform_value": Shape.MODULE,
    # graph: GraphModule wins over the name; input_device keeps its default
    f"{INDUCTOR}.joint_graph:joint_graph_passes": Shape.MODULE,
    f"{INDUCTOR}.joint_graph:patterns": Shape.MODULE,  # a PatternMatcherPass, run by its apply
    "torch._inductor.constant_folding:constant_fold": Shape.MODULE,
    "torch._export.passes.constant_folding:constant_fold": Shape.MODULE,
    "torch.fx.passes.dialect.common.cse_pass:CSEPass": Shape.PASS_BASE,
    "torch._export.passes.replace_set_grad_with_hop_pass:replace_set_grad_with_hop_pass": Shape.SIGNATURE,
}

REFUSED = {
    # a second required parameter that is no signature: handed the signature, they misran
    f"{INDUCTOR}.post_grad:post_grad_passes": "second required parameter 'is_inference'",
    f"{INDUCTOR}.reinplace:reinplace_inplaceable_ops": "second required parameter 'graph'",
    f"{INDUCTOR}.freezing_patterns:freezing_passes": "second required parameter 'aot_example_inputs'",
    "torch._inductor.pattern_matcher:PatternMatcherPass.apply": "second required parameter 'gm'",
    "torch._functorch.partitioners:default_partition": "required keyword-only parameter",
    "torch._functorch.partitioners:min_cut_rematerialization_partition": "required keyword-only parameter",
    "torch.fx.passes.reinplace:reinplace": "takes *args",
}


@pytest.mark.parametrize("spec, shape", RUN_BY_SHAPE.items())
def test_torch_entry_points_are_called_in_their_own_shape(spec, shape):
    assert load_pass(spec).takes_signature is (shape is Shape.SIGNATURE)
    from fxfuzz.core.passes import resolve_attr

    assert shape_of(resolve_attr(spec))[0] is shape


@pytest.mark.parametrize("spec, message", REFUSED.items())
def test_entry_points_fxfuzz_cannot_call_are_refused_saying_how_to_run_them(spec, message):
    with pytest.raises(PassSpecError) as e:
        load_pass(spec)
    line = str(e.value)
    assert message in line and "catalogue row" in line and "\n" not in line


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
    pass_fn = load_pass(f"{INDUCTOR}.joint_graph:patterns")
    from torch.export.graph_signature import ExportGraphSignature

    result = pass_fn(gm, ExportGraphSignature([], []))
    assert isinstance(result[0], fx.GraphModule)
