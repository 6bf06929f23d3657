"""Where pre-wrapped regions, regions without outputs and colliding attribute names come from,
checked against what torch.export really hands the set-grad pass."""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.known import load_known
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import verify
from fxfuzz.oracles.execute import run_graph
from fxfuzz.strategies import from_module, graph_cases, subgraphs
from fxfuzz.strategies.builder import GraphBuilder
from fxfuzz.strategies.state import Budget, State, Value, count_region_shapes
from fxfuzz.tools.mutants import enumerate_mutants, load_pass_variant
from hypothesis import HealthCheck, Phase, find, given, seed, settings
from hypothesis import strategies as st
from paths import ROOT
from torch._higher_order_ops.map import map as cf_map
from torch.export.graph_signature import InputKind

SET_GRAD = torch._C._set_grad_enabled
WRAP = torch.ops.higher_order.wrap_with_set_grad_enabled
REAL = load_pass("set_grad")
KNOWN = os.path.join(ROOT, "fxfuzz-known.txt")
MUTANTS = {m.id: m for m in enumerate_mutants("set_grad")}


class NoGradBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))

    def forward(self, x):
        y = x * self.p
        with torch.no_grad():
            z = y.sin() + 1
            w = z.cos()
        return y + z, w


def _targets(gm: torch.fx.GraphModule) -> list:
    return [n.target for m in gm.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes]


def test_reexported_program_reaches_the_pass_unwrapped():
    """``ep.module()`` of a program whose no_grad block the pass wrapped calls
    wrap_with_set_grad_enabled, yet export traces through the HOP (its ``__call__`` runs the
    body eagerly), so the set-grad pass is handed plain toggles again. This is why
    pre-wrapped regions stay in the adversarial domain only."""
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    ep = torch.export.export(NoGradBlock(), (x,), strict=False)
    assert WRAP in _targets(ep.graph_module), "the first export wrapped the block"
    case = from_module(ep.module(), (x,))
    targets = _targets(case.gm)
    assert WRAP not in targets and targets.count(SET_GRAD) == 2
    assert verify(case, REAL) == []


def _region_stats(inside, after) -> Counter:
    """count_region_shapes on x -> no_grad { vals = inside(b, x) } -> outputs after(b, x, vals)."""
    b = GraphBuilder(grad_mode=True)
    x = b.placeholder("arg0_1", torch.ones(3), InputKind.USER_INPUT)
    s = State(b, "export", Counter(), Budget(0))
    enter = b.set_grad(False)
    vals = inside(b, x)
    s.regions.append((enter, b.set_grad(True)))
    b.finish(after(b, x, vals))
    count_region_shapes(s)
    return s.stats


def _sin(b, x):
    return [b.call(torch.ops.aten.sin.default, [x])]


def _sin_then_cos(b, x):
    y = _sin(b, x)[0]
    return [y, b.call(torch.ops.aten.cos.default, [y])]  # y read inside the region


def _add(b, x, v):
    return b.call(torch.ops.aten.add.Tensor, [v, x])


def test_region_without_outputs_is_counted_only_when_nothing_outside_reads_it():
    assert _region_stats(_sin, lambda b, x, vals: [x])["region:no_outputs"] == 1
    assert _region_stats(_sin, lambda b, x, vals: [vals[0]])["region:no_outputs"] == 0


def test_values_crossing_a_region_and_an_output_read_inside_are_counted():
    stats = _region_stats(_sin, lambda b, x, vals: [vals[0]])
    assert stats["region:value_in"] == stats["region:value_out"] == 1
    assert stats["region:single_output_read_inside"] == 0
    # y is read by cos inside the region and by add after it; cos is read by nothing.
    assert (
        _region_stats(_sin_then_cos, lambda b, x, vals: [_add(b, x, vals[0])])["region:single_output_read_inside"] == 1
    )
    # two outputs (y and cos): the single-output shape it counts is not there
    both = _region_stats(_sin_then_cos, lambda b, x, vals: [_add(b, x, vals[0]), vals[1]])
    assert both["region:single_output_read_inside"] == 0


@pytest.fixture(scope="module")
def adversarial_cases():
    cases = []

    @seed(0)
    @settings(max_examples=150, derandomize=False, database=None, deadline=None, phases=[Phase.generate])
    @given(graph_cases(domain="adversarial"))
    def collect(case):
        cases.append(case)

    collect()
    return cases


def _reads_tensor_attr(case) -> bool:
    return any(
        n.op == "get_attr" and isinstance(getattr(m, n.target), torch.Tensor)
        for m in case.gm.modules()
        if isinstance(m, torch.fx.GraphModule)
        for n in m.graph.nodes
    )


@pytest.mark.slow
def test_adversarial_cases_read_tensor_attributes_and_run(adversarial_cases):
    readers = [c for c in adversarial_cases if c.features.get("adversarial:tensor_attr")]
    assert readers and all(_reads_tensor_attr(c) for c in readers)
    # One more read of an attribute already read: rarer (two draws in one graph), so searched for.
    reread = find(
        graph_cases(domain="adversarial"),
        lambda c: c.features.get("adversarial:tensor_attr_reread", 0) > 0,
        settings=settings(
            max_examples=2000, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
        ),
    )
    assert _reads_tensor_attr(reread)
    balanced = [
        c for c in readers if not any(k.startswith("adversarial:") and "tensor_attr" not in k for k in c.features)
    ]
    assert balanced and all(run_graph(c.gm, c.inputs, c.ambient_grad).error is None for c in balanced)


@pytest.mark.parametrize(
    "mutant_id",
    [
        # The recursion skips a get_attr that is not a GraphModule: only a tensor attribute tells.
        "replace_with_hop_pass_util._replace_with_hop_pass_helper:191:remove:7",
        # node_inline_ renames an inlined get_attr whose name the parent already has (submod_N).
        "utils.node_inline_:860:remove:20",
        "utils.node_inline_:864:negate:12",
    ],
)
def test_adversarial_cases_kill_mutants_export_cannot_reach(adversarial_cases, mutant_id):
    """No export-domain case reaches these branches (export lifts tensors to placeholders and
    names subgraphs true_graph_N / body_graph_N, never like a split's submod_N)."""
    candidate = load_pass_variant("set_grad", MUTANTS[mutant_id])
    # Each of these mutants crashes where torch's pass copes; running the passes is enough.
    assert any(_raises(candidate, c) and not _raises(REAL, c) for c in adversarial_cases)


def _raises(pass_fn, case) -> bool:
    work = case.copy()
    try:
        with torch.set_grad_enabled(case.ambient_grad):
            pass_fn(work.gm, work.signature)
    except Exception:
        return True
    return False


class MapUnderNoGrad(torch.nn.Module):
    """``map`` over a buffer updated in place, inside no_grad (the shape a campaign drew with
    a nested autocast around it; the autocast plays no part)."""

    def __init__(self) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
        self.register_buffer("buf", torch.ones(2, 3))

    def forward(self, x):
        with torch.no_grad():
            self.buf.add_(x)
            y = cf_map(lambda r, p: r * p, self.buf, self.p)
        return y * self.p


def test_map_under_no_grad_is_the_known_dropped_region():
    """The split moves the map body's get_attr in front of the region's toggle, so the pass
    inlines the region and deletes the toggle: the map then runs with grad on and ``p``
    receives a gradient through it (eager: 2, -6, 16; ep.module(): twice that). Known
    finding 1 (fxfuzz-known.txt), not a new one."""
    case = from_module(MapUnderNoGrad(), (torch.tensor([1.0, 2.0, 3.0]),))
    assert _targets(case.gm).count(SET_GRAD) == 2
    work = case.copy()
    out, _ = REAL(work.gm, work.signature)
    assert SET_GRAD not in _targets(out) and WRAP not in _targets(out)
    found = {bucket_id(f) for f in verify(case, REAL)}
    assert "gradients-grad_value_mismatch-7964935e" in found
    assert found <= set(load_known(KNOWN))


def _meta(v: object) -> object:
    """A meta as plain data; sizes as their expressions (comparing SymInts would guard on them)."""
    if not isinstance(v, torch.Tensor):
        return repr(v)
    return (
        [str(d) for d in v.shape],
        [str(d) for d in v.stride()],
        v.dtype,
        v.requires_grad,
        v.is_leaf,
        str(v.storage_offset()),
    )


# Seeds whose samples meet every branch of the rule (adversarial 21: subgraphs leaving grad off).
@pytest.mark.slow
@pytest.mark.parametrize("domain, seed_", [("export", 19), ("adversarial", 21)])
def test_cond_and_map_metas_equal_torchs_tracing_on_a_seeded_sample(monkeypatch, domain, seed_):
    """Generation takes a cond's or map's metas from its subgraph (strategies.subgraphs.hop_outputs)
    instead of torch's fake tracing of the subgraphs: on several hundred seeded cases they equal
    what torch's tracing gives (shapes and strides, symbolic ones too, dtypes, requires_grad),
    torch accepts every call the shortcut emits and refuses every call it refuses."""
    hops = (torch.ops.higher_order.cond, torch.ops.higher_order.map_impl)
    seen: Counter[str] = Counter()
    emit = GraphBuilder.emit

    def compared(self, target, args, kwargs, val, name=None):
        if target in hops:
            traced = self._propagate(target, args, kwargs)  # raises where torch rejects the call
            assert type(traced) is type(val) and [_meta(t) for t in traced] == [_meta(v) for v in val]
            seen[target.__name__] += 1
            seen["symbolic"] += any(isinstance(d, torch.SymInt) for v in val for d in v.shape)
            # The autograd rule's branches: outputs that require grad, and subgraphs that leave
            # the grad mode changed (their outputs' requires_grad follows the mode left).
            sub = self.attrs[args[1 if target is hops[0] else 0].target]
            toggles = [n.args[0] for n in sub.graph.nodes if n.target is torch._C._set_grad_enabled]
            operands = [a.meta["val"] for a in (args[3] if target is hops[0] else [*args[1], *args[2]])]
            seen["requires_grad"] += any(v.requires_grad for v in val)
            seen["left_off"] += (
                self.grad_mode and bool(toggles) and not toggles[-1] and any(o.requires_grad for o in operands)
            )
        return emit(self, target, args, kwargs, val, name)

    hop_call = subgraphs._hop_call

    def refused_alike(s, target, args, gm, operands):
        node = hop_call(s, target, args, gm, operands)
        if node is None:  # the shortcut refuses only what torch's tracing refuses too
            assert s.builder.try_call(target, args) is None
            seen["refused"] += 1
        return node

    monkeypatch.setattr(GraphBuilder, "emit", compared)
    monkeypatch.setattr(subgraphs, "_hop_call", refused_alike)
    cases = []

    @seed(seed_)
    @settings(max_examples=300, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(graph_cases(domain=domain))
    def draw(case):
        cases.append(case)

    draw()
    assert len(cases) == 300 and seen["cond"] >= 50 and seen["map_impl"] >= 30 and seen["requires_grad"] >= 15, seen
    assert seen["symbolic" if domain == "export" else "left_off"] >= 3, seen


@pytest.mark.parametrize("draw_hop", [subgraphs.draw_cond, subgraphs.draw_map])
def test_a_toggle_a_subgraph_leaves_set_holds_for_the_nodes_after_the_call(draw_hop):
    """A cond branch or map body ending with grad off (the adversarial domain's unbalanced
    toggle) leaves grad off after the call when the graph runs, so a node drawn after the call
    gets its meta with grad off: the same requires_grad as the run."""

    def leaves_grad_off(draw, sub, depth):
        sub.builder.set_grad(False)
        sub.pool.append(Value(sub.builder.call(torch.ops.aten.sin.default, [sub.pool[0].node])))

    @seed(0)
    @settings(max_examples=1, database=None, phases=[Phase.generate])
    @given(st.data())
    def build(data):
        b = GraphBuilder(grad_mode=True)
        x = b.placeholder("arg0_1", torch.ones(3, requires_grad=True), InputKind.USER_INPUT)
        s = State(b, "adversarial", Counter(), Budget(1), [Value(x)])
        draw_hop(data.draw, s, 1, leaves_grad_off)
        assert s.stats[f"hop:{draw_hop.__name__.removeprefix('draw_')}"] == 1
        after = b.call(torch.ops.aten.cos.default, [x])
        gm, _ = b.finish([after])
        run = run_graph(gm, tuple(b.inputs), ambient_grad=True)
        assert run.ok and run.outputs[0].requires_grad is False
        assert after.meta["val"].requires_grad is False

    build()
