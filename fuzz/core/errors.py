"""The one hierarchy of user errors: bad input that the CLI prints as one line, exit status 2.

Library code raises these; only ``fxfuzz.cli`` prints them and exits.
"""

from __future__ import annotations


class FxfuzzError(ValueError):
    """Bad input from the user; the message names the problem in one line."""


class UsageError(FxfuzzError):
    """A bad command line, option value or path."""


class PassSpecError(FxfuzzError):
    """A pass spec that cannot be loaded."""


class SerializeError(FxfuzzError):
    """A saved case or repro file that cannot be read back."""


class KnownFileError(FxfuzzError):
    """A baseline of known findings that cannot be read."""


class ReportError(FxfuzzError):
    """A report folder that cannot be read, or report folders that cannot be merged."""


class UntrustedError(SerializeError):
    """A saved case that asks for code this run does not trust (an operator source it did not
    name, a call target outside the allowlist): it is not loaded, and is kept where it is."""
