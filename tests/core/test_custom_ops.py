"""Custom operators: fxfuzz's own in graph cases and programs, what torch's pass does with
them, the repros that define them, and a user's own added with ``register_op`` and the
plugin's ``--fxfuzz-op``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import torch
import user_ops
from draws import draw
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.cli.main import main
from fxfuzz.core.errors import UsageError
from fxfuzz.core.identity import identify
from fxfuzz.core.known import load_known
from fxfuzz.core.passes import load_pass
from fxfuzz.core.serialize import case_from_dict, case_to_dict
from fxfuzz.oracles import verify
from fxfuzz.oracles.program import check_program
from fxfuzz.repro.files import program_repro_source, repro_document, write_repro
from fxfuzz.strategies import from_module, module_programs, op_spec, register_op
from fxfuzz.strategies.custom import FXFUZZ_OPS, unregister_op
from handmade import CUSTOM_PROGRAM, PLANTED, run_standalone
from hypothesis import HealthCheck, given, seed, settings
from paths import HELPERS, ROOT
from torch._subclasses.fake_tensor import FakeTensorMode

pytest_plugins = ["pytester"]

REAL = load_pass("set_grad")
ops = torch.ops.fxfuzz
KNOWN = os.path.join(ROOT, "fxfuzz-known.txt")


def _custom_calls(features: dict) -> Counter:
    return Counter({k: v for k, v in features.items() if k.startswith("op:") and "::" in k})


@pytest.mark.slow
def test_export_cases_call_custom_operators():
    """At least 5% of export-domain cases call a custom operator, at least 3 distinct ones
    in 300 cases, each counted per operator in the features."""
    cases = draw(300)
    calls = [_custom_calls(c.features) for c in cases]
    assert sum(bool(c) for c in calls) >= 0.05 * len(cases)
    assert len(set().union(*calls)) >= 3
    case = next(c for c, n in zip(cases, calls) if n)
    nodes = {str(n.target) for m in case.gm.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes}
    assert any(t.startswith("fxfuzz.") for t in nodes)


def test_each_fxfuzz_operator_has_its_autograd_fake_and_mutation_behaviour():
    x, y = torch.randn(2, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    gx, gy = torch.autograd.grad(ops.scaled_mul(x, y).sum(), (x, y))
    assert torch.allclose(gx, 2 * y.expand(2, 3)) and torch.allclose(gy, 2 * x.sum(0))
    a, sign = ops.split_sign(x)
    assert not sign.requires_grad and torch.equal(torch.autograd.grad(a.sum(), x)[0], x.sign())
    with pytest.raises(RuntimeError, match="no autograd formula"):
        ops.cube(x).sum().backward()
    t, mask = ops.tanh_mask(x)
    assert not mask.requires_grad and torch.allclose(torch.autograd.grad(t.sum(), x)[0], 1 - torch.tanh(x) ** 2)
    buf = torch.zeros(3)
    version = buf._version
    ops.add_half_(buf, torch.ones(3))
    assert buf.eq(0.5).all() and buf._version > version
    # Metas come from the fake implementations: the real results' shapes and dtypes.
    calls = [(ops.scaled_mul, (x, y)), (ops.split_sign, (x,)), (ops.cube, (x,)), (ops.tanh_mask, (x,))]
    with FakeTensorMode(allow_non_fake_inputs=True):
        fakes = [op(*args) for op, args in calls]
    for (op, args), fake in zip(calls, fakes):
        real = op(*args)
        for r, f in zip(real if isinstance(real, tuple) else (real,), fake if isinstance(fake, tuple) else (fake,)):
            assert (r.shape, r.dtype, r.requires_grad) == (f.shape, f.dtype, f.requires_grad), op
    assert {s.name for s in FXFUZZ_OPS} == {
        f"fxfuzz::{n}" for n in ("scaled_mul", "split_sign", "cube", "tanh_mask", "add_half_")
    }


def test_each_fxfuzz_operator_runs_on_cuda_too():
    """A CPU kernel alone made every generated graph that calls the operator raise on CUDA on
    both sides alike, so --device cuda checked nothing of those cases (the first GPU run showed
    it for tanh_mask). The dispatcher says so on a machine without CUDA too."""
    for spec in FXFUZZ_OPS:
        assert any(
            torch._C._dispatch_has_kernel_for_dispatch_key(spec.name, key)
            for key in ("CUDA", "CompositeExplicitAutograd")
        ), spec.name


class EveryCustomOp(torch.nn.Module):
    """Each fxfuzz operator inside and around grad regions, values crossing them both ways."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))
        self.register_buffer("b", torch.zeros(3))

    def forward(self, x):
        y = ops.scaled_mul(x, self.w)
        with torch.no_grad():
            a, _ = ops.split_sign(y)
            c = ops.cube(x)  # no autograd formula: fine where nothing needs grad
            t, m = ops.tanh_mask(x)
            ops.add_half_(self.b, a)  # a buffer update under no_grad
        with torch.enable_grad():
            z = ops.scaled_mul(y, a)
            a2, s2 = ops.split_sign(z)
        u = ops.cube(s2)  # the non-differentiable output needs no grad
        v = y.sin()
        ops.add_half_(v, m)  # an activation updated in place
        t3, m3 = ops.tanh_mask(v)
        return a2 + u + t3 + self.b, c, m3, t


@pytest.mark.parametrize("ambient", [True, False])
def test_torchs_pass_keeps_every_custom_operator_in_and_across_grad_regions(ambient):
    with torch.set_grad_enabled(ambient):
        case = from_module(EveryCustomOp(), (torch.randn(3, requires_grad=True),))
    called = {n.target for n in case.gm.graph.nodes if str(n.target).startswith("fxfuzz.")}
    assert len(called) == 5
    assert verify(case, REAL) == []


class CustomBufferUpdateUnderNoGrad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.zeros(3))

    def forward(self, x):
        y = x.sin()
        with torch.no_grad():
            ops.add_half_(self.b, y)
        return y.cos()


def test_custom_buffer_update_under_no_grad_is_the_known_dead_code_defect():
    """A mutating custom operator alone in a no_grad region meets the known defect of the
    aten in-place update: the wrap_with_set_grad_enabled call around it has no users and is
    not side-effecting, so dead-code elimination deletes the update. Export itself keeps it
    (ep.module() updates the buffer)."""
    module = CustomBufferUpdateUnderNoGrad()
    case = from_module(module, (torch.ones(3, requires_grad=True),))
    findings = verify(case, REAL)
    assert {(f.oracle, f.kind) for f in findings} == {("structure", "dead_code_elimination_changes_meaning")}
    assert {bucket_id(f) for f in findings} <= set(load_known(KNOWN))
    exported = torch.export.export(CustomBufferUpdateUnderNoGrad(), (torch.ones(3),), strict=False).module()
    exported(torch.ones(3))
    assert exported.b.eq(0.5 * torch.ones(3).sin()).all()


class CustomOpNoGradInsideAutocast(torch.nn.Module):
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with torch.no_grad():
                y = ops.scaled_mul(x, x)
            z = -y
        return y, z


def test_forward_ad_through_a_custom_op_differs_where_its_region_is_dropped():
    """A custom operator's autograd.Function has no jvp rule: forward-mode AD through it
    raises exactly when it runs with grad enabled on an input that requires grad (as cond's
    does). The known defect that drops a no_grad region inside autocast flips that: the
    findings are the known buckets of that defect, not a new one."""
    x = torch.ones(3, requires_grad=True)
    case = from_module(CustomOpNoGradInsideAutocast(), (x,))
    findings = verify(case, REAL)
    assert ("gradients", "jvp_raises_differently") in {(f.oracle, f.kind) for f in findings}
    assert {bucket_id(f) for f in findings} <= set(load_known(KNOWN))


class CustomOpsUnderNoGrad(torch.nn.Module):
    def forward(self, x):
        with torch.no_grad():
            a, s = ops.split_sign(ops.scaled_mul(x, x))
            t, _ = ops.tanh_mask(x)
        return ops.cube(a) + t, s


@pytest.mark.processes
def test_case_json_and_standalone_repro_define_the_custom_operators(tmp_path):
    pass_file = tmp_path / "planted.py"
    pass_file.write_text(PLANTED)
    spec = f"{pass_file}:drop_toggles"
    case = from_module(CustomOpsUnderNoGrad(), (torch.randn(3, requires_grad=True),))
    data = json.loads(json.dumps(case_to_dict(case)))
    assert set(data["custom_ops"]) == {"fxfuzz::scaled_mul", "fxfuzz::split_sign", "fxfuzz::tanh_mask", "fxfuzz::cube"}
    assert case_from_dict(data).code() == case.code()
    found = verify(case, load_pass(spec))
    assert found, "dropping the toggles must show on this case"
    py = write_repro(str(tmp_path / "repros"), repro_document("planted", found[0].to_dict(), data, identify(spec)))
    run = run_standalone(py)
    assert run.returncode == 1 and "FAIL" in run.stdout, run.stdout + run.stderr
    assert main(["repro", py]) == 1
    assert main(["repro", py[:-3] + ".json", "--pass", "set_grad"]) == 0


@pytest.mark.processes
def test_a_case_whose_operator_source_cannot_be_imported_is_one_line_exit_2(tmp_path, capsys):
    case = from_module(CustomOpsUnderNoGrad(), (torch.randn(3),))
    data = case_to_dict(case)
    data["custom_ops"] = {"nosuchns::op": "no_such_module_for_fxfuzz"}
    finding = {"oracle": "equivalence", "kind": "value_mismatch", "message": "m", "details": {}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(repro_document("r", finding, data, identify("set_grad"))))
    assert main(["repro", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_module_for_fxfuzz" in err[0], err


@pytest.mark.slow
def test_program_source_defines_the_custom_operators_it_calls(tmp_path):
    assert check_program(CUSTOM_PROGRAM, REAL) == []
    py = tmp_path / "program.py"
    py.write_text(program_repro_source(CUSTOM_PROGRAM))
    run = run_standalone(str(py))
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stdout + run.stderr


def test_generated_programs_call_custom_operators():
    programs = []

    @seed(0)
    @settings(
        max_examples=100, database=None, deadline=None, phases=["generate"], suppress_health_check=list(HealthCheck)
    )
    @given(module_programs())
    def collect(p):
        programs.append(p)

    collect()
    seen = Counter(k for p in programs for k in p.features if k.startswith("prog:op:custom_"))
    assert len(seen) >= 3 and sum(seen.values()) >= 5, seen


@pytest.mark.processes
def test_register_op_adds_a_users_operator_to_the_cases_and_their_repros(tmp_path):
    spec = register_op(user_ops.SCALE)
    try:
        cases = [c for c in draw(150, seed_=3) if c.features.get("op:userops::scale")]
    finally:
        unregister_op(spec.name)
    # One torch's pass gets right: the replay below must find nothing (a case reaching a known
    # torch defect would fail it for a reason that is not the operator's).
    case = next((c for c in cases if not verify(c, load_pass("set_grad"))), None)
    assert case is not None, "the registered operator must be drawn"
    data = case_to_dict(case)
    assert data["custom_ops"]["userops::scale"] in ("user_ops", os.path.join(HELPERS, "user_ops.py"))
    finding = {"oracle": "equivalence", "kind": "value_mismatch", "message": "m", "details": {}}
    path = tmp_path / "user.json"
    path.write_text(json.dumps(repro_document("user", finding, data, identify("set_grad"))))
    # A fresh process defines the operator once the user names the source the case records
    # (the module, found from the current directory as every fxfuzz process looks for it);
    # the case's own record is information, never imported (tests/core/test_trust_cases.py).
    run = subprocess.run(
        [sys.executable, "-m", "fxfuzz", "repro", str(path), "--op", data["custom_ops"]["userops::scale"]],
        capture_output=True, text=True, cwd=HELPERS, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


def test_register_op_refuses_what_it_cannot_draw():
    with pytest.raises(UsageError, match="not a torch operator"):
        register_op(torch.sin)
    with pytest.raises(UsageError, match="factor"):
        op_spec(torch.ops.userops.scale)


CONFTEST = """
from hypothesis import Phase, settings
settings.register_profile("ops", max_examples=40, deadline=None, derandomize=True, database=None, phases=[Phase.generate])
"""


@pytest.mark.slow
def test_plugin_option_adds_a_users_operator_to_the_generated_graphs(pytester):
    pytester.makeconftest(CONFTEST)
    source = os.path.join(HELPERS, "user_ops.py")
    args = [
        "--fxfuzz-pass",
        f"{source}:refuses_scale",
        "--hypothesis-profile",
        "ops",
        "-p",
        "no:cacheprovider",
        "-k",
        "generated",
    ]
    pytester.runpytest_inprocess(*args).assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess(*args, "--fxfuzz-op", f"{source}:SCALE")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*userops::scale reached the pass*"])
    # The session's operator leaves the table with it.
    pytester.runpytest_inprocess(*args).assert_outcomes(passed=1)
    bad = pytester.runpytest_inprocess(*args, "--fxfuzz-op", f"{source}:NO_SUCH")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--fxfuzz-op*NO_SUCH*"])


def test_a_pass_file_that_defines_a_custom_operator_loads_twice(tmp_path):
    """A file spec is executed once per process, as an import is: the CLI checks the pass, then
    the campaign loads it again, and a second execution would define its operator twice
    (torch refuses a second TORCH_LIBRARY for one namespace)."""
    f = tmp_path / "op_pass.py"
    f.write_text(
        "import torch\n"
        "lib = torch.library.Library('fxfuzz_test_twice', 'DEF')\n"
        "lib.define('noop(Tensor x) -> Tensor')\n"
        "def my_pass(gm, sig):\n    return gm, sig\n"
    )
    first = load_pass(f"{f}:my_pass")
    assert load_pass(f"{f}:my_pass").fn is first.fn
