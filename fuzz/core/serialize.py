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
import importlib
import math
from collections.abc import Callable
from typing import Any

import sympy
import torch
from fxfuzz.core.case import GraphCase
from fxfuzz.core.errors import SerializeError
from fxfuzz.core.op_sources import define, op_sources
from fxfuzz.core.rebuild import fake_mode, meta_val, rebuild_graph_module, set_attr, tensor
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.export import graph_signature as gs
from torch.fx.passes.shape_prop import _extract_tensor_metadata

FORMAT = "fxfuzz-case/1"




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


def resolve_target(name: str) -> Any:
    """The callable a stored target name refers to (inverse of ``target_name``)."""
    if "::" in name:
        ns, rest = name.split("::", 1)
        if ns == "higher_order":
            return getattr(torch.ops.higher_order, rest)
        op, _, overload = rest.rpartition(".")
        return getattr(getattr(getattr(torch.ops, ns), op), overload)
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # longest importable module prefix wins
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
            return obj
        except AttributeError:
            continue
    raise SerializeError(f"unknown call target {name!r}")


# ---------------------------------------------------------------------------- values

_ENUMS = {torch.dtype: "dtype", torch.layout: "layout", torch.memory_format: "memory_format"}


def encode_arg(a: Any) -> Any:
    """An fx argument as JSON data; nodes become ``{"node": name}``."""
    if isinstance(a, fx.Node):
        return {"node": a.name}
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


def decode_arg(a: Any, nodes: dict[str, fx.Node]) -> Any:
    """Inverse of ``encode_arg``; ``nodes`` maps names to the nodes already rebuilt."""
    if isinstance(a, list):
        return [decode_arg(x, nodes) for x in a]
    if not isinstance(a, dict):
        return a
    if len(a) != 1:
        raise SerializeError(f"malformed argument {a!r}")
    (key, v), = a.items()
    if key == "node":
        if v not in nodes:
            raise SerializeError(f"argument refers to unknown node {v!r}")
        return nodes[v]
    decoders: dict[str, Callable[[Any], Any]] = {
        "float": float,
        "tuple": lambda v: tuple(decode_arg(x, nodes) for x in v),
        "dict": lambda v: {decode_arg(k, nodes): decode_arg(x, nodes) for k, x in v},
        "device": torch.device,
        "slice": lambda v: slice(*(decode_arg(x, nodes) for x in v)),
        "ellipsis": lambda v: Ellipsis,
        "callable": resolve_target,
        **{key_: (lambda v: getattr(torch, v)) for key_ in _ENUMS.values()},
    }
    if key not in decoders:
        raise SerializeError(f"unknown argument encoding {key!r}")
    return decoders[key](v)


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


def decode_tensor(d: dict[str, Any]) -> Any:
    """The tensor ``encode_tensor`` wrote: values, dtype, shape and requires_grad."""
    if "value" in d:
        return decode_arg(d["value"], {})
    return tensor([decode_arg(x, {}) for x in d["values"]], getattr(torch, d["dtype"]), d["shape"], d["requires_grad"])


# ---------------------------------------------------------------------------- graphs


def encode_module_stack(stack: dict[str, tuple[str, Any]]) -> dict[str, list[str]]:
    """``meta['nn_module_stack']`` (export's verifier checks it): module types by name."""
    return {k: [path, ty if isinstance(ty, str) else f"{ty.__module__}.{ty.__qualname__}"] for k, (path, ty) in stack.items()}


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


def decode_graph_module(d: dict[str, Any], fake: FakeTensorMode) -> fx.GraphModule:
    """Rebuild a GraphModule with its nested modules, tensor attributes and node metas
    (``val`` as fakes of ``fake``)."""
    root = torch.nn.Module()
    for target, sub in d.get("submodules", {}).items():
        set_attr(root, target, decode_graph_module(sub, fake))
    for target, t in d.get("tensors", {}).items():
        set_attr(root, target, decode_tensor(t))
    graph = fx.Graph()
    nodes: dict[str, fx.Node] = {}
    for spec in d["nodes"]:
        op = spec["op"]
        target = spec["target"] if op in ("placeholder", "get_attr", "call_method", "call_module", "output") else resolve_target(spec["target"])
        args, kwargs = decode_arg(spec["args"], nodes), decode_arg(spec["kwargs"], nodes)
        name = None if op == "output" else spec["name"]
        node = graph.create_node(op, target, args, kwargs, name=name)
        if name is not None and node.name != name:
            raise SerializeError(f"node name {name!r} is not reproducible (got {node.name!r})")
        if "module_stack" in spec:
            node.meta["nn_module_stack"] = {k: tuple(v) for k, v in spec["module_stack"].items()}
        if spec.get("val") is not None:
            node.meta["val"] = meta_val(fake, spec["val"])
            if isinstance(node.meta["val"], torch.Tensor):
                node.meta["tensor_meta"] = _extract_tensor_metadata(node.meta["val"])
        nodes[node.name] = node
    if "pytree" in d:
        from torch.utils._pytree import treespec_loads

        p = d["pytree"]
        graph._codegen = fx.graph._PyTreeCodeGen(
            fx.graph._PyTreeInfo(
                p["orig_args"],
                # torch types in_spec as always present; a case keeps whatever the graph had.
                treespec_loads(p["in_spec"]) if p["in_spec"] else None,  # type: ignore[arg-type]
                treespec_loads(p["out_spec"]) if p["out_spec"] else None,
            )
        )
    return rebuild_graph_module(root, graph)


# ---------------------------------------------------------------------------- signature


def _encode_argument(a: Any) -> dict[str, Any]:
    fields = {f.name: encode_arg(getattr(a, f.name)) for f in dataclasses.fields(a)}
    return {"type": type(a).__name__, **fields}


def _decode_argument(d: dict[str, Any]) -> Any:
    cls = getattr(gs, d["type"], None)
    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
        raise SerializeError(f"unknown signature argument type {d['type']!r}")
    return cls(**{k: decode_arg(v, {}) for k, v in d.items() if k != "type"})


def encode_signature(sig: gs.ExportGraphSignature) -> dict[str, Any]:
    """An ExportGraphSignature as plain data: every input and output spec."""
    return {
        "inputs": [
            {"kind": s.kind.name, "arg": _encode_argument(s.arg), "target": s.target, "persistent": s.persistent}
            for s in sig.input_specs
        ],
        "outputs": [{"kind": s.kind.name, "arg": _encode_argument(s.arg), "target": s.target} for s in sig.output_specs],
    }


def decode_signature(d: dict[str, Any]) -> gs.ExportGraphSignature:
    """The ExportGraphSignature ``encode_signature`` wrote."""
    return gs.ExportGraphSignature(
        input_specs=[
            gs.InputSpec(gs.InputKind[s["kind"]], _decode_argument(s["arg"]), s["target"], s["persistent"])
            for s in d["inputs"]
        ],
        output_specs=[
            gs.OutputSpec(gs.OutputKind[s["kind"]], _decode_argument(s["arg"]), s["target"]) for s in d["outputs"]
        ],
    )


# ---------------------------------------------------------------------------- cases


def graph_targets(graph: dict[str, Any]) -> set[str]:
    """The stored call targets of a serialized graph, nested graphs included."""
    own = {n["target"] for n in graph["nodes"] if n["op"] == "call_function"}
    return own.union(*(graph_targets(g) for g in graph.get("submodules", {}).values()))


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


def case_from_dict(d: Any) -> GraphCase:
    """Rebuild a GraphCase; raises SerializeError on anything malformed."""
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise SerializeError(f"not an fxfuzz case (expected \"format\": \"{FORMAT}\")")
    try:
        define(d.get("custom_ops", {}))
        fake = fake_mode(d.get("symbols"))
        return GraphCase(
            gm=decode_graph_module(d["graph"], fake),
            signature=decode_signature(d["signature"]),
            inputs=tuple(decode_tensor(t) for t in d["inputs"]),
            ambient_grad=bool(d["ambient_grad"]),
            domain=str(d.get("domain", "export")),
            features=dict(d.get("features", {})),
            sizes=tuple({str(k): int(v) for k, v in s.items()} for s in d.get("sizes", [])),
        )
    except SerializeError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as e:
        raise SerializeError(f"malformed case: {type(e).__name__}: {e}") from None


def count_compute_nodes(graph: dict[str, Any]) -> int:
    """``GraphCase.compute_nodes`` on serialized data, nested graphs included."""
    own = sum(1 for n in graph["nodes"] if n["op"] in ("call_function", "call_method", "call_module"))
    return own + sum(count_compute_nodes(g) for g in graph.get("submodules", {}).values())
