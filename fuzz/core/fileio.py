"""Reading files someone else may have written, and writing files whole: the one place fxfuzz
opens a file it did not just create (``read_bounded``) and replaces one (``write_atomic``).

A baseline, a database entry, a corpus repro or a shard report may be anything a path can
name: a FIFO (opening it blocks until a writer comes, reading it never ends), a device
(``/dev/zero`` never ends), a link to either, or a sparse file of a GiB. ``read_bounded`` opens
without blocking, asks the opened file (not the path, which may be swapped meanwhile) what it
is, and refuses anything but a regular file within the caller's bound before reading a byte;
it then reads at most that bound, should the file grow while it is read.

A write that fails half way (a full disk, a folder gone read-only) must not leave a
truncated file where a whole one is expected, or an empty database entry the next run takes
for a case: ``write_atomic`` writes a temporary file beside the target, flushes it to disk and
renames it over the target, and on failure removes the temporary file and names the target.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat

# What a read asks for at once past the size fstat gave (a file may grow while it is read).
_CHUNK = 1 << 16
# Prefix and suffix of the temporary files ``write_atomic`` writes: a reader of a folder fxfuzz
# writes into (a database's key folder) skips names of this form, half-written or left by a kill.
TEMP_PREFIX = "."
TEMP_SUFFIX = ".tmp"


class RefusedFile(OSError):
    """A file refused before any of it was read: not a regular file, or larger than the bound
    of what it should be. Its ``strerror`` says which, ``filename`` names it."""


def _kind(mode: int) -> str:
    kinds = [(stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")]  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "of another kind")


def size_text(n: int) -> str:
    """``n`` bytes for a message: in MiB when a whole number of them, else in bytes."""
    return f"{n >> 20} MiB" if n and n % (1 << 20) == 0 else f"{n} bytes"


def refusal(st: os.stat_result, max_bytes: int) -> str | None:
    """Why a file of status ``st`` is not read (not a regular file, or over ``max_bytes``), or
    None when it may be."""
    if not stat.S_ISREG(st.st_mode):
        return f"not a regular file ({_kind(st.st_mode)})"
    if st.st_size > max_bytes:
        return f"larger than {size_text(max_bytes)} ({st.st_size} bytes)"
    return None


def read_bounded(path: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (links followed), at most ``max_bytes`` of them.
    RefusedFile, before any byte is read, for anything else (a FIFO, a device, a directory, a
    socket) or for a file whose size is over the bound; RefusedFile too for one that grows past
    it while read. Other OSErrors as opening or reading raises them."""
    # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        problem = refusal(st, max_bytes)
        if problem is not None:
            raise RefusedFile(errno.EFBIG if stat.S_ISREG(st.st_mode) else errno.EINVAL, problem, path)
        data = bytearray()
        want = st.st_size + 1  # one more than fstat said: a file that grew shows it
        while len(data) <= max_bytes:
            chunk = os.read(fd, min(want, max_bytes + 1 - len(data)))
            if not chunk:
                return bytes(data)
            data += chunk
            want = _CHUNK
        raise RefusedFile(errno.EFBIG, f"grew past {size_text(max_bytes)} while read", path)
    finally:
        os.close(fd)


def write_atomic(path: str, data: str | bytes) -> None:
    """``path`` holding ``data`` whole, or as it was before: ``data`` is written to a new file
    in the same folder, flushed to disk and renamed over ``path``. Text is written as UTF-8,
    what UTF-8 cannot hold (a lone surrogate in quoted exception text) backslash-escaped. On
    failure the new file is removed and the OSError names ``path`` (the file that could not be
    written), never the temporary one."""
    raw = data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f"{TEMP_PREFIX}{name}.{secrets.token_hex(6)}{TEMP_SUFFIX}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except OSError as e:
        raise OSError(e.errno, e.strerror, path) from None
    try:
        try:
            view = memoryview(raw)
            while view:  # os.write may write less than asked (a disk filling up)
                view = view[os.write(fd, view) :]
            os.fsync(fd)  # a disk that fills only on flush fails here, not after the rename
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise OSError(e.errno, e.strerror, path) from None


def is_temporary(name: str) -> bool:
    """Whether the file name ``name`` is one of ``write_atomic``'s temporary files."""
    return name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)
