"""The pass under test: one frozen value (spec, callable, contract), loaded from a spec.

A spec is a registered name (one ``REGISTRY`` row each: import spec, contract, export stage,
source files), ``pkg.module:callable`` or ``path/to/file.py:callable``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fxfuzz.core.contract import AUTOCAST, NONE, SET_GRAD, PassContract
from fxfuzz.core.errors import PassSpecError

PassFn = Callable[[Any, Any], tuple[Any, Any]]


def identity_pass(gm: Any, graph_signature: Any) -> tuple[Any, Any]:
    """Returns its input unchanged: the control that every oracle must accept."""
    return gm, graph_signature


@dataclass(frozen=True)
class Source:
    """A module of a pass's source: measured by ``--coverage`` (only ``functions`` when given)
    and, when ``mutate``, mutated by ``fxfuzz mutate``."""

    module: str
    functions: tuple[str, ...] = ()
    mutate: bool = True


@dataclass(frozen=True)
class Registered:
    """One registry row: everything fxfuzz knows about a named pass.

    ``export_stage``: the pass's place in torch.export's pre-dispatch pipeline (None for a
    pass export does not run); ``from_module`` captures a graph just before that stage.
    """

    name: str
    spec: str
    contract: PassContract
    export_stage: int | None = None
    sources: tuple[Source, ...] = ()

    @property
    def module(self) -> str:
        return self.spec.partition(":")[0]

    @property
    def attr(self) -> str:
        return self.spec.partition(":")[2]


# torch._export.utils holds more than the helpers the HOP passes call: only these count.
_HOP_HELPERS = ("sequential_split", "nodes_filter", "nodes_first", "nodes_count", "nodes_map", "node_replace_", "node_inline_")
_SHARED = (
    Source("torch._export.passes.replace_with_hop_pass_util"),
    Source("torch._export.utils", _HOP_HELPERS),
    # A general torch.fx helper, not the pass's own logic: measured, never mutated.
    Source("torch.fx.passes.split_module", mutate=False),
)
_SET_GRAD = "torch._export.passes.replace_set_grad_with_hop_pass"
_AUTOCAST = "torch._export.passes.replace_autocast_with_hop_pass"

REGISTRY: dict[str, Registered] = {
    r.name: r
    for r in (
        Registered("set_grad", f"{_SET_GRAD}:replace_set_grad_with_hop_pass", SET_GRAD, 0, (Source(_SET_GRAD), *_SHARED)),
        Registered("autocast", f"{_AUTOCAST}:replace_autocast_with_hop_pass", AUTOCAST, 1, (Source(_AUTOCAST), *_SHARED)),
        Registered("identity", "fxfuzz.core.passes:identity_pass", NONE),
    )
}

# Export stages in the order torch.export runs them on the pre-dispatch graph.
EXPORT_STAGES: tuple[Registered, ...] = tuple(
    sorted((r for r in REGISTRY.values() if r.export_stage is not None), key=lambda r: r.export_stage)  # type: ignore[arg-type, return-value]
)


@dataclass(frozen=True)
class Pass:
    """The pass under test: callable like the function it wraps, with its identity.

    ``spec`` is what the user named (a registered name or an import spec); ``target`` the
    import spec it resolved to; ``contract`` what the pass promises beyond meaning.
    """

    spec: str
    fn: PassFn
    contract: PassContract
    target: str = ""

    def __call__(self, gm: Any, graph_signature: Any) -> tuple[Any, Any]:
        return self.fn(gm, graph_signature)

    @property
    def registered(self) -> Registered | None:
        return REGISTRY.get(self.spec)


def contract_of(pass_fn: Any) -> PassContract:
    """A pass's contract: a Pass's own, a plain callable's ``fxfuzz_contract`` declaration, or
    set-grad (a pass handed to fxfuzz is presumed to be a grad-mode pass)."""
    if isinstance(pass_fn, Pass):
        return pass_fn.contract
    return getattr(pass_fn, "fxfuzz_contract", SET_GRAD)


def import_spec(spec: str) -> str:
    """The import spec (``module:callable`` or ``file.py:callable``) a spec names."""
    return REGISTRY[spec].spec if spec in REGISTRY else spec


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


def load_pass(spec: str = "set_grad", contract: PassContract | None = None) -> Pass:
    """The Pass that ``spec`` names.

    Registered names carry their own contract; other specs get ``contract``, else the
    callable's ``fxfuzz_contract`` declaration, else set-grad. Raises PassSpecError with a
    one-line message for anything unusable.
    """
    if not spec or not isinstance(spec, str):
        raise PassSpecError("empty pass spec; expected a name, pkg.module:callable or file.py:callable")
    target = import_spec(spec)
    if ":" not in target:
        raise PassSpecError(
            f"unknown pass {spec!r}: expected one of {', '.join(REGISTRY)}, pkg.module:callable or file.py:callable"
        )
    where, _, attr = target.rpartition(":")
    if not where or not attr:
        raise PassSpecError(f"malformed pass spec {spec!r}: expected pkg.module:callable or file.py:callable")
    module = _import_module(where)
    fn: Any = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise PassSpecError(f"{where} has no attribute {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise PassSpecError(f"{target} is a {type(fn).__name__}, not a callable")
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise PassSpecError(f"{target} does not take (gm, graph_signature)") from None
    except ValueError:
        pass  # builtins without an introspectable signature: trust them
    if spec in REGISTRY:
        contract = REGISTRY[spec].contract
    return Pass(spec, fn, contract or contract_of(fn), target)
