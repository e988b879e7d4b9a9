"""Questions asked of a run's record, answered without reading more than needed.

The rule kept here: a query reads the smallest thing that answers it. One
forward's facts: the index, then one or two blocks. A curve or ``forwards()``:
the series files. ``nodes()`` and ``runs()``: the summaries. A query first
asks a live Recorder of this process for its pending facts (read your own
writes); another process's facts are seen once its flusher has run.

pandas is imported inside the functions that build frames, so that the CLI
(which lists runs) does not pay for it.
"""

from __future__ import annotations

import operator

import numpy as np

from .._base.errors import DamagedError, SomatizeKeyError, SomatizeTypeError, SomatizeValueError
from . import _log
from ._recorder import TOOK
from ._runs import INDEX, LOG, SERIES, existing_folder, flush_live, read_summary, store_root, summaries


def _folder(store, run):
    folder = existing_folder(store_root(store), run)
    flush_live(folder)
    return folder


def _blocks(folder):
    """(entries, committed, torn_at): every block the log holds, from the
    index and, past its end, from a scan of the headers."""
    summary = read_summary(folder) or {}
    index = _log.read_index(folder / INDEX)
    end = int(index["offset"][-1] + index["length"][-1]) if len(index) else 0
    extra, torn = [], None
    try:
        with open(folder / LOG, "rb") as f:
            f.seek(end)
            tail = f.read()
    except FileNotFoundError:
        tail = b""
    try:
        for first, last, _count, offset, length in _log.scan(tail, 0):
            extra.append((first, last, end + offset, length))
    except _log.Torn as t:
        torn = end + t.offset
    if extra:
        index = np.concatenate([index, np.array(extra, _log.INDEX)])
    return index, summary.get("log_bytes", 0), torn, summary


def _read(folder, entries, run):
    """Decoded payloads of ``entries``; a block that fails is damage."""
    out = []
    if not len(entries):
        return out  # a run that has no facts yet may have no log yet either
    with open(folder / LOG, "rb") as f:
        for first, last, offset, length in entries:
            f.seek(int(offset))
            raw = f.read(int(length))
            try:
                payload = _log.read_block(raw, 0)[4]
            except _log.Torn as t:
                raise DamagedError(
                    f"run {run!r}: the block of forwards {first}..{last} at byte {offset} of "
                    f"{LOG} does not read ({t.why}); `somatize check` on the store reports "
                    f"all damage; forwards before {first} still read"
                ) from None
            out.append(_log.decode(payload))
    return out


def facts(store, run, forward=None) -> list[dict]:
    """The facts of one forward (counted from 0) in order; all facts when
    ``forward`` is None."""
    folder = _folder(store, run)
    entries, committed, torn, summary = _blocks(folder)
    count = max(summary.get("forwards", 0), int(entries["last"][-1]) + 1 if len(entries) else 0)
    if forward is None:
        chosen = entries
    else:
        try:
            forward = operator.index(forward)
        except TypeError:
            raise SomatizeTypeError(f"forward={forward!r} is not a whole number: write forward=0 for the first forward") from None
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
    for groups in _read(folder, chosen, run):
        for fw, some in groups:
            if forward is None or fw == forward:
                out.extend(some)
    if forward is None and torn is not None and torn < committed:
        raise DamagedError(f"run {run!r}: {LOG} is damaged at byte {torn}; facts(store, run, forward=N) still reads every forward whose blocks are whole, and `somatize check` lists the damaged ones")
    return out


def _points(folder, name, run):
    path = _log.series_file(folder / SERIES, name)
    if not path.exists():
        known = [n for n in _log.series_names(folder / SERIES) if n != TOOK]
        by_node = [n for n in known if n.startswith(name + "/")]
        if len(by_node) == 1:  # one node says it: "energy" means "energy/peak"
            return _log.read_series(_log.series_file(folder / SERIES, by_node[0]))
        raise SomatizeKeyError(
            f"run {run!r} has no numeric fact {name!r}: curves there: "
            f"{', '.join(map(repr, known)) or 'none'} (a fact becomes a curve when it has a numeric 'value')"
        )
    return _log.read_series(path)


def curve(store, run, name="loss"):
    """The values of fact ``name`` (its ``value`` field) by forward, as a
    pandas Series named ``name`` with index ``forward``."""
    import pandas as pd

    points = _points(_folder(store, run), name, run)
    return pd.Series(points["value"].astype(np.float64), index=pd.Index(points["forward"], name="forward"), name=name)


def _last_per_forward(points, rows):
    column = np.full(rows, np.nan)
    if len(points):
        backwards = points[::-1]
        forwards, first = np.unique(backwards["forward"], return_index=True)
        column[forwards] = backwards["value"][first]
    return column


def forwards(store, run):
    """One row per forward: ``forward``, ``took_us`` and the last value of
    each numeric fact that no node made (``loss`` …), read from the series."""
    import pandas as pd

    folder = _folder(store, run)
    summary = read_summary(folder) or {}
    names = [n for n in _log.series_names(folder / SERIES) if n == TOOK or "/" not in n]
    series = {n: _log.read_series(_log.series_file(folder / SERIES, n)) for n in names}
    rows = max([summary.get("forwards", 0)] + [int(p["forward"].max()) + 1 for p in series.values() if len(p)])
    table = {"forward": np.arange(rows)}
    took = _last_per_forward(series.pop(TOOK, np.empty(0, _log.POINT)), rows)
    whole = not np.isnan(took).any() and np.all(took == np.round(took))
    table["took_us"] = took.astype(np.int64) if whole else took
    for name, points in series.items():
        table[name] = _last_per_forward(points, rows)
    return pd.DataFrame(table)


def nodes(store, run):
    """One row per node, from the run's summary: how often it ran or was
    recalled, its time in µs (total, mean, max) and its share of all of it."""
    import pandas as pd

    folder = _folder(store, run)
    per = (read_summary(folder) or {}).get("nodes", {})
    rows = []
    for node, a in per.items():
        times = a["ran"] + a["recalled"]
        rows.append(
            {
                "node": node,
                "forwards": times,
                "ran": a["ran"],
                "recalled": a["recalled"],
                "kept": a["kept"],
                "total_us": a["total_us"],
                "mean_us": a["total_us"] / times if times else float("nan"),
                "max_us": a["max_us"],
            }
        )
    columns = ["node", "forwards", "ran", "recalled", "kept", "total_us", "mean_us", "max_us"]
    frame = pd.DataFrame(rows, columns=columns)
    total = frame["total_us"].sum()
    frame["share"] = frame["total_us"] / total if total else 0.0
    return frame


def runs(store):
    """One row per run of the store: its state and summary; reads no facts."""
    import pandas as pd

    rows = []
    for s in summaries(store):
        row = {k: s.get(k) for k in ("run", "state", "forwards", "facts", "started", "updated", "host", "pid")}
        for name, stats in s.get("summarising", {}).items():
            row[name] = stats.get("last")
            row[f"{name}_min"] = stats.get("min")
        rows.append(row)
    frame = pd.DataFrame(rows, columns=None if rows else ["run", "state", "forwards", "facts"])
    for when in ("started", "updated"):
        if when in frame:
            frame[when] = pd.to_datetime(frame[when], unit="s")
    return frame
