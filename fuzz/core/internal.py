"""fxfuzz's own errors, kept apart from findings.

An exception raised while a check runs is blamed by where it was raised: in fxfuzz's own
code (the modules of the ``fxfuzz`` package, wherever it is installed) it is a bug of fxfuzz,
raised on as an ``InternalError``; in torch's or the pass's code (or the code FX generates for
a graph) it is what the result made torch do, a finding against the pass. Where fxfuzz hands
control to code not its own (the pass), it calls through ``call_out``: an exception the callee
raises itself without a Python frame of its own (a C function such as ``operator.truediv``,
``max`` or a torch builtin) ends its traceback in ``call_out``'s frame, and is the callee's.
An exception that fxfuzz raises again as a verdict it kept (a memoized torch error) is marked
with ``foreign`` when first caught, so replaying it from fxfuzz's frame blames torch as the
first raise did.

Not a ``FxfuzzError``: those are the user's bad input (exit 2); this is fxfuzz's defect
(exit ``EXIT_INTERNAL``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

# EX_SOFTWARE from BSD's sysexits.h: "an internal software error has been detected".
EXIT_INTERNAL = 70
_FOREIGN = "__fxfuzz_foreign__"
# The sub-packages kept in folders of their own in a source checkout (pyproject's
# package-dir); installed from a wheel they lie inside the package's folder.
_SUBPACKAGES = ("strategies", "oracles")
# fxfuzz's custom operators run as part of the graphs, called by torch's dispatcher: an
# error in their kernels is the graph's (and so the pass's) like any torch operator's.
_OPERATOR_FILE = os.path.realpath(os.path.join(os.path.dirname(__file__), "custom_ops.py"))
# Bounds on an exception's text as fxfuzz quotes it (the first line).
_MAX_LINE = 500

T = TypeVar("T")


@functools.cache
def _package_folders() -> tuple[tuple[str, str], ...]:
    """``(folder + os.sep, part)`` for each folder fxfuzz's modules live in, deepest first:
    ``fxfuzz.__path__`` (part ``fuzz``) and the paths of the sub-packages that may lie
    elsewhere (part: their name), as Hypothesis's ``belongs_to`` tells its own code by its
    package's location rather than by a repository's layout."""
    import fxfuzz

    found = [(p, "fuzz") for p in fxfuzz.__path__]
    for sub in _SUBPACKAGES:
        spec = importlib.util.find_spec(f"fxfuzz.{sub}")
        found += [(p, sub) for p in (spec.submodule_search_locations or [] if spec is not None else [])]
    return tuple(sorted({(os.path.realpath(p) + os.sep, part) for p, part in found}, key=lambda f: -len(f[0])))


@functools.lru_cache(maxsize=4096)
def package_part(filename: str) -> str | None:
    """Which part of fxfuzz ``filename`` belongs to (``strategies``, ``oracles``, or ``fuzz``
    for the rest of the package), or None where it is not fxfuzz's."""
    path = os.path.realpath(filename)
    return next((part for folder, part in _package_folders() if path.startswith(folder)), None)


def own_file(filename: str) -> bool:
    """Whether ``filename`` is fxfuzz's own code (its custom operators' kernels excepted)."""
    return package_part(filename) is not None and os.path.realpath(filename) != _OPERATOR_FILE


def call_out(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, where ``fn`` is code not fxfuzz's (the pass): what it raises is its own,
    even when it is a C function with no frame of its own to be told by (``raised_by_fxfuzz``)."""
    return fn(*args)


# The functions whose own lines raise only what the code not fxfuzz's that they call raises:
# ``call_out``, and those that cannot call through it (``calls_out``).
_CALLING_OUT = {call_out.__code__}


def calls_out(fn: Callable[..., Any]) -> None:
    """Count ``fn`` as ``call_out`` is counted: for an adapter that may not import fxfuzz (a
    module pasted into standalone repros) and calls the pass itself."""
    _CALLING_OUT.add(fn.__code__)


def raised_by_fxfuzz(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by fxfuzz's own code: the innermost frame of its traceback,
    where it was raised, is fxfuzz's, and is not ``call_out`` (or a ``calls_out`` adapter)
    calling code not fxfuzz's.

    A C function (a torch kernel, a builtin) adds no frame: an error it raises belongs to the
    Python frame that called it. torch's Python wrappers (``OpOverload.__call__``, autograd's
    ``backward``) stand between fxfuzz and torch's C code for everything a graph or autograd
    runs, so a torch error there is torch's; a check calling a torch function directly on the
    result's values must have checked first what it hands over, and an error there is fxfuzz's.
    """
    if getattr(exc, _FOREIGN, False):
        return False
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return code not in _CALLING_OUT and own_file(code.co_filename)


def foreign(exc: BaseException) -> BaseException:
    """Mark ``exc``, raised outside fxfuzz, as such for when fxfuzz raises it again."""
    if not raised_by_fxfuzz(exc):
        setattr(exc, _FOREIGN, True)
    return exc


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s text, at most 500 characters; where its ``__str__`` (code
    of the pass's, or of whatever object it holds) raises, a line saying so. Called only
    while an example runs, so a ``__str__`` that never returns is the example's hang, bounded
    by its time limit like the pass's own."""
    try:
        text = str(exc)
    except Exception as e:
        return f"<its text could not be read: {type(e).__name__}>"
    lines = text.strip().splitlines()
    return lines[0][:_MAX_LINE] if lines else ""


def internal_line(message: str) -> str:
    """The one line the command line ends an internal error with."""
    return f"fxfuzz: {message} (a bug of fxfuzz, not a finding against the pass)"


class InternalError(Exception):
    """A bug of fxfuzz met while checking a pass: never a finding against the pass.

    ``where`` names the check; ``details`` holds the original traceback as text (the frames
    themselves are not kept: they hold graphs and tensors alive)."""

    def __init__(self, where: str, exc: BaseException) -> None:
        self.where = where
        self.exception = type(exc).__name__
        self.details = "".join(traceback.format_exception(exc))
        super().__init__(f"internal error of fxfuzz in the {where} check: {self.exception}: {first_line(exc)}")
