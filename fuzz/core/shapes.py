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


# The shapes a user may name with ``--pass-shape`` (a spec's ``@SHAPE`` suffix): how many
# positional arguments each hands a callable.
GIVEN_SHAPES = {"signature": Shape.SIGNATURE, "module": Shape.MODULE, "graph": Shape.GRAPH}
_ARITY = {Shape.SIGNATURE: 2, Shape.MODULE: 1, Shape.GRAPH: 1}


def _positional(params: list[inspect.Parameter]) -> tuple[int, float]:
    """How many positional arguments a callable needs at least and takes at most."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params if p.kind in kinds]
    required = sum(1 for p in positional if p.default is inspect.Parameter.empty)
    varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    return required, float("inf") if varargs else len(positional)


def _named_type(annotation: Any, name: str) -> bool:
    """An annotation naming the class ``name`` (the class itself or a subclass, or a string
    whose last dotted part is ``name``, as under ``from __future__ import annotations``)."""
    if isinstance(annotation, str):
        return annotation.strip("'\"").rpartition(".")[2] == name
    return isinstance(annotation, type) and any(c.__name__ == name for c in annotation.__mro__)


def _is_graph(param: inspect.Parameter) -> bool:
    """A parameter that takes a ``torch.fx.Graph``: annotated so, or, unannotated, named
    ``graph`` (Inductor's post-grad passes name it so and annotate nothing). A GraphModule
    annotation wins over the name (``joint_graph_passes(graph: GraphModule)``)."""
    if param.annotation is inspect.Parameter.empty:
        return param.name == "graph"
    return _named_type(param.annotation, "Graph")


# The names a parameter taking the export signature goes by, where it is not annotated.
SIGNATURE_NAMES = ("graph_signature", "signature", "sig", "export_graph_signature")


def _is_signature(param: inspect.Parameter) -> bool:
    """A parameter that takes the ExportGraphSignature: annotated so, or named so."""
    return param.name in SIGNATURE_NAMES or _named_type(param.annotation, "ExportGraphSignature")


def _pattern_pass(obj: Any) -> Any:
    """The ``apply`` of an Inductor ``PatternMatcherPass`` (a list of pattern entries, called
    as ``patterns.apply(graph)``, which rewrites in place and returns how many matched); None
    for anything else. Told by its class's name: this module imports nothing of Inductor."""
    if any(c.__name__ == "PatternMatcherPass" for c in type(obj).__mro__) and callable(getattr(obj, "apply", None)):
        return obj.apply
    return None


def shape_of(obj: Any) -> tuple[Shape, Callable[..., Any]]:
    """The shape of the pass ``obj``, and the callable to run (a PassBase subclass built with
    no arguments, a PatternMatcherPass's ``apply``); NoShape when it has none or fxfuzz cannot
    tell which it has, with what to do instead."""
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
    apply = _pattern_pass(obj)
    if apply is not None:
        return Shape.MODULE, apply
    if not callable(obj):
        raise NoShape(f"is a {type(obj).__name__}, not a callable")
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        raise NoShape("has parameters Python cannot read, so its shape cannot be told; wrap it in a def") from None
    if any(p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty for p in params):
        raise NoShape(f"has a required keyword-only parameter; a pass is called positionally: {_ADAPT}")
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        raise NoShape(f"takes *args, so fxfuzz cannot tell what to hand it besides the graph: {_ADAPT}")
    required, most = _positional(params)
    positional = [
        p for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if required >= 3 or most == 0:
        raise NoShape(f"does not take (gm, graph_signature), (gm) or (graph): {_ADAPT}")
    if required == 2:
        if _is_signature(positional[1]):
            return Shape.SIGNATURE, obj
        raise NoShape(
            f"takes a second required parameter {positional[1].name!r} that fxfuzz cannot supply (only an "
            f"ExportGraphSignature, annotated so or named graph_signature): {_ADAPT}"
        )
    if most >= 2 and _is_signature(positional[1]):
        raise NoShape(
            "is ambiguous: it can be called with (gm) or (gm, graph_signature); "
            "say which with --pass-shape signature or --pass-shape module"
        )
    if _named_type(positional[0].annotation, "ExportedProgram"):
        raise NoShape(f"takes an ExportedProgram, not a GraphModule: {_ADAPT} (fxfuzz.core.calls.on_program)")
    inputs = [p.name for p in positional[1:] if p.name in INPUTS_NAMES]
    if inputs:
        # Its default (none, or ()) is not what its caller hands it (pre_grad_passes, fuse_fx).
        raise NoShape(f"takes the model's example inputs as {inputs[0]!r}, which fxfuzz does not hand a pass: {_ADAPT}")
    # Further optional parameters (joint_graph_passes' input_device) keep their defaults.
    return (Shape.GRAPH if _is_graph(positional[0]) else Shape.MODULE), obj


# The names a parameter taking the model's example inputs goes by: its caller always hands them.
INPUTS_NAMES = ("example_inputs", "aot_example_inputs", "sample_args", "inputs")

# How to run a pass fxfuzz cannot call by its parameters alone (docs/own-pass.md).
_ADAPT = (
    "name its catalogue row (fxfuzz passes), say how it is called with --pass-shape signature|module|graph, "
    "or write a one-line adapter that calls it as its caller does (docs/own-pass.md)"
)


def shape_given(obj: Any, name: str) -> tuple[Shape, Callable[..., Any]]:
    """The callable ``obj`` with the shape a user named (``--pass-shape``, ``GIVEN_SHAPES``),
    called so whatever its parameters say; NoShape where it cannot be called with that
    many positional arguments, or is no callable."""
    shape = GIVEN_SHAPES[name]
    if not callable(obj) or isinstance(obj, type):
        raise NoShape(f"is a {type(obj).__name__}, not a callable that --pass-shape {name} can call")
    try:
        inspect.signature(obj).bind(*range(_ARITY[shape]))
    except TypeError as e:
        raise NoShape(f"cannot be called as --pass-shape {name} says ({shape.value}): {e}") from None
    except ValueError:
        pass  # parameters Python cannot read: the user said how to call it
    return shape, obj


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
    if result is None or type(result) in (bool, int):  # in place, returning whether or how much it changed
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
