"""`progress(store, run=...)`: a named fact over steps, one line per run.

The rule it keeps: what is sent to the page is bounded, whatever the length
of the run. A curve is thinned to at most `POINTS` bucket means before it
leaves Python (a 1M-step run and a 1k-step run weigh the same in a saved
notebook); smoothing, the scale, the zoomed range and the ticks are decided
here, from the full curve (`_chart`), and the page only draws them
(`js/widgets/progress.js`), as the static picture does.
"""

from __future__ import annotations

import numpy as np

from .._pictures import _chart, _svg
from ..record._queries import step_of, steps_of
from ._bundle import panel_bundle

POINTS = 2000
XLABELS = {"step": "step", "relative": "time since the run began", "wall": "clock time"}
# Runs coloured by a numeric config value: low to high along viridis (a
# sequential map that reads in both themes and in grey), by rank.
RAMP = ["#440154", "#3b528b", "#21918c", "#5ec962", "#b5a000"]


def thinned(values, steps, points=POINTS):
    """(steps, means): at most `points` bucket means of `values`, each at the
    mean step of its bucket."""
    values, steps = np.asarray(values, dtype=np.float64), np.asarray(steps, dtype=np.float64)
    if len(values) <= points:
        return steps, values
    edges = np.linspace(0, len(values), points + 1).astype(np.int64)
    counts = np.diff(edges)
    return np.add.reduceat(steps, edges[:-1]) / counts, np.add.reduceat(values, edges[:-1]) / counts


X_AXES = ("step", "relative", "wall")
WALL = "wall_s"  # the Trainer's fact: the clock (seconds since 1970) when a step began
EVALUATED = "val_"  # the Trainer's evaluation (torch/_evaluate.py): val_loss, val_<metric>, drawn beside the loss


def finite(curve, xs=None):
    """(xs, values) of a curve's finite values (and finite xs). By default x
    is the step (`record._queries.step_of`: the fact's place in the curve,
    from 0 like forwards and `Live`; with micro=N a step spans N forwards,
    so it is not the curve's index)."""
    values = curve.to_numpy(dtype=np.float64)
    if xs is None:
        xs = step_of(curve)
    keep = np.isfinite(values) & np.isfinite(xs)
    return xs[keep], values[keep]


def clock_of(store, run, c):
    """Seconds since 1970 of each point of the curve `c`. The Trainer says
    `wall_s` on some steps (the first ten, every 20th, and at least once a
    second: torch/_trainer.py, CLOCKS_*); a point between two of them is
    placed by its forward, linearly, and one after the last at the pace of
    the last two. NaN before the first."""
    from somatize._base.errors import SomatizeKeyError, SomatizeValueError
    from somatize.record import curve

    try:
        wall = curve(store, run=run, name=WALL)
    except SomatizeKeyError:
        raise SomatizeValueError(
            f"run {run!r} records no step times (the Trainer's {WALL!r} fact, a clock reading at the start "
            f"of each step), so it cannot be drawn over time; draw it over steps with x='step'"
        ) from None
    known = wall.index.to_numpy(dtype=np.float64)
    times = wall.to_numpy(dtype=np.float64)
    want = c.index.to_numpy(dtype=np.float64)
    if not len(times):
        return np.full(len(c), np.nan)
    out = np.interp(want, known, times)
    if len(times) >= 2 and known[-1] > known[-2]:  # past the last: at the pace of the last two
        pace = (times[-1] - times[-2]) / (known[-1] - known[-2])
        after = want > known[-1]
        out[after] = times[-1] + (want[after] - known[-1]) * pace
    return np.where(want >= known[0], out, np.nan)


def smoothed(values, weight):
    """Exponential moving average, debiased (the first points are not pulled
    to 0): pandas' `ewm(alpha=1 - weight, adjust=True)`."""
    values = np.asarray(values, dtype=np.float64)
    if weight <= 0 or len(values) == 0:
        return values
    import pandas as pd

    return pd.Series(values).ewm(alpha=1 - weight, adjust=True).mean().to_numpy()


class Progress:
    """The answer of `progress`: a panel in a notebook; `.curves` (one
    pandas Series per run) everywhere.

    What the reader chooses in the panel lives here, in Python (`log`:
    None chooses from the data; `smoothing` 0 to 1; `outliers`: True leaves
    the extreme 1% out of the y range; `window`: (first, last) step shown),
    and `chart()` is what both the page and the static picture draw."""

    def __init__(self, store, runs, name, color_by=None, x="step", group=None):
        from somatize._base.errors import SomatizeValueError
        from somatize.record import curve

        if x not in X_AXES:
            raise SomatizeValueError(f"x={x!r}: give one of {', '.join(map(repr, X_AXES))} (steps, seconds since "
                                     "the run began, or the clock)")
        if group is not None and (color_by is not None or x != "step"):
            raise SomatizeValueError(f"group={group!r} draws one line a group over steps: give neither color_by= "
                                     f"(each group has its colour) nor x= with it")
        self.name = name
        self.runs = runs
        self.x = x
        self.curves = {run: curve(store, run=run, name=name) for run in runs}
        self._finite = {run: finite(c, self._xs(store, run, c)) for run, c in self.curves.items()}
        # Beside the training loss, unasked: each run's evaluation curves ({run: {name: Series}}).
        self.evaluated = {run: self._evaluated(store, run) for run in runs} if name == "loss" else {}
        self._evaluated_finite = {run: {k: finite(c, self._xs(store, run, c, self.curves[run]))
                                        for k, c in per.items()} for run, per in self.evaluated.items()}
        # One colour a run, decided here only: the panel and the picture read it.
        self.colors = {run: _svg.SERIES[i % len(_svg.SERIES)] for i, run in enumerate(runs)}
        self.labels = {run: run for run in runs}
        self.color_by = color_by
        if color_by is not None:
            self._color_by(store, color_by)
        self.group = group
        self.groups: dict = {}  # label -> the runs of the group, when group= is given
        if group is not None:
            self._group_by(store, group)
        self.log, self.smoothing, self.outliers, self.window = None, 0.0, False, None
        self._view = None

    def _group_by(self, store, column):
        """One group per value of ``column`` (a column of ``runs(store)``:
        ``config.lr``, ``config.opt``, …), numbers coloured low to high along
        ``RAMP`` by rank; a run without the column is a group of its own (—)."""
        from somatize._base.errors import SomatizeKeyError, SomatizeTypeError
        from somatize.record._columns import QUERY_STATS
        from somatize.record._queries import table_rows

        if not isinstance(column, str):
            raise SomatizeTypeError(f"group={column!r}: give a column of runs(store) as a str, e.g. "
                                    f"group='config.lr'")
        rows = {r["run"]: r for r in table_rows(store, QUERY_STATS)}
        if not any(column in rows.get(run, ()) for run in self.runs):
            known = sorted({c for run in self.runs for c in rows.get(run, ()) if c.startswith("config.")})
            raise SomatizeKeyError(f"group={column!r}: none of these runs has that column; their config "
                                   f"columns are {known or 'none'} (group='config.lr' groups by the lr recorded)")
        values: dict = {}  # (is a bool, value) -> runs: True and 1 are two groups, as recorded
        for run in self.runs:
            v = rows.get(run, {}).get(column)
            if v is None or v != v:
                v = None
            elif isinstance(v, (list, dict)):
                v = str(v)
            values.setdefault((v.__class__ is bool, v), []).append(run)
        numbers = sorted(k for k in values if not k[0] and isinstance(k[1], (int, float)))
        others = [k for k in values if k[1] is not None and k not in numbers]
        order = numbers + others + [k for k in values if k[1] is None]
        self.groups, self.group_colors = {}, {}
        for k in order:
            members, v = values[k], k[1]
            shown = ", ".join(members[:5]) + (f", … ({len(members)} runs)" if len(members) > 5 else "")
            label = f"{column}={_svg.number(v) if k in numbers else '—' if v is None else v} ({shown})"
            self.groups[label] = members
            if v is None:
                self.group_colors[label] = _svg.MUTED
            elif k in numbers:
                self.group_colors[label] = RAMP[round(numbers.index(k) / max(1, len(numbers) - 1) * (len(RAMP) - 1))]
            else:
                self.group_colors[label] = _svg.SERIES[others.index(k) % len(_svg.SERIES)]

    def band(self, members, smoothing=0.0):
        """(steps, mean, low, high) of a group's runs, step by step over the
        runs that have a finite value at that step: the mean (smoothed by
        ``smoothing``) drawn as the line, the min and the max as the band;
        thinned to at most ``POINTS`` (the band by the min and max of each
        bucket, so it still holds every run)."""
        curves = [self._finite[run] for run in members]
        length = int(max((xs[-1] + 1 for xs, _ in curves if len(xs)), default=0))
        grid = np.full((len(curves), length), np.nan)
        for row, (xs, ys) in zip(grid, curves):
            row[xs.astype(np.int64)] = ys
        seen = ~np.all(np.isnan(grid), axis=0)
        steps = np.arange(length, dtype=np.float64)[seen]
        grid = grid[:, seen]
        if not len(steps):
            return steps, steps, steps, steps
        mean = np.nanmean(grid, axis=0)
        low, high = np.nanmin(grid, axis=0), np.nanmax(grid, axis=0)
        at, line = thinned(smoothed(mean, smoothing), steps)
        if len(steps) > POINTS:
            edges = np.linspace(0, len(steps), POINTS + 1).astype(np.int64)[:-1]
            low, high = np.minimum.reduceat(low, edges), np.maximum.reduceat(high, edges)
        return at, line, low, high

    def _evaluated(self, store, run):
        from somatize.record import curve
        from somatize.record._queries import curve_names

        names = sorted((n for n in curve_names(store, run) if n.startswith(EVALUATED) and "/" not in n),
                       key=lambda n: (n != EVALUATED + "loss", n))  # val_loss first, beside the loss
        return {n: curve(store, run=run, name=n) for n in names}

    def _xs(self, store, run, c, losses=None):
        """The x of each point of `c`: its step (`record._queries.steps_of`;
        given the run's `losses`, read off them), else seconds (since the
        run's first step began, or since 1970)."""
        if self.x == "step":
            return step_of(c, losses) if losses is not None else steps_of(store, run, c)
        t = clock_of(store, run, c)
        if self.x == "relative":
            from somatize.record import curve

            t = t - float(curve(store, run=run, name=WALL).iloc[0])
        return t

    def _color_by(self, store, key):
        """Colour each run by its config's `key` (``Recorder(..., config=)``):
        numbers low to high along `RAMP` by rank, other values one palette
        colour each; the legend says each run's value."""
        from somatize._base.errors import SomatizeKeyError, SomatizeTypeError
        from somatize.record import runs as runs_table

        if not isinstance(key, str):
            raise SomatizeTypeError(f"color_by={key!r}: give a config key as a str, e.g. color_by='lr'")
        table = runs_table(store).set_index("run")
        column = f"config.{key}"
        if column not in table.columns:
            known = sorted(c[len("config."):] for c in table.columns if c.startswith("config."))
            raise SomatizeKeyError(
                f"color_by={key!r}: no run of this store has {key!r} in its config; the config keys "
                f"recorded are {known or 'none'} (Recorder(store, run=..., config={{{key!r}: ...}}) records one)"
            )
        values = {run: table[column].get(run) if run in table.index else None for run in self.runs}
        present = {run: v for run, v in values.items() if v is not None and v == v}
        numeric = present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present.values())
        if numeric:
            order = sorted(set(present.values()))
            place = {v: i / max(1, len(order) - 1) for i, v in enumerate(order)}
            for run, v in present.items():
                self.colors[run] = RAMP[round(place[v] * (len(RAMP) - 1))]
        else:
            distinct = list(dict.fromkeys(str(v) for v in present.values()))
            for run, v in present.items():
                self.colors[run] = _svg.SERIES[distinct.index(str(v)) % len(_svg.SERIES)]
        for run in self.runs:
            if run not in present:
                self.colors[run] = _svg.MUTED
            shown = _svg.number(present[run]) if numeric and run in present else present.get(run, "—")
            self.labels[run] = f"{run} ({key}={shown})"

    def line(self, run, smoothing=0.0):
        """(steps, values) drawn for `run` with `smoothing` (0 to 1): the full
        curve smoothed, then thinned."""
        steps, values = self._finite[run]
        return thinned(smoothed(values, smoothing), steps)

    def chart(self):
        """The chart's data (`_chart.chart`) for the reader's current choices."""
        series = []
        for label, members in self.groups.items():  # group=: a line and a band a group
            at, line, low, high = self.band(members, self.smoothing)
            series.append({"name": label, "color": self.group_colors[label],
                           "points": list(zip(at.tolist(), line.tolist())),
                           "band": list(zip(at.tolist(), low.tolist(), high.tolist()))})
        for run in self.runs if not self.groups else ():
            x, y = self.line(run, self.smoothing)
            # one run with evaluation curves: its line is the loss, beside val_loss, in the legend
            label = self.name if len(self.runs) == 1 and any(self.evaluated.values()) else self.labels[run]
            s = {"name": label, "color": self.colors[run], "points": list(zip(x.tolist(), y.tolist()))}
            if self.smoothing > 0:  # the raw trace faded behind the smoothed one, as TensorBoard draws it
                rx, ry = self.line(run)
                s["raw"] = [[a, b] for a, b in zip(rx.tolist(), ry.tolist())]
            series.append(s)
        for run, per in self._evaluated_finite.items() if not self.groups else ():  # a group: its band alone
            for name, (x, y) in per.items():
                x, y = thinned(y, x)
                series.append({"name": name if len(self.runs) == 1 else f"{self.labels[run]} {name}",
                               "color": _svg.SERIES[len(series) % len(_svg.SERIES)], "dots": True,
                               "points": list(zip(x.tolist(), y.tolist()))})
        return _chart.chart(series, log=self.log, ylabel=self.name, window=self.window, outliers=self.outliers,
                            x=self.x, xlabel=XLABELS[self.x])

    def to_html(self):
        """The static picture: what GitHub, nbviewer and nbconvert show."""
        return _svg.boxed(_svg.line_chart(self.chart()), self.title())

    def title(self):
        over = "steps" if self.x == "step" else "time"
        if self.groups:
            return (f"{self.name} over {over} — {len(self.runs)} runs in {len(self.groups)} groups by "
                    f"{self.group} (the mean, and a band from the min to the max)")
        return f"{self.name} over {over} — " + ", ".join(f"run {r!r}" for r in self.runs)

    def widget(self):
        """The interactive panel: zoom (wheel, drag, double-click for all), log
        scale, smoothing, ignoring outliers, every run's value on hover, a
        legend when several runs overlay."""
        if self._view is None:
            from ._views import ProgressView

            self._view = ProgressView(title=self.title(), chart=self.chart(), smoothing=self.smoothing,
                                      outliers=self.outliers)
            self._view.observe(self._chosen, ["log", "smoothing", "outliers", "window"])
        return self._view

    def _chosen(self, change):
        v = self._view
        self.log, self.smoothing, self.outliers = v.log, float(v.smoothing), bool(v.outliers)
        self.window = tuple(v.window) if len(v.window) == 2 else None
        v.chart = self.chart()

    def _repr_mimebundle_(self, include=None, exclude=None):
        return panel_bundle(self, self.widget)

    def __repr__(self):
        parts = []
        for run, c in self.curves.items():
            last = c.iloc[-1] if len(c) else None
            parts.append(f"{run!r}: {len(c)} steps, last {self.name} {_svg.number(last)}")
        return f"progress({self.name}: " + "; ".join(parts) + ")"


def progress(store, run=None, name="loss", color_by=None, x="step", where=None, group=None):
    """The fact `name` (default `loss`) of `run` over steps, as an interactive
    figure; `run=["a", "b"]` overlays runs with a legend and one tooltip;
    `color_by="lr"` colours each run by that key of its recorded config
    (numbers from dark to light by rank, other values one colour each) and
    says each run's value in the legend. Beside the loss, each run's
    evaluation curves (`trainer.evaluate`'s `val_loss`, `val_accuracy`, ...)
    are drawn unasked, each point at the step it was said at. `x="relative"` draws it over the
    seconds since each run's first step began, `x="wall"` over the clock
    (both read from the Trainer's `wall_s` fact).

    `where="config.opt == 'adam'"`: the runs that query holds for (as
    `runs(store, where=...)`; damaged runs left out), instead of `run=`.
    `group="config.lr"`: one line a value of that column, the mean of its
    runs at each step, with a band from their min to their max; the legend
    names each group's runs (seeds of one configuration read as one band)."""
    from somatize._base.errors import SomatizeValueError

    if where is not None:
        from somatize.record import runs as runs_table

        table = runs_table(store, where=where)
        chosen = [r for r, state in zip(table["run"], table["state"]) if state != "damaged"]
        if run is not None:
            named = {run} if isinstance(run, str) else set(run)
            chosen = [r for r in chosen if r in named]
        if not chosen:
            raise SomatizeValueError(f"no run of the store matches where={where!r}" +
                                     (" among those named by run=" if run is not None else "") +
                                     ": runs(store) shows every run's columns")
        runs = chosen
    elif run is None:
        raise SomatizeValueError("progress(store, run=...) draws the runs named, or "
                                 "progress(store, where='config.lr < 1e-2') those a query holds for: give one")
    else:
        runs = [run] if isinstance(run, str) else list(run)
    return Progress(store, runs, name, color_by=color_by, x=x, group=group)
