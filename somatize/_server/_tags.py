"""A listing's tag (its ETag): what a page is made of, known from one stat
per run through a descriptor of the store's ``runs/`` (the names, the
identity of each run's summary.json), hashed with what else may change it
(running runs, the generation of counts of findings, the row's shape)."""

from __future__ import annotations

import contextlib
import os

import orjson
import xxhash

from .._store.names import run_names_in
from ..record import _runs

SHAPE = 3  # the shape of a row: part of every listing's tag (bump it when _browse's row changes)


@contextlib.contextmanager
def _runs_dir(root):
    """A descriptor of the store's ``runs/`` (not followed if a link), or
    None where there is none; the runs are reached through it, so each stat
    walks two names, not the whole path."""
    try:
        fd = os.open(os.path.join(root, "runs"), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # none yet, or not a folder of this store
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def page_of(root, offset, limit, match, known=frozenset()) -> tuple[list, list, list, list, frozenset]:
    """The store's run folders (all), the runs matching (only folders that
    hold a run, ``_runs.recorded``: what the listing shows, so what it
    counts), those of the page, the ``summary_key`` of each run of the page
    (``limit=None``: of every run matching, which is then the page), and
    the runs now known to hold a run. ``known``: those known before, not
    looked into again (a run stays one; one of the page found emptied since
    is dropped, one gone is forgotten): an unchanged poll of 10,000 runs
    stats the page's 1,000."""
    with _runs_dir(root) as fd:
        if fd is None:
            return [], [], [], [], frozenset()
        every = run_names_in(fd)
        names = every
        if match:
            low = match.lower()
            names = [n for n in every if low in n.lower()]
        new = {n for n in names if n not in known and (summary_key(fd, n) is not None or _runs.recorded(n, at=fd))}
        names = [n for n in names if n in known or n in new]
        page = names if limit is None else names[offset : offset + limit]
        keys = [summary_key(fd, n) for n in page]
        emptied = {n for n, k in zip(page, keys) if k is None and not _runs.recorded(n, at=fd)}
        if emptied:  # by hand, since it was known: rare
            names = [n for n in names if n not in emptied]
            kept = [(n, k) for n, k in zip(page, keys) if n not in emptied]
            page, keys = [n for n, _ in kept], [k for _, k in kept]
        if new or emptied or len(known) > len(every):  # else the same: no set of 10,000 made per poll
            known = frozenset(((known & set(every)) | new) - emptied)
        return every, names, page, keys, known


def recorded_in(root, run) -> bool:
    """Whether the folder ``runs/<run>`` of the store at ``root`` holds a run."""
    with _runs_dir(root) as fd:
        return fd is not None and _runs.recorded(run, at=fd)


def key_of(root, run):
    with _runs_dir(root) as fd:
        return None if fd is None else summary_key(fd, run)


def keys_of(root, runs) -> list:
    """``key_of`` of each of ``runs``, the runs folder opened once."""
    with _runs_dir(root) as fd:
        return [None] * len(runs) if fd is None else [summary_key(fd, n) for n in runs]


def summary_key(runs_fd: int, run: str):
    """The identity of a run's summary.json (None when it has none), which
    a flush changes (it renames a new one in)."""
    try:
        st = os.stat(f"{run}/{_runs.SUMMARY}", dir_fd=runs_fd, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def listing_tag(sid, offset, total, page, keys, running, counts) -> str:
    # orjson, not repr: a tenth of the cost for a page of 1,000 (names, ints)
    return xxhash.xxh3_128_hexdigest(orjson.dumps((sid, offset, total, page, keys, running, counts, SHAPE)))
