"""The run browser's listing sorts by any column (``sort=``, ``order=``),
over every run that matches, before the page is cut: checked against the
runs' table of ``runs(store)`` sorted by hand in pandas, on a store of mixed
runs (ints, floats, strings, booleans, lists, missing keys, nulls, NaN, a
damaged run, a running one), through the Browser and through real HTTP. A
sort key that names no column is refused naming the closest columns; a
hostile one is refused too, bounded, with nothing executed (an audit hook
watches)."""

from __future__ import annotations

import math
import sys

import orjson
import pandas as pd
import pytest
from tornado.httpclient import HTTPClientError

from somatize import Recorder, Store
from somatize._server._browse import Browser
from somatize._server._findings import _COUNTER
from somatize._server._public import Bad
from somatize._server._sort import MAX_COLUMN, Order
from somatize.record import runs

pytest_plugins = ("pytest_jupyter.jupyter_server",)

# run -> (config, losses, accuracies): every kind a column may hold
RUNS = {
    "a-int": ({"lr": 1, "opt": "sgd", "flag": True, "optim": {"beta": 0.9}, "tags": [1, 2]}, [3.0, 2.0], [0.1, 0.2]),
    "b-float": ({"lr": 0.01, "opt": "adam", "flag": False, "optim": {"beta": 0.99}}, [2.0, 0.5], [0.3, 0.6]),
    "c-tie": ({"lr": 0.01, "opt": "Adam", "flag": True, "tags": ["x"]}, [1.0, 0.5], [0.6, 0.5]),
    "d-str": ({"lr": "auto", "opt": "adam", "flag": 1}, [0.9, 0.7], [0.2]),
    "e-none": ({"lr": None, "opt": "sgd", "optim": {"beta": 0.9}}, [5.0, 4.0, 0.1], []),
    "f-missing": ({"opt": "adamw", "flag": "yes"}, [0.4], [0.9, 0.95]),
    "g-nan": ({"lr": 0.1, "flag": False, "tags": [{"k": 1}]}, [0.3, float("nan")], [0.5]),
    "h-big": ({"lr": 2**60 + 1, "opt": "", "flag": 0.0}, [7.0, 6.0], [0.0]),
    "i-neg": ({"lr": -0.5, "opt": "sgd"}, [0.2, 0.2], [0.7]),
    "j-noconfig": (None, [1.5, 1.2], [0.4]),
}
BROKEN = "k-broken"  # damaged: its summary.json does not read
LIVE = "l-live"  # running: its Recorder is open
COLUMNS = ["run", "state", "steps", "forwards", "facts", "duration", "started", "updated", "age",
           "config.lr", "config.opt", "config.flag", "config.optim.beta", "config.tags",
           "loss.last", "loss.best", "loss.min", "loss.max", "accuracy.last", "accuracy.best", "problem"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("sort")
    store = Store(root / "s")
    for run, (config, losses, accs) in RUNS.items():
        with Recorder(store, run=run, config=config, summarising=("loss", "accuracy")) as r:
            for i, v in enumerate(losses):
                r.forward_began()
                r({"fact": "loss", "value": v})
                if i < len(accs):
                    r({"fact": "accuracy", "value": accs[i]})
    with Recorder(store, run=BROKEN, config={"lr": 0.05}) as r:
        r.forward_began()
        r({"fact": "loss", "value": 0.01})
    (store.path / "runs" / BROKEN / "summary.json").write_bytes(b"{garbage")
    live = Recorder(store, run=LIVE, config={"lr": 0.001, "opt": "sgd"})
    live.forward_began()
    live({"fact": "loss", "value": 0.6})
    live.flush()
    yield root, store
    live.close()


# ---- the oracle: the runs' table, sorted by hand in pandas ---------------------------------


def _kind(v):
    """0 numbers, 1 strings, 2 booleans, 3 the rest; None for a missing value."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NaT:
        return None
    if isinstance(v, bool):
        return 2
    if isinstance(v, (int, float)):
        return 0
    return 1 if isinstance(v, str) else 3


def by_hand(table: pd.DataFrame, column: str, descending: bool) -> list[str]:
    """The runs' names in the order ``sort=column`` means, from ``runs()``'s
    table: by name first; a column of one kind by pandas' own stable sort
    (nulls last); a mixed one kind by kind, each kind sorted alone."""
    t = table.sort_values("run", kind="stable").reset_index(drop=True)
    if column == "age":  # seconds since the last update: youngest first
        return list(t.sort_values("updated", ascending=descending, na_position="last", kind="stable")["run"])
    if column in ("started", "updated"):
        return list(t.sort_values(column, ascending=not descending, na_position="last", kind="stable")["run"])
    kinds = t[column].map(_kind)
    if kinds.dropna().nunique() <= 1 and 3 not in set(kinds.dropna()):  # one kind: pandas sorts it
        present = t[kinds.notna()].copy()
        present[column] = present[column].astype(object if kinds.dropna().eq(1).any() else float)
        ordered = present.sort_values(column, ascending=not descending, kind="stable")
        return list(ordered["run"]) + list(t[kinds.isna()]["run"])
    parts = []
    for k in sorted(set(kinds.dropna()), reverse=descending):
        sub = t[kinds == k].copy()
        sub["_by"] = sub[column].map(lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()) \
            if k == 3 else sub[column].astype(float if k == 0 else object)
        parts.append(sub.sort_values("_by", ascending=not descending, kind="stable"))
    return [*(n for p in parts for n in p["run"]), *t[kinds.isna()]["run"]]


def names(answer):
    return [r["run"] for r in answer["runs"]]


def sid_of(browser):
    (sid,) = [s["id"] for s in browser.stores()]
    return sid


def test_the_oracle_knows_what_it_compares():
    """The table holds every kind the sort must order (so the oracle is asked
    of each): numbers with ints and floats, strings, booleans, lists, nulls."""
    t = pd.DataFrame({"run": list("abcdef"), "x": [2, 0.5, "b", True, None, float("nan")]})
    assert by_hand(t, "x", False) == ["b", "a", "c", "d", "e", "f"]
    assert by_hand(t, "x", True) == ["d", "c", "a", "b", "e", "f"]
    ties = pd.DataFrame({"run": list("dcba"), "x": [1.0, 2.0, 1.0, 2.0]})
    assert by_hand(ties, "x", True) == ["a", "c", "b", "d"]  # ties by name, in either direction


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("column", COLUMNS)
def test_the_listing_sorts_as_the_runs_table_sorted_by_hand(mixed, column, descending):
    root, store = mixed
    table = runs(store)
    assert {BROKEN, LIVE} <= set(table["run"]) and set(table.query("state == 'damaged'")["run"]) == {BROKEN}
    if column != "age":
        assert column in table.columns
    browser = Browser(root)
    got = browser.runs(sid_of(browser), sort=column, descending=descending)
    assert names(got) == by_hand(table, column, descending) and got["total"] == len(table)


def test_the_store_holds_every_kind(mixed):
    _, store = mixed
    lr = runs(store)["config.lr"]
    assert {_kind(v) for v in lr} == {0, 1, None}
    assert {_kind(v) for v in runs(store)["config.flag"]} == {0, 1, 2, None}
    assert 3 in {_kind(v) for v in runs(store)["config.tags"]}
    assert _kind(runs(store).set_index("run").loc["g-nan", "loss.last"]) is None  # NaN, as a null


@pytest.mark.parametrize("column", ["config.lr", "loss.best", "accuracy.best", "age", "config.flag"])
@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
def test_the_sort_is_applied_before_the_page_is_cut(mixed, column, descending):
    root, store = mixed
    browser = Browser(root)
    sid = sid_of(browser)
    whole = names(browser.runs(sid, sort=column, descending=descending))
    pages, offset = [], 0
    while offset is not None:
        page = browser.runs(sid, offset=offset, limit=3, sort=column, descending=descending)
        assert page["total"] == len(whole) and len(page["runs"]) <= 3
        pages += names(page)
        offset = page["next"]
    assert pages == whole


def test_a_filter_and_a_sort_together_answer_the_matching_runs_sorted(mixed):
    root, store = mixed
    browser = Browser(root)
    sid = sid_of(browser)
    where = 'config.opt in ["sgd", "adam"] or loss.best < 0.5'
    table = runs(store, where=where)
    assert 3 < len(table) < len(runs(store))
    for descending in (False, True):
        got = browser.runs(sid, where=where, sort="loss.best", descending=descending)
        assert names(got) == by_hand(table, "loss.best", descending) and got["total"] == len(table)
        first = browser.runs(sid, where=where, sort="loss.best", descending=descending, limit=2)
        second = browser.runs(sid, where=where, sort="loss.best", descending=descending, offset=2, limit=2)
        assert names(first) + names(second) == names(got)[:4]
    # a part of the name too
    got = browser.runs(sid, match="N", sort="config.lr", descending=True)
    want = [n for n in by_hand(runs(store), "config.lr", True) if "n" in n]
    assert names(got) == want and len(want) >= 4


def test_sorting_by_findings_orders_the_counts_made(mixed):
    root, store = mixed
    browser = Browser(root)
    sid = sid_of(browser)
    browser.runs(sid)  # the counts are made off the request
    _COUNTER.wait()
    counts = {r["run"]: r.get("findings") for r in browser.runs(sid)["runs"]}
    assert any(v for v in counts.values()) and counts[BROKEN] is None
    got = names(browser.runs(sid, sort="findings", descending=True))
    by = pd.DataFrame({"run": list(counts), "findings": [math.nan if v is None else v for v in counts.values()]})
    assert got == by_hand(by, "findings", True)


def test_an_order_by_name_descending_and_the_tags(mixed):
    root, store = mixed
    browser = Browser(root)
    sid = sid_of(browser)
    every = sorted(runs(store)["run"])
    assert names(browser.runs(sid, sort="run", descending=True)) == every[::-1]
    assert names(browser.runs(sid)) == names(browser.runs(sid, sort="")) == every
    # each order its own tag; the same order asked again answers nothing new
    _, by_loss = browser.runs_tagged(sid, sort="loss.best")
    _, by_loss_desc = browser.runs_tagged(sid, sort="loss.best", descending=True)
    _, by_name = browser.runs_tagged(sid)
    assert len({by_loss, by_loss_desc, by_name}) == 3
    _COUNTER.wait()
    _, tag = browser.runs_tagged(sid, sort="loss.best")
    assert browser.runs_tagged(sid, sort="loss.best", unless={tag}) == (None, tag)


# ---- refusals --------------------------------------------------------------------------------


def test_a_column_no_run_has_is_refused_naming_the_closest(mixed):
    root, _ = mixed
    browser = Browser(root)
    sid = sid_of(browser)
    for wrong, meant in [("config.lrr", "config.lr"), ("loss", "loss.best"), ("lr", "config.lr"),
                         ("loss.bset", "loss.best"), ("stat", "state"), ("acuracy.best", "accuracy.best")]:
        with pytest.raises(Bad) as e:
            browser.runs(sid, sort=wrong)
        said = str(e.value)
        assert said.startswith(f"sort={wrong!r}: no run of this store has that column; did you mean {meant!r}"), said
        assert "config.opt" in said and "loss.best" in said and "Sort by a fixed column (run, state" in said


HOSTILE = [
    "__class__", "config.__class__", "loss.__dict__", "__import__('os').system('touch PWNED')",
    "config.lr; import os", "config.lr' or '1'=='1", "-loss.best", "loss.best desc", "run,state",
    "../../etc/passwd", "config.", ".", "`config.lr`", "config.lr\n", "a\x00b", "\x1b[31mred",
    "lösš.best", "𝔩𝔬𝔰𝔰.best", "‮tsneb.ssol", "config." + "x" * MAX_COLUMN, "y" * 10_000,
    "config.lr" * 40, "{{7*7}}", "${7*7}", "%s%s%s%n",
]


@pytest.mark.parametrize("key", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_sort_key_is_refused_bounded_and_runs_nothing(mixed, key, tmp_path, monkeypatch):
    root, _ = mixed
    browser = Browser(root)
    sid = sid_of(browser)
    browser.runs(sid)  # the rows read: what follows reads only what is kept, or fails before reading
    _COUNTER.wait()  # the counts of findings that listing queued made now, not on their thread while watched
    monkeypatch.chdir(tmp_path)
    del _EVENTS[:]
    _WATCHING.append(True)
    try:
        with pytest.raises(Bad) as e:
            browser.runs(sid, sort=key)
    finally:
        _WATCHING.clear()
    assert _EVENTS == [] and list(tmp_path.iterdir()) == []  # no exec, compile, import, process
    said = str(e.value)
    assert said.startswith("sort=") and len(said) < 1_500, said
    assert key[:200] not in said or len(key) <= 80  # a long key is not echoed whole
    if len(key) > MAX_COLUMN:
        assert f"at most {MAX_COLUMN}" in said


def test_there_are_many_hostile_keys_and_the_hook_sees():
    assert len(HOSTILE) >= 25
    del _EVENTS[:]
    _WATCHING.append(True)
    try:
        eval("1")  # noqa: S307 - the hook must see it
        sys.modules.pop("json.tool", None)  # imported before (another test in this process): no import seen
        __import__("json.tool")
    finally:
        _WATCHING.clear()
    assert {"compile", "exec", "import"} <= set(_EVENTS)


def test_an_order_is_asc_or_desc_and_a_column_a_str():
    from somatize._server._sort import order_of

    assert order_of("asc") is False and order_of("desc") is True
    for wrong in ("DESC", "", "descending", "1", "asc;"):
        with pytest.raises(Bad, match="expected asc or desc"):
            order_of(wrong)
    for wrong in (None, 3, b"run", ["run"]):
        with pytest.raises(Bad, match="takes a column's name"):
            Order(wrong)


_EVENTS: list[str] = []
_WATCHING: list[bool] = []
AUDITED = {"exec", "compile", "import", "os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.remove",
           "os.rename", "os.mkdir", "ctypes.dlopen", "pickle.find_class", "marshal.loads"}


def _hook(event, args):
    if _WATCHING and event in AUDITED:
        _EVENTS.append(event)


sys.addaudithook(_hook)  # for the life of the test process: a hook cannot be removed


# ---- through HTTP ----------------------------------------------------------------------------


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"somatize._server": True}}}


async def test_the_runs_route_sorts_pages_and_refuses_a_bad_column_with_400(jp_fetch, jp_root_dir):
    store = Store(jp_root_dir / "store")
    for i in range(7):
        with Recorder(store, run=f"run-{i}", config={"lr": 10.0 ** -(i % 3), "seed": i}) as r:
            r.forward_began()
            r({"fact": "loss", "value": 1.0 / (1 + (i * 5) % 7)})
    sid = orjson.loads((await jp_fetch("somatize", "stores")).body)["stores"][0]["id"]
    table = runs(store)
    for column, order in [("loss.best", "asc"), ("config.lr", "desc"), ("run", "desc")]:
        got, offset = [], 0
        while offset is not None:
            r = await jp_fetch("somatize", "stores", sid, "runs",
                               params={"sort": column, "order": order, "limit": "3", "offset": str(offset)})
            page = orjson.loads(r.body)
            got += names(page)
            offset = page["next"]
        assert got == by_hand(table, column, order == "desc")
    for params, words in [({"sort": "config.lrr"}, "did you mean 'config.lr'"),
                          ({"sort": "x" * 5_000}, f"at most {MAX_COLUMN}"),
                          ({"sort": "loss.best", "order": "down"}, "expected asc or desc")]:
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("somatize", "stores", sid, "runs", params=params)
        assert e.value.code == 400
        message = orjson.loads(e.value.response.body)["message"]
        assert words in message and str(jp_root_dir) not in message


# ---- a listing of several pages read while its runs move ---------------------------------------


def _paged(browser, sid, between=None, **asked):
    """Every page of a listing, as the sidebar reads it: the first page's
    ``listing`` token sent with each later one; ``between(k)`` runs after
    page ``k`` is read (a run moving meanwhile)."""
    got, offset, listing, k = [], 0, "", 0
    while offset is not None:
        page = browser.runs(sid, offset=offset, limit=3, listing=listing, **asked)
        got += [r["run"] for r in page["runs"]]
        offset, listing = page["next"], page["listing"] or listing
        if between is not None:
            between(k)
        k += 1
    return got


@pytest.mark.parametrize("asked", [{"sort": "loss.last"}, {"sort": "loss.last", "descending": True},
                                   {"where": "loss.last < 100"}, {}], ids=["asc", "desc", "where", "by-name"])
def test_a_listing_of_several_pages_lists_each_run_once_while_runs_move(tmp_path, asked):
    """Pages were cut by offset from the order of the moment each was asked:
    a running run whose loss moved it to the other end between two pages
    was listed twice and another skipped (sorted), and so was a run made
    between two pages (by name). Now later pages are cut from the order the
    first page was cut from (the rows read now); what was made since shows
    from the next first page."""
    store = Store(tmp_path / "s")
    for i in range(8):
        with Recorder(store, run=f"r{i}") as r:
            r.forward_began()
            r({"fact": "loss", "value": float(i)})
    live = Recorder(store, run="zz-live")  # named last, and last (asc) or first (desc) by its loss
    live.forward_began()
    live({"fact": "loss", "value": 50.0})
    live.flush()
    browser = Browser(tmp_path)
    (sid,) = [s["id"] for s in browser.stores()]

    def move(k):  # after the first page
        if k != 0:
            return
        if "sort" in asked:  # the running run's loss takes it to the other end of the order
            live.forward_began()
            live({"fact": "loss", "value": -500.0 if asked.get("descending") else -50.0})
            live.flush()
        else:  # a run made, named first
            with Recorder(store, run="a-new") as r:
                r.forward_began()
                r({"fact": "loss", "value": 1.0})

    ordered = [f"r{i}" for i in range(8)]
    want = ["zz-live", *reversed(ordered)] if asked.get("descending") else [*ordered, "zz-live"]
    assert _paged(browser, sid, move, **asked) == want  # the order the listing began in, each run once
    now = _paged(browser, sid, **asked)  # the next listing: what moved, where it stands now
    assert sorted(now) == sorted(want + ([] if "sort" in asked else ["a-new"])) and len(now) == len(set(now))
    if "sort" in asked:
        assert now[0 if not asked.get("descending") else -1] == "zz-live"
    assert browser.runs(sid, limit=100, **asked)["listing"] is None  # a listing of one page keeps nothing
    live.close()


def test_a_run_deleted_while_a_listing_is_read_is_left_out_and_an_unkept_listing_is_gone(tmp_path, monkeypatch):
    from somatize._server import _browse
    from somatize._server._public import Gone

    store = Store(tmp_path / "s")
    for i in range(7):
        with Recorder(store, run=f"r{i}") as r:
            r.forward_began()
            r({"fact": "loss", "value": float(i)})
    browser = Browser(tmp_path)
    (sid,) = [s["id"] for s in browser.stores()]
    first = browser.runs(sid, limit=3, sort="loss.last")
    assert [r["run"] for r in first["runs"]] == ["r0", "r1", "r2"] and first["total"] == 7
    browser.delete(sid, "r4")
    second = browser.runs(sid, offset=3, limit=3, sort="loss.last", listing=first["listing"])
    assert [r["run"] for r in second["runs"]] == ["r3", "r5"] and second["next"] == 6  # r4 gone from its page
    third = browser.runs(sid, offset=6, limit=3, sort="loss.last", listing=first["listing"])
    assert [r["run"] for r in third["runs"]] == ["r6"] and third["next"] is None
    # the same order asked again: the same token (a poll of an unchanged listing asks the same URLs)
    again = browser.runs(sid, limit=3, sort="loss.last")
    assert again["listing"] == browser.runs(sid, limit=3, sort="loss.last")["listing"] != first["listing"]
    monkeypatch.setattr(_browse, "LISTINGS", 2)  # the last two kept: two other listings push it out
    browser.runs(sid, limit=3, sort="loss.last", descending=True)
    assert browser.runs(sid, offset=3, limit=3, sort="loss.last", listing=again["listing"])["total"] == 6
    browser.runs(sid, limit=3, sort="loss.last", descending=True)  # asked again: kept, not twice
    browser.runs(sid, limit=3, where="loss.last < 5")
    with pytest.raises(Gone, match="is no longer kept .* read its first page again"):
        browser.runs(sid, offset=3, limit=3, sort="loss.last", listing=again["listing"])
    with pytest.raises(Bad, match="listing must be the token a first page answered"):
        browser.runs(sid, offset=3, limit=3, listing="../../etc")


async def test_a_later_page_of_a_listing_no_longer_kept_answers_410(jp_fetch, jp_root_dir):
    store = Store(jp_root_dir / "s")
    for i in range(3):
        with Recorder(store, run=f"r{i}") as r:
            r.forward_began()
            r({"fact": "loss", "value": float(i)})
    stores = orjson.loads((await jp_fetch("somatize", "stores")).body)["stores"]
    sid = stores[0]["id"]
    page = orjson.loads((await jp_fetch("somatize", "stores", sid, "runs",
                                        params={"limit": "2", "sort": "loss.last"})).body)
    assert page["next"] == 2 and len(page["listing"]) == 32
    rest = orjson.loads((await jp_fetch("somatize", "stores", sid, "runs", params={
        "offset": "2", "limit": "2", "sort": "loss.last", "listing": page["listing"]})).body)
    assert [r["run"] for r in rest["runs"]] == ["r2"] and rest["listing"] == page["listing"]
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("somatize", "stores", sid, "runs", params={
            "offset": "2", "limit": "2", "sort": "loss.last", "listing": "0123456789abcdef" * 2})
    assert e.value.code == 410 and "read its first page again" in orjson.loads(e.value.response.body)["message"]
