"""`compare(store, where=..., metric="loss.best")`: the runs of a sweep side
by side, as an explorer whose brushes are a query.

The rule it keeps: the brushes, the query and the selection are one thing.
A brush is turned into a query in the grammar of ``record/_where``
(``explorer.where``), and the selection is that query's answer over the
runs' rows, made by ``record/_frame.frame`` as ``runs()`` makes its table:
``runs(store, where=explorer.where)`` gives the very runs of
``explorer.selected``. Setting ``explorer.where`` keeps the text as given
(its answer is the selection) and moves the brushes to show it.

Everything drawn is decided here, in Python, once for the page and the
static picture: each axis's place for every run (from 0 at its foot to 1 at
its top; a run without the value below the foot), its ticks, and the lines
between neighbouring axes: one a run up to ``DENSE_ABOVE`` runs, above that
binned densities (the runs between two axes counted in ``BINS`` x ``BINS``
bins, one line a bin pair, its opacity by its count), so 10,000 runs weigh
what 400 do. The page (bqplot, ``_compare_view``) and the picture
(``_pictures/_parallel``) only draw them.
"""

from __future__ import annotations

import math
from html import escape

import numpy as np

from .._pictures import _chart, _svg
from ..record._tree import column_text, comparison_of, conjuncts, equal, literal_text, writable
from ._bundle import panel_bundle
from ._progress import RAMP, finite, thinned

DENSE_ABOVE = 400  # runs drawn one line each up to this many; binned above
BINS = 32  # bins along an axis, when binned
CURVES = 20  # curves drawn at most: the best of the selection by the metric
CURVE_POINTS = 300  # each thinned to this many bucket means
MISSING = -0.12  # the place of a run without the axis's value, below the axis's foot
INSET = 0.08  # on an axis holding an infinity: the gap between its end, where the infinity is, and the finite values
GREY = "#9ca3af"  # a run outside the selection, and one without the metric (hex: bqplot takes no CSS variable)


def _outward(x: float, down: bool) -> float:
    """``x`` to four significant digits, rounded away from the inside of the
    brush (down for its foot, up for its top), so a bound reads short."""
    if x == 0 or not math.isfinite(x):
        return x
    r = float(f"{x:.4g}")
    if (r > x) if down else (r < x):
        step = 10.0 ** (math.floor(math.log10(abs(x))) - 3)
        r = float(f"{(r - step if down else r + step):.4g}")
    return r


def _present(v) -> bool:
    return v is not None and not (v.__class__ is float and v != v)


class Axis:
    """One vertical axis: a column of the runs, each run's place on it
    (``places``: 0 at the foot, 1 at the top, ``MISSING`` without a value),
    its ticks ``[(place, label)]``, and the query a brush on it means.

    Numbers are placed linearly, or by their logarithm when all are positive
    and span more than two decades (``_chart.wants_log``); an infinity (a
    summary's ``inf``) at the end of its sign, ``INSET`` apart from the
    finite values, its tick reading ``inf`` or ``-inf``. Anything else
    (strings, booleans, null, numbers among them; numbers that are all
    infinite) is a set of values spread evenly from foot to top: false,
    true, numbers, strings, null."""

    def __init__(self, column, values):
        self.column = column
        self.label = column[len("config."):] if column.startswith("config.") else column
        present = [v for v in values if v is not _ABSENT and _present(v)]
        self.numeric = bool(present) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                             for v in present)
        self.importance = None
        finite = [v for v in present if v - v == 0] if self.numeric else []
        if finite:
            self._numbers(values, present, finite)
        else:
            self.numeric = False
            self._categories(values)

    def _numbers(self, values, present, finite):
        self._least, self._most = min(finite), max(finite)  # as recorded (an int past 2**53 stays exact)
        lo, hi = float(self._least), float(self._most)
        self.log = _chart.wants_log(finite)
        self.whole = all(isinstance(v, int) for v in present)
        self.lo, self.hi = lo, hi
        self._up, self._down = math.inf in present, -math.inf in present  # infinities: at the ends
        self._g0, self._g1 = INSET if self._down else 0.0, 1.0 - INSET if self._up else 1.0  # the finite values
        f = math.log10 if self.log else float
        self._f0, self._span = f(lo), (f(hi) - f(lo)) or 1.0
        data = np.array([float(v) if v is not _ABSENT and _present(v) else np.nan for v in values])
        with np.errstate(invalid="ignore", divide="ignore"):
            places = self._g0 + ((np.log10(data) if self.log else data) - self._f0) / self._span * (self._g1 - self._g0)
        if hi == lo:
            places = np.where(np.isnan(data), np.nan, self.place(lo))
        places = np.where(data == np.inf, 1.0, np.where(data == -np.inf, 0.0, places))
        self.places = np.where(np.isnan(places), MISSING, places)
        if hi == lo:
            self.ticks = [(self.place(lo), _chart.tick_label(lo))]
        else:
            values = _chart.log_ticks(lo, hi) if self.log else _chart.ticks(lo, hi, 4, whole=self.whole)
            self.ticks = [(self.place(t), label) for t, label in _chart.distinct(
                [t for t in values if lo - 1e-9 * abs(lo) <= t <= hi + 1e-9 * abs(hi)], _chart.tick_label)]
        self.ticks = [(0.0, "-inf")] * self._down + self.ticks + [(1.0, "inf")] * self._up
        self.categories = None

    def _categories(self, values):
        def order(v):
            kind = 0 if isinstance(v, bool) else 1 if isinstance(v, (int, float)) else 2 if isinstance(v, str) else 3
            return (kind, v if kind < 3 else 0)  # false, true, numbers, strings, null

        keys = {}
        for v in values:
            if v is not _ABSENT and not (v.__class__ is float and v != v):
                keys[(v.__class__ is bool, v)] = v
        self.categories = sorted(keys.values(), key=order)
        k = len(self.categories)
        self.log = False
        spot = {(c.__class__ is bool, c): (i / (k - 1) if k > 1 else 0.5) for i, c in enumerate(self.categories)}
        self.places = np.array([MISSING if v is _ABSENT or (v.__class__ is float and v != v)
                                else spot[(v.__class__ is bool, v)] for v in values])
        self.ticks = [(spot[(c.__class__ is bool, c)], _chart.number(c) if isinstance(c, (int, float))
                       and not isinstance(c, bool) else literal_text(c) if c is None or isinstance(c, bool) else c)
                      for c in self.categories]

    def place(self, v):
        """The place of value ``v`` on a numeric axis (outside [0, 1] when outside its range; an
        infinity at the end of its sign)."""
        if v - v != 0:
            return 1.0 if v > 0 else 0.0
        g0, g1 = self._g0, self._g1
        if self.hi == self.lo:  # one finite value, in the middle; with infinities, a value beside it between
            side = 0.0 if not (self._up or self._down) or v == self.lo else 0.25 if v > self.lo else -0.25
            return (g0 + g1) / 2 + side * (g1 - g0)
        f = math.log10 if self.log else float
        return g0 + (f(v) - self._f0) / self._span * (g1 - g0)

    def value(self, place):
        """The value at ``place`` on a numeric axis."""
        x = self._f0 + (place - self._g0) / (self._g1 - self._g0) * self._span
        return 10.0 ** x if self.log else x

    def _bound(self, at, foot):
        """The value a brush's end at place ``at`` stands for (its foot when ``foot``, else its top):
        an end on the place of an infinity is that infinity; one in the gap beside an infinity is
        past every finite value; one at or past the finite values' end is their least or greatest."""
        if self.hi == self.lo and not (self._up or self._down):
            return self._least if foot else self._most  # one value: any brush holds it
        if foot and at <= 0 and self._down:
            return -math.inf
        if not foot and at >= 1 and self._up:
            return math.inf
        low, high = (self._g0, self._g1) if self.hi != self.lo else (self.place(self.lo),) * 2
        if foot:
            return self._least if at <= low else math.inf if at > high else None
        return self._most if at >= high else -math.inf if at < low else None

    def term(self, brush):
        """The query a brush ``(foot, top)`` in places means, in the grammar."""
        a, b = max(0.0, min(brush)), min(1.0, max(brush))
        column = column_text(self.column)
        if self.categories is not None:
            chosen = [c for c, p in zip(self.categories, self._spots()) if a - 1e-9 <= p <= b + 1e-9]
            return f"{column} in [{', '.join(literal_text(c) for c in chosen)}]"
        if b < a:  # a brush below the foot: runs without a value, which no comparison holds for
            return f"{column} in []"
        # a brush at the foot or the top holds the very value there (10 ** log10(n) is not always n)
        lo, hi = self._bound(a, True), self._bound(b, False)
        if self.whole:  # the ends as recorded; a bound within a float's error of a whole number is that number
            lo = math.ceil(self.value(a) - 1e-9 - 1e-12 * abs(self.value(a))) if lo is None else lo
            hi = math.floor(self.value(b) + 1e-9 + 1e-12 * abs(self.value(b))) if hi is None else hi
        else:
            lo = _outward(self.value(a) if lo is None else lo, True)
            hi = _outward(self.value(b) if hi is None else hi, False)
        return f"{column} >= {literal_text(lo)} and {column} <= {literal_text(hi)}"

    def _spots(self):
        k = len(self.categories)
        return [i / (k - 1) if k > 1 else 0.5 for i in range(k)]

    def brush_of(self, said):
        """The brush ``[foot, top]`` (in places) that shows the comparisons
        ``said`` (``[(op, value)]``, all of this axis's), or None."""
        if self.categories is not None:
            chosen = set()
            for op, v in said:
                if op not in ("==", "in"):
                    raise _Undrawable(f"{self.column} {op} …", "a set of values: write == or in [...]")
                for x in (v if op == "in" else [v]):
                    chosen.update(p for c, p in zip(self.categories, self._spots()) if equal(c, x))
            if not chosen:
                return None
            room = 0.25 / max(1, len(self.categories) - 1)  # a brush a person can see and grab, around them
            return [min(chosen) - room, max(chosen) + room]
        lo, hi = -math.inf, math.inf
        for op, v in said:
            values = v if op == "in" else [v]
            if op == "in" and not values:  # no value at all: what a brush below the foot writes
                return None
            numbers = [x for x in values if isinstance(x, (int, float)) and not isinstance(x, bool)]
            if op == "!=" or not numbers:
                raise _Undrawable(f"{self.column} {op} {v!r:.40}", "a range of numbers: write <, <=, >, >=, "
                                  "== or in [...] with numbers")
            if op in (">", ">=", "==", "in"):
                lo = max(lo, min(numbers))
            if op in ("<", "<=", "==", "in"):
                hi = min(hi, max(numbers))
        if self.hi == self.lo and not (self._up or self._down):
            return [0.0, 1.0] if lo <= self.lo <= hi else None
        if self.log:  # no place below a log axis's foot (nor an infinity's own place taken away)
            lo, hi = lo if lo == -math.inf else max(lo, self.lo), hi if hi == math.inf else min(hi, self.hi)
        foot = 0.0 if lo == -math.inf else max(0.0, self.place(lo))
        top = 1.0 if hi == math.inf else min(1.0, self.place(hi))
        if foot > top:
            return None
        return [foot, top] if top - foot >= 0.02 else [foot - 0.01, top + 0.01]  # one value: a brush one can see


class _Undrawable(Exception):
    def __init__(self, part, wanted):
        super().__init__(part, wanted)
        self.part, self.wanted = part, wanted


_ABSENT = object()


def _importance(axis, metric):
    """How much ``axis`` explains the metric: the magnitude of Spearman's
    rank correlation of its values with the metric's, over the runs having
    both; for a set of values (strings, booleans), the correlation ratio of
    the metric's ranks over the values (equal to |Spearman| for two values)."""
    import pandas as pd

    both = (axis.places != MISSING) & (metric.places != MISSING)
    if both.sum() < 3:
        return 0.0
    ranks = pd.Series(metric.places[both]).rank().to_numpy()
    if ranks.std() == 0:
        return 0.0
    if axis.categories is None:
        x = pd.Series(axis.places[both]).rank().to_numpy()
        return 0.0 if x.std() == 0 else float(abs(np.corrcoef(x, ranks)[0, 1]))
    groups = pd.Series(ranks).groupby(axis.places[both])
    between = float((groups.count() * (groups.mean() - ranks.mean()) ** 2).sum())
    return math.sqrt(between / float(((ranks - ranks.mean()) ** 2).sum()))


class Explorer:
    """The answer of `compare`: linked views of runs (parallel coordinates
    over the configuration keys that vary plus the metric, and the selected
    runs' curves) in a notebook; a static picture of the same views where no
    widget runs.

    ``selected``: the selected runs' table (as ``runs()``'s); ``where``: the
    query the brushes mean (``runs(store, where=explorer.where)`` gives the
    same runs), settable; ``axes``: the columns drawn, the metric first;
    ``importance``: each key's |rank correlation| with the metric."""

    MISSING = MISSING  # where its view draws a run without an axis's value
    CURVES = CURVES  # curves its view draws at most

    def __init__(self, store, where, metric):
        from somatize._base.errors import SomatizeKeyError, SomatizeTypeError
        from somatize.record import _columns, _table, _where
        from somatize.record._where import nameable

        if not isinstance(metric, str):
            raise SomatizeTypeError(f"metric={metric!r}: give a column of runs(store) as a str, e.g. "
                                    f"metric='loss.best'")
        self.store, self.metric, self.base = store, metric, where
        table = _table.table(store, _columns.QUERY_STATS)
        if where is None:
            self.rows, self._columns = table.rows, table.columns()
        else:  # the runs where= holds for, whose columns a brush's query asks at once (_where.Columns)
            self.rows = _where.matching(table.rows, where, columns=table.columns())
            self._columns = _where.Columns(self.rows)
        values = [r.get(metric, _ABSENT) for r in self.rows]
        if not any(v is not _ABSENT and _present(v) and isinstance(v, (int, float)) for v in values):
            known = sorted({c for r in self.rows for c in r if "." in c and not c.startswith("config.")
                            and c.rsplit(".", 1)[1] in _columns.STATS})
            raise SomatizeKeyError(f"metric={metric!r}: no run here has a number in that column; the summarised "
                                   f"columns are {known[:12] or 'none'} (Recorder(..., summarising=['loss']) "
                                   f"summarises a fact)")
        self.fact = metric.rsplit(".", 1)[0] if metric.rsplit(".", 1)[-1] in _columns.QUERY_STATS else None
        self.higher = bool(_columns.HIGHER.search(metric))  # best is the highest (acc, score, …)
        head = Axis(metric, values)
        keys = []
        for column in dict.fromkeys(c for r in self.rows for c in r if c.startswith("config.")):
            got = [r.get(column, _ABSENT) for r in self.rows]
            given = {(v.__class__ is bool, v) for v in got if v is not _ABSENT and writable(v)}
            if any(v is not _ABSENT and not writable(v) for v in got):
                continue  # a list, a dict: no brush can say it
            if (len(given) >= 2 or (given and any(v is _ABSENT for v in got))) and nameable(column):
                keys.append(Axis(column, got))  # (a key no query can name, with a backtick or a tab, has none)
        for axis in keys:
            axis.importance = _importance(axis, head)
        keys.sort(key=lambda a: -a.importance)  # stable: equal ones in the order the configs gave them
        self.axis_list = [head, *keys]
        self.missing = any((a.places == MISSING).any() for a in self.axis_list)
        self.brushes: list = [None] * len(self.axis_list)
        self._where_text = where  # no brush yet: the query is compare's own
        self._view = None
        self._curves: dict = {}
        self._select()

    # ---- what is asked ---------------------------------------------------------------

    @property
    def axes(self):
        return [a.column for a in self.axis_list]

    @property
    def importance(self):
        return {a.column: a.importance for a in self.axis_list[1:]}

    @property
    def where(self):
        """The query the brushes mean (with ``compare``'s own ``where=``
        first), or None when nothing is brushed and none was given."""
        return self._where_text

    @where.setter
    def where(self, text):
        self._set_where(text)
        if self._view is not None:
            self._view.brushes_moved(self.brushes)
            self._view.draw()

    @property
    def selected(self):
        """The selected runs' table, made as ``runs()`` makes its own."""
        from somatize.record._frame import frame

        return frame([r for r, m in zip(self.rows, self.mask) if m])

    # ---- brushes and the query ----------------------------------------------------------

    def brush(self, i, extent):
        """Axis ``i`` brushed over ``extent`` (``(foot, top)`` in places, 0 to
        1; None clears it): the query and the selection follow."""
        from somatize.record._where import Query

        brushes = list(self.brushes)
        brushes[i] = None if extent is None or len(extent) != 2 else [float(min(extent)), float(max(extent))]
        terms = [a.term(b) for a, b in zip(self.axis_list, brushes) if b is not None]
        base = [f"({self.base})"] if self.base is not None and terms else [self.base] if self.base else []
        text = " and ".join(base + terms) or None
        if text is not None:
            Query(text)  # a query that does not read changes nothing: the brushes stay as they were
        self.brushes, self._where_text = brushes, text
        self._select()

    def _set_where(self, text):
        from somatize._base.errors import SomatizeValueError
        from somatize.record._where import Query, parse

        if text is None or not str(text).strip():
            own, parts = None, []
        else:
            query = Query(text)  # a bad query fails here, pointing at the character
            own, parts = query.text.strip(), conjuncts(query.tree)
            if self.base is not None:
                # compare's own where= in front is not the brushes' ("A or B and C" is A or (B and C): no
                # base "A or B" in front); the brushes draw what follows it
                lead = conjuncts(parse(self.base))
                if parts[: len(lead)] == lead:
                    parts = parts[len(lead):]
                    own = " and ".join(p.text() for p in parts) or None
        said_all = [comparison_of(p) for p in parts]
        if None in said_all:
            raise SomatizeValueError(
                f"where={text!r}: the brushes draw comparisons of an axis with values joined by 'and' "
                f"(no 'or', no 'not'): write e.g. {self._example()!r}")
        said: dict = {}
        by_column = {a.column: i for i, a in enumerate(self.axis_list)}
        for column, op, value in said_all:
            if column not in by_column:
                raise SomatizeValueError(
                    f"where={text!r}: {column} is not an axis of this explorer (its axes: "
                    f"{', '.join(self.axes)}; a key that does not vary has none)")
            said.setdefault(by_column[column], []).append((op, value))
        brushes = [None] * len(self.axis_list)
        for i, pairs in said.items():
            try:
                brushes[i] = self.axis_list[i].brush_of(pairs) or [MISSING, MISSING]
            except _Undrawable as e:
                raise SomatizeValueError(f"where={text!r}: {e.part} cannot be drawn as a brush on an axis "
                                         f"of {e.wanted}") from None
        self.brushes = brushes
        if own is None:
            self._where_text = self.base
        else:
            self._where_text = own if self.base is None else f"({self.base}) and {own}"
        self._select()

    def _example(self):
        a = self.axis_list[-1]
        return a.term([0.0, 0.5])

    def _select(self):
        from somatize.record._where import Query

        if self._where_text is None or self._where_text == self.base:
            self.mask = np.ones(len(self.rows), dtype=bool)
            return
        self.mask = Query(self._where_text).mask(self._columns)  # of whole columns: as row by row, at once

    # ---- what is drawn ------------------------------------------------------------------

    def colors(self):
        """Each run's colour: its metric's place along ``RAMP`` (grey without one)."""
        places = self.axis_list[0].places
        ramp = np.array(RAMP + [GREY])
        at = np.where(places == MISSING, len(RAMP), np.clip(np.rint(places * (len(RAMP) - 1)), 0, len(RAMP) - 1))
        return ramp[at.astype(np.int64)]

    def lines(self):
        """The lines between each pair of neighbouring axes: per gap, the
        arrays ``foot`` (place on the left axis), ``top`` (on the right),
        ``color`` and ``opacity``, the runs outside the selection first (grey,
        faint) so the selected ones are drawn over them. One line a run up to
        ``DENSE_ABOVE`` runs, else one a pair of bins holding runs."""
        gaps = []
        colors = self.colors()
        chosen = self.mask
        n = len(self.rows)
        dense = n > DENSE_ABOVE
        for left, right in zip(self.axis_list, self.axis_list[1:]):
            parts = []
            for inside in (False, True):
                keep = chosen == inside
                if not keep.any():
                    continue
                ya, yb = left.places[keep], right.places[keep]
                if not dense:
                    fade = min(0.8, 0.25 + 30 / max(1, n)) if inside else 0.12
                    parts.append((ya, yb, colors[keep] if inside else np.full(len(ya), GREY),
                                  np.full(len(ya), fade)))
                    continue
                parts.append(_binned(ya, yb, self.axis_list[0].places[keep], inside))
            if parts:
                gaps.append(tuple(np.concatenate(p) for p in zip(*parts)))
            else:
                gaps.append((np.zeros(0), np.zeros(0), np.zeros(0, dtype=object), np.zeros(0)))
        return gaps

    def curve_chart(self):
        """The curves of the selected runs (the best ``CURVES`` by the
        metric), as ``_chart.chart`` data, coloured as their lines."""
        if self.fact is None:
            return None
        picked = self.shown_curves()
        colors = self.colors()
        series = []
        for i in picked:
            got = self._curve(self.rows[i]["run"])
            if got is not None:
                series.append({"name": self.rows[i]["run"], "color": str(colors[i]),
                               "points": list(zip(got[0].tolist(), got[1].tolist()))})
        return _chart.chart(series, ylabel=self.fact, xlabel="step")

    def shown_curves(self):
        """Indexes (in ``rows``) of the runs whose curves are drawn: the best
        ``CURVES`` of the selection by the metric."""
        metric = self.axis_list[0].places
        at = np.flatnonzero(self.mask & (metric != MISSING))
        order = np.argsort(-metric[at] if self.higher else metric[at], kind="stable")
        return at[order[:CURVES]].tolist()

    def _curve(self, run):
        from somatize._base.errors import SomatizeError
        from somatize.record import curve

        if run not in self._curves:
            try:
                xs, ys = finite(curve(self.store, run=run, name=self.fact))
                self._curves[run] = thinned(ys, xs, CURVE_POINTS)
            except SomatizeError:  # damaged since, or without that fact: no line
                self._curves[run] = None
        return self._curves[run]

    def title(self):
        chosen = int(self.mask.sum())
        head = f"{len(self.rows):,} runs by {self.metric}"
        if self.base is not None:
            head += f" where {self.base}"
        return head + (f" — {chosen:,} selected" if chosen != len(self.rows) else "")

    def curves_title(self):
        shown = len(self.shown_curves())
        chosen = int(self.mask.sum())
        best = "highest" if self.higher else "lowest"
        if shown < chosen:
            return f"{self.fact} of the {shown} of {chosen:,} selected runs with the {best} {self.metric}"
        return f"{self.fact} of the {chosen:,} selected runs"

    def picture(self):
        """What both the page and the static picture draw: the axes (label,
        importance, ticks, brush) and the lines."""
        axes = [{"label": a.label, "column": a.column, "ticks": a.ticks, "brush": b,
                 "note": "metric" if i == 0 else f"|ρ| {a.importance:.2f}",
                 "lacks": bool((a.places == MISSING).any())}
                for i, (a, b) in enumerate(zip(self.axis_list, self.brushes))]
        return {"axes": axes, "gaps": self.lines(), "missing": self.missing, "width": self.picture_width()}

    def picture_width(self):
        """The lines' stroke width: thin one a run, thicker binned."""
        return 1.5 if len(self.rows) <= DENSE_ABOVE else 2.0

    def to_html(self):
        """The static picture: what GitHub, nbviewer and nbconvert show."""
        from .._pictures import _parallel

        inner = _parallel.parallel_svg(self.picture(), title=self.title(), missing_at=MISSING)
        chart = self.curve_chart()
        if chart is not None:
            inner += (f'<div style="font-size:12px;color:{_svg.MUTED};margin:8px 0 2px">'
                      f'{escape(self.curves_title())}</div>' + _svg.line_chart(chart, height=220, legend=False))
        return _svg.boxed(inner, self.title())

    def widget(self):
        """The interactive views (bqplot): brush an axis (drag along it),
        brush several; a click beside a brush clears it."""
        if self._view is None:
            from ._compare_view import ExplorerView

            self._view = ExplorerView(self)
        return self._view.box

    def _repr_mimebundle_(self, include=None, exclude=None):
        return panel_bundle(self, self.widget)

    def __repr__(self):
        return (f"compare({len(self.rows)} runs, metric {self.metric!r}, axes {self.axes[1:]}, "
                f"{int(self.mask.sum())} selected, where={self.where!r})")


def _binned(ya, yb, metric, inside):
    """One line a pair of bins (left axis, right axis) holding runs: at the
    mean places of its runs, its opacity growing with their count, its
    colour their mean metric's (grey outside the selection)."""
    def bins(y):
        return np.where(y == MISSING, BINS, np.clip((y * BINS).astype(np.int64), 0, BINS - 1))

    pair = bins(ya) * (BINS + 1) + bins(yb)
    size = (BINS + 1) ** 2
    count = np.bincount(pair, minlength=size)
    held = np.flatnonzero(count)
    c = count[held].astype(np.float64)
    foot = np.bincount(pair, ya, size)[held] / c
    top = np.bincount(pair, yb, size)[held] / c
    if inside:
        known = metric != MISSING
        sums = np.bincount(pair[known], metric[known], size)[held]
        ns = np.bincount(pair[known], minlength=size)[held]
        mean = np.divide(sums, ns, out=np.full(len(held), np.nan), where=ns > 0)
        ramp = np.array(RAMP + [GREY])
        at = np.where(np.isnan(mean), len(RAMP), np.clip(np.rint(np.nan_to_num(mean) * (len(RAMP) - 1)), 0,
                                                          len(RAMP) - 1)).astype(np.int64)
        color = ramp[at]
        opacity = 0.15 + 0.75 * np.sqrt(c / c.max())
    else:
        color = np.full(len(held), GREY)
        opacity = 0.05 + 0.25 * np.sqrt(c / c.max())
    return foot, top, color, opacity


def compare(store, where=None, metric="loss.best"):
    """The runs of a store side by side, as linked views: parallel
    coordinates over the configuration keys that vary among them plus
    ``metric`` (a column of ``runs(store)``; default ``loss.best``), and the
    selected runs' curves of the metric's fact (the best 20 of them).

    Drag along an axis to brush it; brush several to narrow the selection;
    ``explorer.selected`` is then the selected runs' table (as ``runs()``
    makes it), ``explorer.where`` the query the brushes mean, in the grammar
    of ``runs(store, where=...)``, which gives the same runs. Setting
    ``explorer.where = "config.lr <= 0.01 and loss.best < 0.2"`` (comparisons
    of the axes with values, joined by ``and``) moves the brushes; the text
    set is kept and answered as it is.

    ``where=``: only the runs that query holds for (as ``runs(store,
    where=...)``), and every brush's query begins with it.

    Only keys that vary are drawn (a key some runs lack counts as varying;
    a run without it is drawn below the axis's foot, and no brush selects
    it). The metric is the first axis; the keys follow ordered by how much
    they explain it: the magnitude of Spearman's rank correlation between
    the key's values and the metric over the runs having both (for strings
    and booleans, the correlation ratio of the metric's ranks over the
    values, which is |Spearman| for two values), shown under each axis as
    |ρ|. Above 400 runs the lines are binned in the kernel (32 bins an axis,
    one line a pair of bins, its opacity by its count), so the page draws
    10,000 runs as fast as 400."""
    from somatize.record._where import Query

    if where is not None:
        where = Query(where).text  # a bad query fails before anything is read
    return Explorer(store, where, metric)
