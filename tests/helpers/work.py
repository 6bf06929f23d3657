"""Bounds on the work a block of code does, for tests that prove a protection holds (a bomb
refused unbuilt, a large file read in linear time): the tests assert on function calls and
bytes allocated, which do not change with the machine's load, never on seconds.

``with bounded(calls=..., peak_bytes=...) as work:`` counts every call the block makes in its
thread, Python functions and built-ins alike (``sys.setprofile``'s ``call`` and ``c_call``
events), and how far the process's resident memory rose above where it was when the block
began, at its peak (Linux's high-water mark, reset on entry through ``/proc/self/clear_refs``):
what torch allocates for a tensor, or GMP for a huge integer, counts as much as Python's own
objects, and measuring it slows nothing. Past ``calls`` the
block is stopped at once by ``WorkExceeded``: a protection removed often means work without
end (a quadratic count over 100,000 ids, a tower of powers evaluated), and a test must fail
on it, not run for hours. Its peak is checked when the block ends. An exceeded bound is an
AssertionError when the block ends, whatever the code under test did with the interruption
(it may catch broad exceptions and call the refusal its own).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class WorkExceeded(BaseException):
    """Raised inside the block past its call bound: a BaseException, so that the code under
    test's ``except Exception`` does not take it for a refusal of its own."""


@dataclass
class Work:
    """What the block did: calls made, and its peak resident memory above the process's when
    it began, in bytes."""

    calls: int = 0
    peak_bytes: int = 0
    exceeded: bool = False


@contextmanager
def bounded(calls: int | None = None, peak_bytes: int | None = None) -> Iterator[Work]:
    """Count the block's calls and peak allocation; fail the test (AssertionError) when either
    passes its bound (None: measured, not bounded)."""
    work = Work()

    def count(frame: object, event: str, arg: object) -> None:
        if event == "call" or event == "c_call":
            work.calls += 1
            if calls is not None and work.calls > calls and not work.exceeded:
                work.exceeded = True
                raise WorkExceeded(f"more than {calls} calls")

    base = _resident(reset=True)
    previous = sys.getprofile()
    sys.setprofile(count)
    try:
        yield work
    except WorkExceeded:
        pass  # reported below, as one that the code under test swallowed is
    finally:
        sys.setprofile(previous)
        work.peak_bytes = max(0, _resident() - base)
    assert not work.exceeded, f"the block made more than {calls} calls"
    assert peak_bytes is None or work.peak_bytes <= peak_bytes, (
        f"the block allocated {work.peak_bytes} bytes at its peak, more than {peak_bytes}"
    )


def _resident(reset: bool = False) -> int:
    """The process's peak resident memory in bytes; with ``reset``, the peak is first set back
    to what is resident now ("5" to clear_refs), which is then what this returns."""
    if reset:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    with open("/proc/self/status") as fh:
        line = next(line for line in fh if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024
