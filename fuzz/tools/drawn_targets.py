"""``python -m fxfuzz.tools.drawn_targets``: writes ``fuzz/core/drawn_targets.py``, the call
targets fxfuzz's own cases use, which is the allowlist a saved case is loaded against
(``fxfuzz.core.serialize.resolve_target``, docs/security.md).

The list is derived, never edited by hand: every entry of the op tables the strategies draw
from, every target of a seeded sample of generated cases of each domain (export adds targets
no table names: ``_assert_tensor_metadata``, ``alias``, ...), every target of the corpus
captures, and the core ATen opset: the aten domain lowers its cases through
``run_decompositions``, whose output is that opset (plus the ops it keeps, which the sample
holds), and a sample alone misses its rarer members (a second seed drew ``scalar_tensor``,
``squeeze.dims`` and ``log`` where the first had none). Rerun it after changing a table, a
lowering or the torch pin; ``tests/core/test_trust_cases.py`` loads a fresh sample of generated
cases and every capture against the written list.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from fxfuzz.core.choices import DOMAINS
from fxfuzz.core.serialize import case_to_dict, graph_targets, memory_unsafe, target_name
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.corpus import corpus_cases
from fxfuzz.strategies.custom import FXFUZZ_OPS
from fxfuzz.strategies.ops import DRAWN_TARGETS, INPLACE_OPS, OPS
from hypothesis import HealthCheck, given, seed, settings

# Cases drawn per domain: the aten domain lowers each case (about a second), the others are
# cheap; enough that a second sample of a few hundred finds no target missing.
SAMPLE = {
    "export": 600,
    "adversarial": 600,
    "functional": 600,
    "aten": 250,
    "inductor": 60,
    "inductor_joint": 60,
    "inductor_frozen": 60,
}
SEED = 48
OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "core", "drawn_targets.py")


def sampled_targets(domain: str, count: int, at: int) -> set[str]:
    """Every call target (and operator passed as an argument) of ``count`` cases of
    ``domain``, drawn from seed ``at``."""
    found: set[str] = set()

    @seed(at)
    @settings(max_examples=count, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(graph_cases(domain))
    def collect(case: object) -> None:
        found.update(graph_targets(case_to_dict(case)["graph"]))  # type: ignore[arg-type]

    collect()
    return found


def core_aten_targets() -> set[str]:
    """Every overload torch tags as core ATen (``torch.Tag.core``), the opset lowering emits."""
    found = set()
    for qualname in torch._C._dispatch_get_all_op_names():
        ns, _, rest = qualname.partition("::")
        name, _, overload = rest.partition(".")
        packet = getattr(torch.ops.aten, name, None) if ns == "aten" else None
        op = getattr(packet, overload or "default", None) if isinstance(packet, torch._ops.OpOverloadPacket) else None
        if isinstance(op, torch._ops.OpOverload) and torch.Tag.core in op.tags:
            found.add(target_name(op))
    return found


def prims_targets() -> set[str]:
    """Every overload of torch's primitives (``prims``): Inductor's decompositions lower to
    them beside the core ATen opset, and which a case of the Inductor forms holds depends on
    its ops' dtypes and shapes."""
    found: set[str] = set()
    for name in dir(torch.ops.prims):
        packet = getattr(torch.ops.prims, name, None)
        if isinstance(packet, torch._ops.OpOverloadPacket):
            found.update(target_name(getattr(packet, overload)) for overload in packet.overloads())
    return found


def drawn_targets() -> set[str]:
    """The op tables (the motifs' overloads included), the sample of every domain, the corpus
    captures, the core ATen opset and the primitives, less the memory-unsafe operators among
    them (``as_strided``, ``resize_``)."""
    found = {target_name(spec.target) for spec in (*OPS, *INPLACE_OPS, *FXFUZZ_OPS)} | {
        target_name(op) for op in DRAWN_TARGETS
    }
    found |= core_aten_targets() | prims_targets()
    for domain in DOMAINS:
        found |= sampled_targets(domain, SAMPLE[domain], SEED)
        print(f"{domain}: {len(found)} targets so far", file=sys.stderr)
    for _, case in corpus_cases():
        found |= graph_targets(case_to_dict(case)["graph"])
    return {name for name in found if not memory_unsafe(name)}  # refused whatever the list says


def render(targets: set[str]) -> str:
    # Double-quoted, as ruff format writes strings: the written file needs no reformatting.
    lines = "".join(f"        {json.dumps(name)},\n" for name in sorted(targets))
    return (
        '"""The call targets fxfuzz\'s own cases use: written by ``python -m fxfuzz.tools.drawn_targets``\n'
        '(its docstring says how); do not edit by hand."""\n\n'
        f"DRAWN_TARGETS = frozenset(\n    {{\n{lines}    }}\n)\n"
    )


if __name__ == "__main__":
    text = render(drawn_targets())  # before the old list is replaced: this process loads it
    with open(OUT, "w") as fh:
        fh.write(text)
    print(f"wrote {OUT}", file=sys.stderr)
