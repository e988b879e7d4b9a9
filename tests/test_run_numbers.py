"""NaN, infinities, values a run lacks and integers past 2**53, in a run's
summary and config, and what every surface that asks runs a question makes
of them: one rule (``somatize.record.runs``'s docstring, docs/API.md),
followed by ``runs()``, ``somatize runs --where``, the run browser and the
explorer. Real stores, written by a real Recorder."""

import math

import orjson
import pytest

from somatize import Recorder, Store
from somatize._server._browse import Browser
from somatize.cli import runs_table
from somatize.record import compare, runs

NAN, INF = float("nan"), float("inf")


def record(store, run, losses, summarising=("loss",), config=None, acc=()):
    with Recorder(store, run=run, summarising=list(summarising), config=config) as r:
        for v in losses:
            r.forward_began()
            r({"fact": "loss", "value": v})
        for v in acc:
            r.forward_began()
            r({"fact": "acc", "value": v})


def same(a, b) -> bool:
    return a == b or (a != a and b != b)


# ---- a summary leaves NaN out of min, max and best, wherever it fell -------------------------


@pytest.mark.parametrize("at", range(4))
def test_min_max_and_best_leave_nan_out_wherever_it_fell(tmp_path, at):
    losses = [0.9, 0.8, 0.7]
    losses.insert(at, NAN)
    store = Store(tmp_path / "s")
    record(store, "r", losses)
    row = runs(store).iloc[0]
    assert (row["loss.min"], row["loss.max"], row["loss.best"]) == (0.7, 0.9, 0.7)
    assert same(row["loss.last"], losses[-1]) and row["steps"] == 4
    assert list(runs(store, where="loss.count == 4")["run"]) == ["r"]  # every value counted, NaN too


def test_a_fact_recorded_only_as_nan_has_a_count_and_a_last_but_no_min_max_or_best(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "r", [NAN, NAN])
    row = runs(store).iloc[0]
    assert math.isnan(row["loss.last"]) and row[["loss.min", "loss.max", "loss.best"]].isna().all()
    for query, want in [("loss.count == 2", ["r"]), ("loss.min == null", []), ("not loss.min < 1", ["r"])]:
        assert list(runs(store, where=query)["run"]) == want, query


def test_the_live_the_written_the_resumed_and_the_rewound_summaries_agree(tmp_path):
    """A Recorder folds each value as it comes; a resume reads summary.json
    back and folds on; a rewind folds the log again from the start: all
    three keep NaN out of min and max, and inf as inf."""
    store = Store(tmp_path / "s")

    def seen():
        row = runs(store).iloc[0]
        return tuple(row[f"loss.{s}"] for s in ("last", "min", "max", "best"))

    r = Recorder(store, run="r")
    for v in [NAN, 0.9, INF, 0.8]:
        r.forward_began()
        r({"fact": "loss", "value": v})
    r.flush()
    assert seen() == (0.8, 0.8, INF, 0.8)  # the live Recorder's, from its memory
    r.close()
    assert seen() == (0.8, 0.8, INF, 0.8)  # summary.json's
    summary = orjson.loads((store.path / "runs" / "r" / "summary.json").read_bytes())
    assert summary["summarising"]["loss"] == {"count": 4, "first": "NaN", "last": 0.8, "min": 0.8,
                                              "max": "Infinity"}
    with Recorder(store, run="r", resume=True) as again:
        again.forward_began()
        again({"fact": "loss", "value": -INF})
    assert seen() == (-INF, -INF, INF, -INF)
    assert list(runs(store, where="loss.first != loss.first")["run"]) == []  # NaN: false, != too
    assert list(runs(store, where="loss.count == 5")["run"]) == ["r"]
    with Recorder(store, run="r", resume=True) as again:
        again.rewind(3)  # the log folded again: NaN, 0.9, inf
    assert seen() == (INF, 0.9, INF, 0.9)
    assert list(runs(store, where="loss.count == 3 and loss.first == null")["run"]) == []


# ---- one rule for what a run lacks, NaN, null and infinity, on every surface -----------------


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """nan: loss 0.9, NaN; summarises acc, never recorded; config seed None.
    half: loss 0.9, 0.5; acc 0.5; config seed 1.
    inf: loss 0.9, inf; summarises loss only; no config."""
    root = tmp_path_factory.mktemp("rule")
    s = Store(root / "s")
    record(s, "nan", [0.9, NAN], ("loss", "acc"), {"seed": None})
    record(s, "half", [0.9, 0.5], ("loss", "acc"), {"seed": 1}, acc=[0.5])
    record(s, "inf", [0.9, INF])
    return s


RULE = [
    ("loss.last != 0.5", "inf"),  # NaN: false
    ("loss.last not in [0.5]", "inf"),
    ("loss.last in [0.5]", "half"),
    ("loss.last == null", ""),  # NaN is not null
    ("loss.last != null", "half inf"),
    ("not loss.last == 0.5", "inf nan"),
    ("acc.min != 0.5", ""),  # nan: never recorded; inf: not summarised
    ("acc.min == 0.5", "half"),
    ("not acc.min == 0.5", "inf nan"),
    ("acc.min == null", ""),
    ("acc.count == 0", "nan"),
    ("config.seed == null", "nan"),  # a config's None is null
    ("config.seed != null", "half"),
    ("config.seed != 1", "nan"),  # None is a value, of another kind than 1: never equal to it
    ("loss.max > 1e308", "inf"),
    ("loss.max == inf", "inf"),
    ("loss.max >= 0.9 and loss.max < inf", "half nan"),
    ("loss.last > -inf", "half inf"),
    ("loss.last in [inf, 0.5]", "half inf"),
]


@pytest.mark.parametrize(("query", "want"), RULE, ids=[q for q, _ in RULE])
def test_every_surface_answers_by_one_rule(store, query, want):
    want = sorted(want.split())
    assert sorted(runs(store, where=query)["run"]) == want  # of whole columns at once
    lines = runs_table(store.path, query).splitlines()
    assert sorted(line.split()[0] for line in lines[1:] if line[:1] not in ("", "(")) == want or (
        not want and lines[0].startswith("no run"))  # somatize runs --where: row by row
    browser = Browser(store.path.parent)
    (sid,) = [s["id"] for s in browser.stores()]
    assert sorted(r["run"] for r in browser.runs(sid, where=query)["runs"]) == want  # the run browser
    if want:
        assert sorted(compare(store, where=query, metric="loss.count").selected["run"]) == want
    else:
        with pytest.raises(KeyError, match="no run here"):
            compare(store, where=query, metric="loss.count")


# ---- inf is inf: summaries, tables, the sidebar's JSON, the explorer -------------------------


def test_an_infinite_loss_is_listed_as_inf_everywhere(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "up", [0.5, INF], config={"lr": 0.1})
    record(store, "down", [-INF, 0.2], config={"lr": 0.01})
    record(store, "nan", [0.3, NAN], config={"lr": 0.001})
    table = runs(store).set_index("run")
    assert (table.loc["up", "loss.last"], table.loc["up", "loss.max"]) == (INF, INF)
    assert (table.loc["down", "loss.min"], table.loc["down", "loss.best"]) == (-INF, -INF)
    head, *lines = [line.split() for line in runs_table(store.path).splitlines()]
    shown = {cells[0]: dict(zip(head, cells)) for cells in lines}  # somatize runs
    assert [shown[r]["loss.last"] for r in ("up", "down", "nan")] == ["inf", "0.2", "nan"]
    browser = Browser(tmp_path)
    (sid,) = [s["id"] for s in browser.stores()]
    rows = {r["run"]: r["summarising"]["loss"] for r in orjson.loads(orjson.dumps(browser.runs(sid)))["runs"]}
    assert rows["up"] == {"count": 2, "first": 0.5, "last": "Infinity", "min": 0.5, "max": "Infinity",
                          "best": 0.5}
    assert rows["down"]["min"] == rows["down"]["best"] == rows["down"]["first"] == "-Infinity"
    assert rows["nan"]["last"] == "NaN" and rows["nan"]["max"] == 0.3


def test_the_explorer_draws_an_infinity_at_its_axis_end_and_a_brush_there_asks_for_it(tmp_path):
    store = Store(tmp_path / "s")
    for i, losses in enumerate([[0.5, INF], [0.4], [0.2], [0.3, -INF]]):
        record(store, f"r{i}", losses, config={"lr": 10.0 ** -i})
    explorer = compare(store, metric="loss.last")
    axis = explorer.axis_list[0]
    assert list(axis.places[[0, 3]]) == [1.0, 0.0] and 0 < min(axis.places[[1, 2]])
    assert [label for _, label in axis.ticks][::len(axis.ticks) - 1] == ["-inf", "inf"]
    explorer.brush(0, [0.95, 1.0])  # the top: where inf is
    assert explorer.where == "loss.last >= inf and loss.last <= inf"
    assert list(explorer.selected["run"]) == list(runs(store, where=explorer.where)["run"]) == ["r0"]
    explorer.brush(0, [0.0, 1.0])
    assert sorted(explorer.selected["run"]) == ["r0", "r1", "r2", "r3"]
    explorer.brush(0, [0.5, 1.0])
    assert list(explorer.selected["run"]) == list(runs(store, where=explorer.where)["run"]) == ["r0", "r1"]


# ---- a config int past 2**53 stays exact ------------------------------------------------------


def test_a_config_int_past_2_53_is_listed_exactly_when_some_runs_lack_the_key(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "big", [1.0], config={"n": 2**53 + 1, "seed": 2**63 + 1})
    record(store, "near", [1.0], config={"n": 2**53, "seed": -1})
    record(store, "none", [1.0])
    table = runs(store).set_index("run")
    assert str(table["config.n"].dtype) == "Int64"
    assert [int(table.loc[r, "config.n"]) for r in ("big", "near")] == [2**53 + 1, 2**53]
    assert table["config.seed"].dtype == object and table.loc["big", "config.seed"] == 2**63 + 1
    assert table.loc["none", ["config.n", "config.seed"]].isna().all()
    assert list(runs(store, where="config.n == 9007199254740993")["run"]) == ["big"]
    assert list(runs(store, where="config.n > 9007199254740992")["run"]) == ["big"]
    assert list(runs(store, where="config.seed == 9223372036854775809")["run"]) == ["big"]
