"""Each rank's own time in a data-parallel run, and its straggler: what
``spent`` draws and the run browser shows, computed here once for both.

The rule kept here: the numbers come from the record alone, the series
``rank_us/rank<i>`` the Trainer says on rank 0 (each rank's own work a step,
from the step's start to the update's all-reduce, before it waits for the
others: torch/_distributed.py) and ``ranks``, how many there were.
"""

from __future__ import annotations

RANKS_FACT, RANK_FACT = "ranks", "rank_us"  # a data-parallel run: its ranks, and each rank's own work a step
WARMUP = 1  # the first step said pays for lazy set-up: left out, as spent leaves out a run's first forward


def ranks_of(store, run):
    """[{"rank", "mean_us", "steps"}] of a data-parallel run, from the series
    ``rank_us/rank<i>``, the warm-up step left out; [] for a run of one process."""
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
    out = []
    for rank in sorted(i for i in said if i < size):
        try:
            c = curve(store, run=run, name=f"{RANK_FACT}/rank{rank}").dropna()
        except SomatizeKeyError:
            continue
        c = c.iloc[WARMUP:] if len(c) > WARMUP else c
        if len(c):
            out.append({"rank": rank, "mean_us": float(c.mean()), "steps": int(len(c))})
    return out


def straggler_of(ranks):
    """The rank whose steps take longest, and by how much over the fastest:
    {"rank", "mean_us", "fastest", "over_us", "over"} (over: a ratio - 1), or
    None (fewer than two ranks measured)."""
    if len(ranks) < 2:
        return None
    slow = max(ranks, key=lambda r: r["mean_us"])
    fast = min(ranks, key=lambda r: r["mean_us"])
    over = slow["mean_us"] - fast["mean_us"]
    return {"rank": slow["rank"], "mean_us": slow["mean_us"], "fastest": fast["rank"], "over_us": over,
            "over": over / fast["mean_us"] if fast["mean_us"] else 0.0}


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
