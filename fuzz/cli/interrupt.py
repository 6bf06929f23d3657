"""Stopping a command early: SIGINT (Ctrl-C), SIGTERM and SIGHUP ask ``fxfuzz run``, ``gate``
and ``mutate`` to stop at the next example and still write everything for what ran; a second
signal abandons the run at once (``Abandoned``)."""

from __future__ import annotations

import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Abandoned(BaseException):
    """A second stop signal: the run ends now, without its report. A BaseException, so that
    neither the oracles nor Hypothesis take it for a failure of the pass."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def exit_status(signum: int) -> int:
    """The shell's status for a process ended by ``signum`` (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + signum


class StopSignals:
    """While entered, the stop signals are requests: the object is true-callable (``stop()``)
    once one arrived, which every campaign loop polls between examples. SIGHUP is left alone
    where it was ignored on entry (``nohup``)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        for s in STOP_SIGNALS:
            if s == signal.SIGHUP and signal.getsignal(s) == signal.SIG_IGN:
                continue
            self._old[s] = signal.signal(s, self._request)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)  # type: ignore[arg-type]

    def _request(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            raise Abandoned(signum)
        self.signum = signum

    def __call__(self) -> bool:
        return self.signum is not None


def verdict_status(failed: bool, signum: int | None) -> int:
    """1 when the run found something; else 0, or the signal's status for a run a signal cut
    short (a run stopped early is never green)."""
    if failed:
        return 1
    return exit_status(signum) if signum is not None else 0
