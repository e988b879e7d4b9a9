"""``where=``: one small query language over the columns of runs, read by a
grammar of our own (a tokenizer and a recursive-descent parser) into a tree
(``_tree``), which answers it of one row or of a whole table. It runs no
code whatever it holds: no ``eval``, no ``compile``, no attribute is ever
looked up; a column is a key of the run's row (``_columns.row``). A query
may come from a shared notebook or a URL.

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

What a query means (values as recorded; a value a run lacks, NaN, null,
the infinities) is the tree's: ``_tree`` states it, and
``somatize.record.runs`` states it for every surface.

Bounds: a query is at most ``MAX_LENGTH`` characters, nests ``not`` and
parentheses at most ``MAX_DEPTH`` deep, lists at most ``MAX_LIST`` values;
a number is at most 40 characters, finite (but ``inf``, ``-inf``), and an integer fits 64 bits
(-2**63 to 2**64 - 1, what a Recorder records). A
query that does not read raises ``QueryError`` naming the character where
reading stopped and what could have stood there, with a caret under it.

``parse(text)`` is the tree; ``Query(text)`` keeps it with the text and the
columns it names; ``matching`` gives the rows a query holds for;
``comparisons`` and ``nameable`` are what the explorer's brushes ask.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from .._base.errors import QueryError, SomatizeTypeError
from ._arrays import Columns
from ._columns import FIXED, QUERY_STATS
from ._tree import (
    COMPARE,
    CONSTANTS,
    KEYWORDS,
    NAME,
    And,
    Column,
    Compare,
    Member,
    Node,
    Not,
    Or,
    Value,
    column_text,
    comparison_of,
    conjuncts,
)

if TYPE_CHECKING:  # numpy is imported where whole columns are asked: `somatize runs --where` lists without it
    import numpy as np

MAX_LENGTH = 4_000
MAX_DEPTH = 32
MAX_LIST = 1_000
MAX_NUMBER = 40  # characters of one number
NAMES = (*FIXED, "cause", "problem", "age")
_TOKEN = re.compile(
    rf"""(?P<space>[ \t\r\n]+)
      | (?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|-inf(?![A-Za-z0-9_/]))
      | (?P<name>{NAME})
      | (?P<quoted>`[^`\x00-\x1f]{{1,200}}`)
      | (?P<string>"(?:[^"\\\x00-\x1f]|\\.)*"|'(?:[^'\\\x00-\x1f]|\\.)*')
      | (?P<op>==|!=|<=|>=|<|>|\(|\)|\[|\]|,|\.)""",
    re.VERBOSE,
)
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t"}
_WRONG = {"=": "==", "&&": "and", "&": "and", "||": "or", "|": "or", "!": "not", "<>": "!="}
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
                    _fail(query, at, _OPERATOR if right in COMPARE else "and, or, not or a comparison",
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
        if kind != "name":
            return None
        word = text.lower()
        return word if word in KEYWORDS else None

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
        return parts[0] if len(parts) == 1 else Or(parts)

    def and_(self, depth):
        parts = [self.not_(depth)]
        while self.word() == "and":
            self.take()
            parts.append(self.not_(depth))
        return parts[0] if len(parts) == 1 else And(parts)

    def not_(self, depth):
        token = self.peek()
        if depth >= MAX_DEPTH:
            _fail(self.query, token[2], f"at most {MAX_DEPTH} levels of 'not' and parentheses",
                  "more", "write the query flatter")
        if self.word() == "not":
            self.take()
            return Not(self.not_(depth + 1))
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
            if left.__class__ is not Column:
                _fail(self.query, token[2], "a column before 'in'", "a value", "write config.opt in [\"adam\"]")
            self.take()
            return Member(left, self.values(), negated)
        if token[0] != "op" or token[1] not in COMPARE:
            _fail(self.query, token[2], _OPERATOR, self.found(token))
        self.take()
        right = self.operand()
        if left.__class__ is not Column and right.__class__ is not Column:
            _fail(self.query, token[2], f"{_COLUMN} on one side of {token[1]}", "two values",
                  "a column is written without quotes")
        return Compare(token[1], left, right)

    def operand(self):
        token = self.peek()
        kind, text, at, _ = token
        if kind == "name" and text in CONSTANTS:
            self.take()
            after = self.peek()
            if after[0] == "op" and after[1] == ".":
                _fail(self.query, at, _COLUMN, repr(text), f"{text} is a value; a column of that name is "
                      f"written between backticks: `{text}`.last")
            return Value(CONSTANTS[text])
        if kind == "name" and self.word() is None or kind == "quoted":
            return Column(self.column())
        if kind in ("number", "string"):
            return Value(self.literal())
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
            elif token[0] == "name" and token[1] in CONSTANTS:
                out.append(CONSTANTS[self.take()[1]])
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


def parse(text: str) -> Node:
    """The tree of the query ``text`` (``_tree``); ``QueryError`` pointing
    at the character where a query that does not read stopped."""
    return Query(text).tree


class Query:
    """A query read once and asked of many rows: ``query(row, now)`` of one,
    ``query.mask(columns, now)`` of a whole ``Columns`` at once (the same
    answers: the tree's two ways). ``tree``: the query read (``_tree``);
    ``columns``: the columns it names; ``text``: as it was written."""

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
        self.tree = parser.parse()
        self.text = text
        self.columns = frozenset(parser.fields)

    def __call__(self, row: dict, now: float | None = None) -> bool:
        return self.tree.test(row, now)

    def mask(self, columns: Columns, now: float | None = None) -> np.ndarray:
        """Whether it holds for each row of ``columns``, as a boolean array
        (``now``: for ``age``, the time asked; now when not given)."""
        if now is None and "age" in self.columns:
            now = time.time()
        return self.tree.mask(columns, now)

    def __repr__(self):
        return f"Query({self.text!r})"


def matching(rows, where, now=None, key=None, columns: Columns | None = None) -> list:
    """The rows ``where`` (a str or a ``Query``) holds for, in order;
    ``key(row)``: the columns of a row, when a row is not its columns;
    ``columns``: the ``Columns`` of ``rows``, when the caller keeps them
    (the query is then asked of whole columns at once)."""
    query = where if isinstance(where, Query) else Query(where)
    if now is None and "age" in query.columns:
        now = time.time()
    if columns is not None:
        import numpy as np

        return [rows[i] for i in np.flatnonzero(query.mask(columns, now))]
    test = query.tree.test
    if key is None:
        return [r for r in rows if test(r, now)]
    return [r for r in rows if test(key(r), now)]


def comparisons(text: str) -> list[tuple[str, str, object]] | None:
    """The comparisons a query is the conjunction of, as ``(column, op,
    value)`` with the column on the left (``0.1 > loss.best`` reads
    ``("loss.best", "<", 0.1)``; ``in`` gives the list of values), or None
    when the query is not one (``or``, ``not``, two columns compared). What
    a picture can draw as brushes, one interval or set of values a column."""
    said = [comparison_of(part) for part in conjuncts(parse(text))]
    return None if None in said else said


def nameable(column: str) -> bool:
    """Whether a query can name ``column``: its text (``_tree.column_text``)
    reads back as that very column (a name with a backtick or a control
    character, or a part of over 200 characters that is not a bare name,
    cannot be written)."""
    try:
        tree = parse(f"{column_text(column)} == 0")
    except QueryError:
        return False
    return tree.__class__ is Compare and tree.left.name == column
