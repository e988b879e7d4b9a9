"""NaN, infinities, values a run lacks and integers past 2**53, in a run's
summary and config, and what every surface that asks runs a question makes
of them. Real stores, written by a real Recorder."""

from somatize import Recorder, Store
from somatize.record import runs


def record(store, run, losses, summarising=("loss",), config=None, acc=()):
    with Recorder(store, run=run, summarising=list(summarising), config=config) as r:
        for v in losses:
            r.forward_began()
            r({"fact": "loss", "value": v})
        for v in acc:
            r.forward_began()
            r({"fact": "acc", "value": v})


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
