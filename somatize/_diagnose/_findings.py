"""Findings: opinions about a record, each with the numbers and the
threshold that decided it.

The rule kept here: a finding is computed from the record only, with
thresholds that are arguments, so anyone can argue with one and compute it
again in a fresh process (same record, same findings). Why each default:
docs/diagnosis.md.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass

import numpy as np

from .._base.errors import SomatizeValueError
from ._read import read

# worst first: a run that cannot continue, then a node that passes no gradient
# on (the cause, before the nodes it starves), a node that cannot learn, one
# that learns badly, then the loss's shape
KINDS = (
    "diverged", "exploding", "dying", "saturated", "not_updated", "vanishing",
    "ratio_high", "ratio_low", "plateaued",
)

DEFAULTS = {
    "explode": 100.0,  # grad_norm above this many times its lowest in the `sustain` steps before,
    "huge": 10.0,  # and above this many times weight_norm
    "vanish": 1e-6,  # grad_norm below this share of weight_norm
    "dying": 0.99,  # share of exact zeros in the output (or the gradient)
    "saturated": 0.5,  # share of a saturating output where its slope is under 2% of its peak
    "ratio": (1e-5, 0.3),  # the band of update_norm / weight_norm
    "diverge": 10.0,  # loss above this many times its first value
    "plateau": 100,  # steps from the start without the loss falling by 10%
    "sustain": 10,  # recorded updates (or steps) in a row a condition must hold
}


@dataclass(frozen=True)
class Finding:
    """One opinion: ``node`` (None: the run's loss), ``kind`` (one of
    ``KINDS``), the steps ``first``..``last`` (from 0) where it holds, the
    ``evidence`` (numbers read from the record), the ``threshold`` (the
    argument and its value) and the ``rule`` it decided, the ``curve`` that
    shows it (a series of the record, or ``update_ratio/<node>``) and the
    ``line`` to draw on that curve."""

    node: str | None
    kind: str
    first: int
    last: int
    evidence: dict
    threshold: dict
    rule: str
    curve: str
    line: float | None

    def to_dict(self):
        return asdict(self)

    def __str__(self):
        where = f"node {self.node!r}" if self.node is not None else "the loss"
        numbers = ", ".join(f"{k}={_short(v)}" for k, v in self.evidence.items())
        return f"{where}: {self.kind.replace('_', ' ')} in steps {self.first}-{self.last} ({numbers}); {self.rule}"


def _short(v):
    return f"{v:.3g}" if isinstance(v, float) else str(v)


class Findings(list):
    """A run's findings, worst first: a list of ``Finding`` that a notebook
    shows as the diagnosis panel (``_panel``)."""

    def __init__(self, found, store, run):
        super().__init__(found)
        self.store, self.run = store, run

    def _repr_mimebundle_(self, include=None, exclude=None):
        from ._panel import diagnosis_bundle

        return diagnosis_bundle(self)

    def __repr__(self):
        if not self:
            return f"diagnose(run={self.run!r}): no finding"
        head = f"diagnose(run={self.run!r}): {len(self)} finding(s), worst first"
        return "\n".join([head] + [f"  {f}" for f in self])


def diagnose(store, run, **thresholds) -> list:
    """The findings of run ``run`` of ``store``, worst first: a list of
    ``Finding`` (empty: nothing found; in a notebook it shows as a panel,
    each finding beside the curve that shows it). Reads the record only, so a fresh
    process without the model gets the same list. Thresholds (keyword
    arguments, defaults in ``DEFAULTS``; why: docs/diagnosis.md): ``explode``,
    ``huge``, ``vanish``, ``dying``, ``saturated``, ``ratio`` (a (low, high) band),
    ``diverge``, ``plateau``, ``sustain``."""
    t = _thresholds(thresholds)
    rec = read(store, run)
    found = []
    found += _loss(rec, t)
    for node in rec.nodes.values():
        found += _node(rec, node, t)
    rank = {k: i for i, k in enumerate(KINDS)}
    found.sort(key=lambda f: (rank[f.kind], f.first, f.node or ""))
    return Findings(found, store, run)


def _thresholds(given):
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise SomatizeValueError(
            f"diagnose(..., {unknown[0]}=...): no such threshold; the thresholds are "
            f"{', '.join(DEFAULTS)} (defaults: somatize._diagnose.DEFAULTS)"
        )
    t = {**DEFAULTS, **given}
    band = t["ratio"]
    if not (isinstance(band, (tuple, list)) and len(band) == 2 and all(_positive(v) for v in band)
            and band[0] < band[1]):
        raise SomatizeValueError(
            f"ratio={band!r:.60}: give a band (low, high) with 0 < low < high, like ratio=(1e-5, 0.3)"
        )
    for name in ("sustain", "plateau"):
        if not (_positive(t[name]) and float(t[name]).is_integer()):
            raise SomatizeValueError(
                f"{name}={t[name]!r:.60} counts steps: give a positive whole number, like {name}=10"
            )
        t[name] = int(t[name])
    for name in ("explode", "huge", "vanish", "dying", "saturated", "diverge"):
        if not _positive(t[name]):
            raise SomatizeValueError(
                f"{name}={t[name]!r:.60}: a threshold is a positive number, like {name}={DEFAULTS[name]!r}"
            )
    return t


def _positive(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _stretches(mask, need):
    """(start, end) index pairs, end inclusive, of the runs of True at least
    ``need`` long (or all of a shorter record)."""
    if not len(mask):
        return []
    need = min(need, len(mask))
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    keep = ends - starts + 1 >= need
    return list(zip(starts[keep].tolist(), ends[keep].tolist()))


def _span(steps, a, b, last):
    """Steps of records a..b; a stretch that reaches the last record holds to the run's last step."""
    return int(steps[a]), (last if b == len(steps) - 1 else int(steps[b]))


def _loss(rec, t):
    loss = rec.loss
    if not len(loss):
        return []
    out = []
    finite = np.isfinite(loss)
    first = float(loss[finite][0]) if finite.any() else None
    bad = ~finite
    if first is not None and first > 0:
        bad |= finite & (loss > t["diverge"] * first)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        out.append(Finding(
            None, "diverged", at, rec.last,
            {"loss": float(loss[at]), "first_loss": first if first is not None else float("nan")},
            {"diverge": t["diverge"]},
            f"the loss is not finite, or above {t['diverge']:g} x its first value",
            "loss", t["diverge"] * first if first else None,
        ))
        return out
    w = max(int(t["sustain"]), int(t["plateau"]) // 4)  # a mean over w steps: one lucky batch is not progress
    if len(loss) < t["plateau"] + w:
        return out
    means = np.convolve(loss, np.ones(w) / w, "valid")  # means[i]: steps i .. i+w-1
    target = 0.9 * means[0]
    below = np.flatnonzero(means < target)
    stuck = int(below[0]) if len(below) else len(loss)  # the first window below began there
    if stuck >= t["plateau"]:
        out.append(Finding(
            None, "plateaued", 0, stuck - 1,
            {"first_mean": float(means[0]), "best_mean": float(means.min()), "window": w},
            {"plateau": t["plateau"]},
            f"the loss (mean of {w} steps) did not fall 10% below its start for {t['plateau']} steps or more",
            "loss", float(target),
        ))
    return out


def _node(rec, n, t):
    out = []
    name, steps, u = n.name, n.steps, n.update
    sustain = int(t["sustain"])
    if n.not_optimized:
        moved = float(np.max(u["update_norm"])) if len(steps) else 0.0
        out.append(Finding(
            name, "not_updated", n.since, rec.last,
            {"not_in_optimizer": n.not_optimized, "largest_update_norm": moved},
            {},
            "its parameters take gradients but the optimizer does not hold them (recorded at the start)",
            "update_norm/" + name, None,
        ))
    dead = _dying(rec, n, t)
    out += dead
    if not len(steps) or n.not_optimized:
        return out  # a gradient nobody zeroes accumulates: no opinion on its size
    gn, wn, un = u["grad_norm"], u["weight_norm"], u["update_norm"]

    if not dead:
        for a, b in _stretches(un == 0, sustain):
            first, last = _span(steps, a, b, rec.last)
            out.append(Finding(
                name, "not_updated", first, last,
                {"updates": b - a + 1, "largest_grad_norm": float(np.max(gn[a:b + 1])),
                 "grad_zeros": float(np.median(u["grad_zeros"][a:b + 1]))},
                {"sustain": sustain},
                f"update_norm is exactly 0 on {sustain} recorded updates in a row",
                "update_norm/" + name, 0.0,
            ))

    lows = _recent_low(gn, steps, sustain)
    wild = ~np.isfinite(gn) | ((lows > 0) & (gn > t["explode"] * lows) & (gn > t["huge"] * wn))
    if wild.any():
        at = int(np.flatnonzero(wild)[0])
        low = float(lows[at])
        start = at
        # from where the rise that crossed the line began: records above the
        # low it rose from, each below the next
        while start > 0 and low < gn[start - 1] < (gn[start] if np.isfinite(gn[start]) else np.inf):
            start -= 1
        out.append(Finding(
            name, "exploding", int(steps[start]), rec.last,
            {"grad_norm": float(gn[at]), "rose_from": low, "weight_norm": float(wn[at]), "at_step": int(steps[at])},
            {"explode": t["explode"], "huge": t["huge"], "sustain": sustain},
            f"grad_norm is not finite, or above {t['explode']:g} x its lowest in the {sustain} steps before "
            f"and {t['huge']:g} x weight_norm",
            "grad_norm/" + name, t["explode"] * low if low > 0 else None,
        ))
        return out

    tiny = (un > 0) & (wn > 0) & (gn < t["vanish"] * wn)  # no update at all is not_updated
    for a, b in _stretches(tiny, sustain):
        first, last = _span(steps, a, b, rec.last)
        out.append(Finding(
            name, "vanishing", first, last,
            {"grad_norm": float(np.median(gn[a:b + 1])), "weight_norm": float(np.median(wn[a:b + 1]))},
            {"vanish": t["vanish"], "sustain": sustain},
            f"grad_norm below {t['vanish']:g} x weight_norm on {sustain} recorded updates in a row",
            "grad_norm/" + name, None,
        ))

    lo, hi = t["ratio"]
    measured = (un > 0) & (wn > 0)
    ratio = np.divide(un, wn, out=np.zeros_like(un), where=wn > 0)
    for kind, mask, line in (("ratio_low", measured & (ratio < lo), lo), ("ratio_high", measured & (ratio > hi), hi)):
        for a, b in _stretches(mask, sustain):
            first, last = _span(steps, a, b, rec.last)
            out.append(Finding(
                name, kind, first, last,
                {"update_ratio": float(np.median(ratio[a:b + 1])), "updates": b - a + 1},
                {"ratio": [lo, hi], "sustain": sustain},
                f"update_norm / weight_norm outside [{lo:g}, {hi:g}] on {sustain} recorded updates in a row",
                "update_ratio/" + name, float(line),
            ))
    return out


def _recent_low(values, steps, w):
    """For each record, the lowest finite value recorded in the ``w`` steps
    before it, or at the record before it when records are sparser (0 where
    there is none)."""
    n = len(values)
    padded = np.concatenate([np.full(w, np.inf), np.where(np.isfinite(values), values, np.inf)])
    windows = np.lib.stride_tricks.sliding_window_view(padded[:-1], w)  # row i: records i-w .. i-1
    i = np.arange(n)
    since = np.minimum(np.searchsorted(steps, steps - w, "left"), i - 1)  # first record in reach
    reach = (i[:, None] - w + np.arange(w)) >= since[:, None]
    lows = np.where(reach, windows, np.inf).min(axis=1) if n else np.empty(0)
    return np.where(np.isfinite(lows), lows, 0.0)


def _dying(rec, n, t):
    out = []
    sustain = int(t["sustain"])
    for fact, kind, limit in (("out_zeros", "dying", t["dying"]), ("out_saturated", "saturated", t["saturated"])):
        if fact not in n.output:
            continue
        steps, values = n.output[fact]
        for a, b in _stretches(values >= limit, sustain):
            first, last = _span(steps, a, b, rec.last)
            evidence = {fact: float(np.median(values[a:b + 1])), "steps_recorded": b - a + 1}
            if kind == "dying" and len(n.steps):
                inside = (n.steps >= first) & (n.steps <= last)
                if inside.any():
                    evidence["grad_zeros"] = float(np.median(n.update["grad_zeros"][inside]))
            out.append(Finding(
                n.name, kind, first, last, evidence,
                {kind: limit, "sustain": sustain},
                f"{fact} at or above {limit:g} on {sustain} recorded steps in a row",
                f"{fact}/{n.name}", float(limit),
            ))
    return out
