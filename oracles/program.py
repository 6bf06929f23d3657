"""The program-level check: a random nn.Module through the real torch.export pipeline.

Under each ambient grad mode the program is checked two ways, with the pass under test
standing in for the stage of export it replaces (the set-grad pass by default):

- the GraphCase export hands that pass is captured (``fxfuzz.core.capture.from_module``) and goes
  through ``verify`` like any generated graph;
- end to end, ``ep.module()`` is compared with eager execution of the same module: outputs
  and their structure, requires_grad, gradients of inputs and parameters, the module's
  parameters and buffers after the call, and the grad mode left behind.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import torch
from fxfuzz.core.capture import from_module
from fxfuzz.core.contract import AUTOCAST
from fxfuzz.core.passes import REGISTRY, PassFn, Registered, contract_of
from fxfuzz.core.program import Program, load_program
from fxfuzz.oracles import verify
from fxfuzz.oracles.crash import innermost_pass_frame
from fxfuzz.oracles.equivalence import compare_value, raised_differently
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.gradients import compare_derivatives
from fxfuzz.oracles.program_runtime import export_under, observe_module
from hypothesis import reject


def stage_of(pass_fn: PassFn) -> Registered:
    """The export stage the pass stands in for: autocast passes replace the autocast pass."""
    return REGISTRY["autocast" if contract_of(pass_fn) is AUTOCAST else "set_grad"]


@contextlib.contextmanager
def pass_in_export(stage: Registered, pass_fn: PassFn) -> Iterator[None]:
    """Make torch.export call ``pass_fn`` where it calls the stage's real pass.

    Export imports the pass inside the function that calls it, so replacing the module
    attribute reaches it (and ``from_module``'s capture, which wraps whatever is there).
    """
    module, name = importlib.import_module(stage.module), stage.attr
    real = getattr(module, name)
    setattr(module, name, lambda gm, signature: pass_fn(gm, signature))
    try:
        yield
    finally:
        setattr(module, name, real)


def _export_crash(e: BaseException) -> Finding:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return Finding(
        "crash",
        "export_raised",
        f"torch.export raised {type(e).__name__}: {first}",
        {"exception": type(e).__name__, "frame": innermost_pass_frame(e)},
    )


def _end_to_end(eager: dict[str, Any], exported: dict[str, Any]) -> list[Finding]:
    """Findings (kinds prefixed ``e2e_``) where ep.module() and eager disagree."""
    if exported["error"] is not None:
        return raised_differently("equivalence", "e2e_raises_differently", "the call", None, exported["error"])
    if eager["structure"] != exported["structure"] or len(eager["leaves"]) != len(exported["leaves"]):
        return [
            Finding(
                "equivalence",
                "e2e_output_structure_mismatch",
                f"outputs {eager['structure']} became {exported['structure']}",
            )
        ]
    found: list[Finding] = []
    for i, (a, b) in enumerate(zip(eager["leaves"], exported["leaves"])):
        found += compare_value(f"output leaf {i}", a, b)
    # Only the eager module's own state: export adds buffers of its own (lifted constants).
    for k, a in eager["state"].items():
        if k not in exported["state"]:
            found.append(Finding("equivalence", "state_missing", f"state {k} is missing from ep.module()"))
        else:
            found += compare_value(f"state {k} after the call", a, exported["state"][k])
    if eager["grad_mode_after"] != exported["grad_mode_after"]:
        found.append(
            Finding(
                "equivalence",
                "grad_mode_leak",
                f"grad mode after the call is {exported['grad_mode_after']}, eager leaves {eager['grad_mode_after']}",
            )
        )
    found = [Finding(f.oracle, "e2e_" + f.kind, f.message, f.details) for f in found]
    if eager["backward_error"] is not None or exported["backward_error"] is not None:
        return found + raised_differently(
            "gradients", "e2e_backward_raises_differently", "backward", eager["backward_error"], exported["backward_error"]
        )
    labels = list(eager["grads"])
    return found + compare_derivatives(
        "e2e_grad", labels, [eager["grads"][k] for k in labels], [exported["grads"].get(k) for k in labels], True
    )


def _check_mode(program_class: Any, example_inputs: Any, pass_fn: PassFn, grad_mode: bool) -> list[Finding]:
    eager = observe_module(program_class(), example_inputs(), grad_mode)
    if eager["error"] is not None:
        # The generator promises programs eager PyTorch runs; one that raises is not a test.
        reject()
    stage = stage_of(pass_fn)
    before = torch.is_grad_enabled()
    with pass_in_export(stage, pass_fn):
        try:
            torch.set_grad_enabled(grad_mode)
            case = from_module(program_class(), example_inputs(), stage=stage.name)
        except Exception as e:
            return [_export_crash(e)]  # export failed before it reached the pass
        finally:
            torch.set_grad_enabled(before)
        findings = [
            Finding(f.oracle, f.kind, f"captured graph: {f.message}", {**f.details, "source": "captured_graph"})
            for f in verify(case, pass_fn)
        ]
        if any(f.oracle == "crash" for f in findings):
            return findings  # the export below would only raise the same crash again
        try:
            ep = export_under(program_class(), example_inputs(), grad_mode)
        except Exception as e:
            return findings + [_export_crash(e)]
    exported = observe_module(ep.module(), example_inputs(), grad_mode)
    return findings + _end_to_end(eager, exported)


def release_traced_state() -> None:
    """Drop what torch keeps alive after tracing a program, so a long campaign of distinct
    programs runs in bounded memory (about 1 MB per program otherwise).

    Eager ``torch.cond`` compiles its branches with dynamo, which installs each compiled
    function as a ``__compiled_fn_*`` global of ``torch._higher_order_ops.cond`` (holding the
    branch graphs) for good; and torch.fx keeps the source of every generated module in its
    eval cache, with a linecache entry holding a copy of its globals.
    """
    import linecache

    import torch._higher_order_ops.cond as cond_module
    from torch.fx import graph_module

    torch._dynamo.reset()
    for name in [n for n in vars(cond_module) if n.startswith("__compiled_fn")]:
        delattr(cond_module, name)
    for key in graph_module._loader.eval_cache:
        linecache.cache.pop(key, None)
    graph_module._loader.eval_cache.clear()


def check_program(program: Program, pass_fn: PassFn) -> list[Finding]:
    """Export ``program`` with ``pass_fn`` in place of the real pass under both ambient grad
    modes; return the captured graph's ``verify`` findings and the end-to-end findings."""
    program_class, example_inputs = load_program(program)
    findings = []
    try:
        for grad_mode in (program.ambient_grad, not program.ambient_grad):
            for f in _check_mode(program_class, example_inputs, pass_fn, grad_mode):
                f.details = {**f.details, "level": "program", "ambient_grad": grad_mode}
                f.message = f"[ambient grad {grad_mode}] {f.message}"
                findings.append(f)
    finally:
        release_traced_state()
    return findings
