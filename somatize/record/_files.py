"""How the record reads one of its files: the store's primitives
(``_store.files``: no link followed, regular files only, bounded reads,
never waiting on a FIFO), given a path and answering ``NotAFile`` naming it.

The rule kept here: anything that is not a regular file is ``NotAFile``,
which callers report as damage naming the file; a missing file is None (or
0 bytes) unless the caller says it must be there. The folder holding the
file is reached as given: the record checks that ``runs/`` and a run's
folder are real folders before it reads them.
"""

from __future__ import annotations

import os

from .._store import files as _store_files


class NotAFile(Exception):
    """The path is there but is not a regular file (a symlink, a FIFO, a folder…)."""


def _refused(path, why) -> NotAFile:
    return NotAFile(f"{path} is not a regular file ({why})")


def _open_sized(path, missing_ok):
    try:
        return _store_files.open_file(path)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise
    except _store_files.Refused as e:
        raise _refused(path, e) from None
    except OSError as e:  # a folder where a file's folder belongs, say
        raise _refused(path, e.strerror) from None


def open_regular(path, missing_ok: bool = True) -> int | None:
    """A read-only fd of the regular file at ``path`` (``_store.files.open_file``);
    None when missing and ``missing_ok``; ``NotAFile`` for anything else."""
    opened = _open_sized(path, missing_ok)
    return None if opened is None else opened[0]


def read_bytes(path, limit: int, start: int = 0, missing_ok: bool = True) -> bytes | None:
    """Bytes ``start``..``start + limit`` of the regular file at ``path``
    (``open_regular``); None when it is missing and ``missing_ok``."""
    opened = _open_sized(path, missing_ok)
    if opened is None:
        return None
    fd, size = opened
    try:
        return _store_files.pread_all(fd, limit, start, size)
    finally:
        os.close(fd)


def file_size(path) -> int:
    """Size of the regular file at ``path`` (0 when missing); ``NotAFile``
    for a symlink or anything else."""
    try:
        size = _store_files.regular_size(path)
    except _store_files.Refused as e:
        raise _refused(path, e) from None
    return 0 if size is None else size
