"""GraphCase <-> plain JSON data, by walking any fx graph generically.

Targets are stored by qualified name (``aten::add.Tensor`` for ATen overloads,
``higher_order::cond`` for higher-order ops, ``operator.getitem`` for Python callables),
arguments with node references, nested graph modules recursively, ``meta['val']`` as
shape/stride/dtype/requires_grad, the export signature field by field, and inputs as
literal values. Nothing here knows which ops the strategies draw, so the format follows
whatever they add.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import operator
import re
from collections.abc import Callable
from typing import Any

import sympy
import torch
from fxfuzz.core.case import GraphCase
from fxfuzz.core.drawn_targets import DRAWN_TARGETS
from fxfuzz.core.errors import SerializeError, UntrustedError
from fxfuzz.core.op_sources import define, op_sources, user_op
from fxfuzz.core.rebuild import (
    MAX_ELEMENTS,
    MAX_SIZE_VALUE,
    SizeExpressionError,
    enum,
    fake_mode,
    meta_val,
    rebuild_graph_module,
    set_attr,
    size_at,
    symint_literal,
    tensor,
)
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.export import graph_signature as gs
from torch.fx.passes.shape_prop import _extract_tensor_metadata

FORMAT = "fxfuzz-case/1"

# Bounds on a saved case, checked before anything is built from it: every generated case is far
# inside them, and a hostile one cannot make the loader recurse, allocate or loop without limit.
MAX_JSON_DEPTH = 100  # nesting of the JSON document
MAX_JSON_ITEMS = 1_000_000  # values in the JSON document
MAX_GRAPH_DEPTH = 16  # graphs nested in graphs
MAX_NODES = 2048  # nodes of a case, nested graphs included (generated ones have tens)
MAX_ARGS = 1024  # items of one list, tuple or dict in a node's arguments
# MAX_ELEMENTS (fxfuzz.core.rebuild): elements of an input tensor, a traced tensor, a list of
# sizes or any value the graph makes.
MAX_TENSOR_BYTES = 8 * MAX_ELEMENTS  # bytes of any one value the graph makes
MAX_GRAPH_BYTES = 2**30  # bytes of all the values the graph makes together (generated ones: kilobytes)
MAX_STRING = 10_000  # characters of a name, a target or a spec
MAX_CASE_BYTES = 64 * 2**20  # a saved case or repro, as JSON


def json_data(raw: bytes | str) -> Any:
    """The JSON value in ``raw`` (a saved case, a database entry), read only if at most
    ``MAX_CASE_BYTES`` long; SerializeError for anything else."""
    if len(raw) > MAX_CASE_BYTES:
        raise SerializeError(f"a saved case of {len(raw)} bytes, more than {MAX_CASE_BYTES >> 20} MiB")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise SerializeError(
            f"not valid JSON: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}"
        ) from None


# ---------------------------------------------------------------------------- targets


def target_name(target: Any) -> str:
    """The qualified name a call target is stored under."""
    if isinstance(target, torch._ops.OpOverload):
        ns, name = target._schema.name.split("::")
        return f"{ns}::{name}.{target._overloadname or 'default'}"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order::{target.name()}"
    if isinstance(target, str):  # call_method / call_module / get_attr
        return target
    module = getattr(target, "__module__", None) or "builtins"
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if qualname is None:
        raise SerializeError(f"cannot name call target {target!r}")
    module = {"_operator": "operator"}.get(module, module)
    return f"{module}.{qualname}"


def _public_functions(module: Any, refused: set[str]) -> list[Any]:
    return [
        f
        for n, f in vars(module).items()
        if not n.startswith("_") and n not in refused and callable(f) and not isinstance(f, type)
    ]


# Python callables a saved graph may call, by stored name: what export records for grad mode and
# autocast regions, torch's symbolic-size functions, the operator module (less the helpers that
# build or call arbitrary callables) and the torch-level random functions Dynamo and
# symbolic_trace record (``_TORCH_FUNCTIONS``: they make tensors, of sizes ``_Allocations``
# bounds); a case calls only those among them fxfuzz draws.
_TORCH_FUNCTIONS = (
    torch.rand,
    torch.randn,
    torch.rand_like,
    torch.randn_like,
    torch.bernoulli,
    torch.randperm,
    torch.nn.functional.dropout,
)
_PYTHON_TARGETS = {
    target_name(f): f
    for f in (
        torch._C._set_grad_enabled,
        torch.amp.autocast_mode._enter_autocast,
        torch.amp.autocast_mode._exit_autocast,
        *(
            getattr(torch, n)
            for n in ("sym_max", "sym_min", "sym_not", "sym_float", "sym_int", "sym_ite", "sym_sum")
            if hasattr(torch, n)
        ),
        *_public_functions(operator, {"call", "attrgetter", "itemgetter", "methodcaller"}),
        *_TORCH_FUNCTIONS,
    )
}
# Operators that reinterpret or resize storage, or index, view or build tensors without checking
# bounds (what they touch is decided by their arguments, not by the tensors they are given), and
# those that read files: refused from a saved case even where the user adds them.
_MEMORY_UNSAFE = re.compile(
    r"as_strided|resize|_reshape_alias|unsafe|storage|^set_?$|set_data|from_file|from_blob|_nested_view_from"
    r"|_make_\w*quantized|_sparse_\w*tensor|_copy_from"
)
_ALLOWED = (
    "the targets fxfuzz's own cases call (fxfuzz.core.drawn_targets) and the operators added for this run with --op"
)


def _refused(name: str) -> UntrustedError:
    return UntrustedError(
        f"call target {name[:200]!r} is not one fxfuzz resolves from a saved case (allowed: {_ALLOWED}); "
        "to allow a custom operator, name the source that defines it with --op SOURCE"
    )


def memory_unsafe(name: str) -> bool:
    """Whether the stored target ``ns::name.overload`` is an operator that may touch memory its
    tensors do not own (``_MEMORY_UNSAFE``)."""
    ns, sep, rest = name.partition("::")
    return bool(sep) and _MEMORY_UNSAFE.search(rest.rpartition(".")[0] or rest) is not None


def resolve_target(name: Any) -> Any:
    """The callable a stored target name refers to (inverse of ``target_name``), looked up only
    among the allowed targets: those fxfuzz's own cases call and the operators the user added
    for this run, never a memory-unsafe one; a saved case never makes fxfuzz import or reach
    anything else. UntrustedError for a name outside them, SerializeError for an operator this
    torch lacks."""
    if not isinstance(name, str) or len(name) > MAX_STRING:
        raise SerializeError(f"a call target is a string of at most {MAX_STRING} characters")
    ns, sep, rest = name.partition("::")
    op_name, _, overload = rest.rpartition(".")
    if memory_unsafe(name):
        raise UntrustedError(
            f"call target {name[:200]!r} may touch memory its tensors do not own (it reinterprets or resizes storage, "
            "or indexes or reads without bounds checks): fxfuzz never runs it from a saved case, added with --op or not"
        )
    if name not in DRAWN_TARGETS and not (sep and ns != "higher_order" and user_op(f"{ns}::{op_name}")):
        raise _refused(name)
    if not sep:
        if name not in _PYTHON_TARGETS:
            raise _refused(name)
        return _PYTHON_TARGETS[name]
    if ns == "higher_order":
        op = torch._ops._higher_order_ops.get(rest)
        if not isinstance(op, torch._ops.HigherOrderOperator):
            raise SerializeError(f"this torch has no higher-order op {rest!r}")
        return op
    if not (ns.isidentifier() and op_name.isidentifier() and overload.isidentifier()) or overload.startswith("_"):
        raise _refused(name)
    try:
        packet = getattr(getattr(torch.ops, ns), op_name)
        op = getattr(packet, overload) if isinstance(packet, torch._ops.OpOverloadPacket) else None
    except (AttributeError, RuntimeError):
        op = None
    if not isinstance(op, torch._ops.OpOverload):
        raise SerializeError(f"this torch has no operator {name!r}")
    return op


# ---------------------------------------------------------------------------- values

_ENUMS = {torch.dtype: "dtype", torch.layout: "layout", torch.memory_format: "memory_format"}


def encode_arg(a: Any) -> Any:
    """An fx argument as JSON data; nodes become ``{"node": name}``."""
    if isinstance(a, fx.Node):
        return {"node": a.name}
    if isinstance(a, torch.SymInt):  # a literal: a symbolic size reaches a call through its node
        value = a.node.maybe_as_int()
        if value is None:
            raise SerializeError(f"cannot serialize the symbolic size {a} as an argument: only a constant SymInt")
        return {"symint": value}
    if a is None or isinstance(a, (bool, int, str)):
        return a
    if isinstance(a, float):
        return a if math.isfinite(a) else {"float": repr(a)}
    if isinstance(a, (tuple, torch.Size)):
        return {"tuple": [encode_arg(x) for x in a]}
    if isinstance(a, list):
        return [encode_arg(x) for x in a]
    if isinstance(a, dict):
        return {"dict": [[encode_arg(k), encode_arg(v)] for k, v in a.items()]}
    if isinstance(a, torch.device):
        return {"device": str(a)}
    if isinstance(a, slice):
        return {"slice": [encode_arg(a.start), encode_arg(a.stop), encode_arg(a.step)]}
    if a is Ellipsis:
        return {"ellipsis": True}
    for cls, key in _ENUMS.items():
        if isinstance(a, cls):
            return {key: str(a).removeprefix("torch.")}
    if callable(a):
        return {"callable": target_name(a)}
    raise SerializeError(f"cannot serialize argument of type {type(a).__name__}: {a!r}")


def _short_str(v: Any, what: str, limit: int = 64) -> str:
    if not isinstance(v, str) or len(v) > limit:
        raise SerializeError(f"{what} is a string of at most {limit} characters")
    return v


def decode_arg(a: Any, nodes: dict[str, fx.Node]) -> Any:
    """Inverse of ``encode_arg``; ``nodes`` maps names to the nodes already rebuilt."""
    if isinstance(a, list):
        return [decode_arg(x, nodes) for x in _items(a, "a list", 0, MAX_ARGS)]
    if not isinstance(a, dict):
        if a is not None and not isinstance(a, (bool, int, float, str)):
            raise SerializeError(f"malformed argument of type {type(a).__name__}")
        return a
    if len(a) != 1:
        raise SerializeError(f"malformed argument {str(a)[:200]}")
    ((key, v),) = a.items()
    if key == "node":
        if not isinstance(v, str) or v not in nodes:
            raise SerializeError(f"argument refers to unknown node {str(v)[:200]!r}")
        return nodes[v]
    decoders: dict[str, Callable[[Any], Any]] = {
        "float": lambda v: float(_short_str(v, "a float")),
        "tuple": lambda v: tuple(decode_arg(x, nodes) for x in _items(v, "a tuple", 0, MAX_ARGS)),
        "dict": lambda v: {
            decode_arg(k, nodes): decode_arg(x, nodes)
            for k, x in (_pair(kx) for kx in _items(v, "a dict", 0, MAX_ARGS))
        },
        "device": lambda v: torch.device(_short_str(v, "a device")),
        "slice": lambda v: slice(*(decode_arg(x, nodes) for x in _items(v, "a slice", 3, 3))),
        "ellipsis": lambda v: Ellipsis,
        "callable": resolve_target,
        "symint": symint_literal,
        **{kind: functools.partial(enum, kind) for kind in _ENUMS.values()},
    }
    if key not in decoders:
        raise SerializeError(f"unknown argument encoding {str(key)[:80]!r}")
    return decoders[key](v)


def _items(v: Any, what: str, least: int = 0, most: int = MAX_ELEMENTS) -> list[Any]:
    if not isinstance(v, list) or not least <= len(v) <= most:
        raise SerializeError(f"{what} is stored as a list of {least} to {most} items")
    return v


def _pair(kx: Any) -> list[Any]:
    return _items(kx, "a dict item", 2, 2)


def encode_size(n: Any) -> Any:
    """A size: an int, or a symbolic one as ``{"sym": sympy.srepr(expr)}`` (exact, and read
    back by sympy alone)."""
    if isinstance(n, torch.SymInt):
        expr = n.node.expr
        return int(expr) if expr.is_number else {"sym": sympy.srepr(expr)}
    return n


def encode_meta_val(v: Any) -> Any:
    """``meta['val']``: tensors as their metadata (symbolic sizes as expressions), SymInts,
    containers recursively, scalars as is."""
    if isinstance(v, torch.SymInt):
        return {"symint": encode_size(v)}
    if isinstance(v, torch.Tensor):
        return {
            "tensor": {
                "shape": [encode_size(n) for n in v.shape],
                "stride": [encode_size(n) for n in v.stride()],
                "dtype": str(v.dtype).removeprefix("torch."),
                "device": str(v.device),
                "requires_grad": v.requires_grad,
            }
        }
    if isinstance(v, (tuple, list)):
        return {"tuple" if isinstance(v, tuple) else "list": [encode_meta_val(x) for x in v]}
    if v is None or isinstance(v, (bool, int, float, str)):
        return {"value": v}
    return {"unsupported": type(v).__name__}


def encode_tensor(t: Any) -> Any:
    """A concrete input: literal values with dtype, shape and requires_grad."""
    if not isinstance(t, torch.Tensor):
        return {"value": encode_arg(t)}
    flat = t.detach().reshape(-1)
    values = [encode_arg(x) for x in flat.tolist()]
    return {
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "values": values,
        "requires_grad": t.requires_grad,
    }


def decode_tensor(d: Any) -> Any:
    """The tensor ``encode_tensor`` wrote: values, dtype, shape and requires_grad; its shape
    bounded and matching its values before any tensor is made."""
    if not isinstance(d, dict):
        raise SerializeError("a stored tensor is an object")
    if "value" in d:
        value = decode_arg(d["value"], {})
        _check_callables("placeholder", None, value)
        return value
    shape, values = _items(d["shape"], "a tensor's shape", 0, 64), _items(d["values"], "a tensor's values")
    if not all(type(n) is int and 0 <= n <= MAX_ELEMENTS for n in shape) or math.prod(shape) != len(values):
        raise SerializeError(f"a tensor of shape {str(shape)[:100]} holding {len(values)} values")
    values = [decode_arg(x, {}) for x in values]
    if not all(isinstance(x, (bool, int, float)) for x in values):
        raise SerializeError("a tensor's values are numbers")
    return tensor(values, enum("dtype", d["dtype"]), shape, _flag(d["requires_grad"]))


def _flag(v: Any) -> bool:
    if not isinstance(v, bool):
        raise SerializeError(f"expected true or false, got {str(v)[:80]}")
    return v


# ---------------------------------------------------------------------------- graphs


def encode_module_stack(stack: dict[str, tuple[str, Any]]) -> dict[str, list[str]]:
    """``meta['nn_module_stack']`` (export's verifier checks it): module types by name."""
    return {
        k: [path, ty if isinstance(ty, str) else f"{ty.__module__}.{ty.__qualname__}"]
        for k, (path, ty) in stack.items()
    }


def encode_graph_module(gm: fx.GraphModule) -> dict[str, Any]:
    """Nodes in order, nested graph modules (every child, in order) and tensor attributes,
    and the pytree codegen."""
    nodes: list[dict[str, Any]] = []
    submodules = {name: encode_graph_module(c) for name, c in gm.named_children() if isinstance(c, fx.GraphModule)}
    tensors: dict[str, Any] = {}
    for n in gm.graph.nodes:
        nodes.append(
            {
                "name": n.name,
                "op": n.op,
                "target": target_name(n.target),
                "args": encode_arg(n.args),
                "kwargs": encode_arg(n.kwargs),
                "val": encode_meta_val(n.meta["val"]) if "val" in n.meta else None,
            }
        )
        if n.meta.get("nn_module_stack"):
            nodes[-1]["module_stack"] = encode_module_stack(n.meta["nn_module_stack"])
        if n.op == "get_attr":
            attr = gm
            for part in n.target.split("."):
                attr = getattr(attr, part)
            if isinstance(attr, fx.GraphModule):
                submodules.setdefault(n.target, encode_graph_module(attr))
            elif isinstance(attr, torch.Tensor):
                tensors[n.target] = encode_tensor(attr)
            else:
                raise SerializeError(f"get_attr {n.target!r} is a {type(attr).__name__}")
    out: dict[str, Any] = {"nodes": nodes, "submodules": submodules, "tensors": tensors}
    codegen = gm.graph._codegen
    if isinstance(codegen, fx.graph._PyTreeCodeGen):
        from torch.utils._pytree import treespec_dumps

        info = codegen.pytree_info
        out["pytree"] = {
            "orig_args": list(info.orig_args),
            "in_spec": treespec_dumps(info.in_spec) if info.in_spec else None,
            "out_spec": treespec_dumps(info.out_spec) if info.out_spec else None,
        }
    return out


# The node kinds fxfuzz saves. fx pastes a call_module's target into the code it generates: a
# saved one names a graph module the case defines (``_case_attribute``), as split_module's
# outlined children are. call_method, whose target is any attribute of its operand, is refused.
NODE_OPS = ("placeholder", "get_attr", "call_function", "call_module", "output")


def _attr_path(target: Any) -> str:
    """A get_attr or submodule target: dotted identifiers, none of them special (``__x__``) or
    an attribute graph modules have anyway (``apply``, ``graph``, ``to_folder``): a path names
    what the case itself defines."""
    if (
        not isinstance(target, str)
        or len(target) > 1000
        or not all(p.isidentifier() and not p.startswith("__") for p in target.split("."))
    ):
        raise SerializeError(f"bad attribute path {str(target)[:200]!r}")
    taken = next((p for p in target.split(".") if hasattr(fx.GraphModule, p)), None)
    if taken is not None:
        raise UntrustedError(
            f"attribute path {target[:200]!r} names {taken!r}, an attribute of every graph module, not one the case defines"
        )
    return target


def _case_attribute(gm: fx.GraphModule, target: str, defined: dict[str, Any], op: str = "get_attr") -> None:
    """UntrustedError unless ``op`` ``target`` of the rebuilt ``gm`` reaches exactly what the
    case defined under that name (``defined``): a tensor or a nested graph module of its own,
    never a method, a module's attribute or anything else a path could reach."""
    attr: Any = gm
    for part in target.split("."):
        attr = getattr(attr, part, None)
    if target not in defined or attr is not defined[target]:
        raise UntrustedError(
            f"{op} {target[:200]!r} names no tensor or graph the case defines: a {op} reaches nothing else"
        )


def _callables_in(value: Any) -> list[Any]:
    """The callables held in a decoded argument (graph modules reach nodes only through get_attr)."""
    if isinstance(value, (list, tuple)):
        return [c for v in value for c in _callables_in(v)]
    if isinstance(value, dict):
        return [c for kv in value.items() for v in kv for c in _callables_in(v)]
    if isinstance(value, slice):
        return _callables_in([value.start, value.stop, value.step])
    return [] if isinstance(value, fx.Node) or not callable(value) else [value]


def _check_callables(op: str, target: Any, args: Any) -> None:
    """A callable argument is an operator handed to a higher-order op (``with_effects``,
    ``auto_functionalized`` call the operator they are given); anywhere else, or any other
    callable, would make an op call what the data chose. A higher-order op's subgraphs are
    get_attr nodes, which reach only the case's own graph modules (``_case_attribute``)."""
    hop = op == "call_function" and isinstance(target, torch._ops.HigherOrderOperator)
    for c in _callables_in(args):
        if not (hop and isinstance(c, torch._ops.OpOverload)):
            raise UntrustedError(
                f"a {target_name(c)!r} argument outside a higher-order op's operator slot: only an operator may be handed to one"
            )


def _identifier(v: Any, what: str) -> str:
    if not isinstance(v, str) or not v.isidentifier() or len(v) > 1000:
        raise SerializeError(f"{what} {str(v)[:200]!r} is not a Python identifier")
    return v


def _bounded_sizes(values: Any) -> None:
    """Lists of ints in a node's arguments (shapes, repeat counts) stay below ``MAX_ELEMENTS``
    elements, so a saved graph cannot ask an op for a giant allocation."""
    if isinstance(values, (list, tuple)):
        ints = [v for v in values if type(v) is int]
        if ints and len(ints) == len(values) and math.prod(max(v, 1) for v in ints) > MAX_ELEMENTS:
            raise SerializeError(f"a node argument of sizes {str(list(values))[:100]} exceeds {MAX_ELEMENTS} elements")
        for v in values:
            _bounded_sizes(v)
    elif isinstance(values, dict):
        for v in values.values():
            _bounded_sizes(v)


def _treespec(spec: Any) -> Any:
    """A pytree spec of the calling convention: tuples, lists and dicts keyed by identifiers
    (fx pastes the keys into the code it generates)."""
    from torch.utils._pytree import treespec_loads

    loaded = treespec_loads(_short_str(spec, "a pytree spec", 2**20))
    pending = [loaded]
    while pending:
        node = pending.pop()
        if node.type not in (None, tuple, list, dict) and not node.is_leaf():
            raise SerializeError(f"a pytree spec of type {node.type.__name__}")
        if node.type is dict:
            for key in node.context:
                _identifier(key, "a pytree dict key")
        pending.extend(node.children())
    return loaded


def _node_count(graph: Any) -> int:
    """Nodes of a serialized graph and its nested ones, counted before any is built."""
    count, pending = 0, [graph]
    while pending and count <= MAX_NODES:
        g = pending.pop()
        if isinstance(g, dict):
            count += len(g.get("nodes", ()))
            subs = g.get("submodules", {})
            pending.extend(subs.values() if isinstance(subs, dict) else ())
    return count


def decode_graph_module(d: Any, fake: FakeTensorMode, depth: int = 0) -> fx.GraphModule:
    """Rebuild a GraphModule with its nested modules, tensor attributes and node metas
    (``val`` as fakes of ``fake``)."""
    if depth > MAX_GRAPH_DEPTH:
        raise SerializeError(f"graphs nested deeper than {MAX_GRAPH_DEPTH}")
    if depth == 0 and _node_count(d) > MAX_NODES:
        raise SerializeError(f"a case of more than {MAX_NODES} nodes")
    root = torch.nn.Module()
    defined: dict[str, Any] = {}
    for target, sub in d.get("submodules", {}).items():
        defined[target] = decode_graph_module(sub, fake, depth + 1)
        set_attr(root, _attr_path(target), defined[target])
    for target, t in d.get("tensors", {}).items():
        defined[target] = decode_tensor(t)
        set_attr(root, _attr_path(target), defined[target])
    graph = fx.Graph()
    nodes: dict[str, fx.Node] = {}
    for spec in d["nodes"]:
        op = spec["op"]
        if op not in NODE_OPS:
            raise SerializeError(f"node op {str(op)[:80]!r} is not one of {', '.join(NODE_OPS)}")
        targets = {
            "placeholder": _identifier,
            "get_attr": lambda t, _: _attr_path(t),
            "call_module": lambda t, _: _attr_path(t),
            "call_function": lambda t, _: resolve_target(t),
        }
        target = targets[op](spec["target"], "a placeholder") if op in targets else "output"
        if op == "get_attr" and target not in defined:
            raise UntrustedError(
                f"get_attr {target[:200]!r} names no tensor or graph the case defines: a get_attr reaches nothing else"
            )
        if op == "call_module" and not isinstance(defined.get(target), fx.GraphModule):
            raise UntrustedError(
                f"call_module {target[:200]!r} names no graph module the case defines: a call_module calls nothing else"
            )
        args, kwargs = decode_arg(spec["args"], nodes), decode_arg(spec["kwargs"], nodes)
        if not isinstance(args, tuple) or not isinstance(kwargs, dict):
            raise SerializeError("a node's args are a tuple and its kwargs a dict")
        _check_callables(op, target, (args, kwargs))
        for key in kwargs:
            _identifier(key, "a keyword argument")
        _bounded_sizes(args)
        _bounded_sizes(kwargs)
        name = None if op == "output" else _short_str(spec["name"], "a node name", 1000)
        node = graph.create_node(op, target, args, kwargs, name=name)
        if name is not None and node.name != name:
            raise SerializeError(f"node name {name!r} is not reproducible (got {node.name!r})")
        if "module_stack" in spec:
            stack = {
                str(k): tuple(
                    _short_str(x, "a module stack entry", 1000) for x in _items(v, "a module stack entry", 2, 2)
                )
                for k, v in spec["module_stack"].items()
            }
            node.meta["nn_module_stack"] = stack
        if spec.get("val") is not None:
            node.meta["val"] = meta_val(fake, spec["val"])
            if isinstance(node.meta["val"], torch.Tensor):
                # The oracles make real tensors from traced metas (inputs at other sizes): bounded too.
                if (
                    math.prod(n.node.hint if isinstance(n, torch.SymInt) else n for n in node.meta["val"].shape)
                    > MAX_ELEMENTS
                ):
                    raise SerializeError(f"node {name!r} has a traced tensor of more than {MAX_ELEMENTS} elements")
                node.meta["tensor_meta"] = _extract_tensor_metadata(node.meta["val"])
        nodes[node.name] = node
    if "pytree" in d:
        p = d["pytree"]
        graph._codegen = fx.graph._PyTreeCodeGen(
            fx.graph._PyTreeInfo(
                [_identifier(a, "a pytree argument") for a in _items(p["orig_args"], "pytree arguments", 0, 10_000)],
                # torch annotates in_spec as a TreeSpec, yet graphs without one carry None.
                _treespec(p["in_spec"]) if p["in_spec"] else None,  # type: ignore[arg-type]
                _treespec(p["out_spec"]) if p["out_spec"] else None,
            )
        )
    gm = rebuild_graph_module(root, graph)
    for node in graph.nodes:
        if node.op in ("get_attr", "call_module"):
            _case_attribute(gm, node.target, defined, node.op)
    return gm


# ---------------------------------------------------------------------------- signature


def _encode_argument(a: Any) -> dict[str, Any]:
    fields = {f.name: encode_arg(getattr(a, f.name)) for f in dataclasses.fields(a)}
    return {"type": type(a).__name__, **fields}


# The argument kinds of an export signature a saved case may hold.
SIGNATURE_ARGUMENTS = {
    c.__name__: c
    for c in (
        gs.TensorArgument,
        gs.SymIntArgument,
        gs.SymFloatArgument,
        gs.SymBoolArgument,
        gs.ConstantArgument,
        gs.TokenArgument,
    )
}


def _decode_argument(d: Any) -> Any:
    cls = SIGNATURE_ARGUMENTS.get(d["type"]) if isinstance(d, dict) and isinstance(d.get("type"), str) else None
    if cls is None:
        raise SerializeError(
            f"unknown signature argument type {str(d.get('type') if isinstance(d, dict) else d)[:80]!r} (expected one of {', '.join(SIGNATURE_ARGUMENTS)})"
        )
    fields = {k: decode_arg(v, {}) for k, v in d.items() if k != "type"}
    _check_callables("signature", None, fields)
    return cls(**fields)


def encode_signature(sig: gs.ExportGraphSignature) -> dict[str, Any]:
    """An ExportGraphSignature as plain data: every input and output spec."""
    return {
        "inputs": [
            {"kind": s.kind.name, "arg": _encode_argument(s.arg), "target": s.target, "persistent": s.persistent}
            for s in sig.input_specs
        ],
        "outputs": [
            {"kind": s.kind.name, "arg": _encode_argument(s.arg), "target": s.target} for s in sig.output_specs
        ],
    }


def decode_signature(d: dict[str, Any]) -> gs.ExportGraphSignature:
    """The ExportGraphSignature ``encode_signature`` wrote."""

    def text(v: Any) -> str | None:
        return None if v is None else _short_str(v, "a signature target", 1000)

    return gs.ExportGraphSignature(
        input_specs=[
            gs.InputSpec(
                gs.InputKind[s["kind"]],
                _decode_argument(s["arg"]),
                text(s["target"]),
                s["persistent"] if s["persistent"] is None else _flag(s["persistent"]),
            )
            for s in d["inputs"]
        ],
        output_specs=[
            gs.OutputSpec(gs.OutputKind[s["kind"]], _decode_argument(s["arg"]), text(s["target"])) for s in d["outputs"]
        ],
    )


# ---------------------------------------------------------------------------- cases


def graph_targets(graph: dict[str, Any]) -> set[str]:
    """The stored call targets of a serialized graph, nested graphs included, and the
    operators its calls take as arguments (``with_effects`` calls the operator it is given)."""
    own = {n["target"] for n in graph["nodes"] if n["op"] == "call_function"}
    passed = set().union(*(_callables([n.get("args"), n.get("kwargs")]) for n in graph["nodes"]))
    return own.union(passed, *(graph_targets(g) for g in graph.get("submodules", {}).values()))


def _callables(encoded: Any) -> set[str]:
    """The names of the callables an encoded argument holds (``{"callable": name}``)."""
    if isinstance(encoded, dict):
        own = {encoded["callable"]} if isinstance(encoded.get("callable"), str) else set()
        return own.union(*(_callables(v) for v in encoded.values()))
    if isinstance(encoded, list):
        return set().union(*(_callables(v) for v in encoded))
    return set()


def _symints(v: Any) -> list[torch.SymInt]:
    if isinstance(v, torch.SymInt):
        return [v]
    if isinstance(v, torch.Tensor):
        return [n for n in (*v.shape, *v.stride()) if isinstance(n, torch.SymInt)]
    if isinstance(v, (tuple, list)):
        return [s for x in v for s in _symints(x)]
    return []


def encode_symbols(gm: fx.GraphModule) -> dict[str, dict[str, Any]]:
    """Every size symbol the metas of ``gm`` (nested graphs included) use, by name: its traced
    value and its range (``max`` None: unbounded)."""
    symbols: dict[str, dict[str, Any]] = {}
    for mod in gm.modules():
        for n in mod.graph.nodes if isinstance(mod, fx.GraphModule) else ():
            for s in _symints(n.meta.get("val")):
                env = s.node.shape_env
                for sym in s.node.expr.free_symbols:
                    r = env.var_to_range[sym]
                    upper = int(r.upper) if r.upper.is_Integer else None
                    symbols[sym.name] = {"hint": int(env.backed_var_to_val[sym]), "min": int(r.lower), "max": upper}
    return dict(sorted(symbols.items()))


def case_to_dict(case: GraphCase) -> dict[str, Any]:
    """The whole case as JSON data (see the README's repro section for the format)."""
    graph = encode_graph_module(case.gm)
    return {
        "format": FORMAT,
        "custom_ops": op_sources(sorted(graph_targets(graph))),
        "graph": graph,
        "signature": encode_signature(case.signature),
        "inputs": [encode_tensor(t) for t in case.inputs],
        "ambient_grad": case.ambient_grad,
        "domain": case.domain,
        "features": {k: v for k, v in case.features.items() if isinstance(v, (int, float, str, bool))},
        "symbols": encode_symbols(case.gm),
        "sizes": [dict(s) for s in case.sizes],
    }


def check_json_bounds(d: Any) -> None:
    """SerializeError unless the JSON value ``d`` nests at most ``MAX_JSON_DEPTH`` deep and holds
    at most ``MAX_JSON_ITEMS`` values; walked without recursion, before any decoding recurses."""
    level, depth, count = [d], 0, 0
    while level:  # one nesting level at a time
        count += len(level)
        if depth > MAX_JSON_DEPTH or count > MAX_JSON_ITEMS:
            raise SerializeError(
                f"a case nested deeper than {MAX_JSON_DEPTH} or holding more than {MAX_JSON_ITEMS} values"
            )
        deeper: list[Any] = []
        for v in level:
            if type(v) is dict:
                deeper.extend(v.values())
            elif type(v) is list:
                deeper.extend(v)
        level, depth = deeper, depth + 1


def _symbols(d: Any) -> dict[str, dict[str, Any]]:
    """The "symbols" table: identifier -> {"hint", "min", "max"} with sizes ordered and bounded."""
    if not isinstance(d, dict) or len(d) > 1000:
        raise SerializeError('"symbols" is a table of at most 1000 size symbols')
    for name, s in d.items():
        _identifier(name, "a size symbol")
        low, hint, high = s["min"], s["hint"], s["max"]
        if not (type(low) is int and type(hint) is int and (high is None or type(high) is int)):
            raise SerializeError(f"size symbol {name}: hint, min and max are integers")
        if not 0 <= low <= hint <= (MAX_ELEMENTS if high is None else min(high, 2**62)) or hint > MAX_ELEMENTS:
            raise SerializeError(f"size symbol {name}: hint {hint} outside [{low}, {high}] or above {MAX_ELEMENTS}")
    return d


def _sizes(d: Any, symbols: dict[str, dict[str, Any]]) -> tuple[dict[str, int], ...]:
    """The "sizes" list: each a value for every size symbol, within its range."""
    out = []
    for s in _items(d, '"sizes"', 0, 100):
        if not isinstance(s, dict) or s.keys() != symbols.keys():
            raise SerializeError('each of "sizes" gives a value to every size symbol')
        for k, v in s.items():
            high = symbols[k]["max"]
            if type(v) is not int or not symbols[k]["min"] <= v <= min(
                MAX_ELEMENTS, high if high is not None else MAX_ELEMENTS
            ):
                raise SerializeError(f"size {k}={str(v)[:40]} outside the symbol's range")
        out.append(dict(s))
    return tuple(out)


def _check_input_sizes(gm: fx.GraphModule, sizes: tuple[dict[str, int], ...]) -> None:
    """Inputs are re-made at each of ``sizes`` (``inputs_at``): none may exceed ``MAX_ELEMENTS``."""
    for ph in (n for n in gm.graph.nodes if n.op == "placeholder"):
        val = ph.meta.get("val")
        for at in sizes if isinstance(val, torch.Tensor) else ():
            if math.prod(size_at(n, at) for n in val.shape) > MAX_ELEMENTS:
                raise SerializeError(f"input {ph.name} at sizes {at} exceeds {MAX_ELEMENTS} elements")


# Calls that change global state (grad mode, autocast) rather than make a value: the check below
# leaves them out (shapes do not depend on them) so that it changes nothing.
_STATE_CALLS = frozenset(
    {torch._C._set_grad_enabled, torch.amp.autocast_mode._enter_autocast, torch.amp.autocast_mode._exit_autocast}
)


def _concrete(fake: FakeTensorMode, val: Any) -> Any:
    """A traced meta as a value of ``fake`` at its hints (symbolic sizes made ints)."""
    if isinstance(val, torch.SymInt):
        return int(val.node.hint)
    if isinstance(val, torch.Tensor):
        shape = [n.node.hint if isinstance(n, torch.SymInt) else n for n in val.shape]
        stride = [n.node.hint if isinstance(n, torch.SymInt) else n for n in val.stride()]
        with fake:
            return torch.empty_strided(shape, stride, dtype=val.dtype, device=val.device)
    if isinstance(val, (tuple, list)):
        return type(val)(_concrete(fake, v) for v in val)
    return val


@dataclasses.dataclass
class _Made:
    """What the values of a case's graphs come to (bytes), and the first refusal: a refusal
    raised inside a higher-order op may reach the check as the op's own error, so it is kept."""

    total: int = 0
    refused: SerializeError | None = None

    def refuse(self, error: SerializeError) -> SerializeError:
        self.refused = self.refused or error
        return self.refused


class _Allocations(fx.Interpreter):
    """Runs a rebuilt graph on fake tensors (nothing is allocated) and refuses it, before it
    ever runs for real, if any value it makes exceeds ``MAX_ELEMENTS`` elements or
    ``MAX_TENSOR_BYTES`` bytes, or all of them together ``MAX_GRAPH_BYTES``: sizes written in
    arguments (``arange(4e8)``, ``full``, ``repeat``, ``expand``, a product of matrices) are
    bounded by what they make. Nested graphs are checked as the higher-order op calls them."""

    def __init__(self, gm: fx.GraphModule, fake: FakeTensorMode, made: _Made) -> None:
        super().__init__(gm)
        self.fake, self.made = fake, made

    def run_node(self, n: fx.Node) -> Any:
        if n.op == "call_function" and n.target in _STATE_CALLS:
            return None
        if (
            n.op == "call_function"
            and not isinstance(n.target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator))
            and n.target not in _TORCH_FUNCTIONS
        ):
            self._python_arguments(n)
        try:
            with self.fake:
                out = super().run_node(n)
        except Exception as e:  # torch cannot propagate it: its traced meta says what it makes
            if self.made.refused is not None:
                raise self.made.refused from None
            if "val" not in n.meta:
                why = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                raise self.made.refuse(SerializeError(f"node {n.name} does not run on its arguments: {why}")) from None
            out = _concrete(self.fake, n.meta["val"])
        self._count(n.name, out)
        return out

    def _python_arguments(self, n: fx.Node) -> None:
        """Python's operators repeat a list or a string they are given (``[x] * 10**9``) and
        square an int into one of twice its bits (a chain of them, into billions): they take
        tensors and numbers within an int64 only (``getitem`` a container and an index)."""
        values = [self.env[a] if isinstance(a, fx.Node) else a for a in (*n.args, *n.kwargs.values())]
        if n.target is operator.getitem:
            values = values[1:]
        if any(
            isinstance(v, (list, tuple, dict, str, bytes)) or (isinstance(v, int) and abs(v) > MAX_SIZE_VALUE)
            for v in values
        ):
            what = f"node {n.name} hands a container, a string or an int beyond an int64 to {target_name(n.target)}"
            raise self.made.refuse(UntrustedError(f"{what}: Python operators of a case take tensors and numbers"))

    def _count(self, name: str, out: Any) -> None:
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, (tuple, list)):
                self._count(name, t)
            elif isinstance(t, torch.Tensor):
                elements = math.prod(t.shape)
                size = elements * t.element_size()
                self.made.total += size
                if elements > MAX_ELEMENTS or size > MAX_TENSOR_BYTES or self.made.total > MAX_GRAPH_BYTES:
                    raise self.made.refuse(
                        SerializeError(
                            f"node {name} makes a tensor of shape {list(t.shape)} ({size} bytes): a case's values are at most "
                            f"{MAX_ELEMENTS} elements and {MAX_TENSOR_BYTES >> 20} MiB each, {MAX_GRAPH_BYTES >> 20} MiB together"
                        )
                    )


# Fake-tensor dispatch logs every failing meta kernel; a case's failing node is an answer here.
_FAKE_LOG = logging.getLogger("torch._subclasses.fake_tensor")


def _check_allocations(case: GraphCase) -> None:
    """``_Allocations`` over the case at its own inputs, its nested graphs included: each is
    checked on the values its higher-order op hands it, or where no op ran it, on its
    placeholders' traced metas."""
    fake, made = FakeTensorMode(allow_non_fake_inputs=True), _Made()
    nested = [m for name, m in case.gm.named_modules() if name and isinstance(m, fx.GraphModule)]
    checked: set[int] = set()

    def checking(sub: fx.GraphModule) -> Callable[..., Any]:
        def forward(*args: Any) -> Any:
            checked.add(id(sub))
            return _Allocations(sub, fake, made).run(*args)

        return forward

    was_disabled, _FAKE_LOG.disabled = _FAKE_LOG.disabled, True
    for sub in nested:
        sub.forward = checking(sub)  # undone below
    try:
        inputs = [fake.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in case.inputs]
        _Allocations(case.gm, fake, made).run(*inputs)
        for sub in (m for m in nested if id(m) not in checked):
            placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
            if any("val" not in n.meta for n in placeholders):
                raise SerializeError(
                    "a nested graph that no higher-order op of the case runs has inputs without traced metas"
                )
            _Allocations(sub, fake, made).run(*(_concrete(fake, n.meta["val"]) for n in placeholders))
    except Exception:
        if made.refused is None:
            raise
    finally:
        _FAKE_LOG.disabled = was_disabled
        for sub in nested:
            del sub.forward
    if made.refused is not None:  # raised afresh: fx adds the node's code to what passes through it
        raise type(made.refused)(str(made.refused).splitlines()[0])


def case_from_dict(d: Any) -> GraphCase:
    """Rebuild a GraphCase from untrusted data: SerializeError on anything malformed or out of
    bounds, UntrustedError (a SerializeError) on anything that asks for code this run does
    not trust; nothing in ``d`` is imported, evaluated or called."""
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise SerializeError(f'not an fxfuzz case (expected "format": "{FORMAT}")')
    check_json_bounds(d)
    try:
        define(d.get("custom_ops", {}))
        symbols = _symbols(d.get("symbols") or {})
        fake = fake_mode(symbols)
        features = d.get("features", {})
        if not isinstance(features, dict) or not all(isinstance(v, (int, float, str, bool)) for v in features.values()):
            raise SerializeError('"features" is a table of numbers, strings and flags')
        case = GraphCase(
            gm=decode_graph_module(d["graph"], fake),
            signature=decode_signature(d["signature"]),
            inputs=tuple(decode_tensor(t) for t in _items(d["inputs"], '"inputs"', 0, MAX_NODES)),
            ambient_grad=_flag(d["ambient_grad"]),
            domain=_short_str(d.get("domain", "export"), '"domain"'),
            features=dict(features),
            sizes=_sizes(d.get("sizes", []), symbols),
        )
        _check_input_sizes(case.gm, case.sizes)
        _check_allocations(case)
        return case
    except SerializeError:
        raise
    except SizeExpressionError as e:  # Python where a size belongs, or a bomb: never evaluated
        raise UntrustedError(f"size expression refused: {e}") from None
    except Exception as e:  # anything else the data made torch or fx raise: malformed, in one line
        raise SerializeError(
            f"malformed case: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        ) from None


def count_compute_nodes(graph: dict[str, Any]) -> int:
    """``GraphCase.compute_nodes`` on serialized data, nested graphs included."""
    own = sum(1 for n in graph["nodes"] if n["op"] in ("call_function", "call_method", "call_module"))
    return own + sum(count_compute_nodes(g) for g in graph.get("submodules", {}).values())
