"""The run browser's chart puts a run's points at its steps, as the
notebook's `progress` does (issue 19, item 4): with micro=2 a Trainer's loss
is said on forwards 1, 3, 5, …, and both draw it at steps 0, 1, 2, …, through
one function (`record._queries.step_of`)."""

from __future__ import annotations

import orjson
import pytest
from test_trainer_evaluate import data, graph, trainer

from somatize import Recorder, Store
from somatize._server._discover import store_id
from somatize.record import curve, progress

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"somatize._server": True}}}


async def test_the_chart_and_the_curve_are_over_steps_as_progress_draws_them(jp_fetch, jp_root_dir):
    store = Store(jp_root_dir / "s")
    with Recorder(store, run="r") as rec:
        t = trainer(graph(), watching=rec, micro=2)  # two forwards a step
        for batch in data([16] * 6):
            t.step(batch)
    losses = curve(store, run="r", name="loss")
    assert losses.index.tolist() == [1, 3, 5, 7, 9, 11]  # the forwards: not the steps
    (drawn,) = [s for s in progress(store, run="r").chart()["series"] if s["name"] == "r"]
    assert [x for x, _ in drawn["points"]] == [0, 1, 2, 3, 4, 5]

    got = orjson.loads((await jp_fetch("somatize", "chart", params=[("name", "loss"),
                                                                     ("run", f"{store_id('s')}/r")])).body)
    assert got["xkind"] == "step" and got["xlabel"] == "step"
    (line,) = got["series"]
    assert line["points"] == [[x, y] for x, (_, y) in zip([0, 1, 2, 3, 4, 5], losses.items())]
    assert [x for x, _ in line["points"]] == [x for x, _ in drawn["points"]]
    assert got["x"] == [0, 5] and [label for _, label in got["xticks"]][0] == "0"

    one = orjson.loads((await jp_fetch("somatize", "stores", store_id("s"), "runs", "r", "curve",
                                       params={"name": "loss"})).body)
    assert one["xkind"] == "step" and one["step"] == [0, 1, 2, 3, 4, 5]
    assert one["forward"] == [1, 3, 5, 7, 9, 11] and one["value"] == losses.tolist()


async def test_an_evaluation_s_curve_is_at_the_steps_it_was_made_after_in_both(jp_fetch, jp_root_dir):
    """`val_loss` is said after its step's facts, now and then: both the
    chart and `progress(name="val_loss")` put it at that step (read off the
    run's loss curve by `record._queries.steps_of`), not at 0, 1, 2."""
    store = Store(jp_root_dir / "s")
    with Recorder(store, run="r") as rec:
        t = trainer(graph(), watching=rec, micro=2)
        for i, batch in enumerate(data([16] * 9)):
            t.step(batch)
            if i % 3 == 2:
                t.evaluate(data([16] * 2))
    (drawn,) = progress(store, run="r", name="val_loss").chart()["series"]
    assert [x for x, _ in drawn["points"]] == [2, 5, 8]
    got = orjson.loads((await jp_fetch("somatize", "chart", params=[("name", "val_loss"),
                                                                     ("run", f"{store_id('s')}/r")])).body)
    (line,) = got["series"]
    assert [x for x, _ in line["points"]] == [2, 5, 8]
    one = orjson.loads((await jp_fetch("somatize", "stores", store_id("s"), "runs", "r", "curve",
                                       params={"name": "val_loss"})).body)
    assert one["step"] == [2, 5, 8]
