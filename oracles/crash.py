"""Turn an exception raised by the pass into a bucketable finding."""

from __future__ import annotations

import os
import traceback
from typing import Any

from fxfuzz.core.internal import first_line, package_part
from fxfuzz.oracles.finding import Finding


def raise_site(exc: BaseException) -> dict[str, str]:
    """Where ``exc`` was raised: ``frame``, the innermost frame outside fxfuzz itself as
    ``file:line:function`` (what a reader follows), and ``line``, that line's source text
    (empty where there is none), with the path shortened to the part after site-packages, so
    buckets agree across machines."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if package_part(f.filename) is None]
    if not frames:
        return {"frame": "<unknown>", "line": ""}
    f = frames[-1]
    path = f.filename.split("site-packages" + os.sep)[-1]
    return {"frame": f"{path}:{f.lineno}:{f.name}", "line": (f.line or "").strip()}


def site_key(details: dict[str, Any]) -> str:
    """What a crash is bucketed by: the frame's file and function and the raising line's text,
    not its number, so a known id outlives edits elsewhere in the file (torch 2.11 raised
    ``Module.__getattr__``'s AttributeError at line 1968, 2.13 at 1967: one defect, two ids).
    A frame recorded without its line's text (``<native>``, ``<unknown>``) keys as it is."""
    frame = str(details.get("frame"))
    parts = frame.rsplit(":", 2)
    if "line" not in details or len(parts) != 3 or not parts[1].isdigit():
        return frame
    path, _, function = parts
    return f"{path}:{function}:{details['line']}"


def crash_finding(exc: BaseException) -> Finding:
    """The ``crash/pass_raised`` finding for ``exc``: its type, first line and where it was raised."""
    return Finding(
        "crash",
        "pass_raised",
        f"the pass raised {type(exc).__name__}: {first_line(exc)}",
        {"exception": type(exc).__name__, **raise_site(exc)},
    )
