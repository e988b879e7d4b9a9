"""A store's runs as one table kept between listings: the one table every
listing answers from. ``runs()``, ``somatize runs``, the explorer and
``progress(where=)`` ask it whole (``table``), as the run browser does for
a query or an order of its own; the browser's listing by name asks it a
page at a time (``names``, then ``current`` of the page's runs). A second
listing of a store whose runs did not change costs two ``stat`` calls a
run (and answers a query from the columns it made last time).

The rule kept here: a run's row is served from memory only when it is all
its summary's, and that summary.json is still the very file it was read
from and the run's log still holds the bytes that summary counts. Per run,
a listing asks, opening no file: ``runs/<run>/summary.json``'s identity
(device, inode, size, times: a new one renamed in, or one written in
place, is another) and ``runs/<run>/facts.log``'s kind and size (a log cut
in place is damage, listed at once). Any difference, and every run whose
row is not all its files' (running: its lock is asked each time; a live
Recorder of this process), is read as ``_runs`` reads it,
its folder opened below ``runs/`` following no link. ``runs/`` itself is
listed again (which entries, which are real folders) unless its identity
and times are those of the last listing; a run is named in it only when
that listing found a real folder. The two ``stat`` calls name ``<run>/…``
in ``runs/``: had the folder been swapped for a link between the listing of
``runs/`` and them, what is served is the row read before from the very
same file (its identity says so), never anything read through the link;
the next listing sees the link.

A page asks less: ``names`` looks into a folder of ``runs/`` only when it
is not known to hold a run yet (a folder emptied by hand stays named until
a page holding it is read), and ``current`` asks only the page's runs.
What a page reads is kept as a whole listing keeps it.

A file's times move by the clock's tick, so that two writes within one
tick may leave the same times: nothing written less than ``_RECENT``
seconds before a listing is trusted by its times (such a run is read
again, ``runs/`` listed again), as git does with its index.

Bounds: what is kept of at most ``KEPT_RUNS`` runs in all, of at most
``KEPT_STORES`` stores (the last asked); a store with more runs is read
each time as ``_runs`` reads it. A caller that lists many stores again and
again (the run browser, every store it shows at each poll) holds their
tables itself (``kept_table``) and hands each back (``held=``) where these
bounds let it go.
"""

from __future__ import annotations

import itertools
import os
import stat
import threading
import time

from .._base import files
from .._base.forks import fork_safe
from .._store.names import is_run_name, store_root
from . import _columns, _runs
from ._local import local
from ._summary import LOST

KEPT_RUNS = 50_000
KEPT_STORES = 4
_TABLES: dict = {}  # (store root, stats) -> Table, the last asked last
_LOCK = fork_safe(threading.Lock())
_SUMMARY = "/" + _runs.SUMMARY
_LOG = "/" + _runs.LOG
_RECENT = 2.0  # seconds: a folder's times closer to now than this may not yet tell one change from two
_NUMBERS = itertools.count(1)


class Listed:
    """What a table holds of one run: ``row`` (its columns,
    ``_columns.row``), ``summary`` (what the row was made of, as ``_runs``
    reads it: its state resolved; shared, never to be changed), ``ident``
    (that summary.json's identity; None for a row that is no file's:
    damaged, or a live Recorder's), ``folder`` (whether ``runs/<name>`` is
    a real folder: a link or a file of a run's name lists, as damaged) and
    ``kept`` (whether it may be served again while its files' identities say
    it is the same)."""

    __slots__ = ("name", "row", "summary", "ident", "folder", "kept", "log_bytes", "_made")

    def __init__(self, name, row, summary, ident, folder, kept):
        self.name, self.row, self.summary, self.ident = name, row, summary, ident
        self.folder, self.kept = folder, kept
        self.log_bytes = summary.get("log_bytes") or 0
        self._made = None

    def made(self, make):
        """``make(self)``, made once: what a caller shows of the run (the run
        browser's row) lives as long as this, and is made again only when
        the run is read again."""
        got = self._made
        if got is None or got[0] is not make:
            got = (make, make(self))
            self._made = got
        return got[1]


class Table:
    """The runs of a store as a whole listing read them: ``listed`` (each
    run's ``Listed``, in the listing's order), ``rows`` (their rows), their
    ``Columns`` for a query and their DataFrame, each made once, when first
    asked; ``number`` tells one table from another (a new one is made when a
    listing finds a run changed). Nothing changes ``listed`` once made; what
    a later listing needs to list again cheaply (``runs/``'s entries, the
    runs known, the rows that may be served again) is kept beside it. A
    table that only pages have read (``whole`` false) has no rows yet."""

    def __init__(self, listed, whole=True, entries=(), at=None, runs=None):
        self.listed = listed
        self.rows = [got.row for got in listed]
        self.whole = whole
        self.number = next(_NUMBERS)
        self._entries = entries  # (name, a real folder) of each entry of runs/ with a run's name, sorted
        self._at = at  # runs/'s identity and times when entries were listed (None: list again)
        self._kept = {got.name: got for got in listed if got.kept}  # run -> Listed served again
        self._runs = frozenset(got.name for got in listed) if runs is None else runs  # the runs known
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
            from ._frame import frame

            self._frame = frame(self.rows, nested=())
        return self._frame

    def nested(self) -> list[str]:
        """The columns holding a list or a dict (``_frame.nested_columns``):
        what a copy of the frame handed out must copy too."""
        from ._frame import nested_columns

        if self._nested is None:
            self._nested = nested_columns(self.rows)
        return self._nested


def _steady(row, ident) -> bool:
    """Whether ``row`` is all its files' (``ident``: its summary.json's
    identity), so that it lists the same while that file and enough log are
    there: a run finished or interrupted, or damaged by a summary.json that
    does not read (it reads the same while it is the same file). (A summary written a moment ago is not kept either:
    a file's times move by the clock's tick, and a second write within the
    same tick, of the same size, would leave the same identity.)"""
    state = row.get("state")
    return ident is not None and state in ("finished", "interrupted", "damaged") and row.get("cause") != LOST


def _same(a: Listed, b: Listed) -> bool:
    return a is b or (a.name == b.name and a.folder == b.folder and a.ident == b.ident and a.row == b.row)


def _opened(store):
    """``(root, a descriptor of its runs/)``, the descriptor None where the
    store has no runs/ yet; ``DamagedError`` where runs/ is a link or a
    file (nothing is read through it)."""
    path = store_root(local(store))  # a bucket's: its mirror, brought up to it
    _runs.runs_dir(path)  # a runs/ that is a link or a file is damage, said so
    try:  # runs/ opened following no link: each run's name is looked up in it
        return str(path), files.open_dir(str(path), ("runs",))
    except FileNotFoundError:
        return str(path), None
    except (files.Refused, NotADirectoryError):
        _runs.runs_dir(path)  # raises, saying what runs/ is
        return str(path), None


def _live(root) -> dict:
    """The live Recorders of this process writing runs of the store, by run."""
    with _runs.LIVE_LOCK:
        live = dict(_runs.LIVE)
    if not live:
        return live
    real = os.path.realpath(os.path.join(root, "runs"))  # keyed by real path; the run folders are real folders
    return {os.path.basename(k): r for k, r in live.items() if os.path.dirname(k) == real}


def _entries(runs_fd, before) -> tuple[list, tuple | None]:
    """``(entries, at)``: the entries of runs/ with a run's name, each
    ``(name, a real folder)``, listed again unless runs/'s identity and
    times are those ``before`` listed them at; ``at``: those, or None when
    they changed a moment ago (another change may yet leave the same)."""
    folder = os.fstat(runs_fd)
    at = (folder.st_dev, folder.st_ino, folder.st_mtime_ns, folder.st_ctime_ns)
    entries = None
    if before is not None:
        with _LOCK:  # the two as one listing left them (another thread may be setting them)
            if before._at == at:
                entries = before._entries
    if entries is None:  # an entry of runs/ came, went, or was renamed over since
        kept = before._kept if before is not None else {}
        with os.scandir(runs_fd) as it:  # a run that is a link or a file lists, as damaged
            entries = sorted((e.name, e.is_dir(follow_symlinks=False)) for e in it
                             if e.name in kept or is_run_name(e.name))
    if time.time_ns() - max(folder.st_mtime_ns, folder.st_ctime_ns) <= _RECENT * 1e9:
        at = None
    return entries, at


def _served(got: Listed, runs_fd) -> bool:
    """Whether ``got`` may be served again: its summary.json the very file it
    was read from, its log a regular file holding the bytes that counts."""
    try:
        st = os.stat(got.name + _SUMMARY, dir_fd=runs_fd, follow_symlinks=False)
        log = os.stat(got.name + _LOG, dir_fd=runs_fd, follow_symlinks=False)
    except OSError:
        return False
    return (stat.S_ISREG(st.st_mode) and stat.S_ISREG(log.st_mode) and log.st_size >= got.log_bytes
            and got.ident == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))


def _read(name, folder, root, runs_fd, live, stats) -> Listed | None:
    """Run ``name`` read as ``_runs`` reads it (None for a folder that holds
    no run); kept when steady and written long enough ago."""
    summary, ident = _runs._row(name, os.path.join(root, "runs", name), runs_fd, live)
    if summary is None:
        return None
    kept = _steady(summary, ident) and time.time_ns() - max(ident[3], ident[4]) > _RECENT * 1e9
    return Listed(name, _columns.row(summary, stats), summary, ident, folder, kept)


def _keep(key, made: Table) -> None:
    """``made`` kept for ``key`` (the last asked), within the bounds."""
    with _LOCK:
        _TABLES.pop(key, None)
        if len(made._runs) <= KEPT_RUNS:  # every run, kept or not yet: a listing that read them all may keep them
            _TABLES[key] = made
        while len(_TABLES) > KEPT_STORES or sum(len(t._runs) for t in _TABLES.values()) > KEPT_RUNS:
            del _TABLES[next(iter(_TABLES))]  # the one asked longest ago


def _asked(key, before: Table) -> None:
    """``before`` (still kept for ``key``) is the last asked now: the last a fifth store pushes out."""
    if _TABLES.get(key) is before:
        _TABLES[key] = _TABLES.pop(key)


def _before(key, held) -> Table | None:
    """The table kept for ``key``; else ``held`` (a caller's, which the
    bounds let go), kept again."""
    with _LOCK:
        before = _TABLES.get(key)
    if before is None and held is not None:
        _keep(key, held)
        return held
    return before


def kept_table(store, stats) -> Table | None:
    """The table kept of the store (the last made, or the one pages have
    read into), for a caller to hold and hand back as ``held=``."""
    with _LOCK:
        return _TABLES.get((str(store_root(local(store, sync=False))), stats))


def table(store, stats, held: Table | None = None) -> Table:
    """The table of the store's runs, each with columns ``stats`` of each
    summarised fact (``_columns.row``), read as ``_runs.summaries`` reads
    them; the one made last time when no run changed. ``held``: a table of
    the store the caller kept (``kept_table``), for when the bounds let it go."""
    root, runs_fd = _opened(store)
    if runs_fd is None:
        return Table([])
    key = (root, stats)
    before = _before(key, held)
    old = before.listed if before is not None and before.whole else None
    same = old is not None
    live = _live(root)
    listed: list = []
    try:
        entries, at = _entries(runs_fd, before)
        kept = before._kept if before is not None else {}
        for name, folder in entries:
            got = kept.get(name)
            if got is None or not folder or name in live or not _served(got, runs_fd):
                got = _read(name, folder, root, runs_fd, live, stats)
                if got is None:
                    continue
            if same:  # a row read again as it was (a damaged run's, say) leaves the table as it was
                same = len(listed) < len(old) and _same(old[len(listed)], got)
            listed.append(got)
    finally:
        os.close(runs_fd)
    if same and len(listed) == len(old):
        with _LOCK:  # runs/ as listed now, the rows read again as they were now old enough to keep
            before._at, before._entries = at, entries
            before._kept = {got.name: got for got in listed if got.kept}
            before._runs = frozenset(got.name for got in listed)
            _asked(key, before)
        return before  # no run changed, none came or went: its columns and frame still hold
    made = Table(listed, True, entries, at)
    _keep(key, made)
    return made


def names(store, stats, held: Table | None = None) -> tuple[list[str], frozenset]:
    """The store's runs by name, as ``table`` lists them (links and files of
    a run's name too), and which of them are no real folder; only an entry
    of runs/ not known to hold a run is looked into, so a folder emptied by
    hand stays named until ``current`` reads it. ``held``: as ``table``'s."""
    root, runs_fd = _opened(store)
    if runs_fd is None:
        return [], frozenset()
    key = (root, stats)
    before = _before(key, held)
    known = before._runs if before is not None else frozenset()
    out, links, found = [], [], False
    try:
        entries, at = _entries(runs_fd, before)
        for name, folder in entries:
            if not folder:
                links.append(name)
            if name in known or not folder or _runs.recorded(name, at=runs_fd):
                found = found or name not in known
                out.append(name)
    finally:
        os.close(runs_fd)
    if before is None:
        _keep(key, Table([], False, entries, at, frozenset(out)))
    else:
        with _LOCK:
            before._at, before._entries = at, entries
            if found or len(out) != len(known):  # else the same runs: no set of them all made again
                before._runs = frozenset(out)
            _asked(key, before)
    return out, frozenset(links)


def current(store, stats, runs, held: Table | None = None) -> dict[str, Listed]:
    """The ``Listed`` of each of ``runs`` that holds a run, made current as
    ``table`` makes a row (served again while its files say it is the same,
    else read); one that no longer holds a run is left out, and no longer
    known as one. ``held``: as ``table``'s."""
    root, runs_fd = _opened(store)
    if runs_fd is None:
        return {}
    key = (root, stats)
    before = _before(key, held)
    kept = before._kept if before is not None else {}
    live = _live(root)
    out, read, gone = {}, [], []
    try:
        for name in runs:
            got = kept.get(name)
            if got is None or name in live or not _served(got, runs_fd):
                try:
                    folder = stat.S_ISDIR(os.stat(name, dir_fd=runs_fd, follow_symlinks=False).st_mode)
                except FileNotFoundError:
                    gone.append(name)
                    continue
                got = _read(name, folder, root, runs_fd, live, stats)
                if got is None:
                    gone.append(name)
                    continue
                read.append(got)
            out[name] = got
    finally:
        os.close(runs_fd)
    if before is not None and (read or gone):
        with _LOCK:
            before._kept.update((got.name, got) for got in read if got.kept)
            for name in gone:
                before._kept.pop(name, None)
            if any(name in before._runs for name in gone):
                before._runs = before._runs - set(gone)
    return out
