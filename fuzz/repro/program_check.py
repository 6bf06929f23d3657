"""The end-to-end comparison of a program-level repro; pasted verbatim into every one after
``fxfuzz.oracles.program_runtime``, whose observations it compares.

It depends on torch alone, so a repro runs where fxfuzz is not installed; where fxfuzz is, it
also judges the graph export hands the set-grad pass. It lives in the repro layer, not beside
the observations: that optional use of the oracles would make the oracles import themselves.
"""

import sys  # noqa: F401  the repro this file is pasted into ends in sys.exit(main(...))

import torch
from fxfuzz.oracles.program_runtime import differences, export_under, fresh_inputs, observe_module


def captured_graph_findings(module_class, example_inputs, grad_mode, dynamic_shapes=None):
    """With fxfuzz installed: ``verify`` on the graph export hands the set-grad pass."""
    try:
        from fxfuzz.core.capture import ExportFailed, from_module
        from fxfuzz.core.passes import load_pass
        from fxfuzz.oracles import verify
    except ImportError:
        return []
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(grad_mode)
    try:
        case = from_module(module_class(), fresh_inputs(example_inputs()), dynamic_shapes=dynamic_shapes)
    except ExportFailed:
        return []  # export itself failed before the pass: main reports it
    finally:
        torch.set_grad_enabled(before)
    return [f"captured graph: {f}" for f in verify(case, load_pass("set_grad"))]


def main(module_class, example_inputs, dynamic_shapes=None, other_sizes=()):
    """Export (with ``dynamic_shapes``), then compare ep.module() with the eager module under
    both grad modes, at the traced size and at each of ``other_sizes``."""
    failed = False
    for grad_mode in (True, False):
        problems = captured_graph_findings(module_class, example_inputs, grad_mode, dynamic_shapes)
        try:
            ep = export_under(module_class(), example_inputs(), grad_mode, dynamic_shapes)
            problems += differences(
                observe_module(module_class(), example_inputs(), grad_mode),
                observe_module(ep.module(), example_inputs(), grad_mode),
            )
            for n in other_sizes:
                problems += [
                    f"at size n={n}: {d}"
                    for d in differences(
                        observe_module(module_class(), example_inputs(n), grad_mode),
                        observe_module(ep.module(), example_inputs(n), grad_mode),
                    )
                ]
        except Exception as e:
            problems.append(f"torch.export raised {type(e).__name__}: {e}")
        for problem in problems:
            print(f"grad mode {grad_mode}: {problem}")
        failed = failed or bool(problems)
    print("FAIL: exported and eager disagree" if failed else "OK: exported and eager agree")
    return 1 if failed else 0
