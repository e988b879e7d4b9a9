"""A lock held by one open file, never by a process: the one way the record
takes a run's lock and asks whether someone holds it.

The rule kept here: a lock is let go only when the descriptor that took it
(and every copy of that descriptor) is closed. POSIX record locks
(``lockf``, ``F_SETLK``) belong to the process instead, and the kernel drops
them when the process closes *any* descriptor of the file: a listing in a
thread of the writer's own process that opened the lock file to ask about
it, and closed it, dropped the writer's lock, and another process then took
the run over. With the locks here a probe from the writer's own process
sees the lock held, as any other process does, and closing the probe drops
nothing.

On Linux these are open file description locks (``F_OFD_SETLK``), which
also conflict with the POSIX locks of older writers; a probe asks with
``F_OFD_GETLK``, which takes nothing, so a probe never stands in a writer's
way and a fork during one leaves no lock behind in the child. Elsewhere
they are ``flock(2)`` locks, and a probe takes a shared lock and gives it
back at once.

A forked child inherits the descriptor, and with it a share of the lock:
whoever forks while holding one closes the child's copy (the record does,
``_flusher``), or the lock outlives the parent.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct

# struct flock: l_type, l_whence (short each), l_start, l_len (off_t), l_pid
# (0 for an open file description lock), padded to its C size.
_FLOCK = "hhqqi4x"
OFD = hasattr(fcntl, "F_OFD_SETLK") and hasattr(fcntl, "F_OFD_GETLK")
_BUSY = (errno.EACCES, errno.EAGAIN, errno.EWOULDBLOCK)


def _flock(kind: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, 0, 0, 0)


def take(fd: int, ofd: bool = OFD) -> bool:
    """Take the exclusive lock of the file open on ``fd`` (opened to write),
    without waiting: True when ``fd`` now holds it, False when another open
    file holds a lock on it (in this process or another). Held until ``fd``
    (and every copy of it) is closed."""
    try:
        if ofd:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _flock(fcntl.F_WRLCK))
        else:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in _BUSY:
            return False
        raise
    return True


def held(fd: int, ofd: bool = OFD) -> bool:
    """Whether another open file, in this process or another, holds the
    exclusive lock of the file open on ``fd`` (read-only is enough). Takes
    nothing that outlives the call."""
    if ofd:
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _flock(fcntl.F_RDLCK))
        return struct.unpack(_FLOCK, answer)[0] != fcntl.F_UNLCK
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in _BUSY:
            return True
        raise
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False
