"""`Live`: a watcher that is also a panel.

The rule it keeps: the training loop never waits for the picture. Handing
`Live` a fact only updates a few numbers and a bounded curve (well under a
microsecond of work); pictures are sent to the front end at most ten times a
second, from a timer, and the last picture always arrives: a timer is armed
whenever something changed since the last send, and the end of the notebook
cell sends the final picture at once. Its ``state`` is the run's, in the
record's words (waiting, running, finished, interrupted, with the ``cause``:
the exception's type); ``send()`` sends now (a Recorder's ``flush`` is the
word for making facts durable).

Nothing here imports Jupyter until the object is displayed, so a script can
watch with `Live` at no cost beyond the counting.
"""

from __future__ import annotations

import math
import sys
import threading
import time

from .._graph.watchers import Holders
from .._pictures import _chart, _svg

INTERVAL_S = 0.1  # at most ten front-end updates a second
CURVE_POINTS = 512  # however long the run, the curve sent holds at most this many points
X_AXES = ("step", "relative")
EVALUATED = "val_"  # the Trainer's evaluation says val_loss, val_<metric> (torch/_evaluate.py): drawn beside the loss


class Curve:
    """A loss curve of bounded size: buckets of `stride` steps, each keeping
    mean, lowest and highest. When the buckets are full, neighbours merge and
    the stride doubles, so a 1M-step run costs what a 512-step run does.
    `timed`: each value comes with its x (seconds), and a bucket is drawn at
    the mean x of its values instead of its middle step."""

    __slots__ = ("size", "stride", "mean", "lo", "hi", "xs", "timed", "_n", "_sum", "_lo", "_hi", "_xsum")

    def __init__(self, size=CURVE_POINTS, timed=False):
        self.size = size
        self.stride = 1
        self.timed = timed
        self.mean, self.lo, self.hi, self.xs = [], [], [], []
        self._n, self._sum, self._lo, self._hi, self._xsum = 0, 0.0, math.inf, -math.inf, 0.0

    def add(self, value, x=0.0):
        self._n += 1
        self._sum += value
        self._xsum += x
        if value < self._lo:
            self._lo = value
        if value > self._hi:
            self._hi = value
        if self._n == self.stride:
            self._close()

    def _close(self):
        self.mean.append(self._sum / self._n)
        self.lo.append(self._lo)
        self.hi.append(self._hi)
        self.xs.append(self._xsum / self._n)
        self._n, self._sum, self._lo, self._hi, self._xsum = 0, 0.0, math.inf, -math.inf, 0.0
        if len(self.mean) == self.size:
            self._halve()

    def _halve(self):
        m, lo, hi = self.mean, self.lo, self.hi
        self.mean = [(m[i] + m[i + 1]) / 2 for i in range(0, len(m), 2)]
        self.lo = [min(lo[i], lo[i + 1]) for i in range(0, len(lo), 2)]
        self.hi = [max(hi[i], hi[i + 1]) for i in range(0, len(hi), 2)]
        self.xs = [(self.xs[i] + self.xs[i + 1]) / 2 for i in range(0, len(self.xs), 2)]
        self.stride *= 2

    def points(self):
        """[(x, mean, lo, hi)], the open bucket last: x is the step, counted
        from 0 like forwards, each bucket at its middle step; or, timed, the
        mean x of the bucket's values."""
        timed = self.timed
        out = [
            (self.xs[i] if timed else (i + 0.5) * self.stride - 0.5, _finite(m), _finite(a), _finite(b))
            for i, (m, a, b) in enumerate(zip(self.mean, self.lo, self.hi))
        ]
        if self._n:
            base = len(self.mean) * self.stride
            x = self._xsum / self._n if timed else base + (self._n - 1) / 2
            out.append((x, _finite(self._sum / self._n), _finite(self._lo), _finite(self._hi)))
        return out


class Points:
    """(step, value) pairs of a fact that comes now and then (a validation
    loss), bounded like `Curve`: past `size`, neighbours merge into their mean."""

    __slots__ = ("size", "xs", "ys")

    def __init__(self, size=CURVE_POINTS):
        self.size, self.xs, self.ys = size, [], []

    def add(self, value, step):
        self.xs.append(step)
        self.ys.append(value)
        if len(self.xs) == self.size:
            self.xs = [(self.xs[i] + self.xs[i + 1]) / 2 for i in range(0, self.size, 2)]
            self.ys = [(self.ys[i] + self.ys[i + 1]) / 2 for i in range(0, self.size, 2)]

    def points(self):
        return [(x, _finite(y), None, None) for x, y in zip(self.xs, self.ys)]


def _number(v):
    """A fact's value as a number, or None: a 0-d tensor or a numpy number
    (what an evaluation outside the Trainer has in hand) reads as its number."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v
    if getattr(v, "ndim", None) == 0 and hasattr(v, "item"):
        v = v.item()
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    return None


def _finite(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def _line(name, color, points, stride, smoothing):
    """A chart series from a Curve's points: the band when bucketed; smoothed
    (debiased EMA over the buckets) with the raw trace kept to draw faded behind."""
    line = {"name": name, "color": color, "points": [(p[0], p[1]) for p in points],
            "band": [(p[0], p[2], p[3]) for p in points] if stride > 1 else []}
    if smoothing > 0:
        acc = norm = 0.0
        smooth = []
        for x, y in line["points"]:
            if y is not None:
                acc, norm = smoothing * acc + y, smoothing * norm + 1
                smooth.append((x, acc / norm))
        line["raw"], line["points"], line["band"] = [list(p) for p in line["points"] if p[1] is not None], smooth, []
    return line


class Live:
    """Watch a run as it happens; display it to see it, during or after.

    `Live(title="training")` goes in `watching=` beside a `Recorder`; put
    `live` alone at the end of a cell to show it. It counts steps (one per
    `loss` fact), forwards and updates, and keeps the last and best loss.

    An evaluation's facts (`trainer.evaluate`: `val_loss`, `val_accuracy`,
    any `val_*`) are drawn beside the loss unasked, each at the step it came
    in (the last step taken; 0 before any), a dot at each.
    `total_steps=N` (when known) adds the time to go; `also=["val_loss"]`
    draws those facts' numeric `value` beside the loss, each at the step it
    came in (a fact a node says with `ctx.fact("val_loss", value=v)`, or one
    handed to the watchers directly, as an evaluation outside the Trainer
    does: a 0-d tensor or numpy number is read as its number); `smoothing=0.6`
    draws a smoothed line over the faded raw one (the panel has a slider for
    it, and a log-scale toggle). `x="relative"` draws over the seconds since
    the run's first forward began (by `clock`) instead of steps.

    `clock` and `timer` are for tests: `clock()` gives seconds (default
    `time.monotonic`) and `timer(wait_s, fn)` returns an object with
    `start()` that calls `fn` once `wait_s` seconds have passed (default
    `threading.Timer`). A test hands in a fake pair and decides when time
    passes, so it can count the sends exactly.
    """

    def __init__(self, title="run", *, total_steps=None, also=(), smoothing=0.0, x="step", clock=time.monotonic,
                 timer=threading.Timer):
        from somatize._base.errors import SomatizeTypeError, SomatizeValueError

        self.title = str(title)
        self.total_steps = total_steps
        if x not in X_AXES:
            raise SomatizeValueError(f"Live(x={x!r}): give x='step' or x='relative' (seconds since the run began)")
        self.x = x
        self._timed = x == "relative"
        # Other facts drawn beside the loss (a validation loss, an accuracy): each a curve of its
        # numeric `value`, at the step it arrived in.
        also = [also] if isinstance(also, str) else also  # also="val_loss" is one name, not eight letters
        if not all(isinstance(name, str) for name in also):
            raise SomatizeTypeError(f"Live(also={also!r:.80}): give the names of facts, like also=['val_loss']")
        self.also = tuple(also)
        self._also = {name: Points() for name in self.also}
        self.smoothing = float(smoothing)
        self.log = None  # the y axis: None chooses from the data; the panel's toggle sets it
        self.not_finite_at = None  # the first step whose loss was NaN or infinite
        self._not_finite_x = None  # and its x
        self._clock = clock
        self._new_timer = timer
        self.steps = self.forwards = self.updates = 0
        self.last = None
        self.best = math.inf
        self.cause = None
        self._curve = Curve(timed=self._timed)
        self._state = "waiting"
        self._began = self._ended = None
        # The front end: a view once displayed, and the throttle's clock and timer.
        self._view = None
        self._displays = []
        self._timer = None
        self._due = 0.0
        self._version = 0
        self._lock = threading.Lock()
        self._hooked = None
        self._holders = Holders()  # producers that hold facts back (held_by): asked before each look

    # --- the watcher: the hot path ------------------------------------------
    def __call__(self, fact):
        kind = fact["fact"]
        if kind == "loss":
            value = fact["value"]
            self.steps += 1
            self.last = value
            x = self._now() if self._timed else 0.0
            if value < self.best:
                self.best = value
            elif value != value or value == math.inf:
                if self.not_finite_at is None:
                    self.not_finite_at = self.steps - 1
                    self._not_finite_x = x if self._timed else self.steps - 1
            self._curve.add(value, x)
        elif kind == "finished":
            self.forwards += 1
            self._ended = self._clock()
        elif kind == "updated":
            self.updates += 1
        elif kind in self._also or kind.startswith(EVALUATED):
            value = _number(fact.get("value"))
            if value is not None:
                points = self._also.get(kind)
                if points is None:  # an evaluation's value (val_loss, val_accuracy): drawn unasked
                    points = self._also[kind] = Points()
                points.add(value, self._now() if self._timed else max(0, self.steps - 1))
        self._version += 1
        if self._view is not None and self._timer is None:
            self._poke()

    def held_by(self, hand_over):
        """``hand_over`` (a Trainer's) holds facts back before handing them
        over; it is called, from the thread that registered it, before the
        panel is drawn or ended, so it shows every step done."""
        self._holders.add(hand_over)

    def _now(self):
        """Seconds since the run's first forward began (since this fact, when none has)."""
        now = self._clock()
        if self._began is None:
            self._began = now
        return now - self._began

    def forward_began(self):
        """Called as a forward begins; the first one starts the panel's clock."""
        if self._state != "running":
            self._start()

    def _start(self):
        now = self._clock()
        if self._began is None:
            self._began = now
        self._state, self.cause = "running", None
        self._hook()

    # --- the run's state -----------------------------------------------------------
    @property
    def state(self):
        """'waiting', 'running', 'finished' or 'interrupted' (``cause`` says by what)."""
        return self._state

    def snapshot(self):
        """Everything the panel shows, as plain data (what is sent)."""
        if self._holders:
            self._holders()
        return self._snapshot()

    def _snapshot(self):
        # What is taken now, held facts not asked for: the throttle sends from
        # inside a replay of them (asking then would replay into this lock).
        elapsed = (self._ended or self._began or 0) - (self._began or 0)
        rate = self.steps / elapsed if elapsed > 0 else None
        curve = [list(p) for p in self._curve.points()]
        bad = self.not_finite_at
        series = [_line("loss", _svg.SERIES[0], curve, self._curve.stride, self.smoothing)]
        series += [{**_line(name, _svg.SERIES[(i + 1) % len(_svg.SERIES)], c.points(), 1, self.smoothing),
                    "dots": True}
                   for i, (name, c) in enumerate(list(self._also.items()))]  # list: a fact may add one meanwhile
        marks = [] if bad is None else [{"x": self._not_finite_x, "label": f"not finite from step {bad:,}"}]
        left = None if not (self.total_steps and rate) else max(0, self.total_steps - self.steps) / rate
        return {
            "title": self.title,
            "state": self._state,
            "cause": self.cause,
            "steps": self.steps,
            "forwards": self.forwards,
            "updates": self.updates,
            "last": _finite(self.last),
            "last_text": _chart.number(self.last),
            "not_finite_at": bad,
            "total": self.total_steps,
            "eta_s": round(left, 1) if left is not None and self._state == "running" else None,
            "best": _finite(self.best),
            "elapsed_s": round(elapsed, 3),
            "steps_per_s": round(rate, 2) if rate is not None else None,
            "stride": self._curve.stride,
            "curve": curve,
            "chart": _chart.chart(series, log=self.log, marks=marks, x=self.x,
                                  xlabel="time since the run began" if self._timed else "step"),
        }

    # --- the end of a notebook cell decides finished or interrupted ---------------
    def _hook(self):
        if self._hooked is not None:
            return
        shell = _ipython()
        if shell is not None:
            shell.events.register("post_run_cell", self._cell_ended)
            self._hooked = shell

    def _cell_ended(self, result=None):
        error = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        self.end(error)

    def end(self, error=None):
        """Mark the run finished (or interrupted by `error`, its type the
        ``cause``) and send the final picture now. Called by the notebook at
        the end of the cell that ran it; call it yourself outside a notebook."""
        if self._hooked is not None:
            self._hooked.events.unregister("post_run_cell", self._cell_ended)
            self._hooked = None
        if self._holders:
            self._holders()
        if self._state != "running":
            return
        self._state = "interrupted" if error is not None else "finished"
        self.cause = None if error is None else type(error).__name__
        if self._ended is None:
            self._ended = self._clock()
        self.send()
        for handle in self._displays:
            handle.update(self._bundle(), raw=True)

    # --- the throttle ----------------------------------------------------------------
    def _poke(self):
        with self._lock:
            if self._timer is not None:
                return
            wait = self._due - self._clock()
            if wait <= 0:
                self._send()
            else:
                self._arm(wait)

    def _arm(self, wait):
        self._timer = self._new_timer(wait, self._fire)
        self._timer.daemon = True  # a pending send never keeps the process alive
        self._timer.start()

    def _fire(self):
        with self._lock:
            seen = self._version
            self._send()
            self._timer = None
            if self._version != seen:  # a fact slipped in while sending
                self._arm(INTERVAL_S)

    def _send(self):
        self._due = self._clock() + INTERVAL_S
        if self._view is not None:
            self._view.status = self._snapshot()

    def send(self):
        """Send the current picture now, whatever the throttle says."""
        if self._holders:
            self._holders()  # outside the lock: what they hand over pokes the throttle, which takes it
        with self._lock:
            self._send()

    # --- display ---------------------------------------------------------------------
    def _ensure_view(self):
        if self._view is None:
            from ._views import LiveView

            self._view = LiveView(status=self.snapshot())
            self._view.smoothing = self.smoothing
            self._view.observe(self._chosen, ["log", "smoothing"])
        return self._view

    def _chosen(self, change):
        self.log, self.smoothing = self._view.log, float(self._view.smoothing)
        self.send()

    def _bundle(self):
        from ._views import view_bundle

        view = self._ensure_view()
        self.send()
        return {**view_bundle(view, repr(self)), "text/html": self.to_html()}

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self._bundle()

    def _ipython_display_(self):
        from IPython.display import display

        handle = display(self._bundle(), raw=True, display_id=True)
        if handle is not None:
            self._displays.append(handle)

    def to_html(self):
        """The static picture: what GitHub, nbviewer and nbconvert show."""
        return _svg.live_html(self.snapshot())

    def __repr__(self):
        if self._holders:
            self._holders()
        best = _finite(self.best)
        return (
            f"Live({self.title!r}: {self._state}, {self.steps} steps, "
            f"last loss {_chart.number(self.last)}, best {_chart.number(best)})"
        )


def _ipython():
    # Only a running IPython has cells to end; a script never imports it.
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None
