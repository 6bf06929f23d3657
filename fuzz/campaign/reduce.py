"""Graph-level reduction of a failing case to the nodes that matter, after Hypothesis shrinks.

Hypothesis shrinks the choices a strategy made, so what it leaves is still a graph the
strategy could draw: every input, region and toggle the draw needed stays in. This reduction
works on the graph itself, in the spirit of C-Reduce and of torch's own FX minifier
(``torch._functorch.fx_minifier``, whose strategies it follows: remove outputs, truncate the
suffix, delta debugging that turns nodes into inputs, dead code, unused inputs), and keeps a
candidate only where ``holds`` says the same finding still shows (the campaign's check and
bucket id). Each candidate is made on the case's serialized form (``fxfuzz.core.serialize``),
rebuilt by the same loader that reads saved cases, so a candidate is a case fxfuzz could have
saved, signature and inputs following its placeholders; inputs nothing reads are dropped from it.

The moves, in the order each round tries them (the first accepted one starts the next round):

- dead code: torch.fx's elimination in every graph, all at once;
- remove outputs, a chunk at a time (their output specs with them);
- truncate the suffix: the graph ends at one of its nodes, which it returns;
- delta debugging: a chunk of nodes becomes inputs of the same meta, each fed the value it
  had when the original ran (its users read the new input);
- then, one at a time: delete a node nothing reads (an in-place update, a grad toggle, a
  region, also inside nested graphs); inline a region or subgraph of any graph
  (torch.cond by either branch, ``wrap_with_set_grad_enabled`` by its body between toggles of
  its grad mode, or by its body alone); collapse a region's toggles (a grad toggle with the
  next one, an ``_enter_autocast`` with its ``_exit_autocast``); bypass a call (its readers
  read an argument of the same meta); drop an input nothing reads (parameters and buffers
  too); drop ``nn_module_stack`` metas and the pytree calling convention, drop the other
  sizes a symbolic case also runs at; shrink a static case's sizes (every input dimension of
  one size cut to 1 or halved, metas propagated again on fake tensors); make an input all
  ones, make an input not require grad.

A candidate is accepted only if it makes the case strictly smaller by (compute nodes, nodes,
bytes of its serialized form), so the reduction ends, at a fixed point or at its bound
(``deadline``, ``max_steps`` candidates judged, or ``stop()``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from fxfuzz.core.case import GraphCase, clone_input
from fxfuzz.core.errors import SerializeError
from fxfuzz.core.serialize import case_from_dict, case_to_dict, count_compute_nodes, encode_tensor
from fxfuzz.oracles.execute import isolated
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.export.graph_signature import InputKind
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

Holds = Callable[[GraphCase], bool]
_COMPUTE = ("call_function", "call_method", "call_module")
# Inputs dropped once nothing reads them: what the caller passes, and state no output updates.
_DROPPABLE = (InputKind.USER_INPUT, InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


@dataclass
class Reduction:
    """What ``reduce_case`` made: the smallest case on which the finding held, the candidates
    judged and accepted, and why it ended (``fixed point`` or ``limit``)."""

    case: GraphCase
    judged: int = 0
    accepted: int = 0
    stopped_by: str = "fixed point"


class _Limit(Exception):
    """The reduction's bound is reached: it ends with the smallest case so far."""


class _Reducer:
    def __init__(
        self,
        case: GraphCase,
        holds: Holds,
        deadline: float | None,
        max_steps: int | None,
        stop: Callable[[], bool] | None,
    ) -> None:
        self.holds, self.deadline, self.max_steps, self.stop = holds, deadline, max_steps, stop
        self.result = Reduction(case)
        self.data = case_to_dict(case)
        self.size = _size(self.data)
        self.values = _values(case)

    # -- judging
    def _out_of_bounds(self) -> bool:
        return (
            (self.deadline is not None and time.monotonic() >= self.deadline)
            or (self.max_steps is not None and self.result.judged >= self.max_steps)
            or (self.stop is not None and self.stop())
        )

    def attempt(self, candidate: dict[str, Any], dead_code: bool = False) -> bool:
        """Judge ``candidate`` (cleaned first, ``_cleaned``); keep it if it is smaller and the
        finding holds."""
        try:
            case = _cleaned(case_from_dict(_sized(candidate)), dead_code)
            data = _sized(case_to_dict(case))
        except SerializeError:
            return False  # a move made something the loader refuses: not a case at all
        size = _size(data)
        if size >= self.size:
            return False
        if self._out_of_bounds():
            raise _Limit
        self.result.judged += 1
        if not self.holds(case):
            return False
        # The judged case went through the pass's checks; the state is rebuilt from its data.
        self.data, self.size = data, size
        self.result.case = case_from_dict(data)
        self.values = _values(self.result.case)
        self.result.accepted += 1
        return True

    def first(self, candidates: Iterator[dict[str, Any]]) -> bool:
        return any(self.attempt(c) for c in candidates)

    # -- the rounds
    def run(self) -> Reduction:
        try:
            while self.round():
                pass
        except _Limit:
            self.result.stopped_by = "limit"
        return self.result

    def round(self) -> bool:
        """One round: True if a move was accepted (the case changed)."""
        n = len(_chunkable(self.data["graph"]))
        granularity = 1 << max(n.bit_length() - 1, 0)
        if self.attempt(self.data, dead_code=True):
            return True
        while granularity >= 1:
            for move in (_drop_outputs, _truncate, _delta):
                if self.first(move(self.data, granularity, self.values)):
                    return True
            granularity //= 2
        return self.first(_one_at_a_time(self.data))


def reduce_case(
    case: GraphCase,
    holds: Holds,
    *,
    deadline: float | None = None,
    max_steps: int | None = None,
    stop: Callable[[], bool] | None = None,
) -> Reduction:
    """Reduce ``case`` while ``holds`` (the same finding shows) to a fixed point of the moves
    in the module doc, or until ``deadline`` (``time.monotonic()``), ``max_steps`` candidates
    judged or ``stop()``. ``holds(case)`` must be true of ``case`` itself; it is not asked again."""
    return _Reducer(case, holds, deadline, max_steps, stop).run()


# ---------------------------------------------------------------------------- measures


def _size(data: dict[str, Any]) -> tuple[int, int, int]:
    graph = data["graph"]
    return count_compute_nodes(graph), _all_nodes(graph), len(json.dumps(data))


def _all_nodes(graph: dict[str, Any]) -> int:
    return len(graph["nodes"]) + sum(_all_nodes(g) for g in graph.get("submodules", {}).values())


# ---------------------------------------------------------------------------- cleaning


def _cleaned(case: GraphCase, dead_code: bool) -> GraphCase:
    """``case`` with inputs nothing reads (``_DROPPABLE``) and nested graphs nothing calls dropped
    (signature and inputs follow the placeholders), and with ``dead_code`` after torch.fx's
    dead-code elimination in every graph (it keeps what ``Node.is_impure`` says has effects).
    Dead code is not always dead to a pass: CSEPass merges a live call into an equal dead one
    computed under another grad mode, so it goes only as a move of its own, judged."""
    gm = case.gm
    for mod in list(gm.modules()):
        if isinstance(mod, fx.GraphModule):
            if dead_code:
                mod.graph.eliminate_dead_code()
            used = {str(n.target).split(".")[0] for n in mod.graph.nodes if n.op in ("get_attr", "call_module")}
            for name, child in list(mod.named_children()):
                if isinstance(child, fx.GraphModule) and name not in used:
                    delattr(mod, name)
    specs, inputs, kept = case.signature.input_specs, list(case.inputs), []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    updated = {
        s.target for s in case.signature.output_specs if s.target is not None
    }  # buffers a mutation output writes
    for i, (node, spec) in enumerate(zip(placeholders, specs)):
        if not node.users and spec.kind in _DROPPABLE and spec.target not in updated:
            gm.graph.erase_node(node)
        else:
            kept.append(i)
    if len(kept) < len(placeholders):
        gm.graph._codegen = fx.graph.CodeGen()  # the calling convention changed: plain arguments
        case.signature.input_specs[:] = [specs[i] for i in kept]
        inputs = [inputs[i] for i in kept]
    gm.recompile()
    case.inputs = tuple(inputs)
    return case


def _sized(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the size symbols and other sizes its metas still use: a move that drops
    the last node of a symbolic size drops the size too."""
    used = set(re.findall(r"Symbol\('(\w+)'", json.dumps(data["graph"])))
    symbols = {k: v for k, v in data.get("symbols", {}).items() if k in used}
    sizes = [{k: v for k, v in s.items() if k in used} for s in data.get("sizes", [])] if symbols else []
    return data | {"symbols": symbols, "sizes": sizes}


def _values(case: GraphCase) -> dict[str, torch.Tensor]:
    """The tensor each top-level node of ``case`` produced when its graph ran on its inputs
    (detached copies; nodes after one that raised have none): what an input that replaces
    the node is fed."""
    values: dict[str, torch.Tensor] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            out = super().run_node(n)
            if isinstance(out, torch.Tensor) and not out.is_sparse:
                values[n.name] = out.detach().clone()
            return out

    try:
        with isolated(case.ambient_grad):
            Recorder(case.gm).run(*(clone_input(t) for t in case.inputs))
    except Exception:  # the graph itself fails past some node: the nodes before it keep their values
        pass
    return values


# ---------------------------------------------------------------------------- the moves


def _nodes(graph: dict[str, Any]) -> list[dict[str, Any]]:
    return graph["nodes"]


def _output(graph: dict[str, Any]) -> dict[str, Any]:
    (out,) = [n for n in graph["nodes"] if n["op"] == "output"]
    return out


def _flat_outputs(data: dict[str, Any]) -> list[Any] | None:
    """The encoded output values of the top-level graph, one per output spec, or None when
    they are not a flat tuple or list of them."""
    (result,) = _output(data["graph"])["args"]["tuple"]
    items = result.get("tuple") if isinstance(result, dict) else result
    return items if isinstance(items, list) and len(items) == len(data["signature"]["outputs"]) else None


def _set_outputs(data: dict[str, Any], items: list[Any], specs: list[dict[str, Any]]) -> None:
    _output(data["graph"])["args"] = {"tuple": [{"tuple": items}]}
    data["signature"]["outputs"] = specs
    data["graph"].pop("pytree", None)  # the result's structure changed


def _drop_outputs(data: dict[str, Any], granularity: int, values: dict[str, torch.Tensor]) -> Iterator[dict[str, Any]]:
    """Without a chunk of ``granularity`` outputs, at each chunk (at least one output stays)."""
    items = _flat_outputs(data)
    if items is None or len(items) <= 1:
        return
    specs = data["signature"]["outputs"]
    for start in range(0, len(items), max(1, granularity)):
        end = start + max(1, granularity)
        if end - start >= len(items):
            continue
        d = copy.deepcopy(data)
        _set_outputs(d, items[:start] + items[end:], specs[:start] + specs[end:])
        yield d


def _tensor_valued(node: dict[str, Any]) -> bool:
    return node["op"] == "call_function" and isinstance(node.get("val"), dict) and "tensor" in node["val"]


def _chunkable(graph: dict[str, Any]) -> list[int]:
    """Positions of the top-level nodes the chunked moves act on: calls that make a tensor."""
    return [i for i, n in enumerate(graph["nodes"]) if _tensor_valued(n)]


def _truncate(data: dict[str, Any], granularity: int, values: dict[str, torch.Tensor]) -> Iterator[dict[str, Any]]:
    """The graph up to one of its tensor-valued nodes, which it returns; earliest first, at
    the positions ``fx_minifier``'s suffix truncation tries for ``granularity``."""
    nodes = _nodes(data["graph"])
    for k, i in enumerate(_chunkable(data["graph"])):
        if k % granularity or (granularity > 1 and k % (granularity * 2) == 0 and k):
            continue
        d = copy.deepcopy(data)
        kept = d["graph"]["nodes"][: i + 1]
        name = kept[-1]["name"]
        d["graph"]["nodes"] = kept + [nodes[-1] | {"args": {"tuple": [{"tuple": [{"node": name}]}]}}]
        d["signature"]["outputs"] = [
            {"kind": "USER_OUTPUT", "arg": {"type": "TensorArgument", "name": name}, "target": None}
        ]
        d["graph"].pop("pytree", None)
        yield d


def _as_input(data: dict[str, Any], name: str, value: torch.Tensor) -> None:
    """Node ``name`` of the top-level graph becomes a user input of the same meta, after the
    last placeholder, with its spec and its value (``requires_grad`` as its meta says)."""
    nodes = data["graph"]["nodes"]
    (i,) = [k for k, n in enumerate(nodes) if n["name"] == name]
    node = nodes.pop(i)
    last = max((k for k, n in enumerate(nodes) if n["op"] == "placeholder"), default=-1)
    nodes.insert(
        last + 1,
        {
            "name": name,
            "op": "placeholder",
            "target": name,
            "args": {"tuple": []},
            "kwargs": {"dict": []},
            "val": node["val"],
        },
    )
    data["signature"]["inputs"].append(
        {"kind": "USER_INPUT", "arg": {"type": "TensorArgument", "name": name}, "target": None, "persistent": None}
    )
    grad = bool(node["val"]["tensor"]["requires_grad"]) and value.is_floating_point()
    data["inputs"].append(encode_tensor(value.requires_grad_(grad)))
    data["graph"].pop("pytree", None)


def _delta(data: dict[str, Any], granularity: int, values: dict[str, torch.Tensor]) -> Iterator[dict[str, Any]]:
    """Each chunk of ``granularity`` nodes turned into inputs (those with a recorded value)."""
    nodes = _nodes(data["graph"])
    positions = [i for i in _chunkable(data["graph"]) if nodes[i]["name"] in values]
    for start in range(0, len(positions), granularity):
        names = [nodes[i]["name"] for i in positions[start : start + granularity]]
        d = copy.deepcopy(data)
        for name in names:
            _as_input(d, name, values[name].clone())
        yield d


def _read(graph: dict[str, Any]) -> set[str]:
    """The names of the nodes some node of ``graph`` reads."""
    found: set[str] = set()
    pending: list[Any] = [[n["args"], n["kwargs"]] for n in graph["nodes"]]
    while pending:
        v = pending.pop()
        if isinstance(v, dict):
            if isinstance(v.get("node"), str) and len(v) == 1:
                found.add(v["node"])
            else:
                pending.extend(v.values())
        elif isinstance(v, list):
            pending.extend(v)
    return found


def _graphs(graph: dict[str, Any]) -> Iterator[list[str]]:
    """The path (submodule names) to ``graph`` and to every graph nested in it."""
    yield []
    for name, sub in graph.get("submodules", {}).items():
        for path in _graphs(sub):
            yield [name, *path]


def _at(data: dict[str, Any], path: list[str]) -> dict[str, Any]:
    graph = data["graph"]
    for name in path:
        graph = graph["submodules"][name]
    return graph


def _one_at_a_time(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The single-step moves of the module doc, each on a fresh copy."""
    for path in _graphs(data["graph"]):
        graph = _at(data, path)
        read = _read(graph)
        for node in reversed(graph["nodes"]):
            if node["op"] in (*_COMPUTE, "get_attr") and node["name"] not in read:
                d = copy.deepcopy(data)
                g = _at(d, path)
                g["nodes"] = [n for n in g["nodes"] if n["name"] != node["name"]]
                yield d
    yield from _inlined(data)
    yield from _collapsed(data)
    yield from _bypassed(data)
    graph, read = data["graph"], _read(data["graph"])
    placeholders = [n["name"] for n in graph["nodes"] if n["op"] == "placeholder"]
    for k, name in enumerate(placeholders):
        if name not in read and len(placeholders) == len(data["inputs"]):
            d = copy.deepcopy(data)
            d["graph"]["nodes"] = [n for n in d["graph"]["nodes"] if n["name"] != name]
            d["signature"]["inputs"] = [s for s in d["signature"]["inputs"] if s["arg"].get("name") != name]
            del d["inputs"][k]
            d["graph"].pop("pytree", None)
            yield d
    yield from _simplified(data)


def _replace_reads(graph: dict[str, Any], old: str, new: str) -> None:
    """Every read of node ``old`` in ``graph`` reads node ``new`` instead."""
    pending: list[Any] = [n for n in graph["nodes"]]
    while pending:
        v = pending.pop()
        if isinstance(v, dict):
            if v.get("node") == old and len(v) == 1:
                v["node"] = new
            else:
                pending.extend(v.values())
        elif isinstance(v, list):
            pending.extend(v)


def _bypassed(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A call bypassed: its readers read one of its arguments of the same meta instead (in any
    graph, nested ones included, where no input can be added), and the call dies."""
    for path in _graphs(data["graph"]):
        graph = _at(data, path)
        vals = {n["name"]: n.get("val") for n in graph["nodes"]}
        for node in reversed(graph["nodes"]):
            if not _tensor_valued(node):
                continue
            args = [a for a in _read({"nodes": [node]}) if vals.get(a) == node["val"]]
            for arg in sorted(args):
                d = copy.deepcopy(data)
                g = _at(d, path)
                g["nodes"] = [n for n in g["nodes"] if n["name"] != node["name"]]
                _replace_reads(g, node["name"], arg)
                for spec in d["signature"]["outputs"] if not path else ():
                    if spec["arg"].get("name") == node["name"]:
                        spec["arg"]["name"] = arg
                yield d


def _simplified(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Metadata no check needs, the other sizes, and simpler input values."""
    d = copy.deepcopy(data)
    for path in _graphs(d["graph"]):
        for n in _at(d, path)["nodes"]:
            n.pop("module_stack", None)
    yield d
    if "pytree" in data["graph"]:
        d = copy.deepcopy(data)
        del d["graph"]["pytree"]
        yield d
    if data.get("sizes"):
        yield data | {"sizes": []}
    yield from _shrunk(data)
    for k, t in enumerate(data["inputs"]):
        if "values" not in t or t["dtype"] not in ("float16", "bfloat16", "float32", "float64"):
            continue
        if any(v != 1.0 for v in t["values"]):
            d = copy.deepcopy(data)
            d["inputs"][k]["values"] = [1.0] * len(t["values"])
            yield d
        if t["requires_grad"]:
            d = copy.deepcopy(data)
            d["inputs"][k]["requires_grad"] = False
            yield d


# ---------------------------------------------------------------------------- regions and toggles

_SET_GRAD, _ENTER_AUTOCAST = "torch._C._set_grad_enabled", "torch.amp.autocast_mode._enter_autocast"
_EXIT_AUTOCAST = "torch.amp.autocast_mode._exit_autocast"


def _tuple_items(v: Any) -> list[Any] | None:
    """The items of an encoded tuple or list, or None when ``v`` is neither."""
    if isinstance(v, list):
        return v
    if isinstance(v, dict) and len(v) == 1 and isinstance(v.get("tuple"), list):
        return list(v["tuple"])
    return None


def _substituted(v: Any, mapping: dict[str, Any]) -> Any:
    """``v`` with every read ``{"node": name}`` of a name in ``mapping`` replaced by its value."""
    if isinstance(v, dict):
        if len(v) == 1 and isinstance(v.get("node"), str):
            return copy.deepcopy(mapping.get(v["node"], v))
        return {k: _substituted(x, mapping) for k, x in v.items()}
    if isinstance(v, list):
        return [_substituted(x, mapping) for x in v]
    return v


def _toggle(name: str, enabled: bool) -> dict[str, Any]:
    return {
        "name": name,
        "op": "call_function",
        "target": _SET_GRAD,
        "args": {"tuple": [enabled]},
        "kwargs": {"dict": []},
        "val": {"value": None},
    }


def _inline(
    data: dict[str, Any], path: list[str], index: int, getter: str, operands: list[Any], grad: bool | None
) -> dict[str, Any] | None:
    """``data`` with the subgraph call at ``index`` of its graph at ``path`` replaced by the body
    of the subgraph its get_attr node ``getter`` fetches: the body's placeholders read
    ``operands``, its nodes and nested graphs take fresh names, the call's ``getitem`` readers
    become the body's outputs; with ``grad`` (not None) the body runs between a toggle to
    ``grad`` and a toggle to ``not grad``. None where the call is read other than by a
    ``getitem`` the body's outputs can answer with a node."""
    d = copy.deepcopy(data)
    graph = _at(d, path)
    nodes, hop = graph["nodes"], graph["nodes"][index]
    (fetch,) = [n for n in nodes if n["name"] == getter]
    body = graph.get("submodules", {}).get(fetch["target"])
    if body is None:
        return None
    taken = {n["name"] for n in nodes} | set(graph.get("submodules", {}))

    def fresh(name: str) -> str:
        new, k = name, 1
        while new in taken:
            new, k = f"{name}_{k}", k + 1
        taken.add(new)
        return new

    placeholders = [n["name"] for n in body["nodes"] if n["op"] == "placeholder"]
    if len(placeholders) != len(operands):
        return None
    mapping: dict[str, Any] = dict(zip(placeholders, operands))
    moved = {name: fresh(name) for name in body.get("submodules", {})}
    for name, sub in body.get("submodules", {}).items():
        graph.setdefault("submodules", {})[moved[name]] = sub
    inlined = []
    for n in body["nodes"]:
        if n["op"] not in ("placeholder", "output"):
            mapping[n["name"]] = {"node": fresh(n["name"])}
            inlined.append(n | {"name": mapping[n["name"]]["node"]})
            if n["op"] == "get_attr":
                inlined[-1]["target"] = moved.get(n["target"], n["target"])
    inlined = [
        n | {"args": _substituted(n["args"], mapping), "kwargs": _substituted(n["kwargs"], mapping)} for n in inlined
    ]
    (body_out,) = [n for n in body["nodes"] if n["op"] == "output"]
    results = _tuple_items(_substituted(body_out["args"]["tuple"][0], mapping))
    readers = [n for n in nodes if hop["name"] in _read({"nodes": [n]})]
    replaced: dict[str, str] = {}
    for r in readers:
        args = r["args"].get("tuple", [])
        if r["target"] != "operator.getitem" or len(args) != 2 or not isinstance(args[1], int) or results is None:
            return None
        result = results[args[1]] if 0 <= args[1] < len(results) else None
        if not (isinstance(result, dict) and isinstance(result.get("node"), str)):
            return None
        replaced[r["name"]] = result["node"]
    if grad is not None:
        inlined = [_toggle(fresh("_set_grad_enabled"), grad), *inlined, _toggle(fresh("_set_grad_enabled"), not grad)]
    kept = [n for n in nodes if n["name"] not in replaced]
    at = kept.index(hop)
    graph["nodes"] = kept[:at] + inlined + kept[at + 1 :]
    for old, new in replaced.items():
        _replace_reads(graph, old, new)
        for spec in d["signature"]["outputs"] if not path else []:  # the signature names top-level nodes
            if spec["arg"].get("name") == old:
                spec["arg"]["name"] = new
    read = _read(graph)
    graph["nodes"] = [n for n in graph["nodes"] if n["op"] != "get_attr" or n["name"] in read]
    return d


def _inlined(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A region or subgraph of any graph inlined: torch.cond replaced by either branch,
    ``wrap_with_set_grad_enabled`` by its body with its grad mode as toggles around it, and by
    its body alone. Nested graphs too: a cond within a branch leaves a two-level nesting
    (what some of the pass's crashes need) whose other branch is as plain as can be."""
    for path, index, node in [(p, i, n) for p in _graphs(data["graph"]) for i, n in enumerate(_at(data, p)["nodes"])]:
        args = node["args"].get("tuple", [])
        refs = [a["node"] if isinstance(a, dict) and isinstance(a.get("node"), str) else None for a in args]
        candidates: list[tuple[str | None, list[Any] | None, bool | None]] = []
        if node["target"] == "higher_order::cond" and len(args) == 4:
            candidates = [(refs[1], _tuple_items(args[3]), None), (refs[2], _tuple_items(args[3]), None)]
        elif node["target"] == "higher_order::wrap_with_set_grad_enabled" and len(args) >= 2:
            enabled = args[0] if isinstance(args[0], bool) else None
            candidates = [(refs[1], args[2:], enabled), (refs[1], args[2:], None)]
        for getter, operands, grad in candidates:
            if getter is not None and operands is not None:
                d = _inline(data, path, index, getter, operands, grad)
                if d is not None:
                    yield d


def _collapsed(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A region's toggles deleted together, in any graph: a grad toggle with the next one, an
    ``_enter_autocast`` with the ``_exit_autocast`` that closes it. One toggle of a pair
    deleted alone changes the mode of everything after it; the pair leaves it as it was."""
    for path in _graphs(data["graph"]):
        nodes = _at(data, path)["nodes"]
        toggles = [n["name"] for n in nodes if n["target"] == _SET_GRAD and n["op"] == "call_function"]
        pairs = list(zip(toggles, toggles[1:]))
        for n in nodes:
            if n["target"] == _ENTER_AUTOCAST:
                pairs += [
                    (n["name"], e["name"])
                    for e in nodes
                    if e["target"] == _EXIT_AUTOCAST and n["name"] in _read({"nodes": [e]})
                ]
        for pair in pairs:
            d = copy.deepcopy(data)
            g = _at(d, path)
            g["nodes"] = [n for n in g["nodes"] if n["name"] not in pair]
            yield d  # a pair something else reads leaves a read of a missing node: the loader refuses it


# ---------------------------------------------------------------------------- sizes


def _shrunk(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A static single-graph case at smaller sizes: every input dimension of one size ``n``
    cut to 1, then to ``n // 2`` (the inputs sliced), the metas propagated again through the
    graph on fake tensors. A graph that cannot run at the smaller size (a view to a fixed
    shape) makes no candidate."""
    if data.get("symbols") or data["graph"].get("submodules"):
        return
    try:
        case = case_from_dict(data)
    except SerializeError:
        return
    sizes = sorted({n for t in case.inputs if isinstance(t, torch.Tensor) for n in t.shape if n > 1}, reverse=True)
    for n in sizes:
        for smaller in sorted({1, n // 2}):
            candidate = _at_size(case, n, smaller)
            if candidate is not None:
                yield candidate


def _at_size(case: GraphCase, n: int, smaller: int) -> dict[str, Any] | None:
    """``case`` (serialized) with every input dimension of size ``n`` cut to ``smaller`` and
    every node's meta propagated again; None when the graph does not run at that size."""
    inputs = []
    for t in case.inputs:
        if isinstance(t, torch.Tensor):
            for dim, size in enumerate(t.shape):
                if size == n:
                    t = t.narrow(dim, 0, smaller)
            t = t.detach().clone().requires_grad_(t.requires_grad)
        inputs.append(t)
    gm = copy.deepcopy(case.gm)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in inputs]
    try:
        with isolated(case.ambient_grad):
            FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    except Exception:  # the graph does not run at this size: no candidate
        return None
    return case_to_dict(dataclasses.replace(case, gm=gm, inputs=tuple(inputs)))
