"""graph_cases: valid by construction, deterministic, wide, and shrinking to small graphs."""

from __future__ import annotations

import operator
import random
from collections import Counter

import pytest
import torch
from draws import draw
from fxfuzz.oracles.execute import run_graph
from fxfuzz.oracles.gradients import input_grads
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.builder import AUTOCAST_ENTER, AUTOCAST_EXIT, SET_GRAD_ENABLED
from fxfuzz.strategies.ops import INPLACE_OPS, OPS
from hypothesis import find, settings
from torch import fx


@pytest.fixture(scope="module")
def export_cases():
    return draw(300)


def _graphs(gm: fx.GraphModule):
    return [m for m in gm.modules() if isinstance(m, fx.GraphModule)]


def test_op_table_has_at_least_40_overloads():
    assert len({spec.target for spec in OPS + INPLACE_OPS}) >= 40


@pytest.mark.slow
def test_export_domain_rejects_under_one_percent(export_cases):
    """Every case must run forward and backward on its own inputs: a case whose reference
    run fails would be rejected by the campaign, so count those."""
    failed = []
    # Hypothesis draws some cases twice; a rejected case counts once.
    distinct = list({(c.code(), c.ambient_grad, tuple(map(str, c.inputs))): c for c in export_cases}.values())
    for case in distinct:
        run = run_graph(case.gm, case.inputs, case.ambient_grad)
        grads = input_grads(run) if run.error is None else None
        if run.error is not None or grads.error is not None:
            failed.append((case, run.error or grads.error))
    assert len(failed) / len(distinct) < 0.01, failed[:3]


def test_export_domain_is_balanced_and_fully_annotated(export_cases):
    """What export hands the pass: every toggle and autocast region closed by the return,
    every value-producing call node with a fake-tensor meta."""
    for case in export_cases:
        for gm in _graphs(case.gm):
            mode, open_autocast = None, 0
            for n in gm.graph.nodes:
                if n.op != "call_function":
                    continue
                if n.target is SET_GRAD_ENABLED:
                    mode = n.args[0]
                elif n.target is AUTOCAST_ENTER:
                    open_autocast += 1
                elif n.target is AUTOCAST_EXIT:
                    open_autocast -= 1
                else:
                    assert "val" in n.meta, (n.name, case)
            assert open_autocast == 0
            if gm is case.gm:
                assert mode in (None, case.ambient_grad), case


def test_generation_covers_every_feature(export_cases):
    seen = Counter()
    for case in export_cases:
        seen.update({k: 1 for k in case.features})
    wanted = [
        "input:parameter",
        "input:buffer",
        "input:buffer_nonpersistent",
        "input:constant_tensor",
        "input:user_input",
        "input:requires_grad",
        "dtype:float32",
        "dtype:float64",
        "dtype:float16",
        "dtype:bfloat16",
        "dtype:int64",
        "dtype:bool",
        "hop:cond",
        "hop:map",
        "region:no_grad",
        "region:enable_grad",
        "region:set_grad_enabled",
        "region:empty",
        "region:no_outputs",
        "region:value_in",
        "region:value_out",
        "region:single_output_read_inside",
        "toggle:duplicate",
        "toggle:flip",
        "toggle:same",
        "toggle:first_node",
        "toggle:last_node",
        "autocast:bfloat16",
        "autocast:float16",
        "inplace:activation",
        "inplace:input",
        "inplace:buffer",
        "output:none",
        "output:constant",
        "output:duplicate",
        "output:input_passthrough",
        "depth:3",
    ]
    assert [k for k in wanted if not seen[k]] == []
    assert len([k for k in seen if k.startswith("op:")]) >= 40
    families = {
        "tuple": ["var_mean", "max_dim", "split", "topk", "sort", "unbind"],
        "matmul": ["mm", "matmul", "linear", "addmm"],
        "view": ["view", "transpose", "permute", "slice", "select", "expand", "squeeze", "unsqueeze", "t"],
        "factory": ["zeros_like", "ones_like", "ones", "full", "arange"],
        "cast": ["to_dtype", "_to_copy"],
        "bool_or_int_out": ["argmax", "eq", "gt", "lt_scalar", "logical_not"],
        "inplace": ["add_", "mul_", "mul_scalar_", "copy_", "clamp_"],
        "reduction": ["sum", "sum_dim", "mean_dim", "amax", "logsumexp"],
    }
    assert [f for f, ops in families.items() if not any(seen["op:" + o] for o in ops)] == []


def test_adversarial_domain_breaks_export_guarantees():
    cases = draw(50, domain="adversarial")
    assert all(c.domain == "adversarial" and c.features["domain:adversarial"] == 1 for c in cases)
    seen = Counter(k for c in cases for k in c.features)
    for key in [
        "adversarial:unbalanced_toggle",
        "adversarial:crossing_regions",
        "adversarial:missing_meta",
        "adversarial:renamed",
        "hop:wrap_with_set_grad_enabled",
    ]:
        assert seen[key], key


def _mutating(case) -> list[str]:
    return [
        n.name
        for n in case.gm.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
    ]


def test_the_functional_domain_draws_export_cases_without_in_place_updates(export_cases):
    assert sum(bool(_mutating(c)) for c in export_cases) >= 30  # what the functional domain leaves out
    cases = draw(60, domain="functional")
    assert all(c.domain == "functional" for c in cases)
    assert [c for c in cases if _mutating(c)] == []
    seen = Counter(k for c in cases for k in c.features)
    assert seen["region:no_grad"] and seen["region:enable_grad"], sorted(seen)  # still grad-mode graphs


def test_both_domains_draws_each_case_from_either_and_records_it():
    cases = draw(40, domain="both")
    assert {c.domain for c in cases} == {"export", "adversarial"}
    assert all(c.features[f"domain:{c.domain}"] == 1 for c in cases)
    with pytest.raises(ValueError, match="unknown domain"):
        draw(1, domain="nonsense")


def test_same_seed_same_graphs_and_other_seed_other_graphs():
    first = [c.code() for c in draw(10, seed_=7)]
    again = [c.code() for c in draw(10, seed_=7)]
    other = [c.code() for c in draw(10, seed_=8)]
    assert first == again
    assert first != other


def test_cond_and_map_take_exports_form(export_cases):
    """The HOP nodes have the argument structure torch.export records (see test_capture)."""
    forms = Counter()
    for case in export_cases:
        for gm in _graphs(case.gm):
            for n in gm.graph.nodes:
                if n.target is torch.ops.higher_order.cond:
                    pred, t, f, ops = n.args
                    assert t.op == f.op == "get_attr" and isinstance(ops, tuple)
                    assert pred.meta["val"].dtype == torch.bool and pred.meta["val"].dim() == 0
                    forms["cond"] += 1
                if n.target is torch.ops.higher_order.map_impl:
                    body, xs, args = n.args
                    assert body.op == "get_attr" and isinstance(xs, list) and isinstance(args, list)
                    forms["map"] += 1
                if n.op == "call_function" and isinstance(n.meta.get("val"), (tuple, list)):
                    # Export unpacks every element of a tuple result through getitem.
                    items = sorted(u.args[1] for u in n.users if u.target is operator.getitem)
                    assert items == list(range(len(n.meta["val"]))), n
    assert forms["cond"] and forms["map"]


def _tuple_op_in_other_mode(gm: fx.GraphModule, ambient: bool) -> bool:
    mode = ambient
    for n in gm.graph.nodes:
        if n.target is SET_GRAD_ENABLED:
            mode = n.args[0]
        elif isinstance(n.target, torch._ops.OpOverload) and isinstance(n.meta.get("val"), (tuple, list)):
            if mode != ambient:
                return True
    return False


def planted_tuple_region_bug(gm, sig):
    """Crashes on a tuple-returning ATen op (var_mean, max.dim, split...) inside a region
    whose grad mode differs from the ambient one: a bug that needs two regions and a tuple-returning op to show."""
    if _tuple_op_in_other_mode(gm, torch.is_grad_enabled()):
        raise RuntimeError("planted")
    return gm, sig


@pytest.mark.slow
def test_shrinks_a_two_region_tuple_bug_to_six_nodes():
    sizes = []

    def fails(case):
        work = case.copy()
        with torch.set_grad_enabled(case.ambient_grad):
            try:
                planted_tuple_region_bug(work.gm, work.signature)
            except RuntimeError:
                sizes.append(case.compute_nodes())
                return True
        return False

    # A small step budget keeps each example cheap; the shrinker still starts from cases of
    # several regions, subgraphs and ops. Random(4): 5 nodes in about 5 s (the derandomized
    # default took 40 s; Random(3) stops at 9 nodes: the bound is this seed's, not every one's).
    settings_ = settings(max_examples=3000, database=None, deadline=None)
    case = find(graph_cases(max_steps=6), fails, settings=settings_, random=random.Random(4))
    assert fails(case)
    assert case.compute_nodes() <= 6 < sizes[0], (case, sizes[0])
