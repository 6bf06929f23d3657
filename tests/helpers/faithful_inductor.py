"""The faithfulness check of Inductor's forms (``fxfuzz.strategies.inductor``): the graph a case
of the form holds against the graph Inductor's own hook ``config.joint_custom_pre_pass``
receives when ``torch.compile(backend="inductor")`` compiles the same callable on the same
inputs, node for node: every node's name, op, target, arguments and meta (shape, stride,
dtype), placeholders included. The hook is the public way into Inductor's joint-graph passes,
for inference and for training; the frozen form's capture point (``freezing_passes``) has no
such hook and is not checked here. Used by tests/strategies/test_inductor.py and, for a longer run,
``python tests/helpers/faithful_inductor.py N``.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from fxfuzz.core.case import GraphCase, copy_graph_module
from fxfuzz.core.inductor import INFERENCE, JOINT, Lowered, is_joint
from fxfuzz.strategies.inductor import compile_input, lower_inductor
from torch import fx


def hooked_graph(case: GraphCase, form: str) -> fx.GraphModule | None:
    """The graph ``config.joint_custom_pre_pass`` receives last (the outermost: nested graphs
    go first) under ``torch.compile(gm, backend="inductor", fullgraph=True, dynamic=False)``
    for ``case`` in ``form``, copied as it arrives; None where it receives none of the form.
    The compilation is stopped at ``config.post_grad_custom_pre_pass``, before code is made."""
    from torch._inductor import config

    seen: list[fx.GraphModule] = []

    def hook(graph: fx.Graph) -> None:
        seen.append(copy_graph_module(graph.owning_module))

    def stop(graph: fx.Graph) -> None:
        raise Lowered()

    gm, args = compile_input(case, form)
    torch._dynamo.reset()
    with (
        config.patch(joint_custom_pre_pass=hook, post_grad_custom_pre_pass=stop),
        torch.set_grad_enabled(form == JOINT),
    ):
        try:
            torch.compile(gm, backend="inductor", fullgraph=True, dynamic=False)(*args)
        except Exception:  # noqa: BLE001 - the stop raises through Dynamo
            pass
    return seen[-1] if seen and (form == JOINT) == is_joint(seen[-1]) else None


def _nodes(gm: fx.GraphModule) -> list[Any]:
    def meta(n: fx.Node) -> Any:
        val = n.meta.get("val")
        return (
            (tuple(val.shape), tuple(val.stride()), str(val.dtype))
            if isinstance(val, torch.Tensor)
            else type(val).__name__
        )

    return [(n.name, n.op, str(n.target), str(n.args), str(n.kwargs), meta(n)) for n in gm.graph.nodes]


def differences(case: GraphCase, form: str) -> tuple[bool, str | None]:
    """Whether the domain lowered ``case`` to ``form``, and None where it did not or its graph
    and the hook's agree node for node (module docstring), else what differs."""
    lowered = lower_inductor(case, form)
    if lowered is None:
        return False, None
    hooked = hooked_graph(case, form)
    if hooked is None:
        return True, "torch.compile's hook received no graph of the form"
    ours, theirs = _nodes(lowered.gm), _nodes(hooked)
    if ours != theirs:
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        return True, f"node {at} differs:\nours   {ours[at : at + 2]}\ntheirs {theirs[at : at + 2]}"
    return True, None


def seeded_cases(count: int, at: int = 50) -> list[GraphCase]:
    """``count`` export cases drawn from seed ``at``."""
    from fxfuzz.strategies import graph_cases
    from hypothesis import HealthCheck, given, seed, settings

    cases: list[GraphCase] = []

    @settings(max_examples=count, database=None, suppress_health_check=list(HealthCheck), deadline=None)
    @seed(at)
    @given(graph_cases("export"))
    def draw(case: GraphCase) -> None:
        cases.append(case)

    draw()
    return cases


def main(count: int) -> int:
    """Check ``count`` seeded export cases in each checked form; print the tally."""
    cases = seeded_cases(count)
    failed = 0
    for form in (INFERENCE, JOINT):
        lowered = equal = 0
        for case in cases:
            done, diff = differences(case, form)
            lowered += done
            equal += diff is None
            if diff is not None:
                failed += 1
                print(f"{form}: {diff}")
        print(f"{form}: {equal} of {len(cases)} cases agree ({lowered} lowered)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
