"""What the run browser shows, with no Jupyter in it: the stores under one
root, their runs, a run's curves, node times and facts, and deleting a run.
``Browser`` is the core; its parts live beside it: ``_discover`` (finding
the stores), ``_findings`` (the thread counting findings), ``_tags`` (a
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
- **Reads are pure**, through the record layer's readers (``_runs``,
  ``_queries``); a listing reuses a run's row while its ``summary.json`` is
  the same file (same inode, size, time: a flush renames a new one in).
- **Findings are counted off the request.** A row's ``findings`` (how many
  ``somatize.diagnose`` returns) costs 5-15 ms a run, too much for a listing
  of 1,000 (<= 100 ms): a listing only reads the counts known for each run's
  current ``summary.json`` and hands the others to one background thread per
  process (``_findings._COUNTER``), which counts them one at a time; such a row shows
  the last count it had (``None`` before the first) and the listing's tag
  changes when a count lands, so the next poll picks it up.
- **Text, not paths, in answers**: a problem names files relative to the
  store, never the absolute path of anything.
"""

from __future__ import annotations

import collections
import contextlib
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
from ..record import _columns, _runs
from ..record._check import check_run
from ..record._columns import best, config_columns
from ..record._queries import steps_of
from ..record._summary import stat_json
from ..record._where import Query
from ._delete import delete_run
from ._discover import Walk, is_store
from ._downsample import downsample
from ._findings import _COUNTER, counted_rows
from ._public import Bad, Gone, NotFound, public_text
from ._sort import Order, getter
from ._tags import key_of, keys_of, listing_tag, page_of, recorded_in

PAGE = 1_000  # runs in one listing answer at most
POINTS = 2_000  # points a curve is cut down to at most (min and max of each bucket)
CHART_RUNS = 20  # runs one chart overlays at most
FACTS_PAGE = 10_000  # facts in one answer at most
LISTINGS = 16  # orders of listings of more than one page kept, for their later pages (least recently asked out)
_LISTING = re.compile(r"[0-9a-f]{32}")


class Browser:
    """The stores under ``root`` and their runs, as the routes answer them."""

    def __init__(self, root, clock=time.monotonic):
        self.root = os.path.realpath(os.fspath(root))
        self.walk = Walk(self.root, clock)  # the stores, walked again at most every walk.gap() s
        self._stores: dict[str, str] = {}
        self._rows: dict[str, dict[str, tuple]] = {}  # store id -> run -> (summary file key, row)
        self._recorded: dict[str, frozenset] = {}  # store id -> runs known to hold a run (_tags.page_of)
        self._damage: dict[str, int] = {}  # store id -> damage found by a query: part of the listing's tag
        # (store id, listing token) -> the names of a listing of several pages, in its order (_listing)
        self._listings: collections.OrderedDict[tuple[str, str], tuple[str, ...]] = collections.OrderedDict()
        self._lock = threading.Lock()

    # ---- stores ----------------------------------------------------------------

    def stores(self) -> list[dict]:
        """The stores found (by the last walk: ``_discover.Walk``) that still
        are, each with how many runs a listing of it shows."""
        out = []
        for sid, rel in sorted(self._current().items(), key=lambda kv: kv[1]):
            folder = self._folder(rel)
            if os.path.realpath(folder) != folder or not is_store(folder):  # gone since the walk
                continue
            out.append({"id": sid, "path": rel, "runs": len(self._page_of(sid, folder, 0, 0, "")[1])})
        return out

    def _folder(self, rel: str) -> str:
        return self.root if rel == "." else os.path.join(self.root, rel)

    def _current(self) -> dict[str, str]:
        """The stores there are (``Walk.stores``); when a new walk landed,
        what was kept of a store no longer found (rows, counts of findings)
        is dropped."""
        found = self.walk.stores()
        with self._lock:
            if found is self._stores:
                return found
            self._stores = found
            for sid in self._rows.keys() - found.keys():
                del self._rows[sid]
            for sid in self._recorded.keys() - found.keys():
                del self._recorded[sid]
        _COUNTER.forget_stores(self.root, {self._folder(rel) for rel in found.values()})
        return found

    def store(self, sid: str) -> str:
        """The folder of store ``sid``, as the last walk found it (a store
        made since is found by the next walk, at most ``walk.gap()`` seconds
        on; an unknown id never starts one). NotFound when there is none
        (any more), or when a folder on its way was replaced by a link since
        it was found."""
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
        if not recorded_in(root, run):  # a folder being made, or no run: the listing leaves it out
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
        store's generation of counts of findings. When the tag is one of
        ``unless`` (the tags a poll sent back) the answer is ``(None, tag)``,
        made from one stat per run and the rows kept: no page is built."""
        # a query that does not read, an order that names no column: refused before anything is read
        query = Query(where) if where else None
        order = Order(sort, descending)
        if listing and not _LISTING.fullmatch(listing):
            raise Bad(f"listing must be the token a first page answered (32 hex digits), not {listing[:40]!r}")
        with _COUNTER.listing():
            if query is not None or not order.by_name:
                return self._runs_chosen(sid, offset, limit, match, unless, query, order, listing)
            return self._runs_tagged(sid, offset, limit, match, unless, listing)

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
        """``runs_tagged`` with a query or an order of its own: every run's
        columns (kept with its row while its summary.json is the same) are
        asked, the matching ones sorted, then paged. The tag covers every
        run's summary, since any may come to match or to move."""
        root = self.store(sid)
        limit = max(0, min(limit, PAGE))
        counts = (_COUNTER.generation(root), self._damage.get(sid, 0))
        every, names, _, keys = self._page_of(sid, root, 0, None, match)
        self._prune(sid, root, every)
        rows = {r["run"]: r for r in self._rows_of(sid, root, names, keys)}
        with self._lock:
            kept = self._rows.get(sid, {})
            columns = {n: kept[n][2] for n in rows if n in kept}
        now = time.time()
        by_name = dict(zip(names, keys))
        if listing:  # a later page: the order its first page was cut from, the rows read now
            chosen = None
        else:
            chosen = [n for n in names if n in columns and (query is None or query(columns[n], now))]
            if not order.by_name:
                order.check(columns.values())
                found = None
                if order.column == "findings":  # the counts known now (None until counted), as the rows show them
                    found = {r["run"]: r.get("findings") for r in counted_rows(
                        root, [rows[n] for n in chosen], {n: by_name[n] for n in chosen})}
                chosen = order.apply(chosen, getter(order.column, columns, found))
        page, token, total = self._listing(sid, chosen, offset, limit, listing)
        page = [n for n in page if n in rows]  # a run deleted since its listing began: left out
        out = counted_rows(root, [rows[n] for n in page], {n: by_name[n] for n in page})
        running = [(r["run"], r["state"]) for r in rows.values()
                   if r["state"] == "running" or by_name[r["run"]] is None]
        # an answer that depends on the clock (a query of age; an order by age never does)
        ticking = int(now) if query is not None and "age" in query.columns else None
        asked = [query.text if query is not None else None, order.key(), keys, ticking, token]
        tag = listing_tag(sid, offset, total, page, asked, running, counts)
        if tag in unless:
            return None, tag
        end = min(offset + limit, total)
        return {"runs": out, "total": total, "offset": offset, "next": end if end < total else None,
                "listing": token}, tag

    def _runs_tagged(self, sid, offset, limit, match, unless, listing) -> tuple[dict | None, str]:
        root = self.store(sid)
        limit = max(0, min(limit, PAGE))
        # before the rows: a count landing after it changes the next tag
        counts = (_COUNTER.generation(root), self._damage.get(sid, 0))
        if listing:  # a later page: the names its first page was cut from, those still holding a run
            every, names, _, _ = self._page_of(sid, root, 0, 0, match)
            page, token, total = self._listing(sid, None, offset, limit, listing)
            now = set(names)
            page = [n for n in page if n in now]
            keys = keys_of(root, page)
        else:
            every, names, page, keys = self._page_of(sid, root, offset, limit, match)
            _, token, total = self._listing(sid, names, offset, limit, "")
        if unless:
            running = self._unchanged(sid, root, page, keys)
            if running is not None:
                tag = listing_tag(sid, offset, total, page, [keys, token], running, counts)
                if tag in unless:
                    return None, tag
        self._prune(sid, root, every)
        rows = counted_rows(root, self._rows_of(sid, root, page, keys), dict(zip(page, keys)))
        # what may change with no summary.json changed: a running run's state, a run with none
        loose = {n for n, k in zip(page, keys) if k is None}
        running = [(r["run"], r["state"]) for r in rows if r["state"] == "running" or r["run"] in loose]
        tag = listing_tag(sid, offset, total, page, [keys, token], running, counts)
        end = min(offset + limit, total)
        return {"runs": rows, "total": total, "offset": offset, "next": end if end < total else None,
                "listing": token}, tag

    def _unchanged(self, sid, root, page, keys) -> list | None:
        """The ``(run, "running")`` of the page's running runs, when every
        row of the page is kept for its summary.json and each running run
        still runs; None when the page must be built to know."""
        with self._lock:
            kept = self._rows.get(sid, {})
            running = []
            for n, k in zip(page, keys):
                got = kept.get(n)
                if k is None or got is None or got[0] != k:
                    return None
                if got[1]["state"] == "running":
                    running.append((n, "running"))
        for n, _ in running:
            folder = os.path.join(root, "runs", n)
            if not _runs.holder_alive(folder):  # this process's Recorders answer the probe too
                return None
        return running

    def _page_of(self, sid, root, offset, limit, match):
        """``_tags.page_of``, with the runs of ``sid`` known to hold a run kept between calls."""
        with self._lock:
            known = self._recorded.get(sid, frozenset())
        every, names, page, keys, known = page_of(root, offset, limit, match, known)
        with self._lock:
            self._recorded[sid] = known
        return every, names, page, keys

    def _prune(self, sid, root, names) -> None:
        """Drop what is kept of the runs of ``sid`` not in ``names`` (deleted,
        by us or by anyone): their rows, their counts of findings."""
        names = set(names)
        with self._lock:
            kept = self._rows.get(sid, {})
            for n in kept.keys() - names:
                del kept[n]
        _COUNTER.forget(root, keep=names)

    @contextlib.contextmanager
    def _noting_damage(self, sid: str, run: str):
        """A query that finds a run damaged (a log cut in place after the
        listing read its summary: no summary.json changed, so no tag did)
        drops the run's kept row and changes the store's listing tag: the
        next poll lists the run again, and it reads damaged."""
        try:
            yield
        except DamagedError:
            with self._lock:
                self._rows.get(sid, {}).pop(run, None)
                self._damage[sid] = self._damage.get(sid, 0) + 1
            raise

    def run(self, sid: str, run: str) -> dict:
        root, _ = self.run_folder(sid, run)
        key = key_of(root, run)
        rows = counted_rows(root, self._rows_of(sid, root, [run], [key]), {run: key})
        if not rows:  # emptied since it was looked at
            raise NotFound(f"no run {run!r} in this store: its folder holds nothing recorded")
        return rows[0]

    def findings(self, sid: str, run: str) -> dict:
        """The run's findings (``somatize.diagnose``), worst first, diagnosed
        now: ``kind``, ``node``, ``first``/``last`` step and the sentence."""
        root, _ = self.run_folder(sid, run)
        with self._noting_damage(sid, run):
            found = _COUNTER.count_now(root, run, key_of(root, run))
        return {"run": run, "findings": [
            {"kind": f.kind, "node": f.node, "first": f.first, "last": f.last, "text": str(f)} for f in found]}

    def _rows_of(self, sid, root, names, keys) -> list[dict]:
        keys = dict(zip(names, keys))
        rows: dict[str, dict] = {}
        missing = []
        with self._lock:
            kept = self._rows.get(sid, {})
            for n in names:
                cached = kept.get(n)
                same = cached is not None and keys[n] is not None and cached[0] == keys[n]
                if same and cached[1]["state"] != "running":  # a running run's state needs its lock asked
                    rows[n] = cached[1]
                else:
                    missing.append(n)
        if missing:
            for s in _runs.summaries(root, names=missing):
                row = _row(root, s)
                rows[row["run"]] = row
                # the run's columns as runs() names them, for a where= query
                columns = _columns.row(s, _columns.QUERY_STATS)
                with self._lock:
                    self._rows.setdefault(sid, {})[row["run"]] = (keys.get(row["run"]), row, columns)
        return [rows[n] for n in names if n in rows]

    # ---- one run ---------------------------------------------------------------

    def curve(self, sid: str, run: str, name: str, points: int = POINTS) -> dict:
        """Curve ``name`` of a run, cut to at most ``points``: each point's
        ``step`` (``record._queries.steps_of``, what ``progress`` draws it at:
        with micro=N not its forward), ``forward`` and ``value``; ``xkind``
        says which one a chart's x is (``"step"``, as the chart route says it)."""
        from ..record import curve

        root, _ = self.run_folder(sid, run)
        with self._noting_damage(sid, run):
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
                       else public_text(str(e), self.root) if isinstance(e, SomatizeError)  # DamagedError too
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
        with self._noting_damage(sid, run):
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
        count = self.run(sid, run).get("forwards") or 0
        if not 0 <= forward < max(count, 1):
            raise Bad(f"forward={forward} is out of range: this run has {count} forwards (0..{count - 1})")
        with self._noting_damage(sid, run):
            got = facts(root, run, forward=forward) if count else []
        return {"run": run, "forward": forward, "forwards": count, "facts": got[:FACTS_PAGE],
                "cut": len(got) > FACTS_PAGE, "next": forward + 1 if forward + 1 < count else None}

    def delete(self, sid: str, run: str) -> None:
        """Remove a run's folder (``_delete.delete_run``) and forget it."""
        root, folder = self.run_folder(sid, run)
        delete_run(root, folder, run)
        with self._lock:
            self._rows.get(sid, {}).pop(run, None)
        _COUNTER.forget(root, runs={run})


def _row(root: str, s: dict) -> dict:
    """What the sidebar shows of one run: no checksums, no absolute path."""
    name = s["run"]
    row = {"run": name, "state": s["state"]}
    if s["state"] == "damaged":
        problems, _ = check_run(Path(root) / "runs" / name)
        row["problem"] = public_text(s.get("problem", ""), root)
        row["check"] = [public_text(p, root) for p in problems]
        return row
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
