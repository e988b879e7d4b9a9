"""How the record reads one of its files: the store's primitives
(``_store.files``: no link followed, regular files only, bounded reads,
never waiting on a FIFO), given a path and answering ``NotAFile`` naming it.

The rule kept here: anything that is not a regular file is ``NotAFile``,
which callers report as damage naming the file; a missing file is None (or
0 bytes) unless the caller says it must be there.

A file of a run (``<store>/runs/<run>/…``) is opened from the store's root
down, each folder below the root opened without following a link
(``_store.files.open_regular``): a check of ``runs/`` or a run's folder made
by path (an lstat) cannot be raced by swapping that folder for a link
before the open, and no byte outside the store is read through one. A path
that is not in a store (no marker above ``runs/``) is opened as given, its
last part not followed.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._store import files as _store_files
from .._store.names import MARKER


class NotAFile(Exception):
    """The path is there but is not a regular file (a symlink, a FIFO, a folder…)."""


def _refused(path, why) -> NotAFile:
    return NotAFile(f"{path} is not a regular file ({why})")


def _anchored(path):
    """``(store root, parts below it)`` of a run's file or folder
    (``runs/<run>``, ``runs/<run>/<file>``, ``runs/<run>/series/<file>``), or
    None for a path in no store. The highest match wins: a run named "runs"
    or "series", or a marker planted inside ``runs/``, moves no part above the
    root into ``parts``."""
    parts = Path(path).parts
    for depth in (4, 3, 2):
        if len(parts) > depth and parts[-depth] == "runs":
            root = os.path.join(*parts[:-depth])
            if os.path.lexists(os.path.join(root, MARKER)):
                return root, parts[-depth:]
    return None


def _open_sized(path, missing_ok, at=None):
    anchored = None if at is not None else _anchored(path)
    try:
        if at is not None:
            return _store_files.open_in(at, os.path.basename(path))
        if anchored is None:
            return _store_files.open_file(path)
        return _store_files.open_regular(*anchored)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise
    except _store_files.Refused as e:
        if e.part is not None:  # a folder on the way: name it, not the file
            raise _on_the_way(anchored[0], e) from None
        raise _refused(path, e) from None
    except OSError as e:  # a folder where a file's folder belongs, say
        raise _refused(path, e.strerror) from None


def _on_the_way(root, refused) -> NotAFile:
    where = os.path.join(root, refused.part)
    return NotAFile(f"{where} is {refused} (nothing is read through it)")


def entries(folder) -> list[tuple[str, str]]:
    """``_store.files.entries`` of a run's folder or of its ``series/``,
    reached from the store's root as a file is (``_anchored``); ``NotAFile``
    naming the folder that is a link (or no folder)."""
    anchored = _anchored(folder)
    if anchored is None:
        folder = Path(folder)
        anchored = (folder.parent, (folder.name,))
    try:
        return _store_files.entries(*anchored)
    except _store_files.Refused as e:
        raise _on_the_way(anchored[0], e) from None


def open_regular(path, missing_ok: bool = True, at: int | None = None) -> int | None:
    """A read-only fd of the regular file at ``path``; None when missing and
    ``missing_ok``; ``NotAFile`` for anything else. ``at``: a descriptor of
    the path's folder, opened without following (a listing holds one per
    run), the file is then opened in it."""
    opened = _open_sized(path, missing_ok, at)
    return None if opened is None else opened[0]


def read_bytes(path, limit: int, start: int = 0, missing_ok: bool = True,
               at: int | None = None) -> bytes | None:
    """Bytes ``start``..``start + limit`` of the regular file at ``path``
    (``open_regular``); None when it is missing and ``missing_ok``."""
    opened = _open_sized(path, missing_ok, at)
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
