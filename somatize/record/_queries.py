"""Questions asked of a run's record, answered without reading more than needed.

The rule kept here: a query reads the smallest thing that answers it, and
never answers from bytes it has not verified. One forward's facts: the index
(checked against its checksum in the summary, and against the log's shape),
then one or two blocks (each checks itself). A curve or ``forwards()``: the
series files, checked against their checksums. ``nodes()`` and ``runs()``: the
summaries, read strictly. A file that does not match raises ``DamagedError``
naming it. Reads are pure: a live Recorder of this process is asked for its
facts not yet flushed, from memory, never made to write; another process's
facts are seen once its flusher has run (whole blocks of a flush under way
are read too, by ``facts``).

pandas is imported inside the functions that build frames, so that the CLI
(which lists runs) does not pay for it.
"""

from __future__ import annotations

import operator
import os

import numpy as np

from .._base import files
from .._base.errors import (
    DamagedError,
    SomatizeKeyError,
    SomatizeTypeError,
    SomatizeValueError,
)
from .._store.names import store_root
from . import _files, _log
from ._local import local
from ._runs import (
    INDEX,
    LOG,
    SERIES,
    existing_folder,
    live_recorder,
    log_short,
    summary_or_damage,
)
from ._summary import TOOK

TAIL_LIMIT = 1 << 26  # bytes read past the last completed flush: one flush's worth, and then some
_SHAPED: set = set()  # (folder, index bytes, xxh3, log bytes) whose shape was checked


class RunRecord:
    """One run as a query reads it: its folder, the summary of its last
    completed flush (what the files hold), and a live Recorder's pending facts."""

    def __init__(self, store, run):
        if not isinstance(run, str):
            raise SomatizeTypeError(f"run= takes the name of a run (a str), like run=\"a-run\"; "
                                    f"got {type(run).__name__} {run!r:.60}")
        self.name = run
        self.folder = existing_folder(store_root(local(store, run)), run)
        recorder = live_recorder(self.folder)
        if recorder is not None:
            view = recorder._view()
            self.committed, self.summary = view.committed, view.summary
            self.groups, self.points, self.live = view.groups, view.points, True
        else:
            self.committed = self.summary = summary_or_damage(self.folder, run)
            self.groups, self.points, self.live = [], {}, False

    def damaged(self, path, why):
        return DamagedError(
            f"run {self.name!r}: {path} {why}; run `somatize check` on the store. Its log is the "
            f"truth: Recorder(store, run={self.name!r}, resume=True) rebuilds the index and series from it"
        )

    def needs_summary(self):
        if self.committed is None:
            raise self.damaged(self.folder / "summary.json",
                               "is missing while facts.log is there (facts(store, run) still reads the facts)")

    def needs_whole_log(self):
        """Counts in the summary are trusted to size a table only when the
        log holds the bytes they were counted from."""
        if self.live:
            return
        short = log_short(self.folder, self.committed["log_bytes"])
        if short is not None:
            raise self.damaged(self.folder / LOG, short)

    def entries(self):
        """(index entries of every whole block, count of forwards)."""
        if self.committed is None:  # no summary: every whole block of the log, as it stands
            tail = self._tail(0, 1 << 40)  # a regular file: its bytes are there
            return tail.entries(), (int(tail.blocks[-1][1]) + 1 if tail.blocks else 0)
        s = self.committed
        try:
            index = self._index(s)
        except DamagedError:
            # The log is the truth and proves itself block by block: read its
            # blocks from the start (read-only; resume=True rebuilds the file).
            tail = self._tail(0, s["log_bytes"])
            if tail.end < s["log_bytes"]:
                raise self.damaged(self.folder / INDEX,
                                   f"does not verify, and {LOG} does not read past byte {tail.end}") from None
            index = tail.entries()
            index = index[index["offset"] + index["length"] <= s["log_bytes"]]
        count = s["forwards"]
        if not self.live:  # a flush under way in another process, or cut by a kill
            tail = self._tail(s["log_bytes"])
            if tail.blocks:
                index = np.concatenate([index, tail.entries()])
                count = max(count, int(tail.blocks[-1][1]) + 1)
        if self.groups:
            count = max(count, self.groups[-1][0] + 1)
        return index, count

    def _index(self, s):
        """The index as the last completed flush left it, verified."""
        size, want = s["index"]
        if size is None:  # format 1: no checksum; the shape check below still holds
            try:
                size = _files.file_size(self.folder / INDEX) // _log.INDEX.itemsize * _log.INDEX.itemsize
            except _files.NotAFile as e:
                raise self.damaged(self.folder / INDEX, f"cannot be read ({e})") from None
        raw = _log.verified(self.folder / INDEX, size, want, self.name, "index")
        if len(raw) % _log.INDEX.itemsize:
            raise self.damaged(self.folder / INDEX, "is not a whole number of entries")
        index = np.frombuffer(raw, _log.INDEX)
        if s["index"][0] is None:
            index = index[index["offset"] + index["length"] <= s["log_bytes"]]
        key = (str(self.folder), size, want, s["log_bytes"])
        if want is None or key not in _SHAPED:  # the same verified bytes need no second look
            self._check_shape(index, s["log_bytes"])
            if want is not None:
                if len(_SHAPED) > 256:
                    _SHAPED.clear()
                _SHAPED.add(key)
        return index

    def _tail(self, start, limit=TAIL_LIMIT):
        try:
            return _log.read_tail(self.folder / LOG, start, limit)
        except _files.NotAFile as e:
            raise self.damaged(self.folder / LOG, f"cannot be read ({e})") from None

    def _check_shape(self, index, log_bytes):
        """The index must tile the log from byte 0 to ``log_bytes`` in forward order."""
        if not len(index):
            if log_bytes:
                raise self.damaged(self.folder / INDEX, f"names no block while {LOG} holds {log_bytes} bytes")
            return
        offsets, lengths = index["offset"], index["length"]
        ends = offsets + lengths
        if (
            offsets[0] != 0
            or ends[-1] != log_bytes
            or np.any(offsets[1:] != ends[:-1])
            or np.any(lengths < _log.FRAME)
            or np.any(index["first"] > index["last"])
            or np.any(index["last"][:-1] > index["first"][1:])
        ):
            raise self.damaged(self.folder / INDEX, f"does not describe the blocks of {LOG}")

    def blocks(self, entries):
        """Decoded payloads of ``entries``; a block that fails is damage."""
        out = []
        if not len(entries):
            return out  # a run that has no facts yet may have no log yet either
        try:
            fd, _ = files.open_regular(*_files.anchored(self.folder / LOG))
        except (files.Refused, OSError) as e:
            raise self.damaged(self.folder / LOG, f"cannot be read ({e})") from None
        try:
            for first, last, offset, length in entries:
                raw = files.pread_all(fd, int(length), int(offset))
                try:
                    first_, last_, _count, _n, payload = _log.read_block(raw, 0)
                    if (first_, last_) != (first, last) or len(raw) != length:
                        raise _log.Torn(0, "the block there is not the one the index names")
                except _log.Torn as t:
                    raise DamagedError(
                        f"run {self.name!r}: the block of forwards {first}..{last} at byte {offset} of "
                        f"{self.folder / LOG} does not read ({t.why}); `somatize check` on the store reports "
                        f"all damage; forwards before {first} still read"
                    ) from None
                out.append(_log.decode(payload))
        finally:
            os.close(fd)
        return out

    def series(self, name):
        """Points of series ``name``: the verified file, then pending points."""
        size, want = self.committed["series"].get(name, (0, None)) if self.committed else (0, None)
        points = np.empty(0, _log.POINT)
        if size:
            if not files.is_real_dir(self.folder / SERIES):
                raise self.damaged(self.folder / SERIES,
                                   "is not a real folder (a symlink?); nothing is read through it")
            path = _log.series_file(self.folder / SERIES, name)
            try:
                raw = _log.verified(path, size, want, self.name, "series")
            except DamagedError as e:  # said once, with one fix
                raise self.damaged(path, f"does not verify: {getattr(e, 'why', e)}") from None
            points = _log.points_of(raw)
        pending = self.points.get(name)
        if pending:
            points = np.concatenate([points, _log.points_of(_log.points_bytes(*pending))])
        return points

    def series_names(self):
        names = set(self.summary["series"]) if self.summary else set()
        return sorted(names | set(self.points))


def facts(store, run, forward=None) -> list[dict]:
    """The facts of one forward (counted from 0) in order; all facts when
    ``forward`` is None."""
    r = RunRecord(store, run)
    entries, count = r.entries()
    if forward is None:
        chosen = entries
    else:
        try:
            forward = operator.index(forward)
        except TypeError:
            raise SomatizeTypeError(f"forward={forward!r:.60} is not a whole number: "
                                    "write forward=0 for the first forward") from None
        if not 0 <= forward < count:
            raise SomatizeValueError(
                f"run {run!r} has {count} forwards (0..{count - 1}), so there is no forward={forward}"
                if count
                else f"run {run!r} has no forwards yet, so there is no forward={forward}"
            )
        lo = np.searchsorted(entries["last"], forward, "left")
        hi = np.searchsorted(entries["first"], forward, "right")
        chosen = entries[lo:hi]
    out = []
    for groups in r.blocks(chosen) + [r.groups]:
        for fw, some in groups:
            if forward is None or fw == forward:
                out.extend(some)
    return out


def _points(r, name):
    known = r.series_names()
    if name in known:
        return r.series(name)
    by_node = [n for n in known if n.startswith(name + "/") and n != TOOK]
    if len(by_node) == 1:  # one node says it: "energy" means "energy/peak"
        return r.series(by_node[0])
    shown = [n for n in known if n != TOOK]
    raise SomatizeKeyError(
        f"run {r.name!r} has no numeric fact {name!r}: curves there: "
        f"{', '.join(map(repr, shown[:20])) or 'none'}{' …' if len(shown) > 20 else ''} "
        f"(a fact becomes a curve when it has a numeric 'value')"
    )


def curve(store, run, name="loss"):
    """The values of fact ``name`` (its ``value`` field) by forward, as a
    pandas Series named ``name`` with index ``forward``."""
    import pandas as pd

    if not isinstance(name, str):
        raise SomatizeTypeError(f"curve(store, run, name): name is the name of a fact (a str), like \"loss\"; "
                                f"got {type(name).__name__} {name!r:.60}")
    r = RunRecord(store, run)
    r.needs_summary()
    points = _points(r, name)
    index = pd.Index(np.ascontiguousarray(points["forward"]), name="forward", copy=False)
    return pd.Series(np.ascontiguousarray(points["value"]), index=index, name=name, copy=False)


def step_of(c, losses=None) -> np.ndarray:
    """The step of each point of curve ``c`` (a Series by forward, as
    ``curve`` returns it): the one rule of a chart's step axis, kept by the
    notebook's ``progress`` and the run browser's chart alike. A curve's own
    points are one a step, so a point's step is its place in the curve, from
    0 (with micro=N a step spans N forwards: the forward is not the step).
    Given ``losses`` (the run's loss curve, one point a step), the step whose
    forward each point belongs to, 0 before the first: an evaluation, said
    after its step's facts, is drawn at that step."""
    if losses is None:
        return np.arange(len(c), dtype=np.float64)
    at = np.searchsorted(losses.index.to_numpy(dtype=np.int64), c.index.to_numpy(dtype=np.int64), side="right")
    return np.maximum(at - 1, 0).astype(np.float64)


def steps_of(store, run, c) -> np.ndarray:
    """The step of each point of ``c``, the curve of ``run`` named
    ``c.name``: the loss's by its place (``step_of(c)``); any other fact's
    (an evaluation's, ``lr``, an instrument's: said now and then, not once a
    step) by the run's loss curve (``step_of(c, losses)``), or by its place
    when the run records no loss. What ``progress`` and the run browser's
    chart both draw over."""
    if c.name == "loss":
        return step_of(c)
    try:
        losses = curve(store, run, "loss")
    except SomatizeKeyError:
        return step_of(c)
    return step_of(c, losses)


def curve_names(store, run):
    """The names of ``run``'s curves (its numeric facts' series), sorted;
    nothing but the summary is read."""
    r = RunRecord(store, run)
    r.needs_summary()
    return [n for n in r.series_names() if n != TOOK]


def _last_per_forward(points, rows):
    column = np.full(rows, np.nan)
    if len(points):
        points = points[(points["forward"] >= 0) & (points["forward"] < rows)]
        backwards = points[::-1]
        forwards, first = np.unique(backwards["forward"], return_index=True)
        column[forwards] = backwards["value"][first]
    return column


def forwards(store, run):
    """One row per forward: ``forward``, ``took_us`` and the last value of
    each numeric fact that no node made (``loss`` …), read from the series.
    Rows: the forwards the summary counts (bounded by the log's bytes)."""
    import pandas as pd

    r = RunRecord(store, run)
    r.needs_summary()
    r.needs_whole_log()
    rows = r.summary["forwards"]
    names = [n for n in r.series_names() if n == TOOK or "/" not in n]
    series = {n: r.series(n) for n in names}
    table = {"forward": np.arange(rows)}
    took = _last_per_forward(series.pop(TOOK, np.empty(0, _log.POINT)), rows)
    whole = not np.isnan(took).any() and np.all(took == np.round(took))
    table["took_us"] = took.astype(np.int64) if whole else took
    for name, points in series.items():
        table[name] = _last_per_forward(points, rows)
    return pd.DataFrame(table)


def nodes(store, run):
    """One row per node, from the run's summary: ``calls`` (the forwards that
    called it: ``ran`` + ``recalled``), ``ran`` (computed), ``recalled`` (from
    the cache), ``kept`` (written to the cache), its time in µs (total, mean a
    call, max) and its ``share`` of all node time."""
    import pandas as pd

    r = RunRecord(store, run)
    r.needs_summary()
    rows = []
    for node, a in r.summary["nodes"].items():
        calls = a["ran"] + a["recalled"]
        rows.append(
            {
                "node": node,
                "calls": calls,
                "ran": a["ran"],
                "recalled": a["recalled"],
                "kept": a["kept"],
                "total_us": a["total_us"],
                "mean_us": a["total_us"] / calls if calls else float("nan"),
                "max_us": a["max_us"],
            }
        )
    columns = ["node", "calls", "ran", "recalled", "kept", "total_us", "mean_us", "max_us"]
    frame = pd.DataFrame(rows, columns=columns)
    total = frame["total_us"].sum()
    frame["share"] = frame["total_us"] / total if total else 0.0
    return frame


def table_rows(store, stats) -> list[dict]:
    """Each run's columns (``_columns.row``), kept between listings
    (``_table``). The rows are shared between calls: nothing changes one."""
    from . import _table

    return _table.table(store, stats).rows


def runs(store, where=None):
    """A pandas DataFrame, one row per run of the store, its columns named
    by one rule (the same in ``somatize runs``, the sidebar and ``where=``;
    fixed ones have no dot, so no summary can take their name): ``run``, ``state`` (running, finished, interrupted, or
    damaged), ``forwards``, ``steps``, ``facts``, ``started``, ``updated``,
    ``duration`` (seconds), ``host``, ``pid``; one ``config.<key>`` column per
    key of the runs' configs (``Recorder(..., config=...)``; a nested dict
    flattened as ``config.optim.lr``; empty where a run has no such key; a
    column of ints is ``Int64``, or of objects past 64 bits, when one of
    them is past 2**53, which a float would round); for each summarised
    fact ``<fact>.last``, ``<fact>.best``, ``<fact>.min`` and ``<fact>.max``
    (best: max for a fact named like a score, ``acc``, ``f1``, …; min for
    any other; ``min``, ``max`` and ``best`` are over the values that are
    not NaN, wherever a NaN fell; ``last`` is the last value, NaN or not;
    NaN and infinities are kept as they were; empty where a fact has no such
    value); a ``cause`` column says why an interrupted run was (the
    exception that ended its script, an exit without ``close()``, a process
    killed), a ``problem`` column why a damaged run is damaged. Reads the
    summaries, no facts.

    ``where``: only the runs a query holds for, like
    ``where='config.lr < 1e-2 and loss.best < 0.1'`` (``and``, ``or``,
    ``not``, ``in [...]``, ``not in [...]``, ``==``, ``!=``, ``<`` … on
    values as recorded, a boolean never equal to a number; also ``age``,
    seconds since a run's last update, ``<fact>.first`` and
    ``<fact>.count``: how many values the fact was given, NaN included).
    The same query answers the same in ``somatize runs --where``, the run
    browser and ``compare``, by one rule for what a run lacks, NaN and
    infinities:

    - a comparison (``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``,
      ``not in``) with a value the run lacks is false: a config key it was
      not given, a fact it does not summarise, a value its summarised fact
      never had (a fact never recorded; the ``min``, ``max`` and ``best``
      of one recorded only as NaN);
    - a comparison with NaN is false too, ``!=`` and ``not in`` included;
    - ``not`` negates what its operand gave: ``not loss.last == 0.5``
      holds for a run whose last loss is NaN, or that has none;
    - ``null`` is a value recorded as None (a config's): ``== null`` holds
      for it alone, never for NaN nor for a value the run lacks;
    - an infinity is a number beyond every finite one, written ``inf`` or
      ``-inf``: ``loss.max == inf`` and ``loss.max > 1e308`` hold for a run
      whose largest loss was infinite.

    A query runs no code; one that does not read raises
    ``somatize.QueryError`` naming the character where reading stopped and
    what could stand there. (``Store.runs()`` returns only the names,
    sorted.)"""
    from . import _columns, _table, _where
    from ._frame import frame, unshared

    query = None if where is None else _where.Query(where)  # a bad query fails before anything is read
    table = _table.table(store, _columns.QUERY_STATS)  # what frame() shows of a row is the same either way
    if query is None:  # the table's frame is kept: a copy, its lists and dicts too
        return unshared(table.frame().copy(), table.nested())
    return frame(_where.matching(table.rows, query, columns=table.columns()), nested=table.nested())
