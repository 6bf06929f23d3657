"""Load the pass under test from a spec: a registered name, ``pkg.mod:fn`` or ``file.py:fn``."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from oracles.contract import AUTOCAST, NONE, SET_GRAD, PassContract

PassFn = Callable[[Any, Any], tuple[Any, Any]]


class PassSpecError(ValueError):
    """A pass spec that cannot be loaded; the message names the problem in one line."""


def identity_pass(gm: Any, graph_signature: Any) -> tuple[Any, Any]:
    """Returns its input unchanged: the control that every oracle must accept."""
    return gm, graph_signature


# name -> (import spec, contract)
REGISTRY: dict[str, tuple[str, PassContract]] = {
    "set_grad": ("torch._export.passes.replace_set_grad_with_hop_pass:replace_set_grad_with_hop_pass", SET_GRAD),
    "autocast": ("torch._export.passes.replace_autocast_with_hop_pass:replace_autocast_with_hop_pass", AUTOCAST),
    "identity": ("fuzz.passes:identity_pass", NONE),
}


def _import_module(where: str) -> Any:
    if where.endswith(".py") or os.sep in where:
        if not os.path.isfile(where):
            raise PassSpecError(f"pass file not found: {where}")
        name = "fxfuzz_pass_" + os.path.splitext(os.path.basename(where))[0]
        spec = importlib.util.spec_from_file_location(name, where)
        if spec is None or spec.loader is None:
            raise PassSpecError(f"cannot load {where} as Python")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            raise PassSpecError(f"importing {where} failed: {type(e).__name__}: {e}") from None
        return module
    try:
        return importlib.import_module(where)
    except Exception as e:
        raise PassSpecError(f"cannot import module {where!r}: {type(e).__name__}: {e}") from None


def load_pass(spec: str = "set_grad", contract: PassContract | None = None) -> PassFn:
    """The callable ``(gm, graph_signature) -> (gm, graph_signature)`` that ``spec`` names.

    Registered names carry their own contract; other specs get ``contract`` (set-grad by
    default). Raises PassSpecError with a one-line message for anything unusable.
    """
    if not spec or not isinstance(spec, str):
        raise PassSpecError("empty pass spec; expected a name, pkg.module:callable or file.py:callable")
    if spec in REGISTRY:
        spec, contract = REGISTRY[spec]
    if ":" not in spec:
        raise PassSpecError(
            f"unknown pass {spec!r}: expected one of {', '.join(REGISTRY)}, pkg.module:callable or file.py:callable"
        )
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise PassSpecError(f"malformed pass spec {spec!r}: expected pkg.module:callable or file.py:callable")
    module = _import_module(where)
    fn: Any = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise PassSpecError(f"{where} has no attribute {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise PassSpecError(f"{spec} is a {type(fn).__name__}, not a callable")
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise PassSpecError(f"{spec} does not take (gm, graph_signature)") from None
    except ValueError:
        pass  # builtins without an introspectable signature: trust them
    resolved = contract or getattr(fn, "fxfuzz_contract", SET_GRAD)
    if getattr(fn, "fxfuzz_contract", None) is resolved:
        return fn

    def bound(gm: Any, graph_signature: Any) -> tuple[Any, Any]:
        return fn(gm, graph_signature)

    bound.fxfuzz_contract = resolved  # type: ignore[attr-defined]
    bound.__name__ = getattr(fn, "__name__", "pass")
    bound.__qualname__ = spec
    bound.__wrapped__ = fn  # type: ignore[attr-defined]
    return bound
