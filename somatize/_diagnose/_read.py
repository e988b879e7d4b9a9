"""What a diagnosis reads: the run's series, node by node, by step, and the
curve that shows a finding (``curve``).

The rule kept here: read the record only, through its one reader
(``record._queries.RunRecord``: verified series, a live Recorder's pending points
from memory), so the same record gives the same arrays in any process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._base.errors import SomatizeKeyError
from ..record._queries import RunRecord

UPDATE = ("grad_norm", "weight_norm", "update_norm", "grad_zeros")  # one point each per recorded update
OUTPUT = ("out_zeros", "out_saturated")  # one point per recorded forward


@dataclass
class Node:
    """One node's instruments: ``steps`` of its recorded updates and the
    update series over them (each the same length); output series as
    (steps, values); ``not_optimized`` entries (0: all held)."""

    name: str
    steps: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    update: dict = field(default_factory=dict)
    output: dict = field(default_factory=dict)
    not_optimized: int = 0
    since: int = 0  # the step of the not_optimized fact


@dataclass
class Record:
    """A run as a diagnosis sees it: the loss by step, the last step, and
    each instrumented node (in the order their series sort)."""

    run: str
    loss: np.ndarray
    last: int
    nodes: dict


def read(store, run) -> Record:
    r = RunRecord(store, run)
    r.needs_summary()
    names = r.series_names()
    loss_points = r.series("loss") if "loss" in names else None
    step_forwards = loss_points["forward"] if loss_points is not None else None

    def steps_of(forwards):
        """A step is the index of its loss in the loss series (its loss is the
        step's last fact); without a loss, forwards are steps."""
        if step_forwards is None:
            return np.asarray(forwards, np.int64)
        return np.searchsorted(step_forwards, forwards, "left").astype(np.int64)

    nodes: dict = {}
    for name in names:
        fact, sep, node = name.partition("/")
        if not sep or fact not in UPDATE + OUTPUT + ("not_optimized",):
            continue
        points = r.series(name)
        n = nodes.setdefault(node, Node(node))
        if fact == "not_optimized":
            value = float(points["value"][-1]) if len(points) else 0.0
            if math.isfinite(value) and value >= 1:  # a forged NaN or inf is no count
                n.not_optimized = int(value)
                n.since = int(steps_of(points["forward"][:1])[0])
        elif fact in OUTPUT:
            n.output[fact] = (steps_of(points["forward"]), np.ascontiguousarray(points["value"]))
        else:
            n.update[fact] = points
    for n in nodes.values():
        if n.update:
            # A kill can cut between the facts of one update: keep the updates whose every fact is there.
            size = min(len(n.update.get(f, ())) for f in UPDATE)
            n.steps = steps_of(n.update[UPDATE[0]]["forward"][:size]) if size else n.steps
            n.update = {f: np.ascontiguousarray(n.update[f]["value"][:size]) if size else np.empty(0) for f in UPDATE}
    loss = np.ascontiguousarray(loss_points["value"]) if loss_points is not None else np.empty(0)
    last = len(loss) - 1
    for n in nodes.values():
        for steps in [n.steps, *(s for s, _ in n.output.values())]:
            if len(steps):
                last = max(last, int(steps[-1]))
    return Record(run, loss, last, nodes)


def curve(store, run, finding):
    """The curve that shows ``finding``, by step: a pandas Series (for
    ``update_ratio/<node>``, update_norm / weight_norm)."""
    import pandas as pd

    rec = read(store, run)
    kind, _, node = finding.curve.partition("/")
    if kind != "loss" and node not in rec.nodes:
        raise SomatizeKeyError(
            f"run {run!r} records no instruments for node {node!r} ({finding.curve}); "
            f"give a finding of this run: curve(store, {run!r}, somatize.diagnose(store, run={run!r})[0])"
        )
    if kind == "loss":
        values, steps = rec.loss, np.arange(len(rec.loss))
    else:
        n = rec.nodes[node]
        if kind in n.output:
            steps, values = n.output[kind]
        elif kind == "update_ratio":
            steps, u = n.steps, n.update
            wn = u["weight_norm"]
            values = np.divide(u["update_norm"], wn, out=np.full(len(steps), np.nan), where=wn > 0)
        else:
            steps, values = n.steps, n.update[kind]
    return pd.Series(values, index=pd.Index(steps, name="step"), name=finding.curve)
