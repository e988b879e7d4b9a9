"""The query tree (record/_tree): what ``_where`` reads every ``where=``
into, and the one engine every surface asks. Its canonical text reads back
as the very tree; its two answers (of a row, of whole columns) agree; an
``and``'s parts are what the explorer draws as brushes and reads back; the
run browser, ``runs()``, ``somatize runs`` and ``compare`` answer a query
with the same runs from one table; and no layer above the record reaches
into the engine's private names."""

from __future__ import annotations

import ast
import math
import random
import time
from pathlib import Path

import pytest

from somatize import QueryError, Recorder, SomatizeValueError, Store
from somatize._server._browse import Browser
from somatize._server._discover import store_id
from somatize.cli import runs_table
from somatize.record import _runs, _table, compare, runs
from somatize.record._tree import (
    And,
    Column,
    Compare,
    Member,
    Not,
    Or,
    Value,
    column_text,
    comparison_of,
    conjuncts,
    equal,
    literal_text,
    writable,
)
from somatize.record._where import Columns, Query, comparisons, nameable, parse

ROOT = Path(__file__).resolve().parents[1] / "somatize"

# ---- random queries, written every way the grammar reads ----------------------------------------

COLUMNS = ["config.x", "config.y", "loss.best", "run", "age", "config.gone", "`config`.x", "config.`y`"]
LITERALS = ["0", "1", "1.0", "0.5", "-1", "-0.0", "1e308", "2.5e-7", "true", "false", "null", "True", "None",
            '"a"', "'a'", '""', '"ünï"', '"1"', '"q\\"uote"', "'it\\'s'", '"line\\nbreak"', '"\\\\"',
            "9007199254740993", "18446744073709551615", "-9223372036854775808", "inf", "-inf"]


def random_query(rng, depth=0):
    if depth < 3 and rng.random() < 0.35:
        word = rng.choice(["and", "or", "AND", "Or"])
        joined = f" {word} ".join(random_query(rng, depth + 1) for _ in range(rng.randint(2, 3)))
        bare = joined if depth == 0 else f"({joined})"
        return rng.choice([f"({joined})", f"not ({joined})", f"NOT ({joined})", bare])
    column = rng.choice(COLUMNS)
    if rng.random() < 0.2:
        listed = ", ".join(rng.sample(LITERALS, rng.randint(0, 4)))
        return f"{column} {rng.choice(['in', 'not in', 'NOT IN'])} [{listed}]"
    op = rng.choice(["==", "!=", "<", "<=", ">", ">="])
    other = rng.choice(COLUMNS) if rng.random() < 0.2 else rng.choice(LITERALS)
    said = f"{other} {op} {column}" if rng.random() < 0.3 else f"{column} {op} {other}"
    return f"not {said}" if rng.random() < 0.1 else said


VALUES = [0, 1, -1, 1.0, 0.5, -0.0, float("nan"), float("inf"), float("-inf"), True, False, None, "a", "", "ünï",
          "1", 'q"uote', "line\nbreak", 2**53 + 1, (1 << 64) - 1, [1], {"a": 1}]


def random_rows(rng, count):
    rows = []
    for i in range(count):
        row = {"run": rng.choice(["a", "b", f"r{i}"]), "updated": rng.choice([1000.0, 2000.0, None])}
        for column in ("config.x", "config.y", "loss.best"):
            if rng.random() < 0.85:
                row[column] = rng.choice(VALUES)
        rows.append(row)
    return rows


@pytest.mark.parametrize("seed", range(4))
def test_the_canonical_text_reads_back_as_the_same_tree_and_answers_the_same(seed):
    rng = random.Random(seed)
    rows = random_rows(rng, 200)
    columns = Columns(rows)
    for _ in range(150):
        written = random_query(rng)
        tree = parse(written)
        text = tree.text()
        assert parse(text) == tree, (written, text)
        assert parse(text).text() == text  # a fixed point: the canonical text of the canonical text
        for now in (1500.0, 2500.0):
            want = [Query(written)(r, now) for r in rows]
            assert [Query(text)(r, now) for r in rows] == want, (written, text)
            assert Query(text).mask(columns, now).tolist() == want, (written, text)  # the tree's two answers


def test_a_tree_is_the_same_when_the_question_is():
    same = [
        ("config.x == 1 and (loss.best < 2 and run != 'a')", "(config.x == 1 AND loss.best < 2) and run != \"a\""),
        ("0.1 > loss.best", "loss.best < 0.1"),
        ("1 == config.x", "config.x == 1"),
        ("config.x == True or config.x == None", "config.x == true OR config.x == null"),
        ("`config`.`x` in ['a', 1]", 'config.x in ["a", 1]'),
        ("not (a.last < 1 or b.last < 1 or c.last < 1)", "not ((a.last < 1 or b.last < 1) or c.last < 1)"),
    ]
    for a, b in same:
        assert parse(a) == parse(b) and hash(parse(a)) == hash(parse(b)), (a, b)
    different = [
        ("config.x == 1", "config.x == true"),  # a boolean is no number
        ("config.x == 1", "config.x == 1.0"),  # the same answers, written otherwise
        ("config.x in [1, 2]", "config.x in [2, 1]"),
        ("config.x == 1 or config.y == 1 and run == 'a'", "(config.x == 1 or config.y == 1) and run == 'a'"),
        ("not config.x == 1", "config.x != 1"),  # not that: a run without x
        ("config.x not in [1]", "not config.x in [1]"),
    ]
    for a, b in different:
        assert parse(a) != parse(b), (a, b)
    assert parse("0.1 > loss.best") == Compare("<", Column("loss.best"), Value(0.1))
    assert Compare(">", Value(0.1), Column("loss.best")) == Compare("<", Column("loss.best"), Value(0.1))
    assert parse("a.last < 1 and not (b.last == 2 or c.last in [3])") == And([
        Compare("<", Column("a.last"), Value(1)),
        Not(Or([Compare("==", Column("b.last"), Value(2)), Member(Column("c.last"), [3])]))])
    with pytest.raises(TypeError, match="compare a Column with a Value or another Column"):
        Compare("==", Value(1), Value(1))


def test_the_conjuncts_of_a_query_and_the_comparisons_a_brush_draws():
    tree = parse("config.x >= 1 and (0.5 > loss.best and config.opt in ['a', 'b']) and not run == 'r'")
    parts = conjuncts(tree)
    assert [p.text() for p in parts] == ["config.x >= 1", "loss.best < 0.5", 'config.opt in ["a", "b"]',
                                         'not run == "r"']
    assert [comparison_of(p) for p in parts] == [("config.x", ">=", 1), ("loss.best", "<", 0.5),
                                                 ("config.opt", "in", ["a", "b"]), None]
    assert conjuncts(parse("a.last < 1 or b.last < 1")) == [parse("a.last < 1 or b.last < 1")]
    assert comparisons("0.1 > loss.best and config.x == 1") == [("loss.best", "<", 0.1), ("config.x", "==", 1)]
    for drawn_by_no_brush in ("a.last < 1 or b.last < 1", "config.x not in [1]", "not config.x == 1",
                              "config.x < config.y", "a.last < 1 and (b.last < 1 or c.last < 1)"):
        assert comparisons(drawn_by_no_brush) is None, drawn_by_no_brush
    with pytest.raises(QueryError, match="character 9"):
        comparisons("config.x = 1")


NAMES = ["config.lr", "config.batch size", "config.and", "config.OR", "OR.last", "In.best", "inf.last", "True.best",
         "null.count", "config.ünï", "config.a.b", "config.a. b", "config.x/y", "config.1st", "config." + "z" * 300,
         "config." + "y" * 198 + " z", "age", "loss/val.best"]
UNNAMEABLE = ["config.a`b", "config.tab\there", "config." + "y" * 201 + " z", "config.__class__", "lr", "config",
              "loss.nope"]


def test_a_column_is_written_as_it_reads_back():
    for name in NAMES:
        assert nameable(name), name
        tree = parse(f"{column_text(name)} == 0")
        assert tree.left == Column(name) and parse(tree.text()) == tree, name
    assert column_text("OR.last") == "`OR`.last" and column_text("config.batch size") == "config.`batch size`"
    for name in UNNAMEABLE:
        assert not nameable(name), name


WRITTEN = [0, -1, (1 << 64) - 1, -(1 << 63), 2**53 + 1, 0.1, -0.0, 5e-324, 1.7976931348623157e308, float("inf"),
           float("-inf"), True, False, None, "", "a", "ünï", 'q"uote', "it's", "back\\slash", "line\nbreak\ttab",
           "1", "true", "null"]


def test_a_value_is_written_as_it_reads_back_as_the_very_value():
    for v in WRITTEN:
        assert writable(v), v
        got = parse(f"config.x == {literal_text(v)}").right
        assert got == Value(v) and got.value.__class__ is v.__class__, v
        if v.__class__ is float:
            assert math.copysign(1, got.value) == math.copysign(1, v)  # -0.0 stays -0.0
        assert parse(f"config.x in [{literal_text(v)}]").values[0].__class__ is v.__class__
    for v in ([1], {"a": 1}, "bell\x07", "cr\r", object()):
        assert not writable(v)
        with pytest.raises(SomatizeValueError, match="cannot be written in a query"):
            literal_text(v)
    with pytest.raises(SomatizeValueError, match="NaN cannot be written"):
        literal_text(float("nan"))
    assert equal(1, 1.0) and not equal(1, True) and not equal(0, False) and not equal("1", 1) and equal(None, None)


# ---- the explorer: an and's parts are its brushes -------------------------------------------------


def sweep(path, count, seed=0):
    store = Store(path)
    rng = random.Random(seed)
    for k in range(count):
        lr = 10 ** rng.uniform(-4, -1)
        config = {"lr": lr, "opt": rng.choice(["adam", "sgd", "rmsprop"]), "seed": rng.randrange(5)}
        if k % 7:
            config["batch"] = rng.choice([16, 32, 64])
        with Recorder(store, run=f"r{k:03d}", config=config, summarising=["loss"]) as r:
            r.forward_began()
            r({"fact": "loss", "value": math.log10(lr) + 4 + rng.random()})
    return store


def test_the_conjuncts_of_a_query_round_trip_to_brushes(tmp_path):
    """Brushes make an ``and`` of comparisons; set as ``where`` on another
    explorer, its conjuncts draw a brush on each axis they name and no other,
    the text is kept, the selection is the query's, and each drawn brush
    covers the runs selected (a set of values: exactly the runs it holds)."""
    store = sweep(tmp_path / "s", 40)
    rng = random.Random(1)
    explorer = compare(store)
    asked = 0
    for _ in range(25):
        for i in range(len(explorer.axes)):
            extent = sorted([rng.uniform(-0.1, 1.1), rng.uniform(-0.1, 1.1)]) if rng.random() < 0.5 else None
            explorer.brush(i, extent)
        text = explorer.where
        brushed = {i for i, b in enumerate(explorer.brushes) if b is not None}
        if text is None:
            continue
        asked += 1
        said = [comparison_of(part) for part in conjuncts(parse(text))]
        assert None not in said and {c for c, _, _ in said} == {explorer.axes[i] for i in brushed}
        other = compare(store)
        other.where = text
        assert other.where == text
        selected = sorted(runs(store, where=text)["run"])
        assert sorted(other.selected["run"]) == sorted(explorer.selected["run"]) == selected
        assert {i for i, b in enumerate(other.brushes) if b is not None} == brushed
        for i in brushed:
            axis, (foot, top) = other.axis_list[i], other.brushes[i]
            inside = (axis.places >= foot - 1e-9) & (axis.places <= top + 1e-9)
            assert inside[other.mask].all(), (text, axis.column)
            if axis.categories is not None:  # the values its comparisons hold for, and no other
                own = Query(" and ".join(f"({p.text()})" for p in conjuncts(parse(text))
                                         if comparison_of(p)[0] == axis.column))
                assert inside.tolist() == [own(row) for row in other.rows], (text, axis.column)
    assert asked >= 15


# ---- every surface answers from one table, with one engine -------------------------------------------


MIXED = {
    "a-int": {"lr": 1, "opt": "sgd", "flag": True, "tags": [1, 2]},
    "b-float": {"lr": 0.01, "opt": "adam", "flag": False},
    "c-str": {"lr": "auto", "opt": "adam", "flag": 1},
    "d-none": {"lr": None, "opt": "sgd"},
    "e-missing": {"opt": "adamw", "flag": "yes"},
    "f-big": {"lr": 2**60 + 1, "opt": "", "flag": 0.0},
    "g-noconfig": None,
}
LOSSES = {"a-int": [3.0, 2.0], "b-float": [2.0, 0.5], "c-str": [float("nan")], "d-none": [5.0, float("inf")],
          "e-missing": [0.4], "f-big": [7.0, -6.0], "g-noconfig": []}
ASKED = ["config.lr < 0.5", "config.lr == 1", "config.flag == true", "config.flag == 1", "config.flag != 1",
         'config.opt in ["adam", ""]', "config.opt not in ['sgd']", "config.lr == null", "not config.lr == null",
         "loss.best < 1 or config.lr > 1e10", "loss.last > -inf", "loss.max == inf", "not loss.last < 10",
         "config.tags == 1", "loss.count >= 1 and state == 'finished'", "age > 0", "age < 0",
         "config.lr >= config.flag", "run in ['a-int', 'g-noconfig'] and not config.opt == 'sgd'"]


def cli_names(text):
    if text.startswith("no run"):
        return []
    lines = text.splitlines()[1:]  # the header
    return [line.split()[0] for line in lines if line and not line.startswith(("interrupted:", "damaged:", "("))]


def test_every_surface_answers_a_query_with_the_same_runs(tmp_path):
    store = Store(tmp_path / "s")
    for run, config in MIXED.items():
        with Recorder(store, run=run, config=config, summarising=["loss"]) as r:
            for v in LOSSES[run]:
                r.forward_began()
                r({"fact": "loss", "value": v})
    browser = Browser(tmp_path)
    sid = store_id("s")
    for query in ASKED:
        want = list(runs(store, where=query)["run"])
        assert [r["run"] for r in browser.runs(sid, where=query)["runs"]] == want, query
        assert [r["run"] for r in browser.runs(sid, where=query, sort="run", descending=True)["runs"]] == want[::-1]
        assert cli_names(runs_table(store.path, where=query)) == want, query
        if any(isinstance(v, float) and math.isfinite(v) for v in runs(store, where=query).get("loss.best", [])):
            assert list(compare(store, where=query).selected["run"]) == want, query
    assert len({tuple(runs(store, where=q)["run"]) for q in ASKED}) > 10  # the queries tell the runs apart


def test_the_run_browser_lists_from_the_table_runs_asks(tmp_path, monkeypatch):
    """A store's runs read once, by any surface, are not read again by
    another while nothing changed: ``runs()`` and the run browser's
    listings (a query, an order, a page by name) ask one table."""
    monkeypatch.setattr(_table, "_RECENT", 0.0)  # trusts the files' times at once (test_run_table.py)
    read = []
    real = _runs._row
    monkeypatch.setattr(_runs, "_row", lambda name, *a: read.append(name) or real(name, *a))
    store = Store(tmp_path / "s")
    for i in range(6):
        with Recorder(store, run=f"r{i}", config={"lr": 0.1 * i}, summarising=["loss"]) as r:
            r.forward_began()
            r({"fact": "loss", "value": 1.0 / (i + 1)})
    time.sleep(0.05)  # past the clock's tick that moves a file's times
    browser = Browser(tmp_path)
    sid = store_id("s")
    assert list(runs(store, where="config.lr > 0.25")["run"]) == ["r3", "r4", "r5"] and len(read) == 6
    del read[:]
    assert [r["run"] for r in browser.runs(sid, where="config.lr > 0.25")["runs"]] == ["r3", "r4", "r5"]
    assert [r["run"] for r in browser.runs(sid, sort="loss.last")["runs"]] == [f"r{i}" for i in range(5, -1, -1)]
    assert [r["run"] for r in browser.runs(sid, limit=2, offset=2)["runs"]] == ["r2", "r3"]
    assert read == []
    with Recorder(store, run="r1", resume=True, summarising=["loss"]) as r:  # one run changes
        r.forward_began()
        r({"fact": "loss", "value": 0.01})
    time.sleep(0.05)
    assert [r["run"] for r in browser.runs(sid, limit=2)["runs"]] == ["r0", "r1"] and read == ["r1"]
    assert runs(store).set_index("run").loc["r1", "loss.last"] == 0.01 and read == ["r1"]  # read once, by the page


def test_the_run_browser_holds_the_tables_of_every_store_it_shows(tmp_path, monkeypatch):
    """The sidebar lists every store at each poll: more stores than the
    record keeps tables of (``_table.KEPT_STORES``) are each listed again
    from their table, not read again."""
    monkeypatch.setattr(_table, "_RECENT", 0.0)
    stores = [f"s{k}" for k in range(_table.KEPT_STORES + 2)]
    for k, name in enumerate(stores):
        for i in range(3):
            with Recorder(Store(tmp_path / name), run=f"r{i}", config={"k": k}) as r:
                r.forward_began()
                r({"fact": "loss", "value": float(i)})
    time.sleep(0.05)
    read = []
    real = _runs._row
    monkeypatch.setattr(_runs, "_row", lambda name, *a: read.append(name) or real(name, *a))
    browser = Browser(tmp_path)
    assert [s["runs"] for s in browser.stores()] == [3] * len(stores)

    def poll():
        for name in stores:
            assert [r["run"] for r in browser.runs(store_id(name))["runs"]] == ["r0", "r1", "r2"]
            assert [r["run"] for r in browser.runs(store_id(name), where="loss.last > 0")["runs"]] == ["r1", "r2"]

    poll()
    assert len(read) == 3 * len(stores)  # each run read once
    del read[:]
    poll()
    browser.stores()
    assert read == []


# ---- no layer above the record reaches into the engine ----------------------------------------------

ENGINE = {"_where", "_tree", "_arrays", "_table"}  # the query engine's modules in somatize/record


def private_uses(root: Path) -> list[str]:
    """``file:line name`` of each private name of the query engine's modules
    that a module outside ``record/`` imports (``from ..record._where import
    _tokens``) or reaches on the module (``_where._KEYWORDS``)."""
    wrong = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("record/"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                parts = node.module.split(".")
                if parts[-1] in ENGINE and "record" in parts:
                    wrong += [f"{rel}:{node.lineno} {parts[-1]}.{a.name}" for a in node.names if a.name.startswith("_")]
                elif parts[-1] == "record":
                    aliases |= {a.asname or a.name for a in node.names if a.name in ENGINE}
            elif isinstance(node, ast.Import):
                aliases |= {a.asname for a in node.names if a.asname and a.name.split(".")[-1] in ENGINE}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                wrong.append(f"{rel}:{node.lineno} {node.value.id}.{node.attr}")
    return wrong


def test_no_module_above_the_record_uses_a_private_name_of_the_query_engine():
    assert private_uses(ROOT) == []


@pytest.mark.parametrize("code", [
    "from ..record._where import _KEYWORDS, _tokens\n",
    "from somatize.record._tree import _nan\n",
    "from ..record import _where\n\n\ndef f():\n    return _where._tokens('x')\n",
    "from ..record import _table as t\n\n\ndef f():\n    return t._TABLES\n",
    "import somatize.record._where as w\n\n\ndef f():\n    return w._Parser\n",
])
def test_a_private_name_of_the_engine_used_above_it_is_caught(tmp_path, code):
    (tmp_path / "_widgets").mkdir()
    (tmp_path / "_widgets" / "_sneaky.py").write_text(code)
    (tmp_path / "_widgets" / "_fine.py").write_text("from ..record._where import Query, parse\n"
                                                    "from ..record import _where\n\n\ndef f():\n"
                                                    "    return _where.matching, _where.__name__\n")
    (tmp_path / "record").mkdir()
    (tmp_path / "record" / "_own.py").write_text("from ._where import _tokens\n")  # its own package: allowed
    wrong = private_uses(tmp_path)
    assert len(wrong) >= 1 and all(w.startswith("_widgets/_sneaky.py:") for w in wrong), wrong
