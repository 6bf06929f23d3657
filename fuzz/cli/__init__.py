"""The ``fxfuzz`` command line (``main``); one module per sub-command."""

from fxfuzz.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
