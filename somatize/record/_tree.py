"""A query as a tree, what ``_where`` reads every ``where=`` into, and the
one engine that answers it on every surface (``runs()``, ``somatize runs``,
the run browser, ``compare``).

The nodes: ``Compare`` (a column with a value, or with another column),
``Member`` (a column ``in`` or ``not in`` a list of values), ``Not``,
``And``, ``Or``; their leaves ``Column`` and ``Value``. Each node answers
two ways with one meaning: ``test(row, now)`` of one run's row (a dict of
its columns, ``_columns.row``), and ``mask(columns, now)`` of a whole table
at once (``_arrays.Columns``: a boolean array, one entry a row; a part
whose column the arrays cannot stand for is asked row by row there).
``text()`` is the query in its canonical form, which reads back as the same
tree. Two trees are equal when they ask the same thing the same way:
``And`` and ``Or`` hold their parts flat (``a and (b and c)`` is ``a and b
and c``), and a comparison holds its column on the left (``0.1 > loss.best``
is ``loss.best < 0.1``).

Values compare as recorded: a number with a number (an int with a float),
a string with a string (``<`` in code point order), a boolean or null only
by ``==`` and ``!=``; values of different kinds are never equal and never
ordered. A comparison with a value the row lacks, or with NaN, is false
(``!=`` and ``not in`` too); ``not`` negates what its part gave; ``==
null`` holds for a value recorded as None alone (the rule
``somatize.record.runs`` states for every surface).

Beside the nodes, what writes a query (the explorer's brushes):
``column_text`` and ``literal_text`` (a column, a value, as the grammar
reads them back), ``writable`` (whether a value can be written at all),
``equal`` (two values equal as a query compares them), ``conjuncts`` (the
parts an ``and`` joins) and ``comparison_of`` (a part as ``(column, op,
value)``).
"""

from __future__ import annotations

import operator
import re

from .._base.errors import SomatizeTypeError, SomatizeValueError
from ._arrays import EXACT_INT, MISSING, equal_mask, member_mask, ordered_mask

NAME = r"[A-Za-z_][A-Za-z0-9_/]*"  # a part of a column's name written bare
KEYWORDS = ("and", "or", "not", "in")  # in any case: AND, Or, …
CONSTANTS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None,
             "inf": float("inf")}
COMPARE = ("==", "!=", "<", "<=", ">", ">=")
FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_ORDER = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_BARE = re.compile(NAME)
_UNWRITABLE = re.compile(r"[\x00-\x08\x0b-\x1f]")  # in a string: a control character but a new line or a tab


def kind(v) -> str:
    """A value's kind as a query compares it: number, str, bool, null, or
    other (a list, a dict: equal to no value written in a query)."""
    c = v.__class__
    if c is float or c is int:
        return "number"
    if c is str:
        return "str"
    if c is bool:
        return "bool"
    return "null" if v is None else "other"


def _nan(v) -> bool:
    return v.__class__ is float and v != v


def equal(a, b) -> bool:
    """Whether ``a == b`` as a query asks it: of one kind and equal (a
    boolean is no number; an int is the float of the same value)."""
    return kind(a) == kind(b) and a == b


def _unequal(a, b) -> bool:
    return not equal(a, b)


def _ordered(fn):
    def holds(a, b):
        k = kind(a)
        return k == kind(b) and k in ("number", "str") and fn(a, b)

    return holds


_HOLDS = {"==": equal, "!=": _unequal, **{op: _ordered(fn) for op, fn in _ORDER.items()}}


# ---- the leaves ------------------------------------------------------------------------


class Column:
    """A column named in a query (``config.lr``, ``loss.best``, ``age``)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def get(self, row, now):
        """Its value in ``row`` (``MISSING`` where the row lacks it); ``age``
        is ``now`` less the row's ``updated``."""
        if self.name == "age":
            updated = row.get("updated")
            return MISSING if updated is None or now is None else now - updated
        return row.get(self.name, MISSING)

    def text(self) -> str:
        return column_text(self.name)

    def __eq__(self, other):
        return other.__class__ is Column and other.name == self.name

    def __hash__(self):
        return hash((Column, self.name))

    def __repr__(self):
        return f"Column({self.name!r})"


class Value:
    """A value written in a query: a number (``inf``, ``-inf`` too), a
    string, a boolean or null. Equal to another of the same kind and value
    only (``Value(1) != Value(True)``)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def get(self, row, now):
        return self.value

    def text(self) -> str:
        return literal_text(self.value)

    def __eq__(self, other):
        return other.__class__ is Value and _typed(other.value) == _typed(self.value)

    def __hash__(self):
        return hash(_typed(self.value))

    def __repr__(self):
        return f"Value({self.value!r})"


def _typed(v):
    return (v.__class__, v)


# ---- the nodes ---------------------------------------------------------------------------


class Node:
    """A part of a query that holds or not, of a row (``test``) and of each
    row of a table at once (``mask``), with one meaning."""

    __slots__ = ()

    def test(self, row: dict, now: float | None) -> bool:
        raise NotImplementedError

    def mask(self, columns, now: float | None):
        raise NotImplementedError

    def text(self) -> str:
        raise NotImplementedError

    def _key(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other):
        return other.__class__ is self.__class__ and other._key() == self._key()

    def __hash__(self):
        return hash((self.__class__, self._key()))

    def __repr__(self):
        return f"{self.__class__.__name__}{self._key()!r}"

    def __str__(self):
        return self.text()


class Compare(Node):
    """``left op right``: a column with a value or another column; held with
    the column on the left (``0.1 > loss.best`` is ``loss.best < 0.1``)."""

    __slots__ = ("op", "left", "right", "_holds")

    def __init__(self, op: str, left, right):
        if op not in FLIPPED:
            raise SomatizeValueError(f"Compare({op!r}, …): the operator is one of {', '.join(COMPARE)}")
        if left.__class__ is Value:
            op, left, right = FLIPPED[op], right, left
        if left.__class__ is not Column or right.__class__ not in (Column, Value):
            raise SomatizeTypeError(f"Compare({op!r}, {left!r}, {right!r}): compare a Column with a Value or "
                                    f"another Column")
        self.op, self.left, self.right = op, left, right
        self._holds = _HOLDS[op]

    def test(self, row, now):
        a, b = self.left.get(row, now), self.right.get(row, now)
        if a is MISSING or b is MISSING or _nan(a) or _nan(b):
            return False
        return self._holds(a, b)

    def mask(self, columns, now):
        a = columns.operand(self.left.name, now)
        if self.right.__class__ is Column:
            b = columns.operand(self.right.name, now)
            exact = b is not None
        else:
            b = self.right.value
            exact = b.__class__ is not int or EXACT_INT >= b >= -EXACT_INT
        if a is None or not exact:
            return columns.each(self.test, now)
        if self.op == "==":
            return equal_mask(a, b)
        if self.op == "!=":
            return a.valid & (b.valid if self.right.__class__ is Column else True) & ~equal_mask(a, b)
        return ordered_mask(_ORDER[self.op], a, b)

    def text(self):
        return f"{self.left.text()} {self.op} {self.right.text()}"

    def _key(self):
        return (self.op, self.left, self.right)


class Member(Node):
    """``column in [values]``, or ``not in`` (``negated``): a value among
    them by kind (``true`` is not ``1``; ``1`` is ``1.0``)."""

    __slots__ = ("column", "values", "negated", "_by_kind", "_exact")

    def __init__(self, column: Column, values, negated: bool = False):
        self.column, self.values, self.negated = column, tuple(values), bool(negated)
        by_kind: dict = {}
        for v in self.values:
            by_kind.setdefault(kind(v), set()).add(v)
        self._by_kind = by_kind
        self._exact = all(v.__class__ is float or EXACT_INT >= v >= -EXACT_INT for v in by_kind.get("number", ()))

    def test(self, row, now):
        v = self.column.get(row, now)
        if v is MISSING or _nan(v):
            return False
        try:
            found = v in self._by_kind.get(kind(v), ())
        except TypeError:  # a list or a dict: equal to no value written
            found = False
        return not found if self.negated else found

    def mask(self, columns, now):
        a = columns.operand(self.column.name, now)
        if a is None or not self._exact:
            return columns.each(self.test, now)
        k = self._by_kind
        return member_mask(a, list(k.get("number", ())), k.get("bool", ()), k.get("str", set()), "null" in k,
                           self.negated)

    def text(self):
        listed = ", ".join(literal_text(v) for v in self.values)
        return f"{self.column.text()} {'not in' if self.negated else 'in'} [{listed}]"

    def _key(self):
        return (self.column, tuple(_typed(v) for v in self.values), self.negated)

    def __repr__(self):
        return f"Member({self.column!r}, {list(self.values)!r}, negated={self.negated})"


class Not(Node):
    """``not part``: what its part gave, negated (a comparison that is false
    for a missing value is true under ``not``)."""

    __slots__ = ("part",)

    def __init__(self, part: Node):
        self.part = part

    def test(self, row, now):
        return not self.part.test(row, now)

    def mask(self, columns, now):
        return ~self.part.mask(columns, now)

    def text(self):
        inner = self.part.text()
        return f"not ({inner})" if self.part.__class__ in (And, Or) else f"not {inner}"

    def _key(self):
        return (self.part,)


class And(Node):
    """Its parts all hold; an ``And`` among them is spliced in."""

    __slots__ = ("parts",)

    def __init__(self, parts):
        self.parts = tuple(q for p in parts for q in (p.parts if p.__class__ is And else (p,)))

    def test(self, row, now):
        for p in self.parts:
            if not p.test(row, now):
                return False
        return True

    def mask(self, columns, now):
        out = self.parts[0].mask(columns, now)
        for p in self.parts[1:]:
            out = out & p.mask(columns, now)
        return out

    def text(self):
        return " and ".join(f"({p.text()})" if p.__class__ is Or else p.text() for p in self.parts)

    def _key(self):
        return self.parts


class Or(Node):
    """One of its parts holds; an ``Or`` among them is spliced in."""

    __slots__ = ("parts",)

    def __init__(self, parts):
        self.parts = tuple(q for p in parts for q in (p.parts if p.__class__ is Or else (p,)))

    def test(self, row, now):
        for p in self.parts:
            if p.test(row, now):
                return True
        return False

    def mask(self, columns, now):
        out = self.parts[0].mask(columns, now)
        for p in self.parts[1:]:
            out = out | p.mask(columns, now)
        return out

    def text(self):
        return " or ".join(p.text() for p in self.parts)  # an And binds closer: no parentheses

    def _key(self):
        return self.parts


# ---- reading a tree, writing a query -------------------------------------------------------


def conjuncts(tree: Node) -> list[Node]:
    """The parts ``tree`` is the ``and`` of (itself alone when it is no ``And``)."""
    return list(tree.parts) if tree.__class__ is And else [tree]


def comparison_of(part: Node) -> tuple[str, str, object] | None:
    """``(column, op, value)`` of a comparison of a column with a value
    (``in``: the list of values), what a brush on one axis can draw; None
    for any other part (``not``, ``not in``, ``or``, two columns)."""
    if part.__class__ is Compare and part.right.__class__ is Value:
        return (part.left.name, part.op, part.right.value)
    if part.__class__ is Member and not part.negated:
        return (part.column.name, "in", list(part.values))
    return None


def column_text(name: str) -> str:
    """A column as a query writes it: each part of its name bare, or between
    backticks where it is not a bare name or is a word of the grammar
    (``config.`batch size```, ```inf`.last``). ``_where.nameable`` says
    whether it reads back (a part with a backtick cannot)."""
    return ".".join(p if _BARE.fullmatch(p) and p.lower() not in KEYWORDS and p not in CONSTANTS else f"`{p}`"
                    for p in name.split("."))


def writable(v) -> bool:
    """Whether a value of a row can be written in a query: a number, a
    boolean, null, a string without control characters but a new line or
    a tab (not a list nor a dict)."""
    if v.__class__ is str:
        return not _UNWRITABLE.search(v)
    return v is None or v.__class__ in (bool, int, float)


def literal_text(v) -> str:
    """A value as a query writes it, which reads back as the very value
    (``writable`` values; NaN has none: a comparison with it is false)."""
    if v is True or v is False:
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, int):  # a subclass (numpy's) as the number it is
        return int.__repr__(v)
    if isinstance(v, float):
        if v != v:
            raise SomatizeValueError("NaN cannot be written in a query (a comparison with NaN is false): ask "
                                     "for the values a run has instead, like loss.last <= inf")
        return float.__repr__(v)
    if v.__class__ is str and writable(v):
        body = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
        return f'"{body}"'
    raise SomatizeValueError(f"{v!r:.60} cannot be written in a query: a value is a number, a string without "
                             f"control characters (but a new line or a tab), true, false or null")
