"""``where=``: one small query language over the columns of runs, read by a
grammar of our own (a tokenizer and a recursive-descent parser into a tiny
tree of closures). It runs no code whatever it holds: no ``eval``, no
``compile``, no attribute is ever looked up; a column is a key of the run's
row (``_columns.row``). A query may come from a shared notebook or a URL.

    query      := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | "(" or ")" | comparison
    comparison := operand ("==" | "!=" | "<" | "<=" | ">" | ">=") operand
                | column ["not"] "in" "[" literal ("," literal)* "]"
    operand    := column | literal
    column     := name ("." name)*       e.g. state, config.lr, loss.best
    name       := [A-Za-z_][A-Za-z0-9_/]*  or  `any text but a backtick`
    literal    := number | inf | -inf | "string" | 'string' | true | false | null

``and``, ``or``, ``not``, ``in`` may be written in capitals; ``True``,
``False``, ``None`` are ``true``, ``false``, ``null``; a column whose first
name is one of these values is written between backticks (`` `inf`.last ``).
A comparison has a column on at least one side. Columns (``_columns``): the fixed ones (``run``,
``state``, ``forwards``, ``steps``, ``facts``, ``started``, ``updated``,
``duration``, ``host``, ``pid``, ``cause``, ``problem``, and ``age``: seconds since the
run's last update, at the moment the query is asked), ``config.<key>``, and
``<fact>.last|best|min|max|first|count`` of each summarised fact. A run's
count of findings is not a column (diagnosing costs milliseconds a run).

Values compare as they were recorded, never as text: a number with a number
(an int with a float as numbers), a string with a string (``<`` in code
point order), a boolean or null only by ``==`` and ``!=``; values of
different kinds are never equal (``config.flag == 1`` is false for
``flag=True``) and never ordered.

**Missing, NaN, null, infinity** (the rule ``somatize.record.runs`` states
for every surface): a comparison whose column a run lacks (a key absent
from its row: a config key it was not given, a fact it did not summarise,
a summarised fact's value it never had, any column of a run listed as
damaged without a summary) is false, and so is one with a NaN, ``!=`` and
``not in`` included. ``not`` negates whatever its operand gave: ``not
config.lr < 0.1`` holds for a run without ``lr``. ``== null`` holds for a
value recorded as None alone (a config's): NaN is a number, not null, and
a value a run lacks compares with nothing. ``inf`` and ``-inf`` are the
infinities, numbers ordered beyond every finite one.

Bounds: a query is at most ``MAX_LENGTH`` characters, nests ``not`` and
parentheses at most ``MAX_DEPTH`` deep, lists at most ``MAX_LIST`` values;
a number is at most 40 characters, finite (but ``inf``, ``-inf``), and an integer fits 64 bits
(-2**63 to 2**64 - 1, what a Recorder records). A
query that does not read raises ``QueryError`` naming the character where
reading stopped and what could have stood there, with a caret under it.
"""

from __future__ import annotations

import operator
import re
import time
from typing import TYPE_CHECKING

from .._base.errors import QueryError, SomatizeTypeError
from ._columns import FIXED, QUERY_STATS

if TYPE_CHECKING:  # numpy is imported where whole columns are asked: `somatize runs --where` lists without it
    import numpy as np

MAX_LENGTH = 4_000
MAX_DEPTH = 32
MAX_LIST = 1_000
MAX_NUMBER = 40  # characters of one number
NAMES = (*FIXED, "cause", "problem", "age")
_COMPARE = ("==", "!=", "<", "<=", ">", ">=")
_KEYWORDS = {"and": "and", "or": "or", "not": "not", "in": "in"}
_CONSTANTS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None,
              "inf": float("inf")}
_TOKEN = re.compile(
    r"""(?P<space>[ \t\r\n]+)
      | (?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|-inf(?![A-Za-z0-9_/]))
      | (?P<name>[A-Za-z_][A-Za-z0-9_/]*)
      | (?P<quoted>`[^`\x00-\x1f]{1,200}`)
      | (?P<string>"(?:[^"\\\x00-\x1f]|\\.)*"|'(?:[^'\\\x00-\x1f]|\\.)*')
      | (?P<op>==|!=|<=|>=|<|>|\(|\)|\[|\]|,|\.)""",
    re.VERBOSE,
)
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t"}
_WRONG = {"=": "==", "&&": "and", "&": "and", "||": "or", "|": "or", "!": "not", "<>": "!="}
_MISSING = object()
_VALUE = "a value (a number, inf, -inf, a \"string\", true, false or null)"
_OPERATOR = "an operator (==, !=, <, <=, >, >=, in or not in)"
_COLUMN = "a column (state, config.lr, loss.best, …)"


def _shown(query: str, at: int) -> str:
    """The query on one line with a caret under character ``at``."""
    line = re.sub(r"[\x00-\x1f\x7f]", " ", query)  # one line, nothing that moves the caret
    start = max(0, at - 50)
    cut = line[start: at + 50]
    lead = "…" if start else ""
    tail = "…" if at + 50 < len(line) else ""
    return f"    {lead}{cut}{tail}\n    {' ' * (len(lead) + at - start)}^"


def _fail(query: str, at: int, expected: str, found: str = "", hint: str = ""):
    what = f", found {found}" if found else ""
    message = f"where= does not read at character {at}: expected {expected}{what}"
    if hint:
        message += f" ({hint})"
    raise QueryError(f"{message}\n{_shown(query, at)}", query, at, expected)


def _tokens(query: str) -> list[tuple[str, object, int, str]]:
    """``(kind, value, position, text)`` of each token, then ``("end", …)``."""
    out = []
    at = 0
    while at < len(query):
        m = _TOKEN.match(query, at)
        if m is None:
            two = query[at: at + 2]
            for wrong, right in _WRONG.items():
                if two.startswith(wrong) and not two.startswith(right):
                    _fail(query, at, _OPERATOR if right in _COMPARE else "and, or, not or a comparison",
                          repr(wrong), f"write {right}")
            char = query[at]
            if not char.isascii():
                _fail(query, at, f"{_COLUMN}, {_VALUE}, a parenthesis or an operator", repr(char),
                      "names are ASCII letters, digits, _ and /: write any other name between backticks "
                      "(`…`) and any other text between quotes")
            if char in "\"'`":
                end = query.find(char, at + 1)
                for i in range(at + 1, end if end > 0 else len(query)):
                    if query[i] < " ":
                        _fail(query, i, "text without control characters between quotes", repr(query[i]),
                              "write \\n or \\t for a new line or a tab")
                _fail(query, at, f"a closing {char} on the same line" if char != "`" else "a name of 1 to 200 "
                      "characters between backticks", "an unclosed quote")
            _fail(query, at, f"{_COLUMN}, {_VALUE}, a parenthesis or an operator", repr(char),
                  "a query holds columns, values and operators, nothing else")
        kind = m.lastgroup
        text = m.group()
        if kind == "name" and m.end() < len(query) and not query[m.end()].isascii() and query[m.end()].isalnum():
            _fail(query, m.end(), "a name of ASCII letters, digits and _", repr(query[m.end()]),
                  "write a name with other characters between backticks: `…`")
        if kind != "space":
            out.append((kind, text, at, text))
        at = m.end()
    out.append(("end", None, len(query), "the end of the query"))
    return out


class _Parser:
    def __init__(self, query):
        self.query = query
        self.tokens = _tokens(query)
        self.at = 0
        self.fields: set = set()

    def peek(self):
        return self.tokens[self.at]

    def word(self, token=None) -> str | None:
        """The keyword ``token`` is (and, or, not, in), or None."""
        kind, text, _, _ = token or self.peek()
        return _KEYWORDS.get(text.lower()) if kind == "name" else None

    def take(self):
        token = self.tokens[self.at]
        self.at += 1
        return token

    def expect(self, op, expected):
        kind, text, at, shown = self.peek()
        if kind != "op" or text != op:
            _fail(self.query, at, expected, repr(shown) if kind != "end" else "the end of the query")
        return self.take()

    def found(self, token):
        kind, _, _, shown = token
        return "the end of the query" if kind == "end" else repr(shown[:40])

    # ---- the grammar ---------------------------------------------------------------

    def parse(self):
        if not self.query.strip():
            _fail(self.query, 0, "a comparison, like state == \"finished\" or config.lr < 1e-2", "nothing")
        tree = self.or_(0)
        token = self.peek()
        if token[0] != "end":
            _fail(self.query, token[2], "and, or, or the end of the query", self.found(token))
        return tree

    def or_(self, depth):
        parts = [self.and_(depth)]
        while self.word() == "or":
            self.take()
            parts.append(self.and_(depth))
        return parts[0] if len(parts) == 1 else _any(parts)

    def and_(self, depth):
        parts = [self.not_(depth)]
        while self.word() == "and":
            self.take()
            parts.append(self.not_(depth))
        return parts[0] if len(parts) == 1 else _all(parts)

    def not_(self, depth):
        token = self.peek()
        if depth >= MAX_DEPTH:
            _fail(self.query, token[2], f"at most {MAX_DEPTH} levels of 'not' and parentheses",
                  "more", "write the query flatter")
        if self.word() == "not":
            self.take()
            return _not(self.not_(depth + 1))
        if token[0] == "op" and token[1] == "(":
            self.take()
            inner = self.or_(depth + 1)
            self.expect(")", "a closing ) or and/or")
            return inner
        return self.comparison()

    def comparison(self):
        left = self.operand()
        token = self.peek()
        negated = False
        if self.word() == "not" and self.word(self.tokens[self.at + 1]) == "in":
            self.take()
            negated = True
            token = self.peek()
        if self.word() == "in":
            if left[0] != "column":
                _fail(self.query, token[2], "a column before 'in'", "a value", "write config.opt in [\"adam\"]")
            self.take()
            return _member(left[1], self.values(), negated)
        if token[0] != "op" or token[1] not in _COMPARE:
            _fail(self.query, token[2], _OPERATOR, self.found(token))
        self.take()
        right = self.operand()
        if left[0] != "column" and right[0] != "column":
            _fail(self.query, token[2], f"{_COLUMN} on one side of {token[1]}", "two values",
                  "a column is written without quotes")
        return _compare(token[1], left, right)

    def operand(self):
        token = self.peek()
        kind, text, at, _ = token
        if kind == "name" and text in _CONSTANTS:
            self.take()
            after = self.peek()
            if after[0] == "op" and after[1] == ".":
                _fail(self.query, at, _COLUMN, repr(text), f"{text} is a value; a column of that name is "
                      f"written between backticks: `{text}`.last")
            return ("value", _CONSTANTS[text])
        if kind == "name" and self.word() is None or kind == "quoted":
            return ("column", self.column())
        if kind in ("number", "string"):
            return ("value", self.literal())
        _fail(self.query, at, f"{_COLUMN} or {_VALUE}", self.found(token))

    def column(self) -> str:
        start = self.peek()[2]
        parts = [self.name()]
        while self.peek()[0] == "op" and self.peek()[1] == ".":
            self.take()
            token = self.peek()
            if token[0] not in ("name", "quoted"):
                _fail(self.query, token[2], "a name after the dot", self.found(token))
            parts.append(self.name())
        name = ".".join(parts)
        problem = _not_a_column(parts)
        if problem:
            _fail(self.query, start, _COLUMN, repr(name[:60]), problem)
        self.fields.add(name)
        return name

    def name(self) -> str:
        kind, text, at, _ = self.take()
        text = text[1:-1] if kind == "quoted" else text
        if text.startswith("__"):
            _fail(self.query, at, _COLUMN, repr(text[:40]), "names beginning with __ are not columns")
        return text

    def literal(self):
        kind, text, at, _ = self.take()
        if kind == "string":
            return _unquote(self.query, text, at)
        if text == "-inf":
            return float("-inf")
        if len(text) > MAX_NUMBER:
            _fail(self.query, at, f"a number of at most {MAX_NUMBER} characters", f"one of {len(text)}")
        if re.fullmatch(r"-?\d+", text):
            value = int(text)
            if not -(1 << 63) <= value < 1 << 64:  # as a Recorder records one (record/_summary): a uint64 too
                _fail(self.query, at, "an integer that fits 64 bits (-2**63 to 2**64 - 1)", text[:40],
                      "write it as a float, like 1e20")
            return value
        value = float(text)
        if value - value != 0:
            _fail(self.query, at, "a finite number", text[:40],
                  "the largest a float holds is about 1.8e308; an infinity is written inf or -inf")
        return value

    def values(self) -> list:
        self.expect("[", "a [ opening a list of values, like [\"adam\", \"sgd\"]")
        out = []
        while True:
            token = self.peek()
            if token[0] == "op" and token[1] == "]" and not out:
                break
            if token[0] in ("number", "string"):
                out.append(self.literal())
            elif token[0] == "name" and token[1] in _CONSTANTS:
                out.append(_CONSTANTS[self.take()[1]])
            else:
                _fail(self.query, token[2], _VALUE, self.found(token), "a list holds values, not columns")
            if len(out) > MAX_LIST:
                _fail(self.query, token[2], f"at most {MAX_LIST} values in a list", "more")
            token = self.peek()
            if token[0] == "op" and token[1] == ",":
                self.take()
                if self.peek()[0] == "op" and self.peek()[1] == "]":
                    break
                continue
            if token[0] == "op" and token[1] == "]":
                break
            _fail(self.query, token[2], "a comma or a closing ]", self.found(token))
        self.take()
        return out


def _unquote(query, text, at) -> str:
    body = text[1:-1]
    if "\\" not in body:
        return body
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                _fail(query, at + 1 + i, "an escape among \\\\ \\\" \\' \\n \\t", repr("\\" + nxt))
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _not_a_column(parts: list[str]) -> str:
    """Why ``parts`` names no column (empty when it names one)."""
    first, last = parts[0], parts[-1]
    if len(parts) == 1:
        if first in NAMES:
            return ""
        if first == "config":
            return "name a key of the config, like config.lr"
        return (f"the fixed columns are {', '.join(NAMES)}; a summarised fact is asked as "
                f"{first}.last, {first}.best, {first}.min, …")
    if first == "config":
        return ""
    if first in NAMES and len(parts) == 2 and last not in QUERY_STATS:
        return f"{first} has no parts; write {first}"
    if last in QUERY_STATS:
        return ""
    return (f"a summarised fact's columns end in {', '.join('.' + s for s in QUERY_STATS)}; "
            f"a config key begins with config.")


def _kind(v) -> str:
    c = v.__class__
    if c is float or c is int:
        return "number"
    if c is str:
        return "str"
    if c is bool:
        return "bool"
    return "null" if v is None else "other"


def _nan(v):
    return v.__class__ is float and v != v


def _equal(a, b) -> bool:
    return _kind(a) == _kind(b) and a == b


_ORDER = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


def _ordered(op):
    fn = _ORDER[op]

    def test(a, b):
        kind = _kind(a)
        return kind == _kind(b) and kind in ("number", "str") and fn(a, b)

    return test


class _Node:
    """One part of a query, asked two ways with one meaning: ``test(row,
    now)`` of one row, ``mask(columns, now)`` of a whole table's columns at
    once (``Columns``: a boolean array, one entry a row). A part whose
    columns hold a value the arrays cannot stand for exactly (a list, an
    integer past 2**53, a number of a subclass) is asked row by row there."""

    __slots__ = ("test", "mask")

    def __init__(self, test, mask):
        self.test = test
        self.mask = mask


def _compare(op, left, right):
    if op == "==":
        test = _equal
    elif op == "!=":
        def test(a, b):
            return not _equal(a, b)
    else:
        test = _ordered(op)
    get_left, get_right = _getter(left), _getter(right)

    def compare(row, now):
        a, b = get_left(row, now), get_right(row, now)
        if a is _MISSING or b is _MISSING or _nan(a) or _nan(b):
            return False
        return test(a, b)

    if left[0] == "value":  # a column on the right: asked as the column on the left
        op, left, right = _FLIPPED[op], right, left

    def mask(columns, now):
        a = columns.operand(left, now)
        if right[0] == "column":
            b = columns.operand(right, now)
            exact = b is not None
        else:
            b = right[1]
            exact = b.__class__ is not int or _EXACT_INT >= b >= -_EXACT_INT
        if a is None or not exact:
            return columns.each(compare, now)
        if op == "==":
            return _equal_mask(a, b)
        if op == "!=":
            return a.valid & (b.valid if isinstance(b, _Column) else True) & ~_equal_mask(a, b)
        return _ordered_mask(op, a, b)

    return _Node(compare, mask)


def _getter(operand):
    kind, value = operand
    if kind == "value":
        return lambda row, now: value
    if value == "age":
        def age(row, now):
            updated = row.get("updated")
            return _MISSING if updated is None or now is None else now - updated
        return age
    return lambda row, now: row.get(value, _MISSING)


def _member(column, values, negated):
    get = _getter(("column", column))
    hashed = {}
    for v in values:  # by kind, so that True is not 1 and 1 is 1.0
        hashed.setdefault(_kind(v), set()).add(v)

    def member(row, now):
        v = get(row, now)
        if v is _MISSING or _nan(v):
            return False
        try:
            found = v in hashed.get(_kind(v), ())
        except TypeError:  # a list or a dict: equal to no literal
            found = False
        return not found if negated else found

    numbers = [v for v in hashed.get("number", ())]
    exact = all(v.__class__ is float or _EXACT_INT >= v >= -_EXACT_INT for v in numbers)

    def mask(columns, now):
        import numpy as np

        c = columns.operand(("column", column), now)
        if c is None or not exact:
            return columns.each(member, now)
        found = np.zeros(columns.count, bool)
        if numbers:
            found |= (c.kind == _NUMBER) & np.isin(c.num, numbers)
        if "bool" in hashed:
            found |= (c.kind == _BOOL) & np.isin(c.num, [float(v) for v in hashed["bool"]])
        if "str" in hashed:
            found |= c.in_strings(hashed["str"])
        if "null" in hashed:
            found |= c.kind == _NULL
        return c.valid & ~found if negated else found

    return _Node(member, mask)


def _not(inner):
    test = inner.test
    return _Node(lambda row, now: not test(row, now), lambda columns, now: ~inner.mask(columns, now))


def _any(parts):
    tests = [p.test for p in parts]

    def mask(columns, now):
        out = parts[0].mask(columns, now)
        for p in parts[1:]:
            out = out | p.mask(columns, now)
        return out

    return _Node(lambda row, now: any(t(row, now) for t in tests), mask)


def _all(parts):
    tests = [p.test for p in parts]

    def mask(columns, now):
        out = parts[0].mask(columns, now)
        for p in parts[1:]:
            out = out & p.mask(columns, now)
        return out

    return _Node(lambda row, now: all(t(row, now) for t in tests), mask)


# ---- the same questions of whole columns -----------------------------------------------

_MISSING_KIND, _NAN, _NUMBER, _STR, _BOOL, _NULL, _OTHER = range(7)
_KIND_OF = {float: _NUMBER, int: _NUMBER, str: _STR, bool: _BOOL, type(None): _NULL, object: _MISSING_KIND}
_EXACT_INT = 1 << 53  # an int of at most this size is a float exactly


class _Column:
    """One column of many rows as arrays: ``kind`` (missing, NaN, number,
    str, bool, null), ``num`` (a number's or a boolean's value as a float),
    ``strs`` (a string's value, "" elsewhere), ``valid`` (neither missing
    nor NaN: what ``!=`` and ``not in`` ask first)."""

    __slots__ = ("kind", "num", "strs", "valid", "_uniques")

    def __init__(self, kind, num, strs):
        self.kind = kind
        self.num = num
        self.strs = strs
        self.valid = kind > _NAN
        self._uniques = None

    @classmethod
    def of(cls, values):
        """The column of ``values`` (``_MISSING`` where a row lacks it), or
        None when one of them is not what the arrays stand for exactly."""
        import numpy as np

        kinds = [_KIND_OF.get(v.__class__, _OTHER) for v in values]
        if _OTHER in kinds:
            return None
        nums = []
        strs = []
        for v, k in zip(values, kinds):
            if k == _NUMBER:
                if v.__class__ is int and not _EXACT_INT >= v >= -_EXACT_INT:
                    return None
                nums.append(v)
                strs.append("")
            elif k == _BOOL:
                nums.append(1.0 if v else 0.0)
                strs.append("")
            else:
                nums.append(0.0)
                strs.append(v if k == _STR else "")
        kind = np.array(kinds, np.int8)
        num = np.array(nums, float)
        kind[(kind == _NUMBER) & np.isnan(num)] = _NAN
        strings = np.empty(len(strs), object)
        strings[:] = strs
        return cls(kind, num, strings)

    def in_strings(self, wanted) -> np.ndarray:
        """Where the value is a string among ``wanted`` (a set)."""
        import numpy as np

        if self._uniques is None:
            self._uniques = np.unique(self.strs[self.kind == _STR]) if (self.kind == _STR).any() else self.strs[:0]
        hit = [u for u in self._uniques if u in wanted]
        if not hit:
            return np.zeros(len(self.kind), bool)
        return (self.kind == _STR) & np.isin(self.strs, hit)


def _equal_mask(a, b) -> np.ndarray:
    """Where ``a`` (a ``_Column``) equals ``b`` (a column, or a literal) as ``_equal`` says."""

    if isinstance(b, _Column):
        same = a.kind == b.kind
        numeric = (a.kind == _NUMBER) | (a.kind == _BOOL)
        return same & ((numeric & (a.num == b.num)) | ((a.kind == _STR) & (a.strs == b.strs)) | (a.kind == _NULL))
    kind = _KIND_OF.get(b.__class__)
    if kind == _NUMBER:
        return (a.kind == _NUMBER) & (a.num == b)
    if kind == _BOOL:
        return (a.kind == _BOOL) & (a.num == float(b))
    if kind == _STR:
        return (a.kind == _STR) & (a.strs == b)
    return a.kind == _NULL


def _ordered_mask(op, a, b) -> np.ndarray:
    import numpy as np

    fn = _ORDER[op]
    if isinstance(b, _Column):
        numbers = (a.kind == _NUMBER) & (b.kind == _NUMBER)
        strings = (a.kind == _STR) & (b.kind == _STR)
        out = numbers & fn(a.num, b.num)
        if strings.any():
            out[strings] = fn(a.strs[strings], b.strs[strings]).astype(bool)
        return out
    kind = _KIND_OF.get(b.__class__)
    if kind == _NUMBER:
        return (a.kind == _NUMBER) & fn(a.num, b)
    if kind == _STR:
        return (a.kind == _STR) & fn(a.strs, b).astype(bool)
    return np.zeros(len(a.kind), bool)  # a boolean or null is never ordered


class Columns:
    """The columns of a list of rows (``_columns.row``), each made once,
    when a query first asks for it; what ``Query.mask`` asks. The rows are
    not copied: they must not change while this is kept."""

    def __init__(self, rows):
        self.rows = rows
        self.count = len(rows)
        self._made: dict = {}

    def column(self, name) -> _Column | None:
        try:
            return self._made[name]
        except KeyError:
            pass
        got = _Column.of([row.get(name, _MISSING) for row in self.rows])
        self._made[name] = got
        return got

    def operand(self, operand, now) -> _Column | None:
        """The column an operand names (``age`` made of ``updated`` and
        ``now``); None when it is asked row by row."""
        import numpy as np

        kind, name = operand
        if name != "age":
            return self.column(name)
        updated = self.column("updated")
        if updated is None or ((updated.kind == _STR) | (updated.kind == _BOOL)).any():
            return None
        if now is None:
            return _Column(np.zeros(self.count, np.int8), updated.num, updated.strs)
        kind = np.where((updated.kind == _NUMBER) | (updated.kind == _NAN), updated.kind, _MISSING_KIND)
        num = now - updated.num
        kind[(kind == _NUMBER) & np.isnan(num)] = _NAN
        return _Column(kind.astype(np.int8), num, updated.strs)

    def each(self, test, now) -> np.ndarray:
        """``test(row, now)`` of each row: a part asked row by row."""
        import numpy as np

        return np.fromiter((test(row, now) for row in self.rows), bool, self.count)


class Query:
    """A query read once and asked of many rows: ``query(row, now)`` of one,
    ``query.mask(columns, now)`` of a whole ``Columns`` at once (the same
    answers). ``columns``: the columns it names; ``text``: as it was written."""

    def __init__(self, text):
        if isinstance(text, Query):
            text = text.text
        if not isinstance(text, str):
            raise SomatizeTypeError(
                f"where= takes a query as a str, like where='config.lr < 1e-2 and loss.best < 0.1'; "
                f"got {type(text).__name__}"
            )
        if len(text) > MAX_LENGTH:
            raise QueryError(
                f"where= is {len(text):,} characters long: expected at most {MAX_LENGTH:,} (ask a shorter "
                f"question; the query was not read)",
                text[:MAX_LENGTH], MAX_LENGTH, "the end of the query")
        parser = _Parser(text)
        tree = parser.parse()
        self._test = tree.test
        self._mask = tree.mask
        self.text = text
        self.columns = frozenset(parser.fields)

    def __call__(self, row: dict, now: float | None = None) -> bool:
        return self._test(row, now)

    def mask(self, columns: Columns, now: float | None = None) -> np.ndarray:
        """Whether it holds for each row of ``columns``, as a boolean array
        (``now``: for ``age``, the time asked; now when not given)."""
        if now is None and "age" in self.columns:
            now = time.time()
        return self._mask(columns, now)

    def __repr__(self):
        return f"Query({self.text!r})"


def matching(rows, where, now=None, key=None, columns: Columns | None = None) -> list:
    """The rows ``where`` (a str or a ``Query``) holds for, in order;
    ``key(row)``: the columns of a row, when a row is not its columns;
    ``columns``: the ``Columns`` of ``rows``, when the caller keeps them
    (the query is then asked of whole columns at once)."""
    import numpy as np

    query = where if isinstance(where, Query) else Query(where)
    if now is None and "age" in query.columns:
        now = time.time()
    if columns is not None:
        return [rows[i] for i in np.flatnonzero(query.mask(columns, now))]
    if key is None:
        return [r for r in rows if query(r, now)]
    return [r for r in rows if query(key(r), now)]


def comparisons(text: str) -> list[tuple[str, str, object]] | None:
    """The comparisons a query is the conjunction of, as ``(column, op,
    value)`` with the column on the left (``0.1 > loss.best`` reads
    ``("loss.best", "<", 0.1)``; ``in`` gives the list of values), or None
    when the query is not one (``or``, ``not``, two columns compared). What
    a picture can draw as brushes, one interval or set of values a column."""
    Query(text)  # a query that does not read fails here, pointing at the character
    parser = _Parser(text)
    out: list = []
    flipped = _FLIPPED

    def conjunction():
        term()
        while parser.word() == "and":
            parser.take()
            term()

    def term():
        token = parser.peek()
        if token[0] == "op" and token[1] == "(":
            parser.take()
            conjunction()
            if parser.peek()[1] != ")":
                raise _NotOne
            parser.take()
            return
        if parser.word() == "not":
            raise _NotOne
        left = parser.operand()
        if parser.word() == "not":  # not in
            raise _NotOne
        if parser.word() == "in":
            parser.take()
            out.append((left[1], "in", parser.values()))
            return
        op = parser.take()[1]
        right = parser.operand()
        if left[0] == right[0]:
            raise _NotOne
        out.append((left[1], op, right[1]) if left[0] == "column" else (right[1], flipped[op], left[1]))

    try:
        conjunction()
    except _NotOne:
        return None
    return out if parser.peek()[0] == "end" else None


class _NotOne(Exception):
    """Inside ``comparisons``: the query is not a conjunction of comparisons."""
