"""Graph invariants of the pass's output: lint-clean graphs and no surviving toggles."""

from __future__ import annotations

from torch import fx

from .contract import PassContract
from .finding import Finding


def graph_modules(gm: fx.GraphModule) -> list[tuple[str, fx.GraphModule]]:
    """The module and every GraphModule nested in it, with qualified names."""
    return [(name or "<root>", m) for name, m in gm.named_modules() if isinstance(m, fx.GraphModule)]


def check_structure(gm: fx.GraphModule, contract: PassContract) -> list[Finding]:
    """``graph.lint()`` on every graph, and none of the contract's eliminated calls left."""
    findings = []
    for name, mod in graph_modules(gm):
        try:
            mod.graph.lint()
        except Exception as e:
            findings.append(Finding("structure", "lint_failed", f"graph {name} fails lint: {e}", {"graph": name}))
        leftover = [n.name for n in mod.graph.nodes if n.op == "call_function" and n.target in contract.eliminates]
        if leftover:
            findings.append(
                Finding(
                    "structure",
                    "leftover_call",
                    f"graph {name} still calls what the pass must remove: {', '.join(leftover)}",
                    {"graph": name, "nodes": leftover},
                )
            )
    return findings
