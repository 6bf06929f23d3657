"""``from_module``: the GraphCase torch.export really hands a grad-mode pass for an nn.Module;
``capture_module``: that case together with what the same export produced."""

from __future__ import annotations

import copy
import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import torch
from fxfuzz.core.case import GraphCase, clone_input, copy_graph_module
from fxfuzz.core.passes import EXPORT_STAGES, REGISTRY
from fxfuzz.core.symbols import other_sizes
from torch.export.graph_signature import ExportGraphSignature, InputKind
from torch.utils import _pytree as pytree

# The registered passes torch.export runs on the pre-dispatch graph, by name.
STAGES = tuple(r.name for r in EXPORT_STAGES)
# torch.export's private step that lifts constants just before the grad-mode passes (2.13).
_LIFT = "_materialize_and_lift_constants"


class ExportFailed(Exception):
    """torch.export raised before it handed the stage's pass a graph; ``__cause__`` is its
    exception. fxfuzz's own failures while capturing are raised as themselves, so a caller
    never mistakes them for torch's."""


def _attr(root: Any, target: str) -> Any:
    for part in target.split("."):
        root = getattr(root, part)
    return root


def _input_values(
    module: torch.nn.Module,
    signature: ExportGraphSignature,
    user_leaves: list[Any],
    lifted: dict[str, Any],
) -> tuple[Any, ...]:
    """Real inputs in signature order; parameters keep the module's requires_grad flag."""
    users = iter(user_leaves)
    values: list[Any] = []
    for spec in signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            values.append(clone_input(next(users)))
            continue
        # Parameters, buffers and constants always name their attribute.
        assert spec.target is not None
        try:
            value = _attr(module, spec.target)
        except AttributeError:
            # Tensors created inside forward exist only as export's lifted constants.
            value = lifted[spec.target]
        values.append(clone_input(value))
    return tuple(values)


def _capture(
    stage: str, module: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes: Any
) -> tuple[Any, Any, bool, dict, Any, Exception | None]:
    """Run export with the stage's pass patched; return a copy of what the pass was handed,
    and the ExportedProgram or what export raised at or after the pass."""
    row = REGISTRY[stage]
    mod, name = importlib.import_module(row.module), row.attr
    real: Callable[..., Any] = getattr(mod, name)
    seen: list[tuple[Any, Any, bool]] = []
    ours: list[Exception] = []

    def spy(gm: Any, signature: Any) -> Any:
        # Copy before the pass runs: it rewrites the graph in place.
        try:
            seen.append((copy_graph_module(gm), copy.deepcopy(signature), torch.is_grad_enabled()))
        except Exception as e:
            ours.append(e)  # the copy is fxfuzz's, not export's: raised as itself below
            raise
        return real(gm, signature)

    # The values of the constants export lifts (tensors forward creates) before the pass
    # runs: recorded as export lifts them, so a case is whole even where export fails later.
    lifted: dict[str, Any] = {}
    ep, error = None, None
    trace = importlib.import_module("torch.export._trace")
    lift = getattr(trace, _LIFT, None)

    def keep_lifted(*a: Any, **k: Any) -> Any:
        assert lift is not None  # patched in only where export has it
        constants = lift(*a, **k)
        lifted.update(constants)
        return constants

    setattr(mod, name, spy)
    if lift is not None:
        setattr(trace, _LIFT, keep_lifted)
    try:
        ep = torch.export.export(module, args, kwargs, strict=False, dynamic_shapes=dynamic_shapes)
        lifted.update(ep.constants)
    except Exception as e:
        if ours:
            raise ours[0] from None
        if not seen:
            raise ExportFailed(f"torch.export raised {type(e).__name__}: {e}") from e
        # Export failed at or after the pass (the pass itself may be what is broken); the
        # case is still what the pass was handed.
        error = e
    finally:
        setattr(mod, name, real)
        if lift is not None:
            setattr(trace, _LIFT, lift)
    if not seen:
        raise RuntimeError(f"torch.export never called the {stage} pass (is this torch's pre-dispatch export?)")
    gm, signature, grad = seen[0]
    return gm, signature, grad, lifted, ep, error


@dataclasses.dataclass
class Captured:
    """One export of a module: the case it handed the stage's pass, and what it made of the
    pass's result: ``exported`` (the ExportedProgram) or ``error`` (what export raised at or
    after the pass)."""

    case: GraphCase
    exported: Any
    error: Exception | None


def capture_module(
    module: torch.nn.Module,
    args: tuple,
    kwargs: dict | None = None,
    stage: str = "set_grad",
    dynamic_shapes: Any = None,
) -> Captured:
    """``torch.export.export(module, args, kwargs, strict=False, dynamic_shapes=dynamic_shapes)``
    once: the GraphCase it hands the ``stage`` pass (``set_grad`` or ``autocast``), captured
    just before that pass runs, and the ExportedProgram it returns (or what it raised after
    the pass), so a check needs no second export.

    The graph and signature carry export's own names and metas (symbolic sizes where
    ``dynamic_shapes`` made dims dynamic); ``inputs`` are real tensors in signature order
    (parameters, buffers, constants, user inputs); ``ambient_grad`` is the grad mode export
    ran the pass under; ``sizes`` holds other sizes that satisfy the trace's guards. Raises
    ``ExportFailed`` when export fails before it reaches that pass.
    """
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
    kwargs = kwargs or {}
    gm, signature, grad, lifted, ep, error = _capture(stage, module, tuple(args), kwargs, dynamic_shapes)
    leaves = pytree.tree_leaves((tuple(args), kwargs))
    inputs = _input_values(module, signature, leaves, lifted)
    case = GraphCase(
        gm=gm,
        signature=signature,
        inputs=inputs,
        ambient_grad=grad,
        domain="export",
        features={"source:module": 1, f"stage:{stage}": 1},
        sizes=other_sizes(gm),
    )
    return Captured(case, ep, error)


def from_module(
    module: torch.nn.Module,
    args: tuple,
    kwargs: dict | None = None,
    stage: str = "set_grad",
    dynamic_shapes: Any = None,
) -> GraphCase:
    """The GraphCase that ``torch.export.export(module, args, kwargs, strict=False,
    dynamic_shapes=dynamic_shapes)`` hands the ``stage`` pass: ``capture_module``'s case."""
    return capture_module(module, args, kwargs, stage, dynamic_shapes).case
