"""Each rank's own time in a data-parallel run, and its straggler: what
``spent`` draws and the run browser shows, computed here once for both.

The rule kept here: the numbers come from the record alone, the series
the Trainer says on rank 0 (torch/_distributed.py): ``rank_us/rank<i>``,
each rank's work in a step (from the step's start to the update's
all-reduce), ``rank_before_us/rank<i>``, its time before the step (from its
last collective's return to the step's start: loading its data), and
``ranks``, how many there were. The collective returns at about the same
moment on every rank, so a rank's two clocks added are its time to reach
the next one, and the straggler, the rank the others wait for, is the rank
whose time to reach it is the longest (its wait there the shortest). A run
recorded before ``rank_before_us`` was said counts no time before a step.
"""

from __future__ import annotations

RANKS_FACT, RANK_FACT = "ranks", "rank_us"  # a data-parallel run: its ranks, and each rank's own work a step
BEFORE_FACT = "rank_before_us"  # each rank's time before its step: from its last collective's return
WARMUP = 1  # the first step said pays for lazy set-up: left out, as spent leaves out a run's first forward


def ranks_of(store, run):
    """[{"rank", "mean_us", "work_us", "before_us", "wait_us", "steps"}] of a
    data-parallel run, means over its steps said, the warm-up step left out:
    ``mean_us`` a rank's time to reach the update (``work_us``, in its step,
    plus ``before_us``, before it), ``wait_us`` how long it waited there for
    the slowest rank (each step, the most any rank took less its own).
    [] for a run of one process."""
    import pandas as pd

    from .._base.errors import SomatizeKeyError
    from ._queries import curve, curve_names

    try:
        size = curve(store, run=run, name=RANKS_FACT).dropna()
    except SomatizeKeyError:
        return []
    size = size.iloc[-1] if len(size) else 0
    # the ranks the run holds a series of, below its count: a count that is huge (or infinite) asks no more
    prefix = f"{RANK_FACT}/rank"
    said = [n[len(prefix):] for n in curve_names(store, run) if n.startswith(prefix)]
    said = [int(i) for i in said if i.isascii() and i.isdecimal() and len(i) < 19 and str(int(i)) == i]
    work, before = {}, {}
    for rank in sorted(i for i in said if i < size):
        try:
            c = curve(store, run=run, name=f"{RANK_FACT}/rank{rank}").dropna()
        except SomatizeKeyError:
            continue
        c = c.iloc[WARMUP:] if len(c) > WARMUP else c
        if not len(c):
            continue
        work[rank] = c
        try:
            b = curve(store, run=run, name=f"{BEFORE_FACT}/rank{rank}")
        except SomatizeKeyError:  # recorded before the time before a step was said
            b = None
        before[rank] = b.reindex(c.index).fillna(0.0) if b is not None else pd.Series(0.0, index=c.index)
    if not work:
        return []
    took = pd.DataFrame({rank: work[rank] + before[rank] for rank in work})  # by forward: each rank's time
    waited = took.max(axis=1).to_numpy()[:, None] - took  # for the slowest rank that step
    return [{"rank": rank, "mean_us": float(took[rank].dropna().mean()), "work_us": float(work[rank].mean()),
             "before_us": float(before[rank].mean()), "wait_us": float(waited[rank].dropna().mean()),
             "steps": int(len(work[rank]))} for rank in work]


def straggler_of(ranks):
    """The rank the others wait for at the update (its time to reach it the
    longest), and by how much over the fastest: {"rank", "mean_us",
    "before_us", "fastest", "over_us", "over"} (over: a ratio - 1;
    before_us: how much of its time was before its step), or None (fewer
    than two ranks measured)."""
    if len(ranks) < 2:
        return None
    slow = max(ranks, key=lambda r: r["mean_us"])
    fast = min(ranks, key=lambda r: r["mean_us"])
    over = slow["mean_us"] - fast["mean_us"]
    return {"rank": slow["rank"], "mean_us": slow["mean_us"], "before_us": slow["before_us"],
            "fastest": fast["rank"], "over_us": over, "over": over / fast["mean_us"] if fast["mean_us"] else 0.0}


def rank_time(store, run):
    """{"ranks": ranks_of(...), "straggler": straggler_of(...)} of a run.

    The ranks are an optional part of what ``spent`` and the run browser
    show: a rank series that is damaged (its bytes no longer match their
    checksum) answers no ranks and ``"ranks_problem"``, the damage's own
    message (naming the file and the fix), so the nodes' times still show;
    no number is read from the damaged bytes."""
    from .._base.errors import DamagedError

    try:
        ranks = ranks_of(store, run)
    except DamagedError as e:
        return {"ranks": [], "straggler": None, "ranks_problem": str(e)}
    return {"ranks": ranks, "straggler": straggler_of(ranks)}
