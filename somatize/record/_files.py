"""How the record reads one of its files: the durable-file primitives
(``_base.files``: no link followed, regular files only, bounded reads,
never waiting on a FIFO), given a path and answering ``NotAFile`` naming it.

The rule kept here: anything that is not a regular file is ``NotAFile``,
which callers report as damage naming the file; a missing file is None (or
0 bytes) unless the caller says it must be there.

A file of a run (``<store>/runs/<run>/…``) is opened from the store's root
down, each folder below the root opened without following a link
(``files.open_regular`` of ``anchored(path)``): a check of ``runs/`` or a
run's folder made by path (an lstat) cannot be raced by swapping that
folder for a link before the open, and no byte outside the store is read
through one. A path that is not in a store (no marker above ``runs/``) is
opened in its folder, its last part not followed.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._base import files
from .._store.names import MARKER


class NotAFile(Exception):
    """The path is there but is not a regular file (a symlink, a FIFO, a folder…)."""


def _refused(path, why) -> NotAFile:
    return NotAFile(f"{path} is not a regular file ({why})")


def anchored(path) -> tuple[str, tuple[str, ...]]:
    """``(store root, parts below it)`` of a run's file or folder
    (``runs/<run>``, ``runs/<run>/<file>``, ``runs/<run>/series/<file>``):
    what ``files.open_regular`` and ``files.entries`` take. For a path in no
    store, its folder and its name. The highest match wins: a run named
    "runs" or "series", or a marker planted inside ``runs/``, moves no part
    above the root into ``parts``."""
    parts = Path(path).parts
    for depth in (4, 3, 2):
        if len(parts) > depth and parts[-depth] == "runs":
            root = os.path.join(*parts[:-depth])
            if os.path.lexists(os.path.join(root, MARKER)):
                return root, parts[-depth:]
    return os.path.dirname(path) or ".", (os.path.basename(path),)


def not_a_file(root, parts, refused) -> NotAFile:
    """``refused`` (a ``files.Refused`` met opening ``root/parts…``) as
    ``NotAFile`` naming the path: the folder on the way when it was one of
    those, else the file or folder itself."""
    if refused.part is not None:
        return NotAFile(f"{os.path.join(root, refused.part)} is {refused} (nothing is read through it)")
    return _refused(os.path.join(root, *parts), refused)


def _open_sized(path, missing_ok, at=None):
    root, parts = (None, (os.path.basename(path),)) if at is not None else anchored(path)
    try:
        if at is not None:
            return files.open_in(at, parts[0])
        return files.open_regular(root, parts)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise
    except files.Refused as e:
        raise (_refused(path, e) if e.part is None else not_a_file(root, parts, e)) from None
    except OSError as e:  # a folder where a file's folder belongs, say
        raise _refused(path, e.strerror) from None


def read_bytes(path, limit: int, start: int = 0, missing_ok: bool = True,
               at: int | None = None) -> bytes | None:
    """Bytes ``start``..``start + limit`` of the regular file at ``path``
    (opened from the store's root down: ``anchored``; or in the folder
    ``at``, a descriptor of the path's folder opened without following, as a
    listing holds one per run); None when it is missing and ``missing_ok``."""
    opened = _open_sized(path, missing_ok, at)
    if opened is None:
        return None
    fd, size = opened
    try:
        return files.pread_all(fd, limit, start, size)
    finally:
        os.close(fd)


def file_size(path) -> int:
    """Size of the regular file at ``path`` (0 when missing); ``NotAFile``
    for a symlink or anything else."""
    try:
        size = files.regular_size(path)
    except files.Refused as e:
        raise _refused(path, e) from None
    return 0 if size is None else size
