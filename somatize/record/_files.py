"""How the record reads one of its files by path: through the storage seam
(``_base/backend.py``: no link followed, regular files only, reads bounded
by the bytes present, never waiting on a FIFO), answering ``NotAFile``
naming the file.

The rule kept here: anything that is not a regular file is ``NotAFile``,
which callers report as damage naming the file; a missing file is None (or
0 bytes) unless the caller says it must be there.

A file of a run (``<store>/runs/<run>/…``) is opened from the store's root
down (``located``: the store's local backend and the parts below its root),
each folder below the root opened without following a link: a check of
``runs/`` or a run's folder made by path (an lstat) cannot be raced by
swapping that folder for a link before the open, and no byte outside the
store is read through one. A path that is not in a store (no marker above
``runs/``) is opened in its folder, its last part not followed.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._base import files
from .._base.backend import LocalBackend
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


def located(path) -> tuple[LocalBackend, tuple[str, ...]]:
    """The backend (local) and the parts below its root of a run's file or
    folder by its path (``anchored``)."""
    root, parts = anchored(path)
    return LocalBackend(root), parts


def not_a_file(path, refused) -> NotAFile:
    """``refused`` (a ``files.Refused`` met reading ``path``) as ``NotAFile``
    naming the path: the folder on the way when it is one of those, else
    ``path`` itself."""
    if refused.part is not None:
        return NotAFile(f"{refused.where} is {refused} (nothing is read through it)")
    return _refused(path, refused)


def read_bytes(path, limit: int, start: int = 0, missing_ok: bool = True, at=None, fs=None) -> bytes | None:
    """Bytes ``start``..``start + limit`` of the regular file at ``path``
    (opened from the store's root down: ``located``; or in ``at``, the
    path's folder held open by ``fs``, its backend, as a listing holds one
    per run); None when it is missing and ``missing_ok``."""
    if at is None:
        fs, parts = located(path)
    else:
        parts = (os.path.basename(path),)
    try:
        return fs.read_range(parts, limit, start, at)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise
    except files.Refused as e:
        raise not_a_file(path, e) from None
    except OSError as e:  # a folder where a file's folder belongs, say
        raise _refused(path, e.strerror) from None


def file_size(path) -> int:
    """Size of the regular file at ``path`` (0 when missing); ``NotAFile``
    for a symlink or anything else."""
    fs, parts = located(path)
    try:
        return fs.size(parts) or 0
    except files.Refused as e:
        raise not_a_file(path, e) from None
