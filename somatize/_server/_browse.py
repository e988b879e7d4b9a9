"""What the run browser shows, with no Jupyter in it: the stores under one
root and the bucket stores its configuration names by URL, their runs, a
run's curves, node times and facts, and deleting a run.
``Browser`` is the core; its parts live beside it: ``_discover`` (finding
the stores), ``_buckets`` (the stores in buckets, read through this
machine's mirror of each), ``_findings (the thread counting findings), ``_tags`` (a
listing's tag), ``_sort`` (a listing's order), ``_delete`` (removing a
run), ``_downsample`` (cutting a curve), ``_public`` (the refusals, and
text fit for a client).

The rules kept here and in those parts:

- **One root.** Everything is found by walking down from the root the
  server was given (its ``root_dir``), following no link: a store or run
  folder that is a symlink is never listed, read or served, wherever it
  points. The walk is bounded (depth, folders visited) and skips hidden
  folders and ``node_modules``.
- **Ids, not paths.** A store is addressed by an id this module gave to a
  folder it found itself (a hash of its path below the root); a run by the
  name of a real folder in the store's ``runs/``. Nothing a client sends is
  ever joined to a path before it has been matched against what was found.
- **One engine, one table.** A listing is the record layer's table of the
  store's runs (``record/_table``, the one ``runs()``, ``somatize runs`` and
  ``compare`` ask), only its real folders shown: a query is asked of its
  whole columns at once (``record/_where``'s ``Query.mask``), an order
  sorts what it holds for (``_sort``), then the page is cut; a listing by
  name makes current only its page's runs (``_table.names``,
  ``_table.current``). A run's row is served again while its
  ``summary.json`` is the same file (same inode, size, times: a flush
  renames a new one in) and its log holds what that counts; the sidebar's
  row of it is made once with it (``Listed.made``). Reads are pure.
- **Findings are counted off the request.** A row's ``findings`` (how many
  ``somatize.diagnose`` returns) reads each run's instrument series, too
  much for a listing of a thousand runs: a listing only reads the counts known for each run's
  current ``summary.json`` and hands the others to one background thread per
  process (``_findings._COUNTER``), which counts them one at a time; such a row shows
  the last count it had (``None`` before the first) and the listing's tag
  changes when a count lands, so the next poll picks it up.
- **Text, not paths, in answers**: a problem names files relative to the
  store, never the absolute path of anything.
- **A bucket store is read, never changed.** Named by URL
  (``Browser(urls=...)``, from ``c.SomatizeApp.stores``), it is listed
  after the stores under the root, its id a hash of the URL, its label the
  URL (no user, query or credential); its runs are served from its mirror
  (``_buckets``: refreshed at most once a poll, by conditional GETs of the
  running runs' heads, a LIST at most every ``LIST_S``) as a local store's
  are; deleting one of them is refused (``ReadOnly``); one whose bucket
  does not answer is a row of its own saying why. The mirror's folder is
  named to no client.
"""

from __future__ import annotations

import collections
import os
import re
import stat
import threading
import time
from pathlib import Path

import numpy as np
import orjson
import xxhash

from .._base import files
from .._base.errors import DamagedError, SomatizeError, SomatizeKeyError
from .._pictures._chart import chart
from .._store.names import is_run_name
from ..record import _columns, _runs, _table
from ..record._check import check_run
from ..record._columns import QUERY_STATS, best, config_columns
from ..record._queries import steps_of
from ..record._summary import stat_json
from ..record._where import Query
from ._buckets import Buckets
from ._delete import delete_run
from ._discover import Walk, is_store
from ._downsample import downsample
from ._findings import _COUNTER, counted_rows
from ._public import Bad, Gone, NotFound, ReadOnly, Unreachable, public_text
from ._sort import Order, getter
from ._tags import listing_tag

PAGE = 1_000  # runs in one listing answer at most
POINTS = 2_000  # points a curve is cut down to at most (min and max of each bucket)
CHART_RUNS = 20  # runs one chart overlays at most
FACTS_PAGE = 10_000  # facts in one answer at most
LISTINGS = 16  # orders of listings of more than one page kept, for their later pages (least recently asked out)
_LISTING = re.compile(r"[0-9a-f]{32}")


class Browser:
    """The stores under ``root``, and those in buckets named by ``urls``
    (``s3://bucket/prefix``…), and their runs, as the routes answer them."""

    def __init__(self, root, clock=time.monotonic, urls=()):
        self.root = os.path.realpath(os.fspath(root))
        self.walk = Walk(self.root, clock)  # the stores, walked again at most every walk.gap() s
        self.buckets = Buckets(urls, clock)  # the stores in buckets, each read through its mirror
        self._stores: dict[str, str] = {}
        # store folder -> its table (record/_table), held while the store is shown: every poll lists every store
        self._tables: dict[str, _table.Table] = {}
        # (store id, listing token) -> the names of a listing of several pages, in its order (_listing)
        self._listings: collections.OrderedDict[tuple[str, str], tuple[str, ...]] = collections.OrderedDict()
        self._lock = threading.Lock()

    # ---- stores ----------------------------------------------------------------

    def stores(self) -> list[dict]:
        """The stores found (by the last walk: ``_discover.Walk``) that still
        are, each with how many runs a listing of it shows; then each bucket
        store in the order configured: ``url`` (also its ``path``),
        ``readonly``, and ``runs``, or ``error`` (why it cannot be read:
        the URL and the cause) where its last refresh failed."""
        out = []
        for sid, rel in sorted(self._current().items(), key=lambda kv: kv[1]):
            folder = self._folder(rel)
            if os.path.realpath(folder) != folder or not is_store(folder):  # gone since the walk
                continue
            out.append({"id": sid, "path": rel, "runs": len(self._names(folder))})
        self.buckets.look()
        for w in self.buckets:
            row = {"id": w.id, "path": w.url, "url": w.url, "readonly": True}
            if w.error is not None:
                row["error"] = w.error
            row["runs"] = len(self._names(w.root)) if w.root is not None and w.error is None else 0
            out.append(row)
        return out

    def public(self, text: str) -> str:
        """``text`` fit for a client (``_public.public_text``), a bucket
        store's mirror named as the copy of its URL."""
        return public_text(text, self.root, self.buckets.places())

    def _folder(self, rel: str) -> str:
        return self.root if rel == "." else os.path.join(self.root, rel)

    def _current(self) -> dict[str, str]:
        """The stores there are (``Walk.stores``); when a new walk landed,
        what was held of a store no longer found (its table, its counts of
        findings) is dropped."""
        found = self.walk.stores()
        with self._lock:
            if found is self._stores:
                return found
            self._stores = found
            folders = {self._folder(rel) for rel in found.values()}
            for folder in self._tables.keys() - folders - {w.root for w in self.buckets}:
                del self._tables[folder]
        _COUNTER.forget_stores(self.root, folders)
        return found

    def store(self, sid: str) -> str:
        """The folder of store ``sid``, as the last walk found it (a store
        made since is found by the next walk, at most ``walk.gap()`` seconds
        on; an unknown id never starts one). NotFound when there is none
        (any more), or when a folder on its way was replaced by a link since
        it was found. A bucket store's: its mirror's folder, refreshed where
        due (``_buckets``); ``Unreachable`` when its bucket never answered."""
        watched = self.buckets.get(sid)
        if watched is not None:
            watched.look()
            if watched.root is None:
                raise Unreachable(watched.error or f"{watched.url} has not been read yet")
            return watched.root
        rel = self._current().get(sid)
        if rel is None:
            raise NotFound(f"no store {sid[:80]!r} under the server's root: list them again (GET somatize/stores)")
        folder = self._folder(rel)
        if os.path.realpath(folder) != folder or not is_store(folder):
            raise NotFound(f"store {rel!r} is gone or is no longer a real folder under the server's root")
        return folder

    # ---- runs ------------------------------------------------------------------

    def run_folder(self, sid: str, run: str) -> tuple[str, str]:
        """(store folder, run folder) of a run that is a real folder of the
        store's ``runs/`` (what a listing shows); NotFound otherwise."""
        root = self.store(sid)
        if not is_run_name(run):
            raise NotFound("no such run in this store")
        try:
            st = files.lstat_in(root, ("runs", run))
        except (OSError, files.Refused):
            raise NotFound(f"no run {run!r} in this store") from None
        if not stat.S_ISDIR(st.st_mode):
            raise NotFound(f"no run {run!r} in this store")
        if not _holds_a_run(root, run):  # a folder being made, or no run: the listing leaves it out
            raise NotFound(f"no run {run!r} in this store: its folder holds nothing recorded "
                           f"(no {_runs.SUMMARY}, no {_runs.LOG}); list the runs again (GET .../runs)")
        return root, os.path.join(root, "runs", run)

    def runs(self, sid: str, offset: int = 0, limit: int = PAGE, match: str = "", where: str = "",
             sort: str = "run", descending: bool = False, listing: str = "") -> dict:
        """A page of the store's runs: ``runs`` (rows), ``total`` (runs
        matching; on a later page of a listing, the runs it began with),
        ``offset``, ``next`` (offset of the next page, or None),
        ``listing``. ``match``: a part of the run's name; ``where``: a query
        (``record/_where``: ``config.lr < 1e-2 and loss.best < 0.1``),
        answered over every run of the store; ``sort``: the column the runs
        are in the order of (``_sort``: ``run`` by default, ``config.lr``,
        ``loss.best``, …; missing values last, ties by name), over every run
        matching; then the page is cut.

        A listing of several pages is read in the order its first page was
        cut from, whatever moves meanwhile: the first page (``offset=0``)
        answers a ``listing`` token (None for a listing of one page), and a
        later page asked with ``listing=<token>`` is cut from that order
        (its rows read now), so no run is listed twice or skipped when a
        running run's loss moves it while the pages are read. A run made
        since shows at the next first page; one deleted since is left out
        of its page. A token no longer kept (the last ``LISTINGS`` are)
        answers ``Gone``: read the first page again."""
        return self.runs_tagged(sid, offset, limit, match, where=where, sort=sort, descending=descending,
                                listing=listing)[0]

    def runs_tagged(self, sid: str, offset: int = 0, limit: int = PAGE, match: str = "",
                    unless=(), where: str = "", sort: str = "run", descending: bool = False,
                    listing: str = "") -> tuple[dict | None, str]:
        """``runs(...)`` and a tag that changes whenever the page would: the
        names on it, the identity of each one's summary file (a flush renames
        a new one in), the state of each running run (its lock may have been
        dropped by a process that died, with no file changed) and the
        store's generation of counts of findings; with a query or an order,
        the store's table (``_table.Table.number``: a new one whenever a run
        changed), since any run may come to match or to move. When the tag
        is one of ``unless`` (the tags a poll sent back) the answer is
        ``(None, tag)``: no row is built."""
        # a query that does not read, an order that names no column: refused before anything is read
        query = Query(where) if where else None
        order = Order(sort, descending)
        if listing and not _LISTING.fullmatch(listing):
            raise Bad(f"listing must be the token a first page answered (32 hex digits), not {listing[:40]!r}")
        with _COUNTER.listing():
            if query is not None or not order.by_name:
                return self._runs_chosen(sid, offset, limit, match, unless, query, order, listing)
            return self._runs_by_name(sid, offset, limit, match, unless, listing)

    def _listing(self, sid, names, offset, limit, listing) -> tuple[list, str | None, int]:
        """The names of the page at ``offset``, the listing's token and how
        many runs it holds: cut from the order kept for ``listing`` when one
        is given, else from ``names`` (every run matching, in order), which
        a first page of several keeps under a token made of it (the same
        order, the same token: a poll of an unchanged listing asks the same
        URLs)."""
        if listing:
            with self._lock:
                kept = self._listings.get((sid, listing))
                if kept is not None:
                    self._listings.move_to_end((sid, listing))
            if kept is None:
                raise Gone(f"the listing {listing} is no longer kept (the last {LISTINGS} are): read its first "
                           "page again, without listing=")
            return list(kept[offset: offset + limit]), listing, len(kept)
        token = None
        if offset == 0 and len(names) > limit:
            token = xxhash.xxh3_128_hexdigest(orjson.dumps([sid, names]))
            with self._lock:
                if (sid, token) in self._listings:  # an unchanged poll: kept already
                    self._listings.move_to_end((sid, token))
                else:
                    self._listings[(sid, token)] = tuple(names)
                while len(self._listings) > LISTINGS:
                    self._listings.popitem(last=False)
        return names[offset: offset + limit], token, len(names)

    def _runs_chosen(self, sid, offset, limit, match, unless, query, order, listing) -> tuple[dict | None, str]:
        """``runs_tagged`` with a query or an order of its own: the store's
        table (``record/_table``) asked the query of its whole columns at
        once (``Query.mask``), the runs it holds for sorted, then paged."""
        root = self.store(sid)
        limit = max(0, min(limit, PAGE))
        counts = _COUNTER.generation(root)  # before the rows: a count landing after it changes the next tag
        now = time.time()
        if listing:  # a later page: the order its first page was cut from, the rows read now
            page, token, total = self._listing(sid, None, offset, limit, listing)
            got = self._listed(root, page)
            page = [n for n in page if n in got]  # a run deleted since its listing began: left out
            state = _said(got, page)
        else:
            table = self._whole(root)
            low = match.lower()
            held = query.mask(table.columns(), now).tolist() if query is not None else [True] * len(table.listed)
            shown, chosen = [], []  # what a listing shows (real folders, the name matching); what the query holds for
            for listed, holds in zip(table.listed, held):
                if listed.folder and low in listed.name.lower():
                    shown.append(listed)
                    if holds:
                        chosen.append(listed)
            got = {c.name: c for c in chosen}
            names = list(got)
            if not order.by_name:
                order.check([c.row for c in shown])
                found = None
                if order.column == "findings":  # the counts known now (None until counted), as the rows show them
                    found = {c.name: _count(root, c) for c in chosen}
                names = order.apply(names, getter(order.column, {c.name: c.row for c in chosen}, found))
            page, token, total = self._listing(sid, names, offset, limit, "")
            state = table.number
            _COUNTER.forget(root, keep={c.name for c in table.listed})  # the counts of runs gone
        # an answer that depends on the clock (a query of age; an order by age never does)
        ticking = int(now) if query is not None and "age" in query.columns else None
        asked = [query.text if query is not None else None, order.key(), state, ticking, token]
        return self._page(sid, root, offset, limit, total, page, got, token, asked, unless, counts)

    def _runs_by_name(self, sid, offset, limit, match, unless, listing) -> tuple[dict | None, str]:
        """``runs_tagged`` in the listing's own order, by name: the runs'
        names (``_table.names``), then only the page's runs made current
        (``_table.current``): a poll asks its page's runs, not the store's."""
        root = self.store(sid)
        limit = max(0, min(limit, PAGE))
        counts = _COUNTER.generation(root)  # before the rows: a count landing after it changes the next tag
        every = self._names(root)
        low = match.lower()
        names = [n for n in every if low in n.lower()] if match else every
        if listing:  # a later page: the names its first page was cut from, those still holding a run
            page, token, total = self._listing(sid, None, offset, limit, listing)
            there = set(names)
            page = [n for n in page if n in there]
        else:
            page = names[offset: offset + limit]
        got = self._listed(root, page)
        gone = {n for n in page if n not in got}
        if gone:  # emptied by hand since it was known to hold a run: no longer listed, nor counted
            page, every, names = ([n for n in x if n not in gone] for x in (page, every, names))
        if not listing:
            _, token, total = self._listing(sid, names, offset, limit, "")
        _COUNTER.forget(root, keep=set(every))  # the counts of runs gone
        asked = [_said(got, page), token]
        return self._page(sid, root, offset, limit, total, page, got, token, asked, unless, counts)

    def _page(self, sid, root, offset, limit, total, page, got, token, asked, unless, counts
              ) -> tuple[dict | None, str]:
        """The answer of a page (``page``: its names, ``got``: their
        ``Listed``) and its tag (``asked``: what the page was made of);
        ``(None, tag)`` when the tag is one of ``unless``."""
        tag = listing_tag(sid, offset, total, page, asked, counts)
        if tag in unless:
            return None, tag
        rows = counted_rows(root, [_shown(root, got[n]) for n in page], {n: got[n].ident for n in page})
        end = min(offset + limit, total)
        return {"runs": rows, "total": total, "offset": offset, "next": end if end < total else None,
                "listing": token}, tag

    # ---- the store's table, as the listing asks it ----------------------------------------------

    def _names(self, root) -> list[str]:
        """The runs a listing of the store shows, by name: ``_table.names``'
        real folders (a run's name that is a link or a file is never listed);
        none where the store's runs/ is itself a link or a file."""
        try:
            names, links = _table.names(root, QUERY_STATS, held=self._tables.get(root))
        except DamagedError:  # runs/ is no real folder: nothing is read through it
            return []
        held = _table.kept_table(root, QUERY_STATS)
        if held is not None:
            self._tables[root] = held
        return [n for n in names if n not in links] if links else names

    def _listed(self, root, names) -> dict:
        """``_table.current``: the ``Listed`` of each of ``names`` holding a
        run in a real folder, made current."""
        try:
            got = _table.current(root, QUERY_STATS, names, held=self._tables.get(root))
        except DamagedError:
            return {}
        return {n: c for n, c in got.items() if c.folder}

    def _whole(self, root):
        """``_table.table``: every run of the store, the table ``runs()`` asks."""
        try:
            table = _table.table(root, QUERY_STATS, held=self._tables.get(root))
        except DamagedError:
            return _table.Table([])
        self._tables[root] = table
        return table

    def run(self, sid: str, run: str) -> dict:
        root, _ = self.run_folder(sid, run)
        got = self._listed(root, [run]).get(run)
        if got is None:  # emptied since it was looked at
            raise NotFound(f"no run {run!r} in this store: its folder holds nothing recorded")
        return counted_rows(root, [_shown(root, got)], {run: got.ident})[0]

    def findings(self, sid: str, run: str) -> dict:
        """The run's findings (``somatize.diagnose``), worst first, diagnosed
        now: ``kind``, ``node``, ``first``/``last`` step and the sentence."""
        root, _ = self.run_folder(sid, run)
        got = self._listed(root, [run]).get(run)
        found = _COUNTER.count_now(root, run, got.ident if got is not None else None)
        return {"run": run, "findings": [
            {"kind": f.kind, "node": f.node, "first": f.first, "last": f.last, "text": str(f)} for f in found]}

    # ---- one run ---------------------------------------------------------------

    def curve(self, sid: str, run: str, name: str, points: int = POINTS) -> dict:
        """Curve ``name`` of a run, cut to at most ``points``: each point's
        ``step`` (``record._queries.steps_of``, what ``progress`` draws it at:
        with micro=N not its forward), ``forward`` and ``value``; ``xkind``
        says which one a chart's x is (``"step"``, as the chart route says it)."""
        from ..record import curve

        root, _ = self.run_folder(sid, run)
        series = curve(root, run, name)
        forward = series.index.to_numpy()
        step = steps_of(root, run, series)
        value = series.to_numpy()
        keep = np.isfinite(value)
        total, forward, step, value = len(value), forward[keep], step[keep], value[keep]
        exact = {"min": float(value.min()), "max": float(value.max())} if len(value) else {"min": None, "max": None}
        at = downsample(value, max(2, min(points, POINTS)))
        return {"run": run, "name": series.name, "xkind": "step", "points": total,
                "not_finite": int(total - len(value)), "step": step[at].astype(np.int64).tolist(),
                "forward": forward[at].tolist(), "value": value[at].tolist(), **exact}

    def chart(self, name: str, runs: list[tuple[str, str]]) -> dict:
        """Curve ``name`` of several runs (each ``(store id, run)``), overlaid
        as the notebook panels draw a chart, over steps as ``progress`` draws
        them (``"xkind": "step"``; each point ``[step, value]``): ``_chart.chart``'s scale (log when
        the values span decades), ranges and every tick with its label, each
        run's points cut down as the curve route cuts them. ``runs`` says, for
        each run in order, its store id, name, points, exact min and max, or
        ``missing`` (why it draws no line: no such run or curve, damage).
        NotFound when not one of the runs is there."""
        if not runs:
            raise Bad("name the runs to chart: run=STORE_ID/RUN, once for each")
        if len(runs) > CHART_RUNS:
            raise Bad(f"a chart overlays at most {CHART_RUNS} runs, not {len(runs)}: open fewer at once")
        series, told, unknown = [], [], []
        for sid, run in runs:
            try:
                c = self.curve(sid, run, name)
            except (SomatizeError, OSError) as e:  # gone since listed, no such curve (yet), damaged, unreadable
                if isinstance(e, NotFound):
                    unknown.append(e)
                why = ("no such curve" if isinstance(e, SomatizeKeyError)
                       else self.public(str(e)) if isinstance(e, SomatizeError)  # DamagedError too
                       else f"could not be read ({e.strerror or type(e).__name__})")
                series.append({"name": run, "color": "", "points": []})
                told.append({"store": sid, "run": run, "missing": why})
                continue
            series.append({"name": run, "color": "", "points": list(zip(c["step"], c["value"]))})
            told.append({"store": sid, "run": run, "points": c["points"], "not_finite": c["not_finite"],
                         "min": c["min"], "max": c["max"]})
        if len(unknown) == len(runs):  # not one run the server knows: the request is wrong
            raise unknown[0]
        return {**chart(series, ylabel=name, xlabel="step", x="step"), "runs": told}

    def nodes(self, sid: str, run: str) -> list[dict]:
        from ..record import nodes

        root, _ = self.run_folder(sid, run)
        frame = nodes(root, run)
        return [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
                for r in frame.to_dict("records")]

    def rank_time(self, sid: str, run: str) -> dict:
        """A data-parallel run's time per rank and its straggler, as ``spent``
        computes them (``record._ranks.rank_time``): ``{"ranks": [{"rank",
        "mean_us", "steps"}], "straggler": {...} or None}``; no ranks for a
        run of one process. A rank series that is damaged answers no ranks
        and ``ranks_problem`` saying what is damaged, so the route that sends
        them with the nodes' times (``NodesHandler``) still answers those."""
        from ..record._ranks import rank_time

        root, _ = self.run_folder(sid, run)
        got = rank_time(root, run)  # a damaged rank series is its ranks_problem, not an error
        if "ranks_problem" in got:  # the nodes' own times still answer, the damage named
            # (the listing reads summaries, which this damage leaves whole: its tag has nothing to change for)
            got["ranks_problem"] = public_text(got["ranks_problem"], root)
        return got

    def facts(self, sid: str, run: str, forward: int = 0) -> dict:
        """The facts of one forward (a page), with how many forwards there are."""
        from ..record import facts

        root, _ = self.run_folder(sid, run)
        listed = self._listed(root, [run]).get(run)  # a run damaged since its summary still counts its forwards
        count = (listed.summary.get("forwards") if listed is not None else 0) or 0
        if not 0 <= forward < max(count, 1):
            raise Bad(f"forward={forward} is out of range: this run has {count} forwards (0..{count - 1})")
        got = facts(root, run, forward=forward) if count else []
        return {"run": run, "forward": forward, "forwards": count, "facts": got[:FACTS_PAGE],
                "cut": len(got) > FACTS_PAGE, "next": forward + 1 if forward + 1 < count else None}

    def delete(self, sid: str, run: str) -> None:
        """Remove a run's folder (``_delete.delete_run``) and forget it. A
        run of a bucket store is refused (``ReadOnly``): the browser only
        reads a bucket, through a copy on this machine."""
        watched = self.buckets.get(sid)
        if watched is not None:
            name = run if is_run_name(run) else "<run>"
            raise ReadOnly(
                f"run {run[:200]!r} is in the bucket store {watched.url}, which the run browser only reads "
                "(through a copy on this machine): nothing was deleted. Delete it in the bucket, where no "
                f"writer holds it any more: its head {watched.url}/heads/{name}.json and its segments "
                f"{watched.url}/runs/{name}/")
        root, folder = self.run_folder(sid, run)
        delete_run(root, folder, run)
        _COUNTER.forget(root, runs={run})


def _holds_a_run(root, run) -> bool:
    """Whether the folder ``runs/<run>`` of the store at ``root`` holds a run
    (``_runs.recorded``), reached without following a link."""
    try:
        fd = files.open_dir(root, ("runs",))
    except (OSError, files.Refused):
        return False
    try:
        return _runs.recorded(run, at=fd)
    finally:
        os.close(fd)


def _said(got, page) -> list:
    """What a page's rows are made of: each run's summary.json's identity,
    and its state and problem, which may change with no summary.json
    changed (a running run's process gone, a log cut in place)."""
    return [(got[n].ident, got[n].summary["state"], got[n].summary.get("problem")) for n in page]


def _count(root, listed) -> int | None:
    """The run's count of findings known now (None until counted; a damaged run has none)."""
    if listed.summary["state"] == "damaged":
        return None
    return _COUNTER.known(root, listed.name, listed.ident)[0]


def _shown(root: str, listed) -> dict:
    """What the sidebar shows of one run (``Listed``): no checksums, no
    absolute path. Made once for a run's summary (``Listed.made``); a
    damaged run's says what ``somatize check`` finds there now."""
    s = listed.summary
    if s["state"] != "damaged":
        return listed.made(_row)
    problems, _ = check_run(Path(root) / "runs" / listed.name)
    return {"run": listed.name, "state": "damaged", "problem": public_text(s.get("problem", ""), root),
            "check": [public_text(p, root) for p in problems]}


def _row(listed) -> dict:
    """The sidebar's row of a run that is not damaged."""
    s = listed.summary
    row = {"run": listed.name, "state": s["state"]}
    facts = s.get("summarising") or {}
    row.update({
        "forwards": s.get("forwards"),
        "steps": _columns.steps(s),
        "facts": s.get("facts"),
        "started": s.get("started"),
        "updated": s.get("updated"),
        "duration": (s["updated"] - s["started"]) if s.get("updated") and s.get("started") else None,
        # best by the rule runs() names its <fact>.best column by (record/_columns); NaN and the
        # infinities as "NaN", "Infinity", "-Infinity" (JSON has no word for them), null where none yet
        "summarising": {k: {**{f: stat_json(v.get(f)) for f in ("count", "first", "last", "min", "max")},
                            "best": stat_json(best(k, v))} for k, v in facts.items()},
        "curves": sorted(n for n in s.get("series", {}) if n != "finished/took_us"),
        # flattened as runs() flattens it ({"optim.lr": 0.1}): one rule, in record/_columns
        "config": config_columns(s.get("config") or {}, prefix=""),
    })
    return row
