"""Each oracle check fires on a pass broken in its way, and stays quiet on correct passes."""

from __future__ import annotations

import io

import broken_passes as bp
import handmade as hm
import pytest
import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.contract import MEANING
from fxfuzz.core.known import load_known
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import Finding, verify
from fxfuzz.oracles.crash import crash_finding, site_key
from fxfuzz.oracles.execute import graph_modules
from fxfuzz.oracles.exported import export_checks, export_rejection
from fxfuzz.oracles.semantics import compare, observe
from fxfuzz.strategies import graph_cases
from hypothesis import Phase, given, settings

REAL = load_pass("set_grad")
IDENTITY = load_pass("identity")
CASES = [
    hm.no_grad_region_case,
    hm.view_output_case,
    hm.random_op_case,
    hm.nondeterministic_case,
    hm.pytree_case,
    hm.buffer_update_case,
    hm.independent_outputs_case,
]


def kinds(findings):
    return {(f.oracle, f.kind) for f in findings}


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("ambient", [True, False])
def test_correct_passes_are_clean_on_handmade_cases(make, ambient):
    case = make(ambient)
    assert verify(case, IDENTITY) == []
    if make is hm.buffer_update_case and ambient:
        return  # the real pass's known finding, pinned by the next test
    assert verify(case, REAL) == []


def test_real_pass_wrapped_buffer_update_is_lost_to_dead_code_elimination():
    """Known finding: the set-grad pass wraps ``with no_grad(): buf.add_(x)`` in a
    wrap_with_set_grad_enabled call whose result nobody reads; eliminate_dead_code then
    deletes the call and the buffer update with it (the original's toggles and add_ are
    side-effecting, so it survives the same clean-up)."""
    findings = verify(hm.buffer_update_case(True), REAL)
    assert kinds(findings) == {("structure", "dead_code_elimination_changes_meaning")}, findings
    assert "input 0 after the call" in findings[0].message


BROKEN = [
    (bp.crashes, hm.no_grad_region_case, ("crash", "pass_raised")),
    (bp.returns_nothing, hm.no_grad_region_case, ("crash", "bad_return")),
    (bp.leaves_toggles, hm.no_grad_region_case, ("structure", "leftover_call")),
    (bp.breaks_lint, hm.no_grad_region_case, ("structure", "lint_failed")),
    (bp.corrupts_users, hm.no_grad_region_case, ("structure", "def_use_inconsistent")),
    (bp.hop_loses_meta, hm.no_grad_region_case, ("structure", "malformed_hop")),
    (bp.hides_mutation_from_dce, hm.no_grad_region_case, ("structure", "dead_code_elimination_changes_meaning")),
    (bp.undeepcopyable, hm.no_grad_region_case, ("structure", "cleanup_failed")),
    (bp.stateful, hm.no_grad_region_case, ("structure", "rerun_changes_meaning")),
    (bp.renames_placeholder, hm.no_grad_region_case, ("signature", "input_names_mismatch")),
    (bp.renames_output, hm.no_grad_region_case, ("signature", "output_name_mismatch")),
    (bp.renames_user_input, hm.no_grad_region_case, ("signature", "user_inputs_renamed")),
    (bp.drops_output_spec, hm.no_grad_region_case, ("signature", "spec_count_changed")),
    (bp.flips_persistence, hm.no_grad_region_case, ("signature", "input_specs_changed")),
    (bp.adds_pytree_convention, hm.no_grad_region_case, ("signature", "calling_convention_changed")),
    (bp.drops_pytree_convention, hm.pytree_case, ("signature", "calling_convention_changed")),
    (bp.calls_python_sin, hm.no_grad_region_case, ("signature", "export_verifier_rejects")),
    (bp.forgets_module_stack, hm.no_grad_region_case, ("signature", "export_verifier_rejects")),
    (bp.drops_toggles, hm.no_grad_region_case, ("equivalence", "requires_grad_mismatch")),
    (bp.sin_to_cos, hm.no_grad_region_case, ("equivalence", "value_mismatch")),
    (bp.casts_outputs, hm.no_grad_region_case, ("equivalence", "meta_mismatch")),
    (bp.none_output_becomes_zero, hm.no_grad_region_case, ("equivalence", "value_kind_mismatch")),
    (bp.extra_output, hm.no_grad_region_case, ("equivalence", "output_structure_mismatch")),
    (bp.copies_views, hm.view_output_case, ("equivalence", "aliasing_mismatch")),
    (bp.drops_inplace, hm.no_grad_region_case, ("equivalence", "value_mismatch")),
    (bp.leaks_autocast, hm.no_grad_region_case, ("equivalence", "autocast_state_leak")),
    (bp.leaks_dispatch_keys, hm.no_grad_region_case, ("equivalence", "dispatch_state_leak")),
    (bp.wrong_sin_grad, hm.no_grad_region_case, ("gradients", "grad_value_mismatch")),
    (bp.wrong_sin_tangent, hm.no_grad_region_case, ("gradients", "tangent_value_mismatch")),
    (bp.wraps_again, hm.no_grad_region_case, ("idempotence", "adds_hop")),
    (bp.rewrites_own_output, hm.no_grad_region_case, ("idempotence", "second_application_changes_meaning")),
    (bp.refuses_own_output, hm.no_grad_region_case, ("idempotence", "second_application_raised")),
]


@pytest.mark.parametrize("broken, make, expected", BROKEN, ids=[b[0].__name__ for b in BROKEN])
@pytest.mark.parametrize("ambient", [True, False])
def test_oracle_fires_on_broken_pass(broken, make, expected, ambient):
    findings = verify(make(ambient), broken)
    assert expected in kinds(findings), findings


@pytest.mark.parametrize(
    "broken, make, expected",
    [
        # under ambient no_grad the alias would not require grad at all: another finding
        (bp.aliases_passthrough, hm.view_output_case, ("equivalence", "grad_fn_mismatch")),
        # under ambient no_grad the detached multiplication never recorded a gradient anyway
        (bp.detaches_mul_lhs, hm.no_grad_region_case, ("gradients", "grad_presence_mismatch")),
    ],
)
def test_oracle_fires_on_broken_pass_under_grad(broken, make, expected):
    findings = verify(make(True), broken)
    assert expected in kinds(findings), findings


def test_grad_mode_leak_is_an_equivalence_finding():
    findings = verify(hm.no_grad_region_case(True), bp.leaks_grad_mode, contract=MEANING)
    assert kinds(findings) >= {("equivalence", "grad_mode_leak")}, findings


@pytest.mark.parametrize(
    "broken, only",
    [
        (bp.wrong_sin_grad, {("gradients", "grad_value_mismatch"), ("gradients", "tangent_value_mismatch")}),
        (bp.detaches_mul_lhs, {("gradients", "grad_presence_mismatch"), ("gradients", "tangent_value_mismatch")}),
        # a Python function is no ATen op: export's verifier rejects it, nothing else changes
        (bp.wrong_sin_tangent, {("gradients", "tangent_value_mismatch"), ("signature", "export_verifier_rejects")}),
        (bp.calls_python_sin, {("signature", "export_verifier_rejects")}),
        (
            bp.hides_mutation_from_dce,
            {("structure", "dead_code_elimination_changes_meaning"), ("signature", "export_verifier_rejects")},
        ),
    ],
)
def test_planted_bug_shows_only_where_planted(broken, only):
    """Each planted bug keeps everything else intact, so no other check may fire."""
    assert kinds(verify(hm.no_grad_region_case(True), broken)) == only


def test_crash_keeps_exception_type_frame_and_line():
    (f,) = verify(hm.no_grad_region_case(), bp.crashes)
    assert f.details["exception"] == "RuntimeError"
    assert "broken_passes.py" in f.details["frame"] and f.details["frame"].endswith(":crashes")
    assert f.details["line"] == 'raise RuntimeError("planted crash")'


def _raised_in(path, source: str) -> Finding:
    """The crash finding of ``pass_fn`` defined by ``source``, compiled as the file ``path``."""
    import linecache

    path.write_text(source)
    linecache.checkcache(str(path))
    namespace: dict = {}
    exec(compile(source, str(path), "exec"), namespace)
    with pytest.raises(KeyError) as raised:
        namespace["pass_fn"](None, None)
    return crash_finding(raised.value)


def test_a_crash_bucket_outlives_its_line_moving_in_the_file(tmp_path):
    """Crash buckets key the raising line's text, not its number: a torch patch release that
    moves a raise (2.11's ``Module.__getattr__`` raised at line 1968, 2.13's at 1967) keeps its
    known id. Another raise of the same function stays another bucket."""
    body = "def pass_fn(gm, sig):\n    raise KeyError('gone')\n"
    before = _raised_in(tmp_path / "moved.py", body)
    after = _raised_in(tmp_path / "moved.py", "# a line added above\n\n" + body)
    assert before.details["frame"] != after.details["frame"]
    assert bucket_id(before) == bucket_id(after)
    other = _raised_in(tmp_path / "moved.py", body.replace("'gone'", "'other'"))
    assert bucket_id(other) != bucket_id(before)
    # What records no line (a process that died, a case that hung) keys by its frame as before.
    died = {"exception": "SIGSEGV", "frame": "<native>"}
    assert site_key(died) == "<native>" and site_key({**died, "line": ""}) == "<native>"


def test_identity_without_contract_is_clean_even_with_toggles():
    assert verify(hm.no_grad_region_case(), bp.leaves_toggles, contract=MEANING) == []


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__)
def test_export_checks_accept_the_handmade_originals(make):
    """The verdict comparison is only meaningful where the original passes every check."""
    case = make(True)
    python_calls = make is hm.nondeterministic_case  # a Python callable is no ATen op
    for name in export_checks():
        rejection = export_rejection(name, case.gm, case.signature, case.inputs)
        assert rejection is None or (python_calls and name == "exported_program"), (name, rejection)


def test_nondeterministic_values_are_compared_by_property_only():
    """Two runs of the same noisy graph differ, yet verify does not blame the pass; a real
    bug on a deterministic output of the same graph is still caught."""
    case = hm.nondeterministic_case(True)
    first = observe(case.gm, case.inputs, True)
    second = observe(case.gm, case.inputs, True)
    assert ("equivalence", "value_mismatch") in kinds(compare(first, second, ["x"], exact=True))
    assert verify(case, IDENTITY) == []
    caught = [f for f in verify(case, bp.sin_to_cos) if f.kind == "value_mismatch"]
    assert [f.details["where"] for f in caught] == ["output 1"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "broken, oracle",
    [
        (bp.drops_toggles, "equivalence"),
        (bp.wrong_sin_grad, "gradients"),
        (bp.renames_placeholder, "signature"),
        (bp.leaves_toggles, "structure"),
        (bp.rewrites_own_output, "idempotence"),
    ],
)
def test_generated_cases_reach_each_planted_bug(broken, oracle):
    """Generation alone, without a hand-made case, finds planted bugs (no shrinking: the
    campaign tests cover that)."""

    class Reached(Exception):
        pass

    @settings(max_examples=300, database=None, deadline=None, phases=[Phase.generate])
    @given(graph_cases())
    def probe(case):
        if any(f.oracle == oracle for f in verify(case, broken)):
            raise Reached

    with pytest.raises(Reached):
        probe()


def test_generated_cases_carry_the_module_stack_export_checks():
    """Generated cases record nn_module_stack as export does, so the verifier's check bites
    on them: a pass that forgets it on the nodes it creates is caught."""

    @settings(max_examples=300, database=None, deadline=None, phases=[Phase.generate])
    @given(graph_cases())
    def probe(case):
        checks = {f.details.get("check") for f in verify(case, bp.forgets_module_stack)}
        assert "nn_module_stack" not in checks

    with pytest.raises(AssertionError):
        probe()


# Pinned in test_oracles_known.py on cases torch.export itself produces.
KNOWN_KINDS = {"dead_code_elimination_changes_meaning", "def_use_inconsistent"}
# With cond/map bodies or autocast regions the known no_grad-dropping defect and the crashes
# show in these oracles.
KNOWN_WITH_HOPS = {"crash", "equivalence", "gradients"}
# Buckets recorded as torch's own defects (the export stages of the downstream oracle reach
# some of them on generated cases, e.g. a region returning nothing that save/load refuses).
KNOWN_BUCKETS = frozenset(load_known("fxfuzz-known.txt"))


def _has_hops_or_autocast(case):
    enter = torch.amp.autocast_mode._enter_autocast
    return len(graph_modules(case.gm)) > 1 or any(n.target is enter for n in case.gm.graph.nodes)


@pytest.mark.slow
@settings(max_examples=100)
@given(graph_cases())
def test_real_pass_is_equivalent(case):
    findings = [f for f in verify(case, REAL) if f.kind not in KNOWN_KINDS and bucket_id(f) not in KNOWN_BUCKETS]
    if _has_hops_or_autocast(case):
        findings = [f for f in findings if f.oracle not in KNOWN_WITH_HOPS]
    assert findings == []


@settings(max_examples=40)
@given(graph_cases())
def test_identity_pass_is_equivalent(case):
    assert verify(case, IDENTITY) == []


def test_downstream_fires_on_a_result_export_cannot_save_and_blames_only_the_pass():
    """Forced through the stages: torch.export.save refuses the result (save_load_raised),
    while the real pass and the identity on the same case pass every stage."""
    from fxfuzz.oracles.downstream import stages_forced

    case = hm.no_grad_region_case(ambient=True)
    with stages_forced():
        found = verify(case, bp.unsaveable)
        assert [(f.oracle, f.kind) for f in found] == [("downstream", "save_load_raised")], found
        assert "save_load stage" in found[0].message and "the pass's output" in found[0].message
        assert verify(case, REAL) == [] and verify(case, IDENTITY) == []
    # Outside the share (this case hashes above the default), the stages do not run.
    assert verify(case, bp.unsaveable) == []


def test_a_stage_that_leaves_the_autocast_dtype_changed_changes_no_later_check():
    """``run_decompositions`` raises retracing this case (on the original as on the result) in
    the middle of a float16 autocast region, and leaves the CPU autocast dtype float16. The
    stages put the process-wide state back, so a later check does not start from it: before,
    the second application's run left "autocast on cpu off float16, expected off bfloat16"
    (a false alarm of approximates' false-alarm run, tests/data/decompositions_leave_autocast_dtype.json)."""
    import os

    from fxfuzz.core.calls import exported_program
    from fxfuzz.oracles.downstream import check_downstream, stages_forced
    from fxfuzz.oracles.execute import GlobalState
    from fxfuzz.repro.files import load_repro
    from paths import DATA, HELPERS

    case = load_repro(os.path.join(DATA, "decompositions_leave_autocast_dtype.json")).case
    before = GlobalState.read()
    # torch's own leak (docs/known-findings.md, "run_decompositions"): when it is fixed, this
    # fails, and the entry goes.
    program = exported_program(case.gm, case.signature, case.inputs, copy=True)
    try:
        with pytest.raises(RuntimeError, match="might be aliasing the input or the output"):
            program.run_decompositions()
        assert torch.get_autocast_dtype("cpu") == torch.float16
    finally:
        before.restore()
    check_downstream(case.gm, case.signature, case.gm, case.signature, case.inputs, case.ambient_grad)
    assert GlobalState.read() == before
    with stages_forced():
        assert verify(case, load_pass(f"{HELPERS}/rounding_passes.py:reassociates")) == []
    assert GlobalState.read() == before


def test_the_stage_share_is_a_deterministic_function_of_the_case():
    from fxfuzz.core.choices import DEFAULT_STAGE_SHARE
    from fxfuzz.oracles.downstream import DOWNSTREAM_STAGES, stages_forced, stages_selected

    codes = [f"graph {i}" for i in range(2000)]
    picked = [c for c in codes if stages_selected(c, True)]
    assert (
        picked == [c for c in codes if stages_selected(c, True)]
        and DEFAULT_STAGE_SHARE * 1000 <= len(picked) <= DEFAULT_STAGE_SHARE * 3000
    )
    cheap = tuple(s for s in DOWNSTREAM_STAGES if s != "run_decompositions")
    assert all(stages_selected(c, True) in (tuple(DOWNSTREAM_STAGES), cheap) for c in picked)
    with stages_forced():
        assert stages_selected(codes[0], True) == tuple(DOWNSTREAM_STAGES)
    assert not any(stages_selected(c, True, 0.0) for c in codes)
    assert all(stages_selected(c, True, 1.0) for c in codes)


class _MapWithoutExtraArguments(torch.nn.Module):
    """A map with no further operands: its empty list of them is what serde notes."""

    def forward(self, xs):
        from torch._higher_order_ops.map import map as hop_map

        return hop_map(lambda x: x.sin(), xs)


def test_the_stages_run_without_torchs_own_notices():
    """Copying a pytree spec (unflatten, decompositions) warns that ``LeafSpec`` is deprecated,
    and serde logs a note for each empty list it writes: the same on every example whatever the
    pass did, they buried a bench's and a worker's output (#36). Quiet while a stage runs, and
    only then: the stage itself still raises or succeeds as torch makes it."""
    import logging
    import warnings

    from fxfuzz.oracles.downstream import DOWNSTREAM_STAGES

    class Notes(logging.Handler):
        def __init__(self):
            super().__init__(logging.DEBUG)
            self.seen = []

        def emit(self, record):
            self.seen.append(record.getMessage())

    ep = torch.export.export(_MapWithoutExtraArguments(), (torch.randn(2, 3),))
    serde = logging.getLogger("torch._export.serde.serialize")
    notes = Notes()
    serde.addHandler(notes)
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for make, _ in DOWNSTREAM_STAGES.values():
                make(ep)
        assert not [str(w.message) for w in seen if "LeafSpec" in str(w.message)] and not notes.seen
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.export.unflatten(ep)  # the same stages, not quieted: what the filter removes
            torch.export.save(ep, io.BytesIO())
        assert [w for w in seen if "LeafSpec" in str(w.message)]
        assert [m for m in notes.seen if "empty list" in m]
    finally:
        serde.removeHandler(notes)


# --- view layout ---------------------------------------------------------------------------


def _view_case(value: torch.Tensor, view):
    """A graph returning ``view(x)`` of its one input ``x`` (``value``)."""
    from fxfuzz.core.case import GraphCase
    from fxfuzz.strategies.builder import GraphBuilder
    from torch.export.graph_signature import InputKind

    b = GraphBuilder(grad_mode=False)
    x = b.placeholder("x", value, InputKind.USER_INPUT)
    gm, sig = b.finish([view(b, x)])
    return GraphCase(gm, sig, tuple(b.inputs), ambient_grad=False)


def _returning(view):
    """A pass whose result returns ``view(graph, x)`` of the input instead."""

    def rewrite(gm, sig):
        out, (x,) = gm.graph.output_node(), list(gm.graph.find_nodes(op="placeholder"))
        with gm.graph.inserting_before(out):
            out.args = ((view(gm.graph, x),),)
        gm.graph.eliminate_dead_code()
        gm.recompile()
        return gm, sig

    return rewrite


def test_view_layout_fires_on_a_view_with_other_strides_of_the_same_values():
    """``x.t()`` of a (2, 2) input of ones returned as ``x.view(2, 2)``: the same values, the
    same input aliased, but its elements lie elsewhere in the storage."""
    aten = torch.ops.aten
    case = _view_case(torch.ones(2, 2), lambda b, x: b.call(aten.t.default, [x]))
    found = verify(case, _returning(lambda g, x: g.call_function(aten.view.default, (x, [2, 2]))))
    assert "view_layout_mismatch" in {f.kind for f in found}, found


def test_view_layout_is_quiet_on_the_stride_of_a_dimension_of_one():
    """``x.permute(1, 0)`` of a (1, 3) input has strides (1, 3); the same elements as
    ``as_strided((3, 1), (1, 1))``: the stride of the dimension of one places nothing (a false
    alarm of the quantizes false-alarm run: pt2e's dequantized copy had other strides there)."""
    aten = torch.ops.aten
    case = _view_case(torch.randn(1, 3), lambda b, x: b.call(aten.permute.default, [x, [1, 0]]))
    result = _returning(lambda g, x: g.call_function(aten.as_strided.default, (x, [3, 1], [1, 1])))
    assert [f for f in verify(case, result) if f.oracle == "equivalence"] == []
