"""The one way the record reads a file: hostile by default.

The rule kept here: only a regular file is read, opened without following a
symlink (O_NOFOLLOW) and without waiting on a FIFO or a device (O_NONBLOCK,
then fstat must say a regular file), and never more bytes than the caller
allows. Anything else is ``NotAFile``, which callers report as damage naming
the file. No numpy here: ``somatize runs`` reads summaries through it.
"""

from __future__ import annotations

import os
import stat

_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class NotAFile(Exception):
    """The path is there but is not a regular file (a symlink, a FIFO, a folder…)."""


def open_regular(path, missing_ok: bool = True) -> int | None:
    """A read-only fd of the regular file at ``path``: never follows a symlink
    (O_NOFOLLOW), never waits on a FIFO or a device (O_NONBLOCK, then fstat
    must say a regular file). None when missing and ``missing_ok``; raises
    ``NotAFile`` for anything that is not a regular file."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise
    except OSError as e:  # ELOOP: a symlink; ENXIO: a socket, say
        raise NotAFile(f"{path} is not a regular file ({e.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotAFile(f"{path} is not a regular file")
    return fd


def pread_all(fd, limit: int, start: int = 0) -> bytes:
    """At most ``limit`` bytes from ``start`` (fewer at the end of the file)."""
    chunks = []
    want, offset = max(0, limit), start
    while want:
        chunk = os.pread(fd, min(want, 1 << 30), offset)
        if not chunk:
            break
        chunks.append(chunk)
        want -= len(chunk)
        offset += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_bytes(path, limit: int, start: int = 0, missing_ok: bool = True) -> bytes | None:
    """Bytes ``start``..``start + limit`` of the regular file at ``path``
    (``open_regular``); None when it is missing and ``missing_ok``."""
    fd = open_regular(path, missing_ok)
    if fd is None:
        return None
    try:
        return pread_all(fd, limit, start)
    finally:
        os.close(fd)


def file_size(path) -> int:
    """Size of the regular file at ``path`` (0 when missing); ``NotAFile``
    for a symlink or anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if not stat.S_ISREG(st.st_mode):
        raise NotAFile(f"{path} is not a regular file")
    return st.st_size


def is_real_dir(path) -> bool:
    """A folder, and not a symlink to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


