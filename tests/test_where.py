"""``where=``: the query grammar over runs (record/_where), against a
hand-computed oracle over a real store of mixed runs, and against hostile
queries, each refused with an error that points at its place, with nothing
executed (an audit hook watches)."""

import os
import subprocess
import sys

import pytest

from somatize import QueryError, Recorder, Store
from somatize.record import runs
from somatize.record._where import MAX_DEPTH, MAX_LENGTH, Query

EVERY = set("abcdefgh")


def _record(store, run, losses, config=None, summarising=("loss",), acc=None):
    r = Recorder(store, run=run, summarising=list(summarising), config=config)
    for i, loss in enumerate(losses):
        r.forward_began()
        if loss is not None:
            r({"fact": "loss", "value": loss})
        if acc is not None:
            r({"fact": "acc", "value": acc[i]})
    return r


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Eight runs (the oracle below is computed by hand from these):

    a finished  lr .001 opt adam  bn True  layers [64, 64] seed 0  name alpha  loss 1, .5, .2  acc .1, .5, .4
    b finished  lr .01  opt sgd   bn False seed 1  optim.beta .9                 loss 2, .05, .08
    c finished  lr .1   opt adam  bn 1     seed None                             loss 3, NaN
    d interrupted lr "0.01" (a str) opt adam                                     loss .09
    e finished  no config, summarises acc only                                   acc .7 (one forward)
    f running (a live Recorder of this process) lr .001 opt sgd                  loss .5, NaN
    g damaged (its summary.json does not read)
    h finished  lr 1e-5 opt Adam  big 2**62  name ünï  seed 2                    loss .001
    """
    s = Store(tmp_path_factory.mktemp("where") / "s")
    _record(s, "a", [1.0, 0.5, 0.2], {"lr": 0.001, "opt": "adam", "bn": True, "layers": [64, 64], "seed": 0,
                                      "name": "alpha"}, ("loss", "acc"), acc=[0.1, 0.5, 0.4]).close()
    _record(s, "b", [2.0, 0.05, 0.08], {"lr": 0.01, "opt": "sgd", "bn": False, "seed": 1,
                                        "optim": {"beta": 0.9}}).close()
    _record(s, "c", [3.0, float("nan")], {"lr": 0.1, "opt": "adam", "bn": 1, "seed": None}).close()
    with pytest.raises(RuntimeError):
        with _record(s, "d", [0.09], {"lr": "0.01", "opt": "adam"}):
            raise RuntimeError("the script failed")
    _record(s, "e", [None], None, ("acc",), acc=[0.7]).close()
    live = _record(s, "f", [0.5, float("nan")], {"lr": 0.001, "opt": "sgd"})
    _record(s, "g", [1.0], {"lr": 0.5}).close()
    (s.path / "runs" / "g" / "summary.json").write_bytes(b"{ not json")
    _record(s, "h", [0.001], {"lr": 1e-5, "opt": "Adam", "big": 2**62, "name": "ünï", "seed": 2}).close()
    yield s
    live.close()


ORACLE = [
    ('state == "finished"', "abceh"),
    ('state == "interrupted"', "d"),
    ('state == "running"', "f"),
    ('state == "damaged"', "g"),
    ('state != "finished"', "dfg"),
    ('state in ["running", "interrupted"]', "df"),
    ('state not in ["finished"]', "dfg"),
    ("config.lr < 1e-2", "afh"),
    ("config.lr <= 0.01", "abfh"),
    ("config.lr > 0.01", "c"),
    ("config.lr >= 0.01", "bc"),
    ("config.lr == 0.01", "b"),
    ('config.lr == "0.01"', "d"),
    ("config.lr != 0.01", "acdfh"),
    ("not config.lr == 0.01", "acdefgh"),
    ("config.lr < 1e-2 and loss.best < 0.1", "h"),
    ("config.lr <= 1e-2 and loss.best < 0.1", "bh"),
    ('config.lr < 1e-2 or state == "interrupted"', "afhd"),
    ('config.opt == "adam"', "acd"),
    ('config.opt == "Adam"', "h"),
    ('config.opt in ["adam", "Adam"]', "acdh"),
    ('config.opt != "adam"', "bfh"),
    ('config.opt < "b"', "acdh"),
    ("config.bn == true", "a"),
    ("config.bn == false", "b"),
    ("config.bn == 1", "c"),
    ("config.bn != true", "bc"),
    ("config.bn in [true]", "a"),
    ("config.bn in [1]", "c"),
    ("config.bn < true", ""),
    ("config.seed == null", "c"),
    ("config.seed != null", "abh"),
    ("config.seed == 0", "a"),
    ("config.seed >= 0", "abh"),
    ("config.seed == false", ""),
    ("config.optim.beta == 0.9", "b"),
    ("config.optim.beta > 0.5 or config.lr > 0.05", "bc"),
    ("config.layers == null", ""),
    ("config.layers != null", "a"),
    ("config.big > 1e18", "h"),
    ("config.big == 4611686018427387904", "h"),
    ('config.name == "ünï"', "h"),
    ('config.name > "b"', "h"),
    ("loss.last < 0.1", "bdh"),
    ("loss.last == null", ""),  # NaN is a number, not null
    ("loss.last != null", "abdh"),
    ("loss.last != 0.5", "abdh"),  # NaN: false, != too
    ("loss.last not in [0.5]", "abdh"),
    ("not loss.last == 0.5", "abcdefgh"),
    ("loss.max < inf", "abcdfh"),
    ("loss.min == 3", "c"),
    ("loss.max >= 2", "bc"),
    ("loss.first == 1", "a"),
    ("loss.count == 3", "ab"),
    ("loss.count >= 1", "abcdfh"),
    ("acc.best > 0.45", "ae"),
    ("acc.best == acc.max", "ae"),
    ("acc.last < acc.best", "a"),
    ("loss.best < loss.last", "b"),
    ("forwards == 3", "ab"),
    ("forwards >= 1", "abcdefh"),
    ("steps == 1", "deh"),
    ("steps == 2", "cf"),
    ("facts > 5", "a"),
    ('run == "a" or run == "g"', "ag"),
    ('run in ["a", "b", "zz"]', "ab"),
    ('run > "f"', "gh"),
    ('not (state == "finished")', "dfg"),
    ('not not state == "running"', "f"),
    ('(config.opt == "adam" or config.opt == "sgd") and loss.best < 0.1', "bd"),
    ('config.opt == "adam" or config.opt == "sgd" and loss.best < 0.1', "abcd"),
    ('NOT state == "finished" AND config.lr == 0.001', "f"),
    ("problem != null", "g"),
    ("cause != null", "d"),
    ("duration >= 0", "abcdefh"),
    ("config.lr < 1e-2 and config.lr > 1e-4", "af"),
    ("pid > 0", "abcdefh"),
    ("host == host", "abcdefh"),
    ("config.missing == 1", ""),
    ("not config.missing == 1", "abcdefgh"),
    ("config.lr in []", ""),
    ("config.lr not in []", "abcdfh"),
    ("`loss`.best < 0.1", "bdh"),
    ("loss.best<0.1", "bdh"),
    ("config.lr == 1e-3", "af"),
    ("config.lr == .001", "af"),
    ("config.lr > -1", "abcfh"),
    ("0.01 < config.lr", "c"),
    ('"adam" == config.opt', "acd"),
    ("config.lr < 1e-2 or\n  loss.best < 0.1", "abdfh"),
    ("age >= 0", "abcdefh"),
]


def test_the_oracle_has_at_least_sixty_queries():
    assert len(ORACLE) >= 60 and len({q for q, _ in ORACLE}) == len(ORACLE)


def test_the_store_is_what_the_oracle_says(store):
    table = runs(store).set_index("run")
    assert dict(table["state"]) == {"a": "finished", "b": "finished", "c": "finished", "d": "interrupted",
                                    "e": "finished", "f": "running", "g": "damaged", "h": "finished"}
    assert table.loc["c", "loss.min"] == 3.0 and table.loc["c", "loss.last"] != table.loc["c", "loss.last"]


@pytest.mark.parametrize(("query", "want"), ORACLE, ids=[q for q, _ in ORACLE])
def test_runs_where_answers_as_the_oracle(store, query, want):
    got = runs(store, where=query)
    assert set(got["run"]) == set(want)
    assert list(got["run"]) == sorted(got["run"])  # in the listing's order


def test_a_comparison_with_nan_is_false_whatever_the_operator():
    row = {"x.last": float("nan"), "y.last": 1.0}
    for query in ["x.last < 1", "x.last > 1", "x.last == 1", "x.last != 1", "x.last == x.last",
                  "x.last != x.last", "x.last in [1]", "x.last not in [1]", "x.last == null", "y.last == x.last"]:
        assert Query(query)(row) is False, query
    assert Query("not x.last < 1")(row) is True


def test_age_is_seconds_since_the_last_update_at_the_moment_asked():
    row = {"updated": 1000.0}
    assert Query("age < 60")(row, now=1030.0) and not Query("age < 60")(row, now=1061.0)
    assert not Query("age >= 0")({"state": "damaged"}, now=1030.0)  # no update known: missing


def test_values_of_different_kinds_are_never_equal_nor_ordered():
    row = {"config.flag": True, "config.n": 1, "config.s": "1", "config.l": [1]}
    assert not Query("config.flag == 1")(row) and Query("config.flag != 1")(row)
    assert not Query("config.n == true")(row) and not Query('config.n == "1"')(row)
    assert not Query('config.s < 2')(row) and not Query("config.l == 1")(row)
    assert Query("config.n == 1.0")(row)  # an int and a float are numbers


def somatize(*args):
    return subprocess.run([sys.executable, "-m", "somatize.cli", *map(str, args)], capture_output=True, text=True)


def test_somatize_runs_where_lists_what_runs_where_answers(store):
    done = somatize("runs", store.path, "--where", 'config.opt == "adam" and loss.best < 1')
    assert done.returncode == 0, done.stderr
    below = ("(", "interrupted:", "damaged:")  # the notes under the table
    listed = {line.split()[0] for line in done.stdout.splitlines()[1:] if line and not line.startswith(below)}
    assert listed == set(runs(store, where='config.opt == "adam" and loss.best < 1')["run"]) == {"a", "d"}


def test_somatize_runs_with_a_bad_query_exits_2_pointing_at_it(store):
    done = somatize("runs", store.path, "--where", "config.lr < and")
    assert done.returncode == 2 and done.stdout == ""
    assert "character 12" in done.stderr and "expected" in done.stderr and "^" in done.stderr


def test_a_query_that_matches_nothing_says_so_on_the_command_line(store):
    done = somatize("runs", store.path, "--where", "config.lr > 100")
    assert done.returncode == 0 and "no run" in done.stdout and "matches" in done.stdout


# ---- hostile queries -------------------------------------------------------------------------

HOSTILE = [
    "__import__('os').system('touch PWNED')",
    "config.__class__ == 1",
    "config.lr.__class__.__mro__ == 1",
    "`__globals__`.last == 1",
    'eval("1") == 1',
    "exec('import os')",
    "open('/etc/passwd')",
    'state == "a"; import os',
    "lambda: 1",
    "[x for x in ()]",
    "config.lr < 1 + 1",
    "config.lr < 2 ** 1000",
    "loss.best < 1e400",
    "loss.best < -1e400",
    "loss.best < 1" + "0" * 100,
    "loss.best < 123456789012345678901234567890",
    "(" * 100 + 'state == "a"' + ")" * 100,
    "not " * 100 + 'state == "a"',
    'state == "' + "a" * 5000 + '"',
    'state == "a" or ' * 400 + 'state == "b"',
    'state == "\x00"',
    'state == "a"\x00',
    "ｓｔａｔｅ == \"a\"",
    "stаte == \"a\"",  # a Cyrillic а
    'state == "a" && run == "b"',
    'state == "a" || 1',
    "!state",
    'state = "a"',
    'state == "\\q"',
    "state == 'unterminated",
    "state",
    "state ==",
    '"state" == "finished"',
    "config == 1",
    "loss < 1",
    "{}.__class__",
    'f"{1}" == 1',
    'state == "a" ;',
    "${jndi:ldap://x}",
    '\u202estate == "a"',
    'state in "abc"',
    "1 in [1]",
    "config.lr < 0x10",
    'getattr(config, "lr")',
    "os.system == 1",
    "",
    'state == "a" and',
    '((state == "a")',
    "config.lr in [1, config.lr]",
    "`a`b`.last == 1",
]

_EVENTS = []
_WATCHING = []


def _hook(event, args):
    if _WATCHING:
        _EVENTS.append(event)


sys.addaudithook(_hook)  # for the life of the test process: a hook cannot be removed


def test_the_audit_hook_sees_what_the_queries_must_not_do(tmp_path):
    del _EVENTS[:]
    _WATCHING.append(True)
    try:
        eval("1")  # noqa: S307 - the hook must see it
        open(tmp_path / "x", "w").close()
        sys.modules.pop("json.tool", None)  # imported before (another test in this process): no import seen
        __import__("json.tool")
    finally:
        _WATCHING.clear()
    assert {"compile", "exec", "open", "import"} <= set(_EVENTS)


def test_there_are_at_least_thirty_hostile_queries():
    assert len(HOSTILE) >= 30 and len(set(HOSTILE)) == len(HOSTILE)


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_query_is_refused_pointing_at_its_place_and_nothing_runs(query, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    del _EVENTS[:]
    _WATCHING.append(True)
    try:
        with pytest.raises(QueryError) as e:
            Query(query)
    finally:
        _WATCHING.clear()
    assert _EVENTS == []  # no exec, compile, import, open, nothing audited at all
    assert not os.path.exists("PWNED") and os.listdir(tmp_path) == []
    error = e.value
    assert 0 <= error.position <= min(len(query), MAX_LENGTH) and error.expected
    message = str(error)
    assert message.startswith("where= ") and "expected" in message
    if len(query) <= MAX_LENGTH:
        assert "^" in message and f"character {error.position}" in message
    assert len(message) < 1_000  # a long query is shown around its place, not whole


def test_a_query_that_is_not_text_is_refused_saying_what_to_write():
    for wrong in (None, b'state == "a"', 3, ["state"]):
        with pytest.raises(TypeError, match="where= takes a query as a str"):
            Query(wrong)


def test_asking_valid_queries_of_many_rows_audits_nothing(store):
    rows = [{"state": "finished", "config.lr": 0.01 * i, "loss.best": 0.1 * i, "run": str(i)} for i in range(100)]
    queries = [Query(q) for q, _ in ORACLE]
    del _EVENTS[:]
    _WATCHING.append(True)
    try:
        for query in queries:
            for row in rows:
                query(row, now=0.0)
        Query('config.lr < 1e-2 and (state in ["finished", "running"] or not loss.best > 0.5)')
    finally:
        _WATCHING.clear()
    assert _EVENTS == []


def test_depth_and_length_bounds_are_where_the_docs_say():
    Query("(" * (MAX_DEPTH - 1) + 'state == "a"' + ")" * (MAX_DEPTH - 1))
    with pytest.raises(QueryError, match="levels"):
        Query("(" * MAX_DEPTH + 'state == "a"' + ")" * MAX_DEPTH)
    with pytest.raises(QueryError, match="characters long"):
        Query('state == "' + "a" * MAX_LENGTH + '"')


def test_the_error_names_the_place_and_what_was_expected():
    with pytest.raises(QueryError) as e:
        Query("config.lr < and loss.best < 0.1")
    assert e.value.position == 12 and "a value" in e.value.expected
    assert str(e.value).splitlines()[1:] == ["    config.lr < and loss.best < 0.1", "    " + " " * 12 + "^"]
    with pytest.raises(QueryError, match=r"write ==") as e:
        Query('state = "finished"')
    assert e.value.position == 6
    with pytest.raises(QueryError, match=r"loss\.last, loss\.best"):
        Query("loss < 0.1")
    with pytest.raises(QueryError, match="control characters") as e:
        Query('state == "fin\x00ished"')  # the quote is closed: the place is the control character's
    assert e.value.position == 13 and "\x00" not in str(e.value).split("\n", 1)[1]


def test_runs_refuses_a_bad_query_before_reading_anything(tmp_path):
    with pytest.raises(QueryError):
        runs(tmp_path / "no-store-here", where="state ==")


# ---- the same query asked of whole columns (Query.mask) answers as row by row --------------

_VALUES = [0, 1, -1, 1.0, 0.5, -0.0, float("nan"), float("inf"), float("-inf"), True, False, None, "a", "b", "",
           "ünï", "1", 2**53, 2**53 + 1, -(2**62), 2**62, [1], {"a": 1}, 10**30]
_LITERALS = ["0", "1", "1.0", "0.5", "-1", "1e308", "true", "false", "null", '"a"', '""', '"ünï"', '"1"',
             "9007199254740992", "9007199254740993", "4611686018427387904", "inf", "-inf"]


_EXACT = [v for v in _VALUES if not isinstance(v, (list, dict)) and not (isinstance(v, int) and abs(v) > 2**53)]


def _random_rows(rng, count, values):
    rows = []
    for i in range(count):
        row = {"run": f"r{i}", "updated": rng.choice([1000.0, 2000.0, None, float("nan")])}
        for column in ("config.x", "config.y", "loss.best"):
            if rng.random() < 0.85:
                row[column] = rng.choice(values)
        rows.append(row)
    return rows


def _random_query(rng, depth=0):
    if depth < 3 and rng.random() < 0.35:
        joined = f" {rng.choice(['and', 'or'])} ".join(_random_query(rng, depth + 1) for _ in range(rng.randint(2, 3)))
        return f"({joined})" if rng.random() < 0.5 else f"not ({joined})"
    column = rng.choice(["config.x", "config.y", "loss.best", "run", "age", "config.gone"])
    if rng.random() < 0.2:
        listed = ", ".join(rng.sample(_LITERALS, rng.randint(0, 4)))
        return f"{column} {rng.choice(['in', 'not in'])} [{listed}]"
    op = rng.choice(["==", "!=", "<", "<=", ">", ">="])
    other = rng.choice(["config.x", "config.y", "loss.best"]) if rng.random() < 0.2 else rng.choice(_LITERALS)
    return f"{other} {op} {column}" if rng.random() < 0.2 else f"{column} {op} {other}"


@pytest.mark.parametrize("seed", range(6))
def test_a_query_asked_of_whole_columns_answers_as_asked_row_by_row(seed):
    """``Query.mask`` (what ``runs(where=)`` asks of its table) against the
    row-by-row answer, which the oracle above checks: 400 random queries over
    rows of every kind of value (NaN, infinities, booleans beside 0 and 1,
    integers past 2**53, lists, missing keys)."""
    import random

    from somatize.record._where import Columns, matching

    rng = random.Random(seed)
    exact = seed % 2 == 0  # values the arrays hold exactly, or also some asked row by row
    rows = _random_rows(rng, 300, _EXACT if exact else _VALUES)
    columns = Columns(rows)
    assert all((columns.column(c) is not None) == exact for c in ("config.x", "config.y", "loss.best"))
    for _ in range(100):
        query = Query(_random_query(rng))
        for now in (1500.0, None):
            want = [r["run"] for r in matching(rows, query, now=now)]
            assert [r["run"] for r in matching(rows, query, now=now, columns=columns)] == want, query


def test_the_oracle_answers_the_same_asked_of_whole_columns(store):
    from somatize.record._columns import QUERY_STATS
    from somatize.record._queries import table_rows
    from somatize.record._where import Columns, matching

    rows = table_rows(store, QUERY_STATS)
    columns = Columns(rows)
    for query, want in ORACLE:
        assert {r["run"] for r in matching(rows, query, columns=columns)} == set(want), query


def test_every_integer_a_recorder_records_can_be_asked_for(tmp_path):
    """A Recorder records an integer of 64 bits, up to 2**64 - 1 (a uint64
    seed); a query could name none at or above 2**63 ("expected an integer
    that fits 64 bits"), so no query found such a run, and the explorer's
    brush over such an axis wrote a query that did not read."""
    store = Store(tmp_path / "s")
    seeds = {"low": -(1 << 63), "mid": 1 << 63, "top": (1 << 64) - 1}
    for run, seed in seeds.items():
        with Recorder(store, run=run, config={"seed": seed}) as r:
            r.forward_began()
            r({"fact": "loss", "value": 1.0})
    assert runs(store).set_index("run")["config.seed"].to_dict() == seeds  # recorded as they are
    for run, seed in seeds.items():
        assert list(runs(store, where=f"config.seed == {seed}")["run"]) == [run]
    assert list(runs(store, where=f"config.seed >= {1 << 63}")["run"]) == ["mid", "top"]
    for outside in (1 << 64, -(1 << 63) - 1):
        with pytest.raises(QueryError, match="fits 64 bits"):
            Query(f"config.seed == {outside}")
