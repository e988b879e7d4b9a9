"""A table's columns as numpy arrays, each made once, when a query first
asks for it: what a query's tree asks of a whole table at once
(``_tree``'s ``mask``). A column holding a value the arrays cannot stand
for exactly (a list, a dict, an integer past 2**53, a value of a subclass)
is None here, and the part of the query asking it answers row by row.

numpy is imported where an array is made: ``somatize runs --where`` asks
row by row and lists without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MISSING = object()  # the value of a column a row lacks
MISSING_KIND, NAN, NUMBER, STR, BOOL, NULL, OTHER = range(7)
KIND_OF = {float: NUMBER, int: NUMBER, str: STR, bool: BOOL, type(None): NULL, object: MISSING_KIND}
EXACT_INT = 1 << 53  # an int of at most this size is a float exactly


class Arrays:
    """One column of many rows: ``kind`` (missing, NaN, number, str, bool,
    null), ``num`` (a number's or a boolean's value as a float), ``strs``
    (a string's value, "" elsewhere), ``valid`` (neither missing nor NaN:
    what ``!=`` and ``not in`` ask first)."""

    __slots__ = ("kind", "num", "strs", "valid", "_uniques")

    def __init__(self, kind, num, strs):
        self.kind = kind
        self.num = num
        self.strs = strs
        self.valid = kind > NAN
        self._uniques = None

    @classmethod
    def of(cls, values):
        """The arrays of ``values`` (``MISSING`` where a row lacks one), or
        None when one of them is not what the arrays stand for exactly."""
        import numpy as np

        kinds = [KIND_OF.get(v.__class__, OTHER) for v in values]
        if OTHER in kinds:
            return None
        nums = []
        strs = []
        for v, k in zip(values, kinds):
            if k == NUMBER:
                if v.__class__ is int and not EXACT_INT >= v >= -EXACT_INT:
                    return None
                nums.append(v)
                strs.append("")
            elif k == BOOL:
                nums.append(1.0 if v else 0.0)
                strs.append("")
            else:
                nums.append(0.0)
                strs.append(v if k == STR else "")
        kind = np.array(kinds, np.int8)
        num = np.array(nums, float)
        kind[(kind == NUMBER) & np.isnan(num)] = NAN
        strings = np.empty(len(strs), object)
        strings[:] = strs
        return cls(kind, num, strings)

    def in_strings(self, wanted) -> np.ndarray:
        """Where the value is a string among ``wanted`` (a set)."""
        import numpy as np

        if self._uniques is None:
            self._uniques = np.unique(self.strs[self.kind == STR]) if (self.kind == STR).any() else self.strs[:0]
        hit = [u for u in self._uniques if u in wanted]
        if not hit:
            return np.zeros(len(self.kind), bool)
        return (self.kind == STR) & np.isin(self.strs, hit)


def equal_mask(a: Arrays, b) -> np.ndarray:
    """Where ``a`` equals ``b`` (arrays, or a literal) as a query's ``==``
    says: of one kind (a boolean is no number) and equal."""
    if isinstance(b, Arrays):
        same = a.kind == b.kind
        numeric = (a.kind == NUMBER) | (a.kind == BOOL)
        return same & ((numeric & (a.num == b.num)) | ((a.kind == STR) & (a.strs == b.strs)) | (a.kind == NULL))
    kind = KIND_OF.get(b.__class__)
    if kind == NUMBER:
        return (a.kind == NUMBER) & (a.num == b)
    if kind == BOOL:
        return (a.kind == BOOL) & (a.num == float(b))
    if kind == STR:
        return (a.kind == STR) & (a.strs == b)
    return a.kind == NULL


def ordered_mask(fn, a: Arrays, b) -> np.ndarray:
    """Where ``fn(a, b)`` holds (``operator.lt``, …), numbers with numbers
    and strings with strings; nothing else is ordered."""
    import numpy as np

    if isinstance(b, Arrays):
        numbers = (a.kind == NUMBER) & (b.kind == NUMBER)
        strings = (a.kind == STR) & (b.kind == STR)
        out = numbers & fn(a.num, b.num)
        if strings.any():
            out[strings] = fn(a.strs[strings], b.strs[strings]).astype(bool)
        return out
    kind = KIND_OF.get(b.__class__)
    if kind == NUMBER:
        return (a.kind == NUMBER) & fn(a.num, b)
    if kind == STR:
        return (a.kind == STR) & fn(a.strs, b).astype(bool)
    return np.zeros(len(a.kind), bool)  # a boolean or null is never ordered


def member_mask(a: Arrays, numbers, booleans, strings, null: bool, negated: bool) -> np.ndarray:
    """Where ``a`` is among the values given by kind (``numbers``, all of
    them floats or ints a float holds exactly; ``booleans``; ``strings``, a
    set; ``null``: whether None is among them), or is not (``negated``:
    missing and NaN values excepted)."""
    import numpy as np

    found = np.zeros(len(a.kind), bool)
    if numbers:
        found |= (a.kind == NUMBER) & np.isin(a.num, numbers)
    if booleans:
        found |= (a.kind == BOOL) & np.isin(a.num, [float(v) for v in booleans])
    if strings:
        found |= a.in_strings(strings)
    if null:
        found |= a.kind == NULL
    return a.valid & ~found if negated else found


class Columns:
    """The columns of a list of rows (``_columns.row``), each made once,
    when a query first asks for it; what ``Query.mask`` asks. The rows are
    not copied: they must not change while this is kept."""

    def __init__(self, rows):
        self.rows = rows
        self.count = len(rows)
        self._made: dict = {}

    def column(self, name) -> Arrays | None:
        try:
            return self._made[name]
        except KeyError:
            pass
        got = Arrays.of([row.get(name, MISSING) for row in self.rows])
        self._made[name] = got
        return got

    def operand(self, name, now) -> Arrays | None:
        """The arrays of the column ``name`` (``age`` made of ``updated``
        and ``now``); None when it is asked row by row."""
        import numpy as np

        if name != "age":
            return self.column(name)
        updated = self.column("updated")
        if updated is None or ((updated.kind == STR) | (updated.kind == BOOL)).any():
            return None
        if now is None:
            return Arrays(np.zeros(self.count, np.int8), updated.num, updated.strs)
        kind = np.where((updated.kind == NUMBER) | (updated.kind == NAN), updated.kind, MISSING_KIND)
        num = now - updated.num
        kind[(kind == NUMBER) & np.isnan(num)] = NAN
        return Arrays(kind.astype(np.int8), num, updated.strs)

    def each(self, test, now) -> np.ndarray:
        """``test(row, now)`` of each row: a part asked row by row."""
        import numpy as np

        return np.fromiter((test(row, now) for row in self.rows), bool, self.count)
