"""The shapes an FX pass comes in, each adapted to fxfuzz's one form ``(gm, signature) -> (gm, signature)``.

torch.fx writes passes several ways: ``(gm) -> gm`` or in place ``(gm) -> None``, ``(graph) ->
graph`` (AOTAutograd's ``fx_graph_cse``), ``PassBase`` objects returning a ``PassResult``, and a
``PassManager`` of those. ``shape_of`` tells which one an object is (docs/own-pass.md states the
rules) and ``adapt`` wraps it. A pass that is never handed the export signature cannot keep its
names, so its adapter carries the signature to the result by position (``by_position``).

Torch only, and no postponed annotations: every standalone repro pastes this file, so that it
calls the pass as fxfuzz did (``fxfuzz.repro.files``).
"""

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
# Not ``import enum``: a repro pastes this module after fxfuzz.core.rebuild, whose ``enum()`` it would shadow.
from enum import Enum
from typing import Any

from torch import fx
from torch.export.graph_signature import ConstantArgument, ExportGraphSignature
from torch.fx.passes.infra.pass_base import PassBase
from torch.fx.passes.infra.pass_manager import PassManager


class NoShape(ValueError):
    """An object that is no pass of any shape, or could be one of two; the message completes
    a sentence whose subject is the object's spec."""


class Shape(Enum):
    """How a pass is called and what it returns."""

    SIGNATURE = "(gm, graph_signature) -> (gm, graph_signature)"
    MODULE = "(gm) -> gm, or None in place"
    GRAPH = "(graph) -> graph, or None in place"
    PASS_BASE = "PassBase: (gm) -> PassResult, or None in place"
    PASS_MANAGER = "PassManager: (gm) -> PassResult"

    @property
    def takes_signature(self) -> bool:
        return self is Shape.SIGNATURE


def _positional(params: list[inspect.Parameter]) -> tuple[int, float]:
    """How many positional arguments a callable needs at least and takes at most."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params if p.kind in kinds]
    required = sum(1 for p in positional if p.default is inspect.Parameter.empty)
    varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    return required, float("inf") if varargs else len(positional)


def _is_graph(annotation: Any) -> bool:
    """An annotation naming ``torch.fx.Graph`` (the object, or a string under
    ``from __future__ import annotations``), not a GraphModule."""
    if isinstance(annotation, str):
        return annotation.strip("'\"").rpartition(".")[2] == "Graph"
    return isinstance(annotation, type) and issubclass(annotation, fx.Graph)


def shape_of(obj: Any) -> tuple[Shape, Callable[..., Any]]:
    """The shape of the pass ``obj``, and the callable to run (a PassBase subclass built with
    no arguments); NoShape when it has none or could have two."""
    if isinstance(obj, PassManager):
        return Shape.PASS_MANAGER, obj
    if isinstance(obj, type):
        if not issubclass(obj, PassBase):
            raise NoShape("is a class but not a torch.fx PassBase; name a function or a pass object")
        try:
            return Shape.PASS_BASE, obj()
        except Exception as e:
            raise NoShape(f"cannot be built with no arguments: {type(e).__name__}: {e}") from None
    if isinstance(obj, PassBase):
        return Shape.PASS_BASE, obj
    if not callable(obj):
        raise NoShape(f"is a {type(obj).__name__}, not a callable")
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        raise NoShape("has parameters Python cannot read, so its shape cannot be told; wrap it in a def") from None
    if any(p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty for p in params):
        raise NoShape("has a required keyword-only parameter; a pass is called positionally")
    required, most = _positional(params)
    one, two = required <= 1 <= most, required <= 2 <= most
    if one and two:
        raise NoShape("is ambiguous: it can be called with (gm) or (gm, graph_signature); make its parameters all required")
    if two:
        return Shape.SIGNATURE, obj
    if one:
        return (Shape.GRAPH if params and _is_graph(params[0].annotation) else Shape.MODULE), obj
    raise NoShape("does not take (gm, graph_signature), (gm) or (graph)")


def by_position(sig: ExportGraphSignature, gm: fx.GraphModule) -> ExportGraphSignature:
    """``sig`` with its input and output specs renamed, position by position, to ``gm``'s
    placeholders and output nodes: the signature of a result whose pass never saw one. Specs
    beyond the graph's count, and outputs that are no node, keep what they had."""

    def renamed(spec: Any, node: Any) -> Any:
        arg = spec.arg
        if not isinstance(node, fx.Node) or isinstance(arg, ConstantArgument) or not hasattr(arg, "name"):
            return spec
        return dataclasses.replace(spec, arg=dataclasses.replace(arg, name=node.name))

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    outputs = gm.graph.output_node().args[0]
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    inputs = [renamed(s, n) for s, n in zip(sig.input_specs, placeholders)]
    results = [renamed(s, n) for s, n in zip(sig.output_specs, outputs)]
    return ExportGraphSignature(
        inputs + sig.input_specs[len(inputs) :],
        results + sig.output_specs[len(results) :],
    )


def _result_module(result: Any, gm: fx.GraphModule) -> Any:
    """The GraphModule a signature-blind pass handed back, whatever form it took: ``None`` (it
    changed ``gm`` in place), a PassResult, a Graph (a new one goes into ``gm``, which keeps
    its attributes, as AOTAutograd does with ``gm.graph = fx_graph_cse(gm.graph)``) or a
    GraphModule. A module changed in place is recompiled, as torch's PassManager does after
    every pass. Anything else comes back as it is, for the oracles to report."""
    if result is None:
        result = gm
    elif hasattr(result, "graph_module"):  # what PassManager accepts as a PassResult
        result = result.graph_module
    elif isinstance(result, fx.Graph):
        if result is not gm.graph:
            gm.graph = result  # the setter recompiles
            return gm
        result = gm
    if result is gm:
        gm.recompile()
    return result


def _named(e: Exception, name: str) -> Exception:
    """``e`` with the failing pass named in a note. PassManager raises a bare Exception from
    the real one, naming the pass: the real one is raised instead, with that message as its
    note, so the failure is bucketed by its own type and frame rather than PassManager's."""
    cause = e.__cause__
    if type(e) is Exception and isinstance(cause, Exception) and str(e).startswith("An error occurred when running"):
        cause.add_note(str(e))
        return cause
    e.add_note(f"in pass {name}")
    return e


@dataclass(frozen=True)
class Blind:
    """A pass that takes no signature, run in fxfuzz's form: the signature goes to its result
    by position."""

    run: Callable[[Any], Any]
    shape: Shape
    name: str

    @property
    def fxfuzz_contract(self) -> Any:
        """The wrapped pass's contract declaration (AttributeError where it declares none)."""
        return self.run.fxfuzz_contract  # type: ignore[attr-defined]

    @property
    def fxfuzz_reacts_to(self) -> tuple:
        """The node kinds the wrapped pass declares it reacts to (a PassManager: its passes',
        in order), so generation draws them whatever the pass's shape."""
        runs = self.run.passes if isinstance(self.run, PassManager) else [self.run]
        return tuple(dict.fromkeys(k for run in runs for k in getattr(run, "fxfuzz_reacts_to", ())))

    def __call__(self, gm: Any, graph_signature: Any) -> tuple[Any, Any]:
        try:
            result = self.run(gm.graph if self.shape is Shape.GRAPH else gm)
        except Exception as e:
            named = _named(e, self.name)
            if named is e:
                raise
            raise named from named.__cause__
        module = _result_module(result, gm)
        if not isinstance(module, fx.GraphModule):
            return module  # not a pass result: the oracles report what came back
        return module, by_position(graph_signature, module)


def adapt(shape: Shape, fn: Callable[..., Any]) -> Callable[[Any, Any], tuple[Any, Any]]:
    """``fn`` as a pass of fxfuzz's form (one taking the signature already is), its failures
    named by its function or class name."""
    return fn if shape.takes_signature else Blind(fn, shape, getattr(fn, "__name__", type(fn).__name__))
