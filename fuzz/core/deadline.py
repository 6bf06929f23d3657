"""Time limits inside one process, by ``SIGALRM``: a saved example must load within the time an
example may take (``--example-timeout``), whatever it holds."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from fxfuzz.core.errors import SerializeError

T = TypeVar("T")


class Overdue(BaseException):
    """Raised by ``alarm`` when its time is up: a BaseException, so that no ``except Exception``
    of the code it interrupts holds it."""


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise ``Overdue`` in the body once ``seconds`` (wall clock) have passed. Signals reach
    the main thread only: elsewhere the body runs without a limit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum: int, frame: object) -> None:
        raise Overdue

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def load_within(seconds: float, load: Callable[..., T], *args: Any) -> T:
    """``load(*args)``, or SerializeError if it takes more than ``seconds``."""
    try:
        with alarm(seconds):
            return load(*args)
    except Overdue:
        raise SerializeError(f"did not load within {seconds:g}s (--example-timeout)") from None
