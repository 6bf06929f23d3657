"""Graph invariants of the pass's output, on the module and every nested GraphModule."""

from __future__ import annotations

import operator
from typing import Any, cast

import torch
from fxfuzz.core.contract import PassContract
from fxfuzz.core.internal import first_line
from fxfuzz.oracles.execute import graph_modules
from fxfuzz.oracles.finding import Finding
from torch import fx


def _def_use(name: str, graph: fx.Graph) -> list[Finding]:
    """Each node's ``users`` are exactly the nodes whose arguments reference it, all in the
    same graph; every argument node belongs to the graph too."""
    referenced: dict[fx.Node, set[fx.Node]] = {n: set() for n in graph.nodes}
    problems = []
    for node in graph.nodes:
        for arg in node.all_input_nodes:
            if arg.graph is not graph or arg not in referenced:
                problems.append(f"{node.name} reads {arg.name}, a node of another graph")
            else:
                referenced[arg].add(node)
    for node, readers in referenced.items():
        users = set(node.users)
        if users != readers:
            extra = sorted(u.name for u in users - readers)
            missing = sorted(u.name for u in readers - users)
            problems.append(f"{node.name}.users has {extra} that do not read it and lacks {missing}")
    if not problems:
        return []
    return [
        Finding(
            "structure",
            "def_use_inconsistent",
            f"graph {name}: {problems[0]}",
            {"graph": name, "problems": problems[:5]},
        )
    ]


def _subgraph_of(mod: fx.GraphModule, node: fx.Node) -> tuple[int, fx.GraphModule] | None:
    for i, arg in enumerate(node.args):
        if isinstance(arg, fx.Node) and arg.op == "get_attr":
            sub = getattr(mod, cast(str, arg.target), None)
            if isinstance(sub, fx.GraphModule):
                return i, sub
    return None


def _same_meta(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return len(a.shape) == len(b.shape) and all(map(_same_meta, a.shape, b.shape)) and a.dtype == b.dtype
    if isinstance(a, torch.SymInt) or isinstance(b, torch.SymInt):
        # A symbolic size must arrive as the same symbolic size: a constant in its place
        # (a size frozen to its traced value) is right only at the traced sizes. Compared as
        # expressions: ``==`` on a SymInt records a guard in the case's ShapeEnv, which would
        # specialize the symbol for every later check of the case.
        return isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt) and a.node.expr == b.node.expr
    return a == b


def _meta_of_operand(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, fx.Node) else arg


def _hop_problems(mod: fx.GraphModule, node: fx.Node) -> list[str]:
    """Why a call of the contract's higher-order op is malformed (empty when it is fine)."""
    found = _subgraph_of(mod, node)
    if found is None:
        return [f"{node.name} has no get_attr of a GraphModule among its arguments"]
    index, sub = found
    operands = node.args[index + 1 :]
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    problems = []
    if len(placeholders) != len(operands):
        problems.append(
            f"{node.name} passes {len(operands)} operands to a subgraph with {len(placeholders)} placeholders"
        )
    for ph, arg in zip(placeholders, operands):
        if "val" not in ph.meta:
            problems.append(f"subgraph placeholder {ph.name} of {node.name} has no meta['val']")
        elif (isinstance(arg, fx.Node) or isinstance(ph.meta["val"], torch.SymInt)) and not _same_meta(
            ph.meta["val"], _meta_of_operand(arg)
        ):
            problems.append(
                f"subgraph placeholder {ph.name} of {node.name} ({ph.meta['val']}) disagrees with operand {arg}"
            )
    for n in sub.graph.nodes:
        if n.op == "call_function" and "val" not in n.meta:
            problems.append(f"{n.name} inside {node.name}'s subgraph has no meta['val']")
    if "val" not in node.meta:
        problems.append(f"{node.name} has no meta['val']")
    out_node = next((n for n in reversed(sub.graph.nodes) if n.op == "output"), None)
    outputs = out_node.args[0] if out_node is not None and out_node.args else None
    if not isinstance(outputs, (tuple, list)):
        return problems + [f"{node.name}'s subgraph returns {type(outputs).__name__}, not a tuple"]
    for user in node.users:
        if user.target is not operator.getitem or not (
            isinstance(user.args[1], int) and 0 <= user.args[1] < len(outputs)
        ):
            problems.append(f"{user.name} uses {node.name} other than by getitem of one of its {len(outputs)} outputs")
    return problems


def unused_submodules(gm: fx.GraphModule) -> set[str]:
    """Qualified names of the submodules that no ``get_attr`` or ``call_module`` node of
    their parent graph reads (the module and every nested GraphModule)."""
    unused: set[str] = set()
    for name, mod in graph_modules(gm):
        prefix = "" if mod is gm else f"{name}."
        read: set[str] = set()
        for n in mod.graph.nodes:
            if n.op in ("get_attr", "call_module"):
                parts = str(n.target).split(".")
                read.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        unused.update(prefix + child for child, _ in mod.named_children() if child not in read)
    return unused


def check_unused_submodules(gm: fx.GraphModule, original: fx.GraphModule) -> list[Finding]:
    """Submodules the result keeps although nothing reads them, unless the original
    already had them unused."""
    left = sorted(unused_submodules(gm) - unused_submodules(original))
    if not left:
        return []
    return [
        Finding(
            "structure",
            "unused_submodule",
            f"the result keeps submodules nothing calls or reads: {', '.join(left[:5])}; dead weight that "
            "deepcopy, serialization, state_dict consumers and every later pass carry along",
            {"submodules": left[:20]},
        )
    ]


def check_structure(gm: fx.GraphModule, contract: PassContract) -> list[Finding]:
    """``graph.lint()``, def-use consistency, none of the contract's eliminated calls left,
    and every call of the contract's higher-order op well formed."""
    findings: list[Finding] = []
    for name, mod in graph_modules(gm):
        try:
            mod.graph.lint()
        except Exception as e:
            findings.append(Finding("structure", "lint_failed", f"graph {name} fails lint: {e}", {"graph": name}))
        findings += _def_use(name, mod.graph)
        calls = [n for n in mod.graph.nodes if n.op == "call_function"]
        leftover = [n.name for n in calls if n.target in contract.eliminates]
        if leftover:
            findings.append(
                Finding(
                    "structure",
                    "leftover_call",
                    f"graph {name} still calls what the pass must remove: {', '.join(leftover)}",
                    {"graph": name, "nodes": leftover},
                )
            )
        if contract.hops:
            problems = [p for n in calls if n.target in contract.hops for p in _hop_problems(mod, n)]
            if problems:
                findings.append(
                    Finding(
                        "structure",
                        "malformed_hop",
                        f"graph {name}: {problems[0]}",
                        {"graph": name, "problems": problems[:5]},
                    )
                )
    return findings


def malformed(gm: fx.GraphModule, lint: bool = False) -> str | None:
    """Why ``gm`` is not a graph the checks can read, or None: its graph ends in no single
    output node returning a tuple or list of outputs (export's form, which the checks read
    as a sequence); with ``lint``, also the first graph of it that fails ``graph.lint()``
    (the graph invariants check reports that one on its own; ``impossible`` asks it of a
    result a check of fxfuzz's own could not read)."""
    outputs = [n for n in gm.graph.nodes if n.op == "output"]
    if len(outputs) != 1 or outputs[0] is not next(reversed(gm.graph.nodes)):
        return f"the graph has {len(outputs)} output nodes, not one at its end"
    args = outputs[0].args
    if len(args) != 1 or not isinstance(args[0], (tuple, list)):
        returned = type(args[0]).__name__ if len(args) == 1 else f"{len(args)} arguments"
        return f"its output node returns {returned}, not a tuple or list of outputs"
    for name, mod in graph_modules(gm) if lint else []:
        try:
            mod.graph.lint()
        except Exception as e:
            return f"graph {name} fails lint: {type(e).__name__}: {first_line(e)}"
    return None


def malformed_result(why: str) -> Finding:
    """The finding for a result fxfuzz cannot read (``malformed``'s ``why``)."""
    return Finding(
        "structure", "malformed_result", f"the pass returned a graph fxfuzz cannot check: {why}", {"why": why}
    )
