"""The warm interpreter that campaign workers, ``fxfuzz repro``'s replay child and ``fxfuzz
bench``'s workers fork from: ``multiprocessing``'s forkserver, one per fxfuzz process, which
imports the worker's modules (``fxfuzz.campaign.worker.PRELOAD``) and runs nothing else.
Torch-free, so the CLI can start it before it imports torch itself: the forkserver's imports
(seconds of CPU) then run beside the CLI's own instead of after them.

What the forkserver inherits at its start it keeps for every worker: the stop signals blocked
(it lives in the CLI's process group and must outlive a signal that only asks the campaign to
stop: the workers' exit statuses go through it), and ``python -P``, so that its imports do not
come from the current directory (``fxfuzz.core.cwd``). Where there is no forkserver (not
POSIX), ``spawn`` starts a fresh interpreter instead."""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing import forkserver, process, reduction, util
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import Any

from fxfuzz.campaign import worker
from fxfuzz.core.cwd import import_from_cwd

# Whether workers can fork from a warm interpreter (POSIX).
AVAILABLE = "forkserver" in multiprocessing.get_all_start_methods()

# Held while the forkserver starts or forks a worker: what that does to the process's
# environment must not overlap (the gate starts workers from two threads at once).
_LOCK = threading.Lock()
# What a terminal or ``timeout`` sends a whole process group, the forkserver's among them.
_GROUP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


# The most bytes of an AF_UNIX socket path, less what multiprocessing adds to its folder's
# ("/pymp-XXXXXXXX/listener-XXXXXXXX").
_SOCKET_DIR_MAX = 107 - 32


def _socket_folder() -> None:
    """Make multiprocessing's folder for this process's sockets (made once per process, in the
    temporary directory) where the forkserver's socket path fits: under a TMPDIR too long for
    AF_UNIX, in the system's own temporary directory instead, where the forkserver would
    otherwise fail to start ("AF_UNIX path too long")."""
    if process.current_process()._config.get("tempdir") is not None:  # type: ignore[attr-defined]
        return  # made already: multiprocessing keeps it for the process's life
    if len(tempfile.gettempdir()) <= _SOCKET_DIR_MAX or not os.path.isdir("/tmp"):
        return
    saved = tempfile.tempdir
    tempfile.tempdir = "/tmp"
    try:
        util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


@contextmanager
def starting() -> Iterator[tuple[dict[str, str], frozenset[int]]]:
    """Around a start of the forkserver, or a fork that may start it: this process's
    environment and signal mask as they were (what each worker is given back), while the
    forkserver would start in the state above."""
    with _LOCK:
        if AVAILABLE:
            _socket_folder()
            multiprocessing.get_context("forkserver").set_forkserver_preload(list(worker.PRELOAD))
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _GROUP_SIGNALS)
        environ = dict(os.environ)
        os.environ["PYTHONSAFEPATH"] = "1"
        try:
            yield environ, frozenset(mask)
        finally:
            if "PYTHONSAFEPATH" in environ:
                os.environ["PYTHONSAFEPATH"] = environ["PYTHONSAFEPATH"]
            else:
                del os.environ["PYTHONSAFEPATH"]
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def context() -> ForkServerContext | SpawnContext:
    """Where a child forks from: the warm interpreter, or else a fresh one of its own."""
    return multiprocessing.get_context("forkserver") if AVAILABLE else multiprocessing.get_context("spawn")


class Fd:
    """A file descriptor of this process handed to a child: duplicated into it as it starts (a
    fork of the warm interpreter shares no descriptors with this process)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return Fd._received, (reduction.DupFd(self.fd),)

    @staticmethod
    def _received(dup: Any) -> Fd:
        return Fd(dup.detach())


def spawn(target: Callable[..., None], args: tuple[Any, ...], name: str) -> BaseProcess:
    """``target(*args)`` started in a child of the warm interpreter, which first takes this
    process's environment, directory, signal mask, stdout and stderr, with the current
    directory last on ``sys.path``, as a fresh ``python -P`` child would. It stays in this
    process's group, where a Ctrl-C at the terminal reaches it (a campaign worker takes a
    session of its own instead). ``target`` and ``args`` must pickle."""
    with starting() as (environ, mask):
        around = worker.Surroundings(environ, os.getcwd(), mask, None)
        process = context().Process(target=_adopted, args=(target, args, around, Fd(1), Fd(2)), name=name)
        process.start()
    return process


def _adopted(
    target: Callable[..., None], args: tuple[Any, ...], around: worker.Surroundings, stdout: Fd, stderr: Fd
) -> None:
    worker.adopt(around, stdout.fd, stderr.fd)
    for fd in (stdout.fd, stderr.fd):
        os.close(fd)
    import_from_cwd()
    target(*args)


def start() -> bool:
    """Start the forkserver now unless it runs already; whether this call started it. It does
    not wait for the forkserver's imports: a fork asked for meanwhile waits for them."""
    server: Any = forkserver._forkserver  # private: multiprocessing keeps no public handle
    with starting():
        running = server._forkserver_pid
        server.ensure_running()  # a no-op while the one running lives
        return server._forkserver_pid != running


def stop() -> None:
    """End the forkserver this process started, at once: a command that failed before it forked
    a worker leaves no process behind, still importing torch."""
    server: Any = forkserver._forkserver  # private: multiprocessing keeps no public handle
    with _LOCK:
        if server._forkserver_pid is None:
            return
        try:
            os.kill(server._forkserver_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server._stop_unlocked()
