"""Dynamic shapes: symbolic sizes in generated and captured cases, checks at other sizes, and
the passes that break only there."""

from __future__ import annotations

import json
import operator
import random

import broken_passes as bp
import pytest
import torch
from draws import draw, draw_until
from fxfuzz.campaign.gate import run_gate
from fxfuzz.core.capture import from_module
from fxfuzz.core.case import GraphCase
from fxfuzz.core.passes import load_pass
from fxfuzz.core.rebuild import inputs_at
from fxfuzz.core.serialize import case_from_dict, case_to_dict
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.oracles import cleanup, verify
from fxfuzz.oracles.downstream import stages_forced
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.corpus import MODULES, capture
from hypothesis import find, settings
from torch import fx

REAL = load_pass("set_grad")
SYM_SIZE = torch.ops.aten.sym_size.int
DYNAMIC_CORPUS = [e for e in MODULES if e.dynamic_shapes is not None]


@pytest.fixture(scope="module")
def export_cases() -> list[GraphCase]:
    return draw(300, seed_=3)


def _nodes(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for m in gm.modules() if isinstance(m, fx.GraphModule) for n in m.graph.nodes]


@pytest.mark.slow
def test_a_quarter_of_export_cases_carry_symbolic_sizes(export_cases):
    """Done-when of #15: at least 25% of default export-domain cases are traced with symbolic
    sizes and have other sizes to run at."""
    symbolic = [c for c in export_cases if c.sizes]
    assert len(symbolic) >= 0.25 * len(export_cases), f"{len(symbolic)} of {len(export_cases)}"
    assert all(c.features.get("symbolic:case") for c in symbolic)


@pytest.mark.slow
def test_symbolic_cases_look_like_export(export_cases):
    """ShapeEnv-backed placeholder metas with ranges above 1, parameters static, every SymInt
    an op takes read from a node (sym_size / arithmetic), never baked in; sizes cross region
    boundaries, are graph outputs (SymIntArgument) and appear inside cond/map subgraphs."""
    symbolic = [c for c in export_cases if c.sizes]
    seen = set()
    for case in symbolic:
        env = None
        for spec, ph in zip(case.signature.input_specs, [n for n in case.gm.graph.nodes if n.op == "placeholder"]):
            dims = [d for d in ph.meta["val"].shape if isinstance(d, torch.SymInt)]
            if spec.kind.name != "USER_INPUT":
                assert not dims, "export keeps parameters, buffers and constants static"
            for d in dims:
                env = d.node.shape_env
                assert env is not None and all(env.var_to_range[s].lower >= 2 for s in d.node.expr.free_symbols)
        assert env is not None
        for n in _nodes(case.gm):
            for a in fx.node.map_aggregate((n.args, n.kwargs), lambda a: [a]):
                assert not isinstance(a, torch.SymInt), f"{n.name} takes a SymInt constant"
            if n.target is SYM_SIZE:
                seen.add("sym_size")
                assert isinstance(n.meta["val"], torch.SymInt)
            if n.target in (operator.mul, operator.add, operator.floordiv, torch.sym_max):
                seen.add("arith")
            if (
                n.op == "placeholder"
                and n.graph is not case.gm.graph
                and any(isinstance(d, torch.SymInt) for d in n.meta["val"].shape)
            ):
                seen.add("symbolic subgraph")
        if any(type(s.arg).__name__ == "SymIntArgument" for s in case.signature.output_specs):
            seen.add("symint output")
    assert seen == {"sym_size", "arith", "symbolic subgraph", "symint output"}
    regions = ("region:symint_in", "region:symint_out")
    more = draw_until(300, lambda cs: all(any(c.features.get(k, 0) for c in cs) for k in regions), seed_=2)
    assert all(sum(c.features.get(k, 0) for c in more) > 0 for k in regions)


def test_other_sizes_satisfy_the_guards_and_run(export_cases):
    """Each drawn assignment lies in every symbol's range, differs from the traced sizes, and
    the original graph runs at it as it does at the traced sizes."""
    from fxfuzz.oracles.execute import run_graph

    for case in [c for c in export_cases if c.sizes][:15]:
        traced = run_graph(case.gm, case.inputs, case.ambient_grad)
        for i, sizes in enumerate(case.sizes, 1):
            resized = inputs_at(case.gm, case.inputs, sizes, seed=i)
            assert [t.shape for t in resized] != [t.shape for t in case.inputs]
            assert run_graph(case.gm, resized, case.ambient_grad).ok == traced.ok


@pytest.mark.slow
def test_shrinking_prefers_static_shapes():
    """A failure that needs no symbol shrinks to a case without one."""
    symbolic = []

    def calls_sin(case):
        found = case.features.get("op:sin", 0) > 0
        if found:
            symbolic.append(bool(case.sizes))
        return found

    # Random(3): its first failing case is symbolic (the derandomized default's too, but it took 25 s).
    case = find(graph_cases(), calls_sin, settings=settings(database=None, max_examples=500), random=random.Random(3))
    assert symbolic[0], "the first failing case must carry symbols for this test to mean anything"
    assert case.sizes == () and not case.features.get("symbolic:case")


@pytest.mark.slow
def test_adversarial_cases_carry_inconsistent_size_metas():
    def inconsistent(cases):
        return sum(c.features.get("adversarial:inconsistent_size_meta", 0) for c in cases) > 0

    assert inconsistent(draw_until(300, inconsistent, domain="adversarial", seed_=2))


@pytest.fixture(scope="module")
def dynamic_corpus() -> list[tuple[str, GraphCase]]:
    return [(e.name, capture(e, True)) for e in DYNAMIC_CORPUS]


def test_from_module_takes_dynamic_shapes(dynamic_corpus):
    """``from_module(..., dynamic_shapes=...)`` captures export's own symbolic graph (its
    sym_size node feeds the no_grad region) and finds other sizes satisfying its guards."""
    for name, case in dynamic_corpus:
        assert case.sizes and all(v != 4 for s in case.sizes for v in s.values()), name
        assert any(n.target is SYM_SIZE for n in case.gm.graph.nodes)


@pytest.mark.parametrize("broken", [bp.freezes_symint_operands, bp.drops_symint_operands])
def test_verify_catches_size_specializing_passes_at_other_sizes(dynamic_corpus, broken):
    """A pass right at the traced sizes only: caught at another size, and the finding says
    which; the real pass is quiet at every size."""
    for name, case in dynamic_corpus:
        assert verify(case, REAL) == [], name
        found = [f for f in verify(case, broken) if "sizes" in f.details]
        assert found, name
        # The plain kind: a known defect stays its one bucket whichever sizes show it.
        assert {f.kind for f in found} <= {"value_mismatch", "meta_mismatch"}, name
        assert found[0].details["sizes"] in [dict(s) for s in case.sizes]
        assert "at sizes s" in found[0].message


def test_structure_catches_a_frozen_symint_operand(dynamic_corpus):
    _, case = dynamic_corpus[0]
    [f] = [f for f in verify(case, bp.freezes_symint_operands) if f.oracle == "structure"]
    assert f.kind == "malformed_hop" and "disagrees with operand 4" in f.message


@pytest.mark.parametrize("broken", [bp.freezes_symint_operands, bp.drops_symint_operands])
def test_gate_on_the_corpus_rejects_size_specializing_passes(dynamic_corpus, broken):
    result = run_gate(broken, REAL, dynamic_corpus, CampaignSettings(budget_s=1e9, max_examples=0))
    assert any("sizes" in b.finding.details for b in result.buckets.values()), result.buckets


@pytest.mark.processes
@pytest.mark.parametrize("broken", ["freezes_symint_operands", "drops_symint_operands"])
def test_default_gate_rejects_size_specializing_passes_on_its_corpus(tmp_path, broken, cli):
    """Done-when of #15: a default ``fxfuzz gate`` on 2 workers rejects each. Both show on the
    gate's corpus, so one fresh case keeps the test short (as tests/oracles/test_historical.py); how
    fast is ``fxfuzz bench``'s and docs/benchmark.md's to say, not a timed test's."""
    r = cli(
        "gate", "--candidate", f"tests/helpers/broken_passes.py:{broken}",
        "--workers", "2", "--max-examples", "1", "--max-shrink-s", "0", "--report-dir", str(tmp_path),
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert any(f["message"].startswith("at sizes s") and not f["known"] for f in report["findings"])
    in_corpus = [line for line in r.stdout.splitlines() if "REGRESSION" in line and "on a fresh case" not in line]
    assert any("at sizes s" in line for line in in_corpus), r.stdout


def test_a_symbolic_case_round_trips_through_json(dynamic_corpus):
    """Symbols (traced value, range), symbolic metas and the other sizes survive the JSON, and
    the rebuilt case shows the same finding."""
    _, case = dynamic_corpus[1]
    data = json.loads(json.dumps(case_to_dict(case)))
    assert data["symbols"] == {name: {"hint": 4, "min": 2, "max": 64} for name in data["symbols"]} and data["symbols"]
    back = case_from_dict(data)
    assert back.sizes == case.sizes
    metas = [str(n.meta.get("val")) for n in back.gm.graph.nodes]
    assert metas == [str(n.meta.get("val")) for n in case.gm.graph.nodes]
    assert verify(back, REAL) == []
    assert [f.kind for f in verify(back, bp.drops_symint_operands)] == [
        f.kind for f in verify(case, bp.drops_symint_operands)
    ]


# Torch only, so that its repro runs where fxfuzz is absent: torch's pass, then each SymInt
# operand of the HOP passed as its traced value.
FREEZING_PASS = """
import torch
from torch._export.passes.replace_set_grad_with_hop_pass import replace_set_grad_with_hop_pass

def freezes(gm, sig):
    gm, sig = replace_set_grad_with_hop_pass(gm, sig)
    for n in gm.graph.nodes:
        if n.target is torch.ops.higher_order.wrap_with_set_grad_enabled:
            n.args = tuple(a.meta["val"].node.hint if isinstance(getattr(a, "meta", {}).get("val"), torch.SymInt) else a for a in n.args)
    gm.recompile()
    return gm, sig
"""


@pytest.mark.processes
def test_a_dynamic_shape_repro_rebuilds_symbolic_metas_with_torch_alone(tmp_path, dynamic_corpus):
    """The standalone .py rebuilds the symbolic metas (ShapeEnv symbols with their ranges) and
    runs at the other sizes without fxfuzz; ``fxfuzz repro`` replays the .py and the .json."""
    from fxfuzz.cli.main import main
    from fxfuzz.core.identity import identify
    from fxfuzz.repro.files import load_repro, repro_document, write_repro
    from handmade import run_standalone

    (tmp_path / "freezing.py").write_text(FREEZING_PASS)
    spec = f"{tmp_path / 'freezing.py'}:freezes"
    _, case = dynamic_corpus[0]
    finding = next(f for f in verify(case, load_pass(spec)) if "sizes" in f.details)
    doc = repro_document("b", finding.to_dict(), case_to_dict(case), identify(spec))
    py = write_repro(str(tmp_path / "repros"), doc)
    run = run_standalone(py)
    assert run.returncode == 1 and "FAIL equivalence at sizes s" in run.stdout, run.stdout + run.stderr
    back = load_repro(py).case
    assert back.sizes == case.sizes
    assert [str(n.meta.get("val")) for n in back.gm.graph.nodes] == [
        str(n.meta.get("val")) for n in case.gm.graph.nodes
    ]
    # The .json names its pass file for information only: replayed with it given as --pass.
    assert main(["repro", py]) == 1 and main(["repro", py[:-3] + ".json", "--pass", spec]) == 1
    assert main(["repro", py[:-3] + ".json", "--pass", "set_grad"]) == 0


class ReturnsASize(torch.nn.Module):
    """A size computed under no_grad and returned: export's signature names it with a
    SymIntArgument."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        with torch.no_grad():
            n = x.shape[0] * 2
        return x.sin(), n


def test_a_symint_output_of_an_exported_case_is_no_signature_finding():
    """The false-alarm run's one new bucket: the signature check read only TensorArgument
    outputs as named, so a SymInt output (as export makes it) was output_name_mismatch."""
    case = from_module(ReturnsASize(), (torch.randn(4, 3),), dynamic_shapes=({0: torch.export.Dim("b")},))
    assert type(case.signature.output_specs[1].arg).__name__ == "SymIntArgument"
    assert verify(case, REAL) == []


class _Sin(torch.nn.Module):
    def forward(self, x):
        return x.sin()


def test_export_stages_run_at_the_other_sizes_too():
    """A pass that freezes the user input's sizes in its placeholder meta: the graph still runs
    at every size, but the ExportedProgram built on it refuses other sizes. No region, so no
    structure check sees it: only the stages' modules called at the other sizes do."""
    case = from_module(_Sin(), (torch.randn(4, 3),), dynamic_shapes=({0: torch.export.Dim("n", max=64)},))
    assert case.sizes
    with stages_forced():
        assert verify(case, REAL) == []
        findings = verify(case, bp.freezes_input_metas)
    assert findings and all(f.oracle == "downstream" and f.message.startswith("at sizes s") for f in findings), findings
    assert "module_raised" in {f.kind for f in findings}


def test_checks_leave_the_cases_symbols_unspecialized(dynamic_corpus):
    """Comparing a frozen meta with a symbolic one must not record a guard in the case's
    ShapeEnv: ``==`` on a SymInt did, and the case's other sizes became the traced ones for
    every later check (the stages at other sizes then saw nothing)."""
    _, case = dynamic_corpus[0]
    symbolic = [str(n.meta["val"].shape) for n in case.gm.graph.find_nodes(op="placeholder")]
    assert verify(case, bp.freezes_input_metas)  # malformed_hop: the region's operand meta was frozen
    assert [str(n.meta["val"].shape) for n in case.gm.graph.find_nodes(op="placeholder")] == symbolic


def test_the_clean_up_is_built_once_and_run_at_every_size(dynamic_corpus, monkeypatch):
    """deepcopy + eliminate_dead_code + recompile of the result does not depend on the inputs:
    one clean-up per result, which the traced and every other size then run."""
    cleaned = []
    real_clean = cleanup._clean
    monkeypatch.setattr(cleanup, "_clean", lambda gm: cleaned.append(gm) or real_clean(gm))
    for name, case in dynamic_corpus:
        cleaned.clear()
        assert len(case.sizes) >= 2 and verify(case, REAL) == [], name
        assert len(cleaned) == 1, name  # the result's; the original's only when the result fails


def test_other_sizes_of_a_dim_the_trace_replaced_by_an_expression():
    """A placeholder's dim whose symbol the trace replaced by an expression (``s1 = s0 + 1``, as
    a guard on two dims records it) has no name of its own: its other sizes follow from the
    free symbol's. Generation crashed on this once in a 20,000-example campaign (2026-11-26:
    ``AttributeError: 'Add' object has no attribute 'name'``, a worker restart)."""
    from fxfuzz.core.rebuild import size_at
    from fxfuzz.core.symbols import assignment, traced
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    env = ShapeEnv()
    a, b = (
        env.create_symbol(hint, ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC)
        for name, hint in (("a", 4), ("b", 5))
    )
    sa, sb = env.create_symintnode(a, hint=4), env.create_symintnode(b, hint=5)
    torch._check(sb == sa + 1)
    dims = [sa.node.expr, sb.node.expr]
    assert any(not isinstance(d, type(a)) for d in dims), dims  # one of them is now an expression
    sizes = assignment(env, dims, {free: 7 for free in sa.node.expr.free_symbols})
    assert sizes is not None and (size_at(sa, sizes), size_at(sb, sizes)) == (7, 8), sizes
    # The traced sizes, which the other sizes drawn must differ from, spelled the same way:
    # reading them crashed generation the same way once more (2026-11-27, dce's 20,000-example
    # run with identity_mismatch, a worker restart).
    at_trace = traced(env, dims)
    assert at_trace is not None and (size_at(sa, at_trace), size_at(sb, at_trace)) == (4, 5), at_trace
