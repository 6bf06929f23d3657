"""fxfuzz's own errors, kept apart from findings.

An exception raised while a check runs is blamed by where it was raised: in fxfuzz's own
files (the packages fuzz/, strategies/, oracles/) it is a bug of fxfuzz, raised on as an
``InternalError``; in torch's or the pass's code (or the code FX generates for a graph) it is
what the result made torch do, a finding against the pass. An exception that fxfuzz raises
again as a verdict it kept (a memoized torch error) is marked with ``foreign`` when first
caught, so replaying it from fxfuzz's frame blames torch as the first raise did.

Not a ``FxfuzzError``: those are the user's bad input (exit 2); this is fxfuzz's defect
(exit ``EXIT_INTERNAL``).
"""

from __future__ import annotations

import os
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OWN_DIRS = tuple(os.path.join(ROOT, pkg) + os.sep for pkg in ("fuzz", "strategies", "oracles"))
# fxfuzz's custom operators run as part of the graphs, called by torch's dispatcher: an
# error in their kernels is the graph's (and so the pass's) like any torch operator's.
OPERATOR_FILES = (os.path.join(ROOT, "fuzz", "core", "custom_ops.py"),)
# EX_SOFTWARE from BSD's sysexits.h: "an internal software error has been detected".
EXIT_INTERNAL = 70
_FOREIGN = "__fxfuzz_foreign__"


def own_file(filename: str) -> bool:
    """Whether ``filename`` is fxfuzz's own code (its custom operators' kernels excepted)."""
    path = os.path.abspath(filename)
    return path.startswith(OWN_DIRS) and path not in OPERATOR_FILES


def raised_by_fxfuzz(exc: BaseException) -> bool:
    """Whether the innermost frame of ``exc``'s traceback, where it was raised, is fxfuzz's.

    A C function (a torch kernel, a builtin) adds no frame: an error it raises belongs to the
    Python frame that called it. torch's Python wrappers (``OpOverload.__call__``, autograd's
    ``backward``) stand between fxfuzz and torch's C code for everything a graph or autograd
    runs, so a torch error there is torch's; a check calling a torch function directly on the
    result's values must have checked first what it hands over, and an error there is fxfuzz's.
    """
    if getattr(exc, _FOREIGN, False):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and own_file(frames[-1].filename)


def foreign(exc: BaseException) -> BaseException:
    """Mark ``exc``, raised outside fxfuzz, as such for when fxfuzz raises it again."""
    if not raised_by_fxfuzz(exc):
        setattr(exc, _FOREIGN, True)
    return exc


class InternalError(Exception):
    """A bug of fxfuzz met while checking a pass: never a finding against the pass.

    ``where`` names the check; ``details`` holds the original traceback as text (the frames
    themselves are not kept: they hold graphs and tensors alive)."""

    def __init__(self, where: str, exc: BaseException) -> None:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        self.where = where
        self.exception = type(exc).__name__
        self.details = "".join(traceback.format_exception(exc))
        super().__init__(f"internal error of fxfuzz in the {where} check: {self.exception}: {first}")
