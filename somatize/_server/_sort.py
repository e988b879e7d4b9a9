"""A listing's order: ``sort=<column>`` (``order=asc|desc``), applied by
the server over every run that matches, before the page is cut.

A column is named as ``runs(store)`` names it (``record/_columns``): a fixed
one (``run``, ``state``, ``steps``, ``forwards``, ``facts``, ``started``,
``updated``, ``duration``, ``host``, ``pid``, ``cause``, ``problem``), ``age``
(seconds since the last update: the order of ``updated``, turned round, so
an order by age never changes with the clock), ``findings`` (the count of
``somatize.diagnose``, as the row shows it: None until counted),
``config.<key>`` (a nested key flattened, ``config.optim.lr``) and
``<fact>.last|best|min|max|first|count`` of each summarised fact. The name
is looked up as a key of each run's columns, never parsed, never evaluated;
a name that is not a fixed column nor a column of any run of the store is
refused (``Bad``) with the closest names the store has and the kinds of
column there are.

The order, the same for every column:

- values compare as recorded: numbers as numbers (an int with a float),
  strings as strings (code point order, as ``where=``'s ``<``);
- a column holding several kinds orders them numbers, then strings, then
  booleans (false before true), then anything else (a list, by its JSON);
- a missing value (a run without the column, a null, a NaN) comes last,
  in either direction;
- descending is ascending turned round, missing values still last;
- ties keep the listing's order (by name), in either direction: the sort is
  stable, so a page never changes but for a value that did.
"""

from __future__ import annotations

import orjson

from .._base.near import close_names
from ..record._columns import FIXED, QUERY_STATS
from ._public import Bad

# the columns every store may be sorted by, whether or not a run has them
NAMES = (*FIXED, "cause", "problem", "age", "findings")
MAX_COLUMN = 300  # characters of a column's name
ORDERS = ("asc", "desc")
_SHOWN = 12  # columns of the store a refusal names at most


def order_of(text: str) -> bool:
    """Whether ``order=text`` means descending; Bad for anything but asc or desc."""
    if text not in ORDERS:
        raise Bad(f"order={text[:40]!r}: expected asc or desc")
    return text == "desc"


class Order:
    """A listing's order, its name checked for shape before anything is read
    (``check`` checks it against the store's columns once they are)."""

    def __init__(self, column: str = "run", descending: bool = False):
        if not isinstance(column, str):
            raise Bad(f"sort= takes a column's name, like sort=loss.best; got {type(column).__name__}")
        if not column:
            column = "run"
        if len(column) > MAX_COLUMN:
            raise Bad(f"sort= is {len(column):,} characters long: a column's name is at most {MAX_COLUMN} "
                      f"(like run, config.lr or loss.best)")
        if not column.isprintable():
            raise Bad(f"sort={column[:60]!r}: a column's name holds no control character (like run, config.lr "
                      f"or loss.best)")
        self.column = column
        self.descending = bool(descending)

    @property
    def by_name(self) -> bool:
        """The listing's own order (by name, ascending): no column to read."""
        return self.column == "run" and not self.descending

    def key(self) -> list:
        """What a listing's tag holds of the order."""
        return [self.column, self.descending]

    def check(self, columns) -> None:
        """Bad, naming the closest columns of the store, when ``column`` is not
        a fixed one nor a column of one of ``columns`` (each run's, a dict)."""
        if self.column in NAMES or any(self.column in c for c in columns):
            return
        have = sorted({k for c in columns for k in c if k not in NAMES})
        # a fact named alone (loss: loss.best) or a config key without its prefix (lr: config.lr) first
        close = [c for c in (f"{self.column}.best", f"config.{self.column}") if c in have]
        close += [c for c in close_names(self.column, [*NAMES, *have], n=3, cutoff=0.6)
                  if c not in close]
        close = close[:3]
        config = [k for k in have if k.startswith("config.")]
        facts = sorted({k.rsplit(".", 1)[0] for k in have if not k.startswith("config.")})
        said = f"sort={self.column[:80]!r}: no run of this store has that column"
        if close:
            said += f"; did you mean {' or '.join(repr(c) for c in close)}?"
        else:
            said += "."
        said += f" Sort by a fixed column ({', '.join(NAMES)})"
        if config:
            said += f", a key of the runs' config ({_some(config)})"
        else:
            said += ", config.<key> (no run here has a config)"
        if facts:
            said += (f", or a summarised fact's {'|'.join(QUERY_STATS)} "
                     f"({_some([f + '.best' for f in facts])})")
        raise Bad(said)

    def apply(self, names: list[str], value) -> list[str]:
        """``names`` (in the listing's order) sorted by ``value(name)``, as
        the module says: missing last, stable, descending turned round."""
        present, missing = [], []
        for n in names:
            k = _key(value(n))
            (missing if k is None else present).append((k, n))
        present.sort(key=lambda kn: kn[0], reverse=self.descending)  # stable both ways
        return [n for _, n in present] + [n for _, n in missing]


def _some(names: list[str]) -> str:
    shown = ", ".join(n[:60] for n in names[:_SHOWN])
    return shown + (f", … ({len(names):,} in all)" if len(names) > _SHOWN else "")


_MISSING = object()


def _key(v):
    """A value's place: (kind, value) where kinds order numbers, strings,
    booleans, the rest; None for a missing one (absent, null, NaN)."""
    c = v.__class__
    if c is int or c is float:
        return None if v != v else (0, v)
    if c is str:
        return (1, v)
    if c is bool:
        return (2, v)
    if v is None or v is _MISSING:
        return None
    try:
        text = orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = repr(v)
    return (3, text)


def getter(column: str, columns: dict, findings=None):
    """``value(name)`` of ``column`` for the runs whose columns (each a dict)
    are ``columns[name]``; ``findings[name]``: each run's count, for
    ``findings``. ``age`` is ``-updated`` (its order, with no clock)."""
    if column == "findings":
        return lambda n: (findings or {}).get(n)
    if column == "age":
        def age(n):
            updated = columns[n].get("updated")
            return -updated if updated.__class__ in (int, float) else None
        return age
    return lambda n: columns[n].get(column, _MISSING)
