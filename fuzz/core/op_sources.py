"""Where the custom operators a case calls are defined, so a saved case can define them again.

ATen ops and higher-order ops exist in every torch; a custom operator exists only once the
module defining it ran. ``fxfuzz::`` operators come from ``fxfuzz.core.custom_ops``; a user's
operator added with ``fxfuzz.strategies.register_op`` records its module (or ``.py`` file)
here. Serialized cases list the sources of the custom operators they call
(``"custom_ops"``, see docs/repro.md) and import them before resolving their targets.
"""

from __future__ import annotations

from collections.abc import Iterable

from fxfuzz.core.custom_ops import define_missing
from fxfuzz.core.errors import SerializeError

FXFUZZ_NAMESPACE = "fxfuzz"
FXFUZZ_SOURCE = "fxfuzz.core.custom_ops"
# Namespaces every torch defines: nothing to import for them.
BUILTIN_NAMESPACES = frozenset({"aten", "prims", "prim", "higher_order", "_operator"})

_SOURCES: dict[str, str] = {}


def record_source(qualname: str, source: str) -> None:
    """Remember that ``ns::name`` is defined by importing ``source`` (a module or a .py path)."""
    _SOURCES[qualname] = source


def custom_qualname(target_name: str) -> str | None:
    """``ns::name`` of a stored target (``ns::name.overload``) that is a custom operator, else None."""
    ns, sep, rest = target_name.partition("::")
    if not sep or ns in BUILTIN_NAMESPACES:
        return None
    return f"{ns}::{rest.rpartition('.')[0] or rest}"


def op_sources(target_names: Iterable[str]) -> dict[str, str]:
    """qualname -> source for each custom operator among ``target_names`` whose source is known."""
    out: dict[str, str] = {}
    for name in target_names:
        qualname = custom_qualname(name)
        if qualname is None:
            continue
        if qualname.startswith(FXFUZZ_NAMESPACE + "::"):
            out[qualname] = FXFUZZ_SOURCE
        elif qualname in _SOURCES:
            out[qualname] = _SOURCES[qualname]
    return out


def define(sources: dict[str, str]) -> None:
    """Import the source of each operator in ``sources`` (qualname -> source) this process
    does not have yet; SerializeError when one cannot be imported."""
    try:
        define_missing(sources)
    except Exception as e:
        raise SerializeError(f"cannot define custom operators {sorted(sources)}: {type(e).__name__}: {e}") from None
