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
    opened = _open_sized(path, missing_ok)
    return None if opened is None else opened[0]


def _open_sized(path, missing_ok):
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise
    except OSError as e:  # ELOOP: a symlink; ENXIO: a socket, say
        raise NotAFile(f"{path} is not a regular file ({e.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotAFile(f"{path} is not a regular file")
    return fd, st.st_size


def pread_all(fd, limit: int, start: int = 0, size: int | None = None) -> bytes:
    """At most ``limit`` bytes from ``start`` (fewer at the end of the file,
    which is at ``size`` when known: then one read does)."""
    chunks = []
    want, offset = max(0, limit), start
    if size is not None:
        want = max(0, min(want, size - start))
        if want:  # the usual case: one read returns it all
            chunk = os.pread(fd, want, offset)
            if len(chunk) == want:
                return chunk
            chunks.append(chunk)
            want -= len(chunk)
            offset += len(chunk)
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
    opened = _open_sized(path, missing_ok)
    if opened is None:
        return None
    fd, size = opened
    try:
        return pread_all(fd, limit, start, size)
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




def remove_junk(path):
    """Remove what lies at ``path`` (a stale temp file, a symlink, a FIFO), not a folder."""
    try:
        os.unlink(path)
    except OSError:
        pass  # a folder, or gone: the open that follows says what is wrong
