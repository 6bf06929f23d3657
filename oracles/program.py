"""The program-level check: a random nn.Module through the real torch.export pipeline.

Under each ambient grad mode the program is checked two ways, with the pass under test
standing in for the stage of export it replaces (the set-grad pass by default):

- the GraphCase export hands that pass is captured (``fxfuzz.core.capture.capture_module``) and goes
  through ``verify`` like any generated graph;
- end to end, ``ep.module()``, ``ep.run_decompositions().module()`` (values within the
  tolerances) and the module of a save/load round trip are each compared with eager
  execution of the same module: outputs and their structure, requires_grad, gradients of
  inputs and parameters, the module's parameters and buffers after the call, and the grad
  mode left behind.

The stages beyond ``ep.module()`` and a dynamic program's other sizes run for every program,
or, given a ``share`` (a campaign's ``--program-share``), for that share of them,
and for every program while a bucket they showed shrinks.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import importlib
from collections.abc import Iterator
from typing import Any

import torch
from fxfuzz.core.capture import ExportFailed, capture_module
from fxfuzz.core.contract import AUTOCAST
from fxfuzz.core.internal import first_line
from fxfuzz.core.passes import EXPORT_STAGES, REGISTRY, PassFn, Registered, contract_of, identity_pass
from fxfuzz.core.program import Program, load_program
from fxfuzz.core.symbols import valid_sizes
from fxfuzz.oracles import verify
from fxfuzz.oracles.crash import raise_site
from fxfuzz.oracles.downstream import DOWNSTREAM_STAGES, stages_are_forced
from fxfuzz.oracles.equivalence import compare_value, raised_differently
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.gradients import compare_derivatives
from fxfuzz.oracles.program_runtime import observe_module
from fxfuzz.oracles.sizes import new_kinds
from hypothesis import reject


def stages_of(pass_fn: PassFn) -> tuple[Registered, ...]:
    """The export stages the pass stands in for: a pipeline stands for the whole sequence
    (it runs where the first stage runs), an autocast pass for the autocast pass, any other
    for the set-grad pass."""
    if getattr(pass_fn, "parts", ()):
        return EXPORT_STAGES
    return (REGISTRY["autocast" if contract_of(pass_fn) is AUTOCAST else "set_grad"],)


@contextlib.contextmanager
def pass_in_export(stages: tuple[Registered, ...], pass_fn: PassFn) -> Iterator[None]:
    """Make torch.export call ``pass_fn`` where it calls the first stage's real pass, and
    nothing where it calls the other ``stages``.

    Export imports the passes inside the function that calls them, so replacing the module
    attributes reaches them (and ``from_module``'s capture, which wraps whatever is there).
    """
    replaced = []
    for i, stage in enumerate(stages):
        module = importlib.import_module(stage.module)
        replaced.append((module, stage.attr, getattr(module, stage.attr)))
        setattr(module, stage.attr, (lambda gm, signature: pass_fn(gm, signature)) if i == 0 else identity_pass)
    try:
        yield
    finally:
        for module, name, real in replaced:
            setattr(module, name, real)


def _export_crash(e: BaseException) -> Finding:
    first = first_line(e)
    return Finding(
        "crash",
        "export_raised",
        f"torch.export raised {type(e).__name__}: {first}",
        {"exception": type(e).__name__, **raise_site(e)},
    )


# The export stages whose module the end-to-end check compares with eager: kind prefix, stage.
E2E_STAGES = (("e2e_", "module"), ("e2e_decomposed_", "run_decompositions"), ("e2e_saved_", "save_load"))
_AUTOGRAD_KINDS = ("requires_grad_mismatch", "grad_fn_mismatch")


def _shared_checks_on(program: Program, grad_mode: bool, share: float) -> bool:
    """Does this program, under this grad mode, go through the shared checks? A hash of its
    code against the share, so a replay decides alike; always while they are forced (a bucket
    of theirs shrinking: ``shrinks_with_shared_checks``)."""
    if stages_are_forced():
        return True
    digest = hashlib.sha1(f"{grad_mode}|{program.code()}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < share


def shrinks_with_shared_checks(f: Finding) -> bool:
    """Did ``f`` come from a check only a share of examples runs: torch.export's stages (the
    graph level's ``downstream`` oracle; a program's stages after ``ep.module()``) or a
    program's other sizes? While its bucket shrinks every such check runs, so the shrinker
    judges each attempt alike."""
    later = tuple(prefix for prefix, _ in E2E_STAGES[1:])
    return (
        f.oracle == "downstream"
        or f.kind.startswith(later)
        or (f.details.get("level") == "program" and "sizes" in f.details)
    )


def _end_to_end(
    eager: dict[str, Any], exported: dict[str, Any], prefix: str = "e2e_", exact: bool = True
) -> list[Finding]:
    """Findings (kinds prefixed ``prefix``) where a stage's module and eager disagree: values
    exactly and autograd; or, where the stage lowers to inference IR (``exact`` False:
    decompositions, other ops and no autograd), values within the tolerances only."""
    if exported["error"] is not None:
        return raised_differently("equivalence", f"{prefix}raises_differently", "the call", None, exported["error"])
    if eager["structure"] != exported["structure"] or len(eager["leaves"]) != len(exported["leaves"]):
        return [
            Finding(
                "equivalence",
                f"{prefix}output_structure_mismatch",
                f"outputs {eager['structure']} became {exported['structure']}",
            )
        ]
    found: list[Finding] = []
    for i, (a, b) in enumerate(zip(eager["leaves"], exported["leaves"])):
        found += compare_value(f"output leaf {i}", a, b, exact)
    # Only the eager module's own state: export adds buffers of its own (lifted constants).
    for k, a in eager["state"].items():
        if k not in exported["state"]:
            found.append(Finding("equivalence", "state_missing", f"state {k} is missing from ep.module()"))
        else:
            found += compare_value(f"state {k} after the call", a, exported["state"][k], exact)
    if eager["grad_mode_after"] != exported["grad_mode_after"]:
        found.append(
            Finding(
                "equivalence",
                "grad_mode_leak",
                f"grad mode after the call is {exported['grad_mode_after']}, eager leaves {eager['grad_mode_after']}",
            )
        )
    if not exact:
        return [
            Finding(f.oracle, prefix + f.kind, f.message, f.details) for f in found if f.kind not in _AUTOGRAD_KINDS
        ]
    found = [Finding(f.oracle, prefix + f.kind, f.message, f.details) for f in found]
    if eager["backward_error"] is not None or exported["backward_error"] is not None:
        return found + raised_differently(
            "gradients",
            f"{prefix}backward_raises_differently",
            "backward",
            eager["backward_error"],
            exported["backward_error"],
        )
    labels = list(eager["grads"])
    return found + compare_derivatives(
        f"{prefix}grad",
        "gradient",
        labels,
        [eager["grads"][k] for k in labels],
        [exported["grads"].get(k) for k in labels],
        exact,
    )


def _at_other_sizes(
    program_class: Any,
    example_inputs: Any,
    module: Any,
    sizes: tuple[int, ...],
    grad_mode: bool,
    prefix: str,
    exact: bool,
    known: set[str],
) -> list[Finding]:
    """A stage's module against eager at each of ``sizes`` (inputs rebuilt at that size; a
    fresh copy of the module each, as a call updates its buffers): executions only. A
    finding says its size; only kinds not seen yet are kept (one defect, one bucket)."""
    found: list[Finding] = []
    for n in sizes:
        eager = observe_module(program_class(), example_inputs(n), grad_mode)
        if eager["error"] is not None:
            continue  # not a size this program runs at eagerly: nothing to compare
        at = _end_to_end(eager, observe_module(copy.deepcopy(module), example_inputs(n), grad_mode), prefix, exact)
        found += [
            dataclasses.replace(f, message=f"at size n={n}: {f.message}", details={**f.details, "sizes": {"n": n}})
            for f in new_kinds(at, known)
        ]
    return found


def _check_mode(
    program_class: Any,
    example_inputs: Any,
    dynamic_shapes: Any,
    sizes: tuple[int, ...],
    pass_fn: PassFn,
    grad_mode: bool,
    shared: bool,
) -> list[Finding]:
    eager = observe_module(program_class(), example_inputs(), grad_mode)
    if eager["error"] is not None:
        # The generator promises programs eager PyTorch runs; one that raises is not a test.
        reject()
    stages = stages_of(pass_fn)
    before = torch.is_grad_enabled()
    with pass_in_export(stages, pass_fn):
        try:
            torch.set_grad_enabled(grad_mode)
            # One export serves both checks: its captured case and its ExportedProgram.
            captured = capture_module(
                program_class(), example_inputs(), stage=stages[0].name, dynamic_shapes=dynamic_shapes
            )
        except ExportFailed as e:
            return [_export_crash(e.__cause__ or e)]  # export failed before it reached the pass
        finally:
            torch.set_grad_enabled(before)
        sizes = valid_sizes(captured.case.gm, sizes)
        findings = [
            Finding(f.oracle, f.kind, f"captured graph: {f.message}", {**f.details, "source": "captured_graph"})
            for f in verify(captured.case, pass_fn)
        ]
    if any(f.oracle == "crash" for f in findings):
        return findings  # export's own failure after the pass would only repeat the crash
    if captured.error is not None:
        return findings + [_export_crash(captured.error)]
    ep = captured.exported
    for prefix, stage in E2E_STAGES if shared else E2E_STAGES[:1]:
        make, exact = DOWNSTREAM_STAGES[stage]
        try:
            # A copy each: a call of one stage's module updates the buffers the next starts from.
            module = make(copy.deepcopy(ep))
        except Exception as e:
            findings.append(
                Finding(
                    "downstream",
                    f"{stage}_raised",
                    f"end to end: torch.export's {stage} stage raised on the exported program: {type(e).__name__}: {str(e).strip()[:200]}",
                    {"stage": stage, "exception": type(e).__name__},
                )
            )
            continue
        traced = _end_to_end(eager, observe_module(copy.deepcopy(module), example_inputs(), grad_mode), prefix, exact)
        findings += traced
        known = {f.kind for f in traced}
        findings += _at_other_sizes(
            program_class, example_inputs, module, sizes if shared else (), grad_mode, prefix, exact, known
        )
    return findings


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


def check_program(program: Program, pass_fn: PassFn, share: float = 1.0) -> list[Finding]:
    """Export ``program`` with ``pass_fn`` in place of the real pass under both ambient grad
    modes; return the captured graph's ``verify`` findings and the end-to-end findings. The
    stages after ``ep.module()`` and the other sizes run on the deterministic ``share`` (0 to 1)
    of programs."""
    program_class, example_inputs, dynamic_shapes = load_program(program)
    findings = []
    try:
        for grad_mode in (program.ambient_grad, not program.ambient_grad):
            shared = _shared_checks_on(program, grad_mode, share)
            for f in _check_mode(
                program_class, example_inputs, dynamic_shapes, program.other_sizes(), pass_fn, grad_mode, shared
            ):
                f.details = {**f.details, "level": "program", "ambient_grad": grad_mode}
                f.message = f"[ambient grad {grad_mode}] {f.message}"
                findings.append(f)
    finally:
        release_traced_state()
    return findings
