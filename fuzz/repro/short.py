"""The short repro: a program of plain torch a PyTorch maintainer can read at a glance.

Where the case allows, ``short_program`` writes the minimized graph as ``torch.fx.Graph`` calls,
the example inputs as tensor literals, the pass called as its caller calls it, and a check of
the one kind of difference the finding is about, on public APIs and without any of fxfuzz:
``python <bucket>.short.py`` exits 1 while the bug is there and 0 once fixed. It allows a case
of one graph (no nested graphs, no tensor attributes), torch's own operators, a
pass of ``CALLS`` and a finding of ``KINDS``; for any other the full ``.py`` is the repro.
Everything taken from the data (names, values, messages) is written with ``repr``.
"""

from __future__ import annotations

import keyword
import math
from typing import Any

from fxfuzz.core.contract import contract_by_name
from fxfuzz.core.passes import REGISTRY

# A registered pass as its caller calls it, on ``gm`` (a GraphModule) into ``new``: the imports
# and the one statement.
CALLS: dict[str, tuple[str, str]] = {
    "cse": (
        "from torch.fx.passes.dialect.common.cse_pass import CSEPass, get_CSE_banned_ops",
        "new = CSEPass(get_CSE_banned_ops())(copy.deepcopy(gm)).graph_module",
    ),
    "dce": ("", "new = copy.deepcopy(gm)\nnew.graph.eliminate_dead_code()\nnew.recompile()"),
}
# The finding kinds the short check shows: what the outputs are (values, requires_grad, grad_fn,
# which are one tensor), whether the call raises, the grad mode it leaves, the input gradients.
KINDS = frozenset({
    "value_mismatch", "requires_grad_mismatch", "grad_fn_mismatch", "aliasing_mismatch", "raises_differently",
    "output_count_mismatch", "grad_mode_leak", "grad_presence_mismatch", "grad_value_mismatch", "backward_raises_differently",
})  # fmt: skip
# Python callables a short graph may call, by stored name.
SHORT = ".short.py"  # the short program's suffix, next to the full repro
_PYTHON = {"torch._C._set_grad_enabled": "torch._C._set_grad_enabled", "operator.getitem": "operator.getitem"}

_CHECK = """def observe(graph_module):  # what the finding is about: outputs, their aliasing, the grad mode left, gradients
    args = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    torch.set_grad_enabled(AMBIENT_GRAD)
    try:
        out = list(graph_module(*args))
    except Exception as e:
        return f"raised {type(e).__name__}"
    finally:
        mode, _ = torch.is_grad_enabled(), torch.set_grad_enabled(True)
    seen = [(o.tolist(), o.requires_grad, o.grad_fn is not None, [o is p for p in out]) if torch.is_tensor(o) else o for o in out]
    wanted, leaves = [o for o in out if torch.is_tensor(o) and o.requires_grad], [a for a in args if a.requires_grad]
    try:
        grads = [g if g is None else g.tolist() for g in torch.autograd.grad([o.sum() for o in wanted], leaves, allow_unused=True)] if wanted and leaves else []
    except RuntimeError as e:
        grads = f"backward raised {type(e).__name__}"
    return seen, mode, grads

before, after = observe(gm), observe(new)
excused = REFINES and isinstance(before, str)  # a refinement may do anything where the original raised
print(FINDING, "\\noriginal:   ", before, "\\ntransformed:", after)
sys.exit(0 if repr(before) == repr(after) or excused else 1)
"""


def _literal(v: Any) -> str:
    """A Python literal of a stored argument or value, or KeyError for one a short program does
    not write."""
    if isinstance(v, dict):
        ((key, inner),) = v.items()
        if key == "tuple":
            items = [_literal(x) for x in inner]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if key == "float":
            return f"float({inner!r})"
        if key == "dtype":
            return f"torch.{inner}"
        raise KeyError(key)
    if isinstance(v, list):
        return "[" + ", ".join(_literal(x) for x in v) + "]"
    if isinstance(v, float) and not math.isfinite(v):
        return f"float({repr(v)!r})"
    if v is None or isinstance(v, (bool, int, float, str)):
        return repr(v)
    raise KeyError(type(v).__name__)


def _arg(a: Any, names: dict[str, str]) -> str:
    if isinstance(a, dict) and "node" in a and len(a) == 1:
        return names[a["node"]]
    if isinstance(a, dict) and "tuple" in a:
        items = [_arg(x, names) for x in a["tuple"]]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(a, dict) and "dict" in a:
        return "{" + ", ".join(f"{_literal(k)}: {_arg(x, names)}" for k, x in a["dict"]) + "}"
    if isinstance(a, list):
        return "[" + ", ".join(_arg(x, names) for x in a) + "]"
    return _literal(a)


def _target(name: str) -> str:
    if name in _PYTHON:
        return _PYTHON[name]
    ns, sep, rest = name.partition("::")
    op, _, overload = rest.rpartition(".")
    if ns != "aten" or not sep or not (op.isidentifier() and overload.isidentifier()):
        raise KeyError(name)
    return f"torch.ops.aten.{op}.{overload}"


def _variable(name: str, taken: set[str]) -> str:
    var = (
        name
        if name.isidentifier() and not keyword.iskeyword(name)
        else "n_" + "".join(c if c.isalnum() else "_" for c in name)
    )
    while var in taken:
        var += "_"
    taken.add(var)
    return var


def short_program(doc: dict[str, Any]) -> str | None:
    """The short program of a repro document (``fxfuzz.repro.files.repro_document``), or None
    where its case, pass or finding is not one a short program shows (module doc)."""
    case, finding, spec = doc["case"], doc["finding"], doc["pass"]
    graph = case["graph"]
    if spec not in CALLS or finding.get("kind") not in KINDS or doc.get("device", "cpu") != "cpu":
        return None
    if graph.get("submodules") or graph.get("tensors") or case.get("custom_ops"):
        return None
    try:
        lines, names = [], {}
        taken = {
            "g",
            "gm",
            "new",
            "inputs",
            "torch",
            "fx",
            "sys",
            "copy",
            "operator",
            "observe",
            "before",
            "after",
            "excused",
            "FINDING",
            "AMBIENT_GRAD",
            "REFINES",
        }
        for n in graph["nodes"]:
            if n["op"] == "placeholder":
                names[n["name"]] = _variable(n["name"], taken)
                lines.append(f"{names[n['name']]} = g.placeholder({n['name']!r})")
            elif n["op"] == "call_function":
                names[n["name"]] = _variable(n["name"], taken)
                call = f"g.call_function({_target(n['target'])}, {_arg(n['args'], names)}"
                kwargs = _arg(n["kwargs"], names)
                lines.append(f"{names[n['name']]} = {call}{', ' + kwargs if kwargs != '{}' else ''})")
            elif n["op"] == "output":
                lines.append(f"g.output({_arg(n['args']['tuple'][0], names)})")
            else:
                return None
        inputs = [
            f"torch.tensor({_literal(t['values'])}, dtype=torch.{t['dtype']}).reshape({_literal(t['shape'])})"
            + (".requires_grad_()" if t["requires_grad"] else "")
            for t in case["inputs"]
        ]
    except KeyError:
        return None
    imports, call = CALLS[spec]
    refines = (REGISTRY[spec].contract if doc.get("contract") is None else contract_by_name(doc["contract"])).refines
    message = f"{doc['bucket']}: [{finding['oracle']}/{finding['kind']}] {finding.get('message', '')}"
    head = [
        f"FINDING = {message[:2000]!r}",
        "# `python THIS_FILE` exits 1 while the pass shows the bug, 0 once it is fixed.",
        "import copy, operator, sys, torch",
        "from torch import fx",
        *([imports] if imports else []),
        "g = fx.Graph()",
        *lines,
        "gm = fx.GraphModule(torch.nn.Module(), g)",
        f"inputs = [{', '.join(inputs)}]",
        f"AMBIENT_GRAD, REFINES = {bool(case['ambient_grad'])!r}, {refines!r}  # the grad mode the graph runs under; the pass's contract",
        call,
    ]
    return "\n".join(head) + "\n" + _CHECK
