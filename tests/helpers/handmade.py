"""Small hand-built cases with a known shape, for deterministic oracle tests."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import torch
import torch.utils._pytree as pytree
import user_ops  # noqa: F401  (registers the custom operators CUSTOM_PROGRAM calls)
from fxfuzz.core.case import GraphCase
from fxfuzz.core.program import GradBlock, Input, Op, Program, StateTensor, StateUpdate
from fxfuzz.strategies.builder import GraphBuilder
from paths import ROOT
from torch.export.graph_signature import InputKind
from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo

aten = torch.ops.aten


def _case(b: GraphBuilder, outputs, ambient: bool) -> GraphCase:
    gm, sig = b.finish(outputs)
    return GraphCase(gm, sig, tuple(b.inputs), ambient_grad=ambient)


def no_grad_region_case(ambient: bool = True) -> GraphCase:
    """p * x, then under no_grad sin(p) and a buffer update, then sin(x) with grad back on."""
    b = GraphBuilder(grad_mode=ambient)
    p = b.placeholder("p_w", torch.tensor([0.5, -1.0, 2.0], requires_grad=True), InputKind.PARAMETER, "w")
    buf = b.placeholder("b_buf", torch.zeros(3), InputKind.BUFFER, "buf", persistent=True)
    x = b.placeholder("x", torch.tensor([1.0, 2.0, 3.0], requires_grad=True), InputKind.USER_INPUT)
    y = b.call(aten.mul.Tensor, [p, x])
    b.set_grad(not ambient)
    z = b.call(aten.sin.default, [p])
    b.call(aten.add_.Tensor, [buf, z])
    b.set_grad(ambient)
    w = b.call(aten.sin.default, [x])
    out = b.call(aten.add.Tensor, [y, w])
    return _case(b, [out, z, None], ambient)


def view_output_case(ambient: bool = True) -> GraphCase:
    """Returns x * x, a transpose of x made in the flipped region, and x itself."""
    b = GraphBuilder(grad_mode=ambient)
    x = b.placeholder("x", torch.arange(6.0).reshape(2, 3).requires_grad_(), InputKind.USER_INPUT)
    y = b.call(aten.mul.Tensor, [x, x])
    b.set_grad(not ambient)
    t = b.call(aten.transpose.int, [x, 0, 1])
    b.set_grad(ambient)
    return _case(b, [y, t, x], ambient)


def buffer_update_case(ambient: bool = True) -> GraphCase:
    """``with torch.no_grad(): self.buf.add_(x)`` and nothing reads the buffer afterwards:
    exactly what torch.export hands the pass for that module (see README, known findings)."""
    b = GraphBuilder(grad_mode=ambient)
    buf = b.placeholder("b_buf", torch.zeros(3), InputKind.BUFFER, "buf", persistent=True)
    x = b.placeholder("x", torch.tensor([1.0, 2.0, 3.0], requires_grad=True), InputKind.USER_INPUT)
    b.set_grad(False)
    b.call(aten.add_.Tensor, [buf, x])
    b.set_grad(ambient)
    return _case(b, [b.call(aten.sin.default, [x])], ambient)


def random_op_case(ambient: bool = True) -> GraphCase:
    """Seeded randomness: rand_like in the flipped region, then bernoulli with grad on."""
    b = GraphBuilder(grad_mode=ambient)
    x = b.placeholder("x", torch.tensor([0.2, 0.5, 0.9], requires_grad=True), InputKind.USER_INPUT)
    b.set_grad(not ambient)
    r = b.call(aten.rand_like.default, [x])
    b.set_grad(ambient)
    m = b.call(aten.bernoulli.default, [x])
    return _case(b, [b.call(aten.mul.Tensor, [x, r]), m], ambient)


def _system_noise(x: torch.Tensor) -> torch.Tensor:
    # Draws from the OS, outside torch's seeded generators: truly nondeterministic.
    return x + random.SystemRandom().random()


def nondeterministic_case(ambient: bool = True) -> GraphCase:
    """A graph whose first output differs on every run whatever the RNG seed."""
    b = GraphBuilder(grad_mode=ambient)
    x = b.placeholder("x", torch.tensor([1.0, 2.0], requires_grad=True), InputKind.USER_INPUT)
    b.set_grad(not ambient)
    s = b.call(aten.sin.default, [x])
    b.set_grad(ambient)
    noisy = b.graph.call_function(_system_noise, (x,))
    noisy.meta["val"] = b.fake_mode.from_tensor(torch.empty(2))
    return _case(b, [noisy, s], ambient)


def pytree_case(ambient: bool = True) -> GraphCase:
    """``no_grad_region_case`` with the pytree calling convention export gives modules:
    positional (p, buf, x) in, a dict out."""
    case = no_grad_region_case(ambient)
    names = [n.name for n in case.gm.graph.nodes if n.op == "placeholder"]
    in_spec = pytree.tree_flatten((tuple(names), {}))[1]
    out_spec = pytree.tree_flatten({"out": 0, "z": 0, "none": 0})[1]
    case.gm.graph._codegen = _PyTreeCodeGen(_PyTreeInfo(names, in_spec, out_spec))
    case.gm.recompile()
    return case


def raising_case(ambient: bool = True) -> GraphCase:
    """index_select with an index out of range, then a no_grad region: the graph itself raises
    IndexError when run (fake tensors cannot tell), before and after any correct pass."""
    b = GraphBuilder(grad_mode=ambient)
    x = b.placeholder("x", torch.tensor([1.0, 2.0, 3.0], requires_grad=True), InputKind.USER_INPUT)
    i = b.placeholder("i", torch.tensor([7]), InputKind.USER_INPUT)
    y = b.call(aten.index_select.default, [x, 0, i])
    b.set_grad(not ambient)
    z = b.call(aten.sin.default, [x])
    b.set_grad(ambient)
    return _case(b, [y, z], ambient)


def independent_outputs_case(ambient: bool = True) -> GraphCase:
    """sin(a) and cos(b), each output reaching one input, and a no_grad region between."""
    b = GraphBuilder(grad_mode=ambient)
    a = b.placeholder("a", torch.tensor([0.5, -1.0, 2.0], requires_grad=True), InputKind.USER_INPUT)
    c = b.placeholder("c", torch.tensor([1.0, 2.0, 3.0], requires_grad=True), InputKind.USER_INPUT)
    s = b.call(aten.sin.default, [a])
    b.set_grad(not ambient)
    z = b.call(aten.neg.default, [c])
    b.set_grad(ambient)
    return _case(b, [s, b.call(aten.cos.default, [c]), z], ambient)


def unknown(findings: list, row: str) -> list:
    """``findings`` less those whose bucket the row's known file lists (docs/known/<row>.txt):
    the real pass's own recorded defects, which these tests do not re-judge."""
    import os

    from fxfuzz.campaign.engine import bucket_id
    from fxfuzz.core.known import load_known

    path = os.path.join(ROOT, "docs", "known", f"{row}.txt")
    known = load_known(path) if os.path.exists(path) else {}
    return [f for f in findings if bucket_id(f) not in known]


FIXED = "torch fixed this: drop its line from {known} and its entry in docs/known-findings.md"


def run_standalone(path: str) -> subprocess.CompletedProcess:
    """Run a repro with a plain interpreter: isolated mode, fxfuzz's packages unimportable."""
    boot = (
        "import sys, runpy\n"
        "for name in ('fxfuzz', 'fuzz', 'oracles', 'strategies', 'tests'): sys.modules[name] = None\n"
        f"runpy.run_path({path!r}, run_name='__main__')\n"
    )
    return subprocess.run(
        [sys.executable, "-I", "-c", boot], capture_output=True, text=True, cwd=os.path.dirname(path), timeout=300
    )


# A planted bug that imports nothing but torch, so its repro runs where fxfuzz is absent:
# it deletes the grad toggles instead of wrapping the regions they delimit.
PLANTED = """
import torch

def drop_toggles(gm, sig):
    for mod in list(gm.modules()):
        if isinstance(mod, torch.fx.GraphModule):
            for n in list(mod.graph.nodes):
                if n.op == "call_function" and n.target is torch._C._set_grad_enabled:
                    mod.graph.erase_node(n)
            mod.recompile()
    return gm, sig
"""


def report_with(findings):
    """A report.json document of a small campaign with ``findings``."""
    return {
        "tool": "fxfuzz",
        "version": "0",
        "torch_version": "2.x",
        "pass": "p",
        "contract": "meaning",
        "domain": "export",
        "seed": 0,
        "workers": 2,
        "started": "t",
        "duration_s": 3.0,
        "examples": 30,
        "examples_per_s": 10.0,
        "stopped_by": "budget",
        "new_findings": sum(not f["known"] for f in findings),
        "findings": findings,
        "coverage": {
            "enabled": True,
            "files": [
                {
                    "path": "a.py",
                    "scope": "whole file",
                    "missing_lines": [3, 4, 5, 9],
                    "lines": {"covered": 6, "total": 10, "percent": 60.0},
                    "branches": {"covered": 1, "total": 4, "percent": 25.0},
                }
            ],
            "lines": {"covered": 6, "total": 10, "percent": 60.0},
            "branches": {"covered": 1, "total": 4, "percent": 25.0},
        },
        "stats": {"op:sin": 4},
        "timeline": [[0, 0], [1, 10], [2, 25], [3, 30]],
    }


# A program of the custom operators user_ops.py registers (the program level, its loader);
# importing this module registers them.
CUSTOM_PROGRAM = Program(
    shape=(3,),
    inputs=(Input("x0", 1, True),),
    state=(StateTensor("b0", "buffer", 2),),
    helpers=(),
    submodules=(),
    body=(
        Op("v0", "custom_scaled_mul", ("x0", "x0")),
        GradBlock(
            "no_grad", None, (StateUpdate("b0", "fxfuzz.add_half_", "v0"), Op("v1", "custom_tanh_mask", ("v0",)))
        ),
        Op("v2", "custom_split_sign", ("v1",)),
        Op("v3", "add", ("v2", "v0")),
    ),
    outputs=(("var", "v3"), ("var", "self.b0")),
)
