"""Turn an exception raised by the pass into a bucketable finding."""

from __future__ import annotations

import os
import traceback

from fxfuzz.core.internal import OWN_DIRS
from fxfuzz.oracles.finding import Finding


def innermost_pass_frame(exc: BaseException) -> str:
    """``file:line:function`` of the innermost frame outside fxfuzz itself, with the path
    shortened to the part after site-packages, so buckets agree across machines."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not os.path.abspath(f.filename).startswith(OWN_DIRS)]
    if not frames:
        return "<unknown>"
    f = frames[-1]
    path = f.filename.split("site-packages" + os.sep)[-1]
    return f"{path}:{f.lineno}:{f.name}"


def crash_finding(exc: BaseException) -> Finding:
    """The ``crash/pass_raised`` finding for ``exc``: its type, first line and innermost
    frame outside fxfuzz."""
    return Finding(
        "crash",
        "pass_raised",
        f"the pass raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
        {"exception": type(exc).__name__, "frame": innermost_pass_frame(exc)},
    )
