"""Pass modules in the current directory, importable in every fxfuzz process (torch-free: the
CLI calls it before ``--help``)."""

from __future__ import annotations

import os
import sys


def import_from_cwd() -> None:
    """Let pass specs name modules in the current directory (``mypass:fn``), as under pytest:
    the directory goes to the end of ``sys.path``, after the installed packages, so a file
    there named like one of them (``hypothesis.py``) shadows nothing. Called where an fxfuzz
    process starts: the CLI, and its workers and replay child, which run with ``python -P``
    so that the directory is not put first."""
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != cwd] + [cwd]
