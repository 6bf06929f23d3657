"""Loading the user's code (a pass, an ``--op`` source) so that its ending the process is an
error of that code, never the end of fxfuzz.

Python code can end the interpreter as it is imported: ``sys.exit`` (``SystemExit``, any code),
``raise KeyboardInterrupt`` or ``os._exit``. Left alone, fxfuzz would end with that code's
status, without a word: 0 reads as green for a run that never ran. ``exits_refused`` turns the
first two into the loader's one-line error (exit status 2), while a Ctrl-C that really arrived
stays a ``KeyboardInterrupt``; ``os._exit`` cannot be caught, so ``first_exit`` runs the loading
once in a throwaway fork of the process first and tells which step ended it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType

# Ctrl-Cs that reached ``_record`` so far: a KeyboardInterrupt while their count grew was one.
_sigints = 0


def _record(signum: int, frame: FrameType | None) -> None:
    global _sigints
    _sigints += 1
    raise KeyboardInterrupt


class _Sigint:
    """While entered: whether a SIGINT arrived (it still raises KeyboardInterrupt), counted by
    ``_record``, put in place of Python's own Ctrl-C handler in the main thread (one entered
    outside leaves it there). Elsewhere no SIGINT raises one at all (another thread, or a
    handler of fxfuzz's own: ``fxfuzz.cli.interrupt``), so a KeyboardInterrupt there was raised
    by code."""

    def __init__(self) -> None:
        self._seen = _sigints
        self._old: object = None

    def __enter__(self) -> _Sigint:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._old = signal.signal(signal.SIGINT, _record)
        return self

    @property
    def arrived(self) -> bool:
        return _sigints > self._seen

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)  # type: ignore[arg-type]


@contextlib.contextmanager
def exits_refused(what: str, error: Callable[[str], Exception], when: str = "as it was loaded") -> Iterator[None]:
    """Around running ``what`` (the user's code; ``when``: loading it): a ``SystemExit`` it
    raises, or a ``KeyboardInterrupt`` it raises itself, becomes ``error(message)``, one line; a
    Ctrl-C arriving meanwhile stays a KeyboardInterrupt."""
    with _Sigint() as sigint:
        try:
            yield
        except SystemExit as e:
            raise error(f"{what} raised SystemExit({e.code!r}) {when}, which would end fxfuzz") from None
        except KeyboardInterrupt:
            if sigint.arrived:
                raise
            raise error(f"{what} raised KeyboardInterrupt {when}, which would end fxfuzz") from None


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"


def first_exit(steps: Sequence[tuple[str, Callable[[], object]]]) -> str | None:
    """Run ``steps`` (label, load) in order in a throwaway fork of this process: None when it
    got through all of them, whatever they raised (this process loads them again and reports
    that itself); else one line naming the step that ended the child and how (``os._exit``, a
    signal). The child writes nothing to this process's output. Without ``fork`` (not POSIX)
    it returns None."""
    if not steps or not hasattr(os, "fork"):
        return None
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(read_fd)
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # a Ctrl-C ends it with the command
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            for i, (_, load) in enumerate(steps):
                os.write(write_fd, f"{i}\n".encode())
                try:
                    load()
                except BaseException:  # noqa: BLE001  (what it raised is this process's to report)
                    pass
            os.write(write_fd, b"end\n")
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        with os.fdopen(read_fd) as fh:
            said = fh.read().split()
    except BaseException:  # a Ctrl-C meanwhile: the child goes too
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    _, status = os.waitpid(pid, 0)
    if said[-1:] == ["end"]:
        return None
    label = steps[int(said[-1])][0] if said else steps[0][0]
    return f"{label}: loading it ended the process (it {_how(status)}) before fxfuzz could run anything"
