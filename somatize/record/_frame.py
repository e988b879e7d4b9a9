"""A store's runs as the table ``runs()`` hands out: its columns, in its
order, from the runs' rows (``_columns.row``); config ints a float would
round kept exact; the rows' shared lists and dicts copied before they leave.
``_table`` keeps such a frame between listings, ``runs()`` and the explorer
make one of the rows a query holds for."""

from __future__ import annotations


def nested_columns(rows) -> list[str]:
    """The columns of ``rows`` holding a list or a dict somewhere (a
    config's value: the only columns that may)."""
    found: dict = {}
    for row in rows:
        for column, value in row.items():
            if value.__class__ in (list, dict) and column.startswith("config."):
                found[column] = None
    return list(found)


def unshared(table, columns):
    """``table`` with the lists and dicts of ``columns`` copied: the rows are
    kept and shared between listings (``_table``, ``_runs``), and a value
    changed in place in one answer must change no other."""
    import copy

    import pandas as pd

    for column in columns:
        values = [copy.deepcopy(v) if v.__class__ in (list, dict) else v for v in table[column].tolist()]
        table[column] = pd.Series(values, index=table.index, dtype=object)
    return table


def frame(rows, nested=None):
    """The table ``runs()`` makes of runs' rows (``_columns.row``): its
    columns, in its order, from the rows it is given (the explorer's
    selection is this of the rows a query holds for, as ``runs(where=)``);
    ``nested``: the columns that may hold a list or a dict, when the caller
    knows them (``_table.Table.nested``), else they are looked for."""
    import pandas as pd

    from . import _columns

    fixed = list(_columns.FIXED)
    configs: dict = {}  # the config columns, then the summarised ones, each in order of appearance
    stats_columns: dict = {}
    asked = tuple(f".{s}" for s in _columns.QUERY_STATS)
    for row in rows:
        for column in row:
            if column.startswith("config."):
                configs[column] = None
            elif column.endswith(asked):  # each of a fact's shown columns, whichever of them it has a value in
                fact = column.rsplit(".", 1)[0]
                stats_columns.update(dict.fromkeys(f"{fact}.{s}" for s in _columns.STATS))
    columns = [*fixed, *configs, *stats_columns]
    columns += [said for said in ("cause", "problem") if any(said in row for row in rows)]
    table = pd.DataFrame(rows, columns=columns)
    for column in configs:
        if table[column].dtype.kind == "f":  # pandas' floats round an int past 2**53: kept exact, as recorded
            _exact(table, column, [row.get(column) for row in rows])
    for when in ("started", "updated"):
        table[when] = pd.to_datetime(table[when], unit="s", errors="coerce")  # a forged time reads NaT
    # the rows' lists and dicts are kept and shared: not handed out
    return unshared(table, [c for c in (nested_columns(rows) if nested is None else nested) if c in configs])


def _exact(table, column, values):
    """``table[column]`` made of ``values`` again when one of them is an int
    a float does not hold exactly: a nullable ``Int64`` column when every
    value is an int of 64 bits or missing (None), else one of objects."""
    import pandas as pd

    if all(v.__class__ is not int or -_EXACT_INT <= v <= _EXACT_INT for v in values):
        return
    if all(v is None or v.__class__ is int and -(1 << 63) <= v < 1 << 63 for v in values):
        table[column] = pd.Series(pd.array(values, dtype="Int64"), index=table.index)
    else:
        table[column] = pd.Series(values, index=table.index, dtype=object)


_EXACT_INT = 1 << 53  # an int of at most this size is a float exactly
