"""A store's runs as one table kept between listings: ``runs()``, the
explorer and ``progress(where=)`` ask it, and a second listing of a store
whose runs did not change costs two ``stat`` calls a run (and answers a
query from the columns it made last time).

The rule kept here: a row is served from memory only when it is all its
summary's, and that summary.json is still the very file it was read from
and the run's log still holds the bytes that summary counts. Per run, a
listing asks, opening no file: ``runs/<run>/summary.json``'s identity
(device, inode, size, times: a new one renamed in, or one written in
place, is another) and ``runs/<run>/facts.log``'s kind and size (a log cut
in place is damage, listed at once). Any difference, and every run whose
row is not all its summary's (running: its lock is asked each time;
damaged; a live Recorder of this process), is listed as ``_runs`` lists
it, its folder opened below ``runs/`` following no link. ``runs/`` itself
is listed again (which entries, which are real folders) unless its
identity and times are those of the last listing; a run is named in it
only when that listing found a real folder. The two ``stat`` calls name
``<run>/…`` in ``runs/``: had the folder been swapped for a link between
the listing of ``runs/`` and them, what is served is the row read before
from the very same file (its identity says so), never anything read
through the link; the next listing sees the link.

A file's times move by the clock's tick, so that two writes within one
tick may leave the same times: nothing written less than ``_RECENT``
seconds before a listing is trusted by its times (such a run is read
again, ``runs/`` listed again), as git does with its index.

Bounds: at most ``KEPT_RUNS`` rows kept in all, the tables of at most
``KEPT_STORES`` stores (the last asked); a store with more runs is listed
each time as ``_runs`` lists it.
"""

from __future__ import annotations

import os
import stat
import threading
import time

from .._base import files
from .._base.forks import fork_safe
from .._store.names import is_run_name, store_root
from . import _runs
from ._summary import LOST

KEPT_RUNS = 50_000
KEPT_STORES = 4
_TABLES: dict = {}  # (store root, stats) -> Table, the last asked last
_LOCK = fork_safe(threading.Lock())
_SUMMARY = "/" + _runs.SUMMARY
_LOG = "/" + _runs.LOG
_RECENT = 2.0  # seconds: a folder's times closer to now than this may not yet tell one change from two


class Table:
    """The rows of a store's runs (``_columns.row``, in the listing's
    order), their ``Columns`` for a query and their DataFrame, each made
    once, when first asked. Nothing changes a table once made: a listing
    that finds a run changed makes a new one."""

    def __init__(self, rows, kept, entries=(), listed=None):
        self.rows = rows
        self._kept = kept  # run -> (summary's identity, its log_bytes, row, the two paths), rows served again
        self._entries = entries  # (name, a real folder) of each entry of runs/ with a run's name, sorted
        self._listed = listed  # runs/'s identity and times when entries were listed (None: list again)
        self._columns = None
        self._frame = None
        self._nested = None

    def columns(self):
        from ._arrays import Columns

        if self._columns is None:
            self._columns = Columns(self.rows)
        return self._columns

    def frame(self):
        """The DataFrame ``runs()`` makes of these rows (shared: copy it, its
        lists and dicts too, before handing it out, as ``runs()`` does; so
        the frame kept shares the rows' own, not copies of them)."""
        if self._frame is None:
            from ._queries import frame

            self._frame = frame(self.rows, nested=())
        return self._frame

    def nested(self) -> list[str]:
        """The columns holding a list or a dict (``_queries.nested_columns``):
        what a copy of the frame handed out must copy too."""
        from ._queries import nested_columns

        if self._nested is None:
            self._nested = nested_columns(self.rows)
        return self._nested


def _steady(row, ident) -> bool:
    """Whether ``row`` is all its summary's (``ident``: that summary.json's
    identity), so that it lists the same while that file and enough log are
    there. (A summary written a moment ago is not kept either: a file's times
    move by the clock's tick, and a second write within the same tick, of the
    same size, would leave the same identity.)"""
    state = row.get("state")
    return ident is not None and state in ("finished", "interrupted") and row.get("cause") != LOST


def table(store, stats) -> Table:
    """The table of the store's runs, each with columns ``stats`` of each
    summarised fact (``_columns.row``), read as ``_runs.summaries`` reads
    them; the one made last time when no run changed."""
    from . import _columns

    root = str(store_root(store))
    key = (root, stats)
    with _LOCK:
        before = _TABLES.get(key)
    kept = before._kept if before is not None else {}
    _runs.runs_dir(store_root(store))  # a runs/ that is a link or a file is damage, said so
    with _runs.LIVE_LOCK:
        live = dict(_runs.LIVE)
    where = os.path.join(root, "runs")
    if live:  # keyed by real path; the run folders are real folders (checked below)
        real = os.path.realpath(where)
        live = {os.path.basename(k): r for k, r in live.items() if os.path.dirname(k) == real}
    try:  # runs/ opened following no link: each run's name is looked up in it
        runs_fd = files.open_dir(root, ("runs",))
    except FileNotFoundError:
        return Table([], {})
    except (files.Refused, NotADirectoryError):
        _runs.runs_dir(store_root(store))  # raises, saying what runs/ is
        return Table([], {})
    rows: list = []
    now_kept: dict = {}
    same = before is not None
    earlier = None  # the rows of the table before, by run, once one is made again
    lstat, regular = os.stat, stat.S_ISREG
    try:
        folder = os.fstat(runs_fd)
        listed = (folder.st_dev, folder.st_ino, folder.st_mtime_ns, folder.st_ctime_ns)
        if before is not None:
            with _LOCK:  # the two as one listing left them (another thread may be setting them)
                was, entries = before._listed, before._entries
        if before is None or was != listed:  # else no entry of runs/ came, went, or was renamed over since
            with os.scandir(runs_fd) as it:  # a run that is a link or a file lists, as damaged
                entries = sorted((e.name, e.is_dir(follow_symlinks=False)) for e in it
                                 if e.name in kept or is_run_name(e.name))
        if time.time_ns() - max(folder.st_mtime_ns, folder.st_ctime_ns) <= _RECENT * 1e9:
            listed = None  # changed a moment ago: another change may yet leave the same times
        for name, is_dir in entries:
            got = kept.get(name)
            if got is not None and is_dir and name not in live:
                try:
                    st = lstat(got[3], dir_fd=runs_fd, follow_symlinks=False)
                    log = lstat(got[4], dir_fd=runs_fd, follow_symlinks=False)
                except OSError:
                    pass
                else:
                    if regular(st.st_mode) and regular(log.st_mode) and log.st_size >= got[1] and got[0] == (
                            st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns):
                        rows.append(got[2])
                        now_kept[name] = got
                        continue
            summary, ident = _runs._row(name, os.path.join(where, name), runs_fd, live)
            if summary is None:
                continue
            row = _columns.row(summary, stats)
            if same:  # a row made again as it was (a damaged run's, say) leaves the table as it was
                if earlier is None:
                    earlier = {r["run"]: r for r in before.rows}
                same = earlier.get(name) == row
            rows.append(row)
            if _steady(summary, ident) and time.time_ns() - max(ident[3], ident[4]) > _RECENT * 1e9:
                now_kept[name] = (ident, summary.get("log_bytes") or 0, row, name + _SUMMARY, name + _LOG)
    finally:
        os.close(runs_fd)
    if same and len(rows) == len(before.rows):
        with _LOCK:  # runs/ as listed now with its entries (a folder that is no run yet among them)
            before._listed, before._entries = listed, entries
            before._kept = now_kept  # rows read again as they were, now old enough to keep
            if _TABLES.get(key) is before:  # the last asked now: the last a fifth store pushes out
                _TABLES[key] = _TABLES.pop(key)
        return before  # no run changed, none came or went: its columns and frame still hold
    made = Table(rows, now_kept, entries, listed)
    with _LOCK:
        _TABLES.pop(key, None)
        if len(rows) <= KEPT_RUNS:  # every row, kept or not yet: a listing that read them all may keep them next
            _TABLES[key] = made
        while len(_TABLES) > KEPT_STORES or sum(len(t.rows) for t in _TABLES.values()) > KEPT_RUNS:
            del _TABLES[next(iter(_TABLES))]  # the one asked longest ago
    return made
