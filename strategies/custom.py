"""Custom operators in the op table: fxfuzz's own (``fxfuzz.core.custom_ops``) and the user's.

``op_spec`` turns a custom operator and its input constraints into an ``OpSpec``, reading what
the schema says (how many leading tensor operands, a tuple result, an in-place update of the
first operand); ``register_op`` adds one to the table ``graph_cases`` draws from, next to the
ATen ops and fxfuzz's five operators.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import inspect
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from fxfuzz.core import custom_ops  # noqa: F401  (registers the fxfuzz:: operators)
from fxfuzz.core.errors import FxfuzzError, UsageError
from fxfuzz.core.op_sources import add_user_op, is_source_spec, load_sources, record_source
from fxfuzz.core.passes import REGISTRY, load_pass, resolve_attr
from fxfuzz.core.user_code import first_exit
from fxfuzz.strategies.ops import FLOAT_DTYPES, Extra, Fits, OpSpec, broadcastable, fits_into

fxfuzz_ops = torch.ops.fxfuzz


def float_broadcastable(chosen: list[torch.Tensor], other: torch.Tensor) -> bool:
    """A floating operand of the first operand's dtype that broadcasts with the others."""
    return other.dtype == chosen[0].dtype and other.dtype in FLOAT_DTYPES and broadcastable(chosen, other)


def _overload(op: Any) -> torch._ops.OpOverload:
    """The OpOverload behind a custom op, its packet (``.default``) or a ``CustomOpDef``."""
    op = getattr(op, "_opoverload", op)  # torch.library.custom_op's CustomOpDef
    if isinstance(op, torch._ops.OpOverloadPacket):
        op = op.default
    if not isinstance(op, torch._ops.OpOverload):
        raise UsageError(f"not a torch operator: {op!r} (expected torch.ops.<ns>.<name>[.<overload>] or a custom_op)")
    return op


def op_spec(
    op: Any,
    *,
    dtypes: str = "float",
    fits: Fits = broadcastable,
    arguments: Extra | None = None,
    min_dim: int = 0,
    saves_output: bool = False,
) -> OpSpec:
    """The op-table entry for a custom operator.

    ``dtypes`` is the first operand's dtype class (``float``, ``num``, ``bool``, ``any``),
    ``min_dim`` its least rank, ``fits(chosen, other)`` whether ``other`` may follow the
    operands ``chosen`` so far, and ``arguments(draw, metas)`` draws the non-tensor arguments
    after the tensor operands as ``(args, kwargs)`` (None: the operands do not fit). The
    schema decides the rest: the leading Tensor arguments are the operands, a tuple result
    is unpacked, and an operator that mutates its first argument is drawn as an in-place
    update (of a fresh activation, or under no_grad of a buffer or input)."""
    overload = _overload(op)
    schema = overload._schema
    arity = 0
    for arg in schema.arguments:
        if not isinstance(arg.type, torch.TensorType):
            break
        arity += 1
    if arity == 0:
        raise UsageError(f"{schema.name}: the first argument must be a Tensor")
    rest = schema.arguments[arity:]
    if arguments is None and any(not a.has_default_value() and not a.kwarg_only for a in rest):
        raise UsageError(f"{schema.name}: give `arguments` to draw its non-tensor arguments {[a.name for a in rest]}")
    written = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    if written not in ([], [0]):
        raise UsageError(f"{schema.name}: only an operator mutating its first argument can be drawn")
    name = schema.name if overload._overloadname == "default" else f"{schema.name}.{overload._overloadname}"
    extra: dict[str, Any] = {} if arguments is None else {"extra": arguments}  # else OpSpec's default
    return OpSpec(
        name,
        overload,
        arity,
        **extra,
        dtypes=dtypes,
        fits=fits,
        min_dim=min_dim,
        tuple_out=len(schema.returns) > 1,
        saves_output=saves_output,
        inplace=bool(written),
    )


FXFUZZ_OPS: tuple[OpSpec, ...] = (
    op_spec(fxfuzz_ops.scaled_mul, fits=float_broadcastable),
    op_spec(fxfuzz_ops.split_sign, saves_output=True),
    op_spec(fxfuzz_ops.cube),
    *((op_spec(fxfuzz_ops.tanh_mask, saves_output=True),) if hasattr(fxfuzz_ops, "tanh_mask") else ()),
    op_spec(fxfuzz_ops.add_half_, fits=fits_into),
)

_USER: dict[str, OpSpec] = {}
# How many table entries a user operator counts for (custom_specs).
USER_WEIGHT = 5
# entry name -> the specs (``pkg.module:attr`` or ``file.py:attr``) another process registers
# the same entry from, the first it can resolve; None where none is known (constraints given
# as live objects).
_SPECS: dict[str, tuple[str, ...] | None] = {}


def _defining_module(qualname: str) -> tuple[Any, str] | None:
    """The module that defines a ``torch.library.custom_op`` and the source that imports it
    again: its name where importing that name finds the same file, else the file
    (``__main__``, a file loaded by path)."""
    opdef = torch._library.custom_ops.OPDEFS.get(qualname)
    module = inspect.getmodule(getattr(opdef, "_init_fn", None))
    path = getattr(module, "__file__", None)
    if module is None or path is None:
        return None
    return module, module.__name__ if _importable_as(module.__name__, path) else os.path.abspath(path)


def _importable_as(name: str, path: str) -> bool:
    """Whether importing ``name`` afresh finds the file ``path``: searched on the path, not in
    ``sys.modules``, where a file loaded by path (``--op file.py:attr``) sits under a name
    no other process can import."""
    parent, _, _ = name.rpartition(".")
    try:
        search = importlib.import_module(parent).__path__ if parent else None
        found = importlib.machinery.PathFinder.find_spec(name, search)
    except (ImportError, AttributeError):  # a parent that cannot be imported, or is no package
        return False
    return found is not None and found.origin == path


def _specs_of(op: Any, qualname: str) -> tuple[str, ...] | None:
    """``source:attr`` where the module defining the operator holds ``op`` itself as ``attr``
    (the operator or its op_spec entry), so another process resolves the same object: by the
    module's name, then by its file (a process whose path, unlike this one's, lacks the module:
    pytest and scripts add to ``sys.path``)."""
    defining = _defining_module(qualname)
    if defining is None:
        return None
    module, source = defining
    attr = next((name for name, value in vars(module).items() if value is op), None)
    if attr is None:
        return None
    return tuple(dict.fromkeys([f"{source}:{attr}", f"{os.path.abspath(module.__file__)}:{attr}"]))


def register_op(op: Any, **constraints: Any) -> OpSpec:
    """Add a custom operator (or an ``OpSpec`` from ``op_spec``, or the ``pkg.module:attr`` or
    ``file.py:attr`` spec naming either) to the op table graph cases draw from, in this
    process; ``constraints`` are ``op_spec``'s. Registering the same operator again replaces
    its entry. Returns the entry.

    Worker processes (``fxfuzz.campaign.supervisor``) register the same entry from its spec:
    the one given, or the attribute of the operator's defining module that holds ``op``.
    An entry with ``constraints``, or found nowhere, has none (``op_specs`` refuses it)."""
    given = op if isinstance(op, str) else None
    if given is not None:
        op = resolve_attr(given, "operator")
    spec = op if isinstance(op, OpSpec) else op_spec(op, **constraints)
    qualname = spec.target._schema.name
    add_user_op(qualname)  # saved cases calling it load in this run
    defining = _defining_module(qualname)
    if defining is not None:
        record_source(qualname, defining[1])
    _USER[spec.name] = spec
    _SPECS[spec.name] = None if constraints else (given,) if given else _specs_of(op, qualname)
    return spec


def register_ops(specs: Iterable[str], option: str) -> list[OpSpec]:
    """Register each spec of a command-line ``option`` (``--op``, ``--fxfuzz-op``) in the op
    table, all or none: UsageError naming the option for the first that cannot be had. A value
    naming a source rather than an operator (``pkg.module``, ``file.py``) is loaded instead
    (``load_sources``): its operators then exist, for saved cases that call them."""
    specs = list(specs)
    load_sources([s for s in specs if is_source_spec(s)], option)
    added: list[OpSpec] = []
    try:
        for spec in (s for s in specs if not is_source_spec(s)):
            added.append(register_op(spec))
    except FxfuzzError as e:
        for entry in added:
            unregister_op(entry.name)
        raise UsageError(f"{option}: {e}") from None
    return added


def loading_ends(passes: Sequence[tuple[str, str]], ops: Sequence[str], option: str) -> str | None:
    """One line naming the first of ``passes`` (option, spec) or of the ``option`` values ``ops``
    (loaded as ``register_ops`` loads them) whose loading ends the process (``os._exit``, a
    signal), which no handler could catch; None when none does. Each is loaded first in a
    throwaway fork (``fxfuzz.core.user_code.first_exit``), so that no command ends with the
    status the user's code chose. A registered pass runs none of the user's code: not tried."""
    steps: list[tuple[str, Callable[[], object]]] = [
        (f"{o} {spec}", functools.partial(load_pass, spec)) for o, spec in passes if spec not in REGISTRY
    ]
    steps += [(f"{option} {op}", functools.partial(register_ops, [op], option)) for op in ops]
    return first_exit(steps)


def register_first(specs: Sequence[str]) -> OpSpec:
    """``register_op`` of the first of ``specs`` (alternatives from ``op_specs``) that
    resolves in this process; the last one's error when none does."""
    for spec in specs[:-1]:
        try:
            return register_op(spec)
        except FxfuzzError:
            continue
    return register_op(specs[-1])


def op_specs() -> list[tuple[str, ...]]:
    """For each user operator of this process's op table, in the order they were added, the
    specs another process registers it from (``register_first``); UsageError for one
    registered from live objects alone, which a worker process cannot rebuild (rather than
    fuzz without it)."""
    missing = [name for name, specs in _SPECS.items() if specs is None]
    if missing:
        raise UsageError(
            f"custom operator {missing[0]} was registered with constraints or from an object no module holds, so "
            "worker processes cannot register it: register it by spec (register_op('pkg.module:attr'), "
            "an op_spec(...) entry defined beside the operator) or run in one process"
        )
    return [specs for specs in _SPECS.values() if specs is not None]


def unregister_op(name: str) -> None:
    """Remove a user operator (by its entry's name, ``ns::op``) from the op table."""
    _USER.pop(name, None)
    _SPECS.pop(name, None)


def custom_specs(inplace: bool) -> tuple[OpSpec, ...]:
    """The custom operators' table entries, functional or in-place ones, each user operator
    ``USER_WEIGHT`` times: it is what its user came to fuzz, one entry among sixty would reach
    a short campaign's cases only now and then."""
    user = tuple(s for s in _USER.values() for _ in range(USER_WEIGHT))
    return tuple(s for s in (*FXFUZZ_OPS, *user) if s.inplace == inplace)
