"""The catalogue rows of Inductor's passes (issue 51): each is called as compile_fx calls it,
under the context its row declares, on its form's graphs; each reaches the real pass; the pattern
rows leave out the entries that lower to Inductor's IR for their call alone; the training row's
forward and backward, joined as AOTAutograd runs them, compute the joint graph."""

from __future__ import annotations

import pytest
import torch
from fxfuzz.core.inductor import FROZEN, INFERENCE, JOINT, counting_patterns, drain_reach
from fxfuzz.core.passes import _FUNCTORCH_ROWS, _INDUCTOR_ROWS, _PATTERN_ROWS, REGISTRY, load_pass
from fxfuzz.oracles import verify
from fxfuzz.strategies import from_module
from fxfuzz.strategies.inductor import lower_inductor
from torch import fx

pytestmark = pytest.mark.filterwarnings("ignore")
ROWS = [r.name for r in (*_INDUCTOR_ROWS, *_FUNCTORCH_ROWS, *_PATTERN_ROWS)]


class _Model(torch.nn.Module):
    """Something for Inductor's patterns: a permute pair, a float16 round trip, a linear layer
    followed by a multiplication by a constant (binary folding), a clone, a softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5], [0.0, 1.0, 1.0]]))
        self.b = torch.nn.Parameter(torch.tensor([0.1, 0.2, -0.3]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x.to(torch.float16).to(torch.float32)
        a = torch.ops.aten.permute.default(torch.ops.aten.permute.default(a, [1, 0]), [1, 0])
        y = torch.nn.functional.linear(a, self.w, self.b) * 2.0
        return (y.clone() + x).softmax(-1)


_CASES: dict[str, object] = {}


def case_of(form: str):
    """The model lowered to ``form`` (once per form)."""
    if form not in _CASES:
        x = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.25]])
        lowered = lower_inductor(from_module(_Model(), (x,)), form, seed=1)
        assert lowered is not None
        _CASES[form] = lowered
    return _CASES[form]


@pytest.mark.parametrize("name", ROWS)
def test_each_row_declares_its_context_and_domain(name):
    row = REGISTRY[name]
    assert row.domain in (INFERENCE, JOINT, FROZEN) and row.context.fake_mode and row.sources
    assert load_pass(name).registered is row


def test_fxfuzz_passes_lists_each_rows_context():
    import contextlib
    import io
    import json

    from fxfuzz.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["passes", "--json"]) == 0
    listed = {r["name"]: r for r in json.loads(out.getvalue())}
    assert listed["post_grad_passes"]["context"] == "example_inputs=fake, is_inference=True, V.set_fake_mode"
    assert listed["freezing_passes"]["context"] == "aot_example_inputs=fake, V.set_fake_mode, config.freezing=True"
    assert all(listed[n]["domain"] == REGISTRY[n].domain for n in ROWS)


@pytest.mark.parametrize("name", ROWS)
def test_each_row_runs_on_its_forms_case_without_a_finding(name):
    """Correct passes of torch on a case made for them: no finding, and nothing of fxfuzz's own raised."""
    assert verify(case_of(REGISTRY[name].domain), load_pass(name)) == []


def _code_after(name: str) -> tuple[str, str]:
    case = case_of(REGISTRY[name].domain).copy()
    before = case.gm.code
    gm, _ = load_pass(name)(case.gm, case.signature)
    return before, gm.code


@pytest.mark.parametrize(
    "name", ["joint_graph_passes", "post_grad_passes", "post_grad_passes_training", "freezing_passes"]
)
def test_each_pipeline_row_reaches_the_real_pass(name):
    before, after = _code_after(name)
    assert before != after


def test_a_pattern_row_applies_its_own_list_alone():
    """Both permute pairs of the joint graph (the forward's and its transpose in the backward)
    go, by the early list's entries and no other list's."""
    drain_reach()
    with counting_patterns():
        _code_after("joint_early_patterns")
    counts = drain_reach()
    assert counts["pattern:joint_graph.early_patterns:joint_graph.pointless_permute_pair:replaced"] == 2
    assert all(k.startswith("pattern:joint_graph.early_patterns:") for k in counts)


def test_a_pattern_row_leaves_lowering_entries_out_for_its_call_alone():
    from fxfuzz.core.catalogue import PatternList, lowerings_of
    from torch._inductor.pattern_matcher import LoweringPatternEntry

    rows = PatternList("post_grad_patterns_1")
    total, lowering = lowerings_of("post_grad_patterns_1")
    assert 0 < lowering < total
    patterns = rows.pattern_list()
    seen = []
    real_apply = type(patterns).apply

    def spy(self, gm):
        # The row's list alone: building the case (on a process's first Inductor-form case)
        # runs Inductor's pre-grad lists too, through the same class.
        if self is patterns:
            seen.extend(e for es in self.patterns.values() for e in es)
        return real_apply(self, gm)

    type(patterns).apply = spy
    try:
        _code_after("post_grad_patterns_1")
    finally:
        type(patterns).apply = real_apply
    assert len(seen) == total - lowering and not any(isinstance(e, LoweringPatternEntry) for e in seen)
    assert sum(len(es) for es in patterns.patterns.values()) == total  # put back


def test_the_training_rows_forward_and_backward_joined_compute_the_joint_graph():
    """``joined`` both ways: the partition joined is judged equal to the joint graph; with one
    gradient of the backward broken, it is not."""
    from fxfuzz.core.catalogue import _given, joined, split
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    case = case_of(JOINT)

    def join(broken: bool):
        def pass_fn(gm, graph_signature):
            with _given("joint_graph_passes", gm):
                fw, bw, forward_outputs = split(min_cut_rematerialization_partition, gm, compiler="inductor")
            if broken:
                out = bw.graph.output_node()
                first = next(v for v in out.args[0] if isinstance(v, fx.Node))
                with bw.graph.inserting_before(out):
                    bumped = bw.graph.call_function(torch.ops.aten.add.Tensor, (first, 1))
                out.args = (tuple(bumped if v is first else v for v in out.args[0]),)
                bw.recompile()
            return joined(gm, fw, bw, forward_outputs), graph_signature

        return pass_fn

    assert verify(case, join(broken=False)) == []
    assert any(f.oracle == "equivalence" for f in verify(case, join(broken=True)))


@pytest.mark.parametrize("broken", ["swaps_saved", "recomputes_saved_wrongly"])
def test_a_partitioner_that_mixes_up_what_it_saves_is_found(broken):
    """Judged as the joint graph it came from, a partition whose backward reads the wrong saved
    values gives wrong gradients: found, by value, not as a crash."""
    import broken_partitioners

    found = verify(case_of(JOINT), getattr(broken_partitioners, broken), REGISTRY["default_partition"].contract)
    assert any((f.oracle, f.kind) == ("equivalence", "value_mismatch") for f in found), found
    assert all(f.oracle != "crash" for f in found), found


def test_a_partition_out_of_step_with_the_runtimes_call_is_a_finding_not_fxfuzzs_error():
    """A backward taking fewer inputs than AOTAutograd's runtime hands it fails when called,
    as the runtime's call would: the pass's malformed result, judged (no InternalError)."""
    from broken_partitioners import drops_a_tangent

    found = verify(case_of(JOINT), drops_a_tangent, REGISTRY["default_partition"].contract)
    assert any(f.oracle == "equivalence" for f in found), found


@pytest.mark.parametrize("name", ["default_partition", "min_cut_rematerialization_partition"])
def test_a_partitioner_row_on_graphs_that_are_no_joint_graph_exits_2(name, tmp_path, capsys):
    """Any other domain's graphs are not what a partitioner takes: refused in one line, before
    any case is drawn."""
    from fxfuzz.cli.main import main

    argv = ["run", "--pass", name, "--domain", "export", "--no-db", "--report-dir", str(tmp_path / "r")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "cannot judge --domain export: its pass takes AOTAutograd's joint graphs" in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_the_partitioner_rows_are_called_as_aotautograd_calls_them():
    """Each row hands its partitioner what ``_partition_joint_graph_into_fw_bw`` hands it (and
    min-cut Inductor's ``compiler``), and the forward saves values the backward reads."""
    import torch._functorch.partitioners as partitioners

    calls = []
    for name in ("default_partition", "min_cut_rematerialization_partition"):
        real = getattr(partitioners, name)

        def spy(gm, joint_inputs, *args, real=real, **kwargs):
            calls.append((joint_inputs, args, kwargs))
            fw, bw = real(gm, joint_inputs, *args, **kwargs)
            calls.append(len(fw.graph.output_node().args[0]) - kwargs["num_fwd_outputs"])
            return fw, bw

        setattr(partitioners, name, spy)
        try:
            _code_after(name)
        finally:
            setattr(partitioners, name, real)
    (primals, tangents), args, kwargs = calls[0]
    assert [len(primals), len(tangents)] == [3, 1] and args == ()
    assert kwargs == {"num_fwd_outputs": 1, "static_lifetime_input_indices": []}
    assert calls[2][2] == {**kwargs, "compiler": "inductor"}
    assert calls[1] > 0 and calls[3] > 0


class _ReturnsAlias(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.ops.aten.alias.default(x), x.sin()


def returns_the_input_itself(gm: fx.GraphModule, graph_signature):
    """What remove_noop_ops does to ``alias(x)`` returned: the output becomes ``x`` itself."""
    for node in list(gm.graph.nodes):
        if node.target is torch.ops.aten.alias.default:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    gm.recompile()
    return gm, graph_signature


def test_an_output_aliasing_an_input_may_become_that_input_on_inductors_forms_alone():
    """AOTAutograd regenerates an output aliasing an input from its base, so on Inductor's form
    the graph returning the input itself is no finding; the same graph judged as an aten-domain
    case (whose caller sees the object returned) is one."""
    import dataclasses

    case = lower_inductor(from_module(_ReturnsAlias(), (torch.tensor([1.0, 2.0]),)), INFERENCE)
    assert case is not None and any(n.target is torch.ops.aten.alias.default for n in case.gm.graph.nodes)
    assert verify(case, returns_the_input_itself, REGISTRY["remove_noop_ops"].contract) == []
    found = verify(
        dataclasses.replace(case, domain="aten"), returns_the_input_itself, REGISTRY["remove_noop_ops"].contract
    )
    assert [f.kind for f in found] == ["identity_mismatch"]
