"""Where the custom operators a case calls are defined, and which of them this run trusts.

ATen ops and higher-order ops exist in every torch; a custom operator exists only once the
code defining it ran. ``fxfuzz::`` operators come from ``fxfuzz.core.custom_ops``; a user's
operator added with ``fxfuzz.strategies.register_op`` (``--op pkg.module:attr``) records its
module (or ``.py`` file) here, and so does every operator a source named with ``--op SOURCE``
defines. Serialized cases list the sources of the custom operators they call
(``"custom_ops"``, see docs/repro.md) for their reader's information: a saved case is data,
so loading one never imports what it names (docs/security.md). Its operators must already
exist in this process, else the case is not loaded and the message says which ``--op`` to add.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import torch
from fxfuzz.core.custom_ops import load_source
from fxfuzz.core.errors import SerializeError, UntrustedError, UsageError
from fxfuzz.core.user_code import exits_refused

FXFUZZ_NAMESPACE = "fxfuzz"
FXFUZZ_SOURCE = "fxfuzz.core.custom_ops"
# Namespaces every torch defines: nothing to import for them.
BUILTIN_NAMESPACES = frozenset({"aten", "prims", "prim", "higher_order", "_operator"})
# What a case's "custom_ops" may hold: more operators than any generated graph calls.
MAX_CUSTOM_OPS = 256

_SOURCES: dict[str, str] = {}
# The sources the user named for this run (--op SOURCE), in order: worker processes load them too.
_NAMED: list[str] = []
# Operators (``ns::name``) the user added for this run: registered in the op table
# (``register_op``, ``--op SPEC``) or defined by a source named with ``--op SOURCE``. A saved
# case may call these besides the targets fxfuzz draws itself (``fxfuzz.core.serialize``).
_ADDED: set[str] = set()


def add_user_op(qualname: str) -> None:
    """Let saved cases call operator ``ns::name``, which the user added for this run."""
    _ADDED.add(qualname)


def user_op(qualname: str) -> bool:
    """Whether the user added operator ``ns::name`` for this run (``add_user_op``)."""
    return qualname in _ADDED


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


def _operator_names() -> set[str]:
    # Overload names stripped: ``ns::name`` of every operator the dispatcher knows now.
    return {n.partition(".")[0] for n in torch._C._dispatch_get_all_op_names()}


# The dispatcher's operators as last listed (listing takes ~15 ms): operators are only ever
# added, so a name found here stays valid and only a miss needs a fresh listing.
_seen: set[str] = set()


def exists(qualname: str) -> bool:
    """Whether operator ``ns::name`` is registered in this process (nothing is imported)."""
    if qualname not in _seen:
        _seen.update(_operator_names())
    return qualname in _seen


def is_source_spec(value: str) -> bool:
    """Whether an ``--op`` value names a source (``pkg.module`` or ``file.py``) rather than an
    operator (``pkg.module:attr`` or ``file.py:attr``)."""
    return ":" not in value


def load_sources(sources: Iterable[str], option: str = "--op") -> None:
    """Run each source of custom operators the user named for this run (a module name or a .py
    path), recording it as the source of every operator it defines; worker processes load the
    same ones (``named_sources``). UsageError naming ``option`` for one that cannot be loaded."""
    for source in sources:
        given = source
        if source.endswith(".py"):
            if not os.path.isfile(source):
                raise UsageError(f"{option} {given}: no such file")
            source = os.path.abspath(source)  # a repro of its operators is replayed from anywhere
        before = _operator_names()
        with exits_refused(f"{option} {given}", UsageError):
            try:
                load_source(source)
            except Exception as e:  # the user's own code: whatever it raises, one line
                raise UsageError(f"{option} {given}: cannot load it: {type(e).__name__}: {e}") from None
        for qualname in _operator_names() - before:
            record_source(qualname, source)
            add_user_op(qualname)
        if source not in _NAMED:
            _NAMED.append(source)


def named_sources() -> list[str]:
    """The sources ``load_sources`` loaded in this process, in order."""
    return list(_NAMED)


def define(sources: Any) -> None:
    """Check a case's ``custom_ops`` (qualname -> source): every operator it lists must exist in
    this process already. Nothing is imported: UntrustedError saying which ``--op`` would
    define a missing one, SerializeError for a malformed table."""
    if not isinstance(sources, dict) or len(sources) > MAX_CUSTOM_OPS:
        raise SerializeError(f'"custom_ops" is a table of at most {MAX_CUSTOM_OPS} operator -> source')
    for qualname, source in sources.items():
        if not isinstance(source, str) or len(qualname) > 200 or len(source) > 1000 or "::" not in qualname:
            raise SerializeError(f'malformed "custom_ops" entry {qualname[:200]!r}')
        if not exists(qualname):
            raise UntrustedError(
                f"the case calls custom operator {qualname}, defined by {source!r}, which fxfuzz does not load "
                f"from a saved case: to allow it, name its source for this run with --op {source}"
            )
