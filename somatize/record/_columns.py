"""The columns of a run: one naming rule for ``runs()``, ``somatize runs``,
the sidebar's rows and the ``where=`` grammar.

The rule kept here: a column's name says where its value comes from, and
two sources can never give the same name.

- **Fixed columns** are plain words with no dot: ``run``, ``state``,
  ``forwards``, ``steps``, ``facts``, ``started``, ``updated``,
  ``duration``, ``host``, ``pid`` (and ``cause`` for an interrupted run,
  ``problem`` for a damaged one).
- **The configuration**: ``config.<key>``, a nested dict flattened
  (``config.optim.lr``).
- **Each summarised fact**: ``<fact>.last``, ``<fact>.best``, ``<fact>.min``,
  ``<fact>.max`` (and, in a query, ``<fact>.first`` and ``<fact>.count``).

A fixed column has no dot, so no summary or config key can take its name; a
fact's columns end in one of a few words after its last dot, so two facts
never share one; and a Recorder refuses to summarise a fact named ``config``
or ``config.…`` (its columns would be a config's). ``best`` is ``max`` for a
fact whose name says higher is better (``acc``, ``score``, ``f1``, ``auc``,
``reward``, ``precision``, ``recall``, ``iou``, ``bleu`` anywhere in it),
``min`` for any other (a loss, an error, a time).

Values are as recorded: ints stay ints, booleans booleans, strings strings,
a NaN or an infinity a float as it was. A summarised fact's column that has
no value (a fact summarised but never recorded; ``min``, ``max`` and
``best`` of one recorded only as NaN) is left out of the row, as a config
key a run was not given is: a value the run lacks, never a null.
``started`` and ``updated`` are seconds since 1970, ``duration`` seconds
from the first to the last update.
"""

from __future__ import annotations

import re

FIXED = ("run", "state", "forwards", "steps", "facts", "started", "updated", "duration", "host", "pid")
STATS = ("last", "best", "min", "max")  # the columns runs() shows for each summarised fact
QUERY_STATS = (*STATS, "first", "count")  # and what a query may ask of it besides
CONFIG = "config"
HIGHER = re.compile(r"acc|score|f1|auc|reward|precision|recall|iou|bleu", re.IGNORECASE)


def best(name: str, stat: dict):
    """The best value of summarised fact ``name``: its max when higher is
    better (by its name, see the module's docstring), else its min."""
    return stat.get("max") if HIGHER.search(name) else stat.get("min")


def refused_fact(name: str) -> str | None:
    """Why ``name`` cannot be summarised (its columns would be a config's), or None."""
    if name == CONFIG or name.startswith(CONFIG + "."):
        return (f"a summarised fact named {name!r:.60} would have the columns of the run's config "
                f"(config.<key>): name the fact otherwise, e.g. {name.replace('.', '_')!r:.60}_value")
    return None


def config_columns(config: dict, prefix: str = CONFIG + ".") -> dict:
    """``{"config.lr": 0.1, "config.optim.beta": 0.9}``: a run's config as
    columns (nested dicts flattened; an empty dict is a value)."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(config_columns(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def steps(summary: dict):
    """A run's steps: the count of its ``loss`` facts (one a step, as the
    Trainer records), else its forwards."""
    got = (summary.get("summarising") or {}).get("loss", {}).get("count")
    return got if got is not None else summary.get("forwards")


def stat_columns(name: str, stat: dict, stats=STATS) -> dict:
    """The columns ``stats`` of summarised fact ``name``, those with a value."""
    out = {}
    for which in stats:
        value = best(name, stat) if which == "best" else stat.get(which)
        if value is not None:
            out[f"{name}.{which}"] = value
    return out


def row(summary: dict, stats=STATS) -> dict:
    """A run's columns, from its summary (as ``_runs.summaries`` lists it):
    the fixed ones it has, its config's, and ``stats`` of each summarised
    fact; a fact whose name is refused (``refused_fact``: a summary not a
    Recorder of today wrote) gives none."""
    out = {k: summary[k] for k in FIXED if k in summary}
    if "forwards" in summary:
        out["steps"] = steps(summary)
    started, updated = summary.get("started"), summary.get("updated")
    if started is not None and updated is not None:
        out["duration"] = updated - started
    for said in ("cause", "problem"):
        if said in summary:
            out[said] = summary[said]
    out.update(config_columns(summary.get(CONFIG) or {}))
    for name, stat in (summary.get("summarising") or {}).items():
        if refused_fact(name) is None:
            out.update(stat_columns(name, stat, stats))
    return out
