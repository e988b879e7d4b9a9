"""`Recorder.log`: any loop writes the record a Trainer writes (issue 32,
item 1). The oracle is the Trainer itself: the same tiny model trained by a
hand-written loop that logs through `rec.log` and by the Trainer, from the
same seed on the same batches, read back by every reader."""

import copy
import math
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

import somatize.torch  # noqa: F401  (registers tensors as values read in bulk)
from somatize import Recorder, Store
from somatize._base.bulk import register_bulk
from somatize._base.errors import SomatizeTypeError, SomatizeValueError
from somatize._server._browse import Browser
from somatize.cli import runs_table
from somatize.record import _logged, curve, facts, progress, runs
from somatize.record._queries import steps_of
from somatize.record._summary import LOST
from somatize.torch import Trainer, _reading, _trainer, parameters

from torch_models import HostSyncs, batches, built

MSE = torch.nn.functional.mse_loss
STEPS = 45  # past the first ten steps that say their clock, and two of every 20th


def by_trainer(store, run, data, seed=0):
    g = built(seed)
    with Recorder(store, run=run, summarising=["loss"]) as rec:
        t = Trainer(g, objective=MSE, optimizer=torch.optim.SGD(parameters(g), lr=1e-2, momentum=0.9),
                    watching=rec, instruments=False)
        for b in data:
            t.step(b)


def by_hand(store, run, data, seed=0):
    """The same model from the same seed, trained by a plain loop that logs
    its loss (a 0-d tensor, never read by the loop) and learning rate."""
    g = built(seed)
    net = torch.nn.Sequential(copy.deepcopy(g.node("body").net), copy.deepcopy(g.node("head").out))
    opt = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)
    with Recorder(store, run=run, summarising=["loss"]) as rec:
        for x, y in data:
            loss = MSE(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            rec.log({"loss": loss, "lr": opt.param_groups[0]["lr"]})


def row(table, run):
    return table.set_index("run").loc[run]


def test_a_hand_written_loop_records_what_the_trainer_records(tmp_path):
    store = Store(tmp_path / "s")
    data = batches(STEPS)
    by_trainer(store, "trainer", data)
    by_hand(store, "loop", data)

    mine, theirs = curve(store, "loop", "loss"), curve(store, "trainer", "loss")
    assert mine.index.tolist() == theirs.index.tolist() == list(range(STEPS))  # a step is a forward
    assert mine.tolist() == theirs.tolist()  # the same numbers, bit for bit

    table = runs(store)
    columns = ["state", "forwards", "steps", "loss.last", "loss.min", "loss.max", "loss.best"]
    assert row(table, "loop")[columns].tolist() == row(table, "trainer")[columns].tolist()
    assert row(table, "loop")["steps"] == STEPS

    drawn = {s["name"]: s["points"] for s in progress(store, run=["loop", "trainer"]).chart()["series"]}
    assert drawn["loop"] == drawn["trainer"] and len(drawn["loop"]) == STEPS
    over_time = progress(store, run="loop", x="relative").chart()["series"][0]["points"]
    assert len(over_time) == STEPS and over_time[0][0] == 0.0  # wall_s said, as the Trainer says it

    # the Trainer says lr on the steps that say their clocks; the loop logged it every step, the same numbers
    lr_theirs = curve(store, "trainer", "lr")
    assert curve(store, "loop", "lr")[lr_theirs.index].tolist() == lr_theirs.tolist()
    assert curve(store, "loop", "wall_s").index.tolist() == curve(store, "trainer", "wall_s").index.tolist() == [
        *range(10), 20, 40]  # by step alone here: the time bound is out of the way in tests (conftest.py)

    lines = runs_table(tmp_path / "s").splitlines()
    head = lines[0].split()
    cells = {line.split()[0]: dict(zip(head, line.split())) for line in lines[1:]}
    for column in ("state", "forwards", "loss.last"):
        assert cells["loop"][column] == cells["trainer"][column]

    browser = Browser(tmp_path)
    sid = next(s["id"] for s in browser.stores() if s["path"] == "s")
    rows = {r["run"]: r for r in browser.runs(sid)["runs"]}
    for column in ("state", "steps", "forwards"):
        assert rows["loop"][column] == rows["trainer"][column]
    assert browser.curve(sid, "loop", "loss")["step"] == browser.curve(sid, "trainer", "loss")["step"]
    chart = browser.chart("loss", [(sid, "loop"), (sid, "trainer")])
    assert chart["series"][0]["points"] == chart["series"][1]["points"]


def test_its_clock_and_its_reads_follow_the_trainers_rules(monkeypatch):
    monkeypatch.undo()  # conftest.py's bounds put back as they are
    assert (_logged.CLOCKS_FIRST, _logged.CLOCKS_EVERY, _logged.CLOCKS_AT_MOST_NS) == (
        _trainer.CLOCKS_FIRST, _trainer.CLOCKS_EVERY, _trainer.CLOCKS_AT_MOST_NS)
    assert (_logged.READ_EVERY, _logged.READ_AT_MOST_NS) == (_reading.READ_EVERY, _reading.READ_AT_MOST_NS)


def test_wall_s_is_said_at_least_once_a_second(tmp_path, monkeypatch):
    monkeypatch.setattr(_logged, "CLOCKS_AT_MOST_NS", 1_000_000_000)
    now = [0]
    with Recorder(tmp_path / "s", run="r") as rec:
        rec.log({"loss": 1.0})
        rec._logging.clock = lambda: now[0]
        for step in range(1, 33):
            now[0] = step * 100_000_000  # a step every 0.1 s
            rec.log({"loss": 1.0})
    # the first ten, every 20th, and the first step a second after the last that said it
    assert curve(tmp_path / "s", "r", "wall_s").index.tolist() == [*range(10), 19, 20, 30]


def test_an_evaluation_logged_at_its_step_lands_in_that_steps_forward(tmp_path):
    with Recorder(tmp_path / "s", run="r") as rec:
        for step in range(6):
            rec.log({"loss": 1.0 / (step + 1)})
            if step % 3 == 2:
                rec.log({"val_loss": 2.0 * step, "val_accuracy": torch.tensor(0.5)}, step=step)
    assert [f["fact"] for f in facts(tmp_path / "s", "r", forward=2)] == ["loss", "wall_s", "val_loss",
                                                                          "val_accuracy"]
    val = curve(tmp_path / "s", "r", "val_loss")
    assert val.index.tolist() == [2, 5] and steps_of(tmp_path / "s", "r", val).tolist() == [2, 5]
    assert runs(tmp_path / "s")["steps"].tolist() == [6]  # an evaluation is no step
    drawn = {s["name"]: s for s in progress(tmp_path / "s", run="r").chart()["series"]}
    assert drawn["val_loss"]["dots"] and drawn["val_loss"]["points"] == [[2.0, 4.0], [5.0, 10.0]]  # beside the loss


def test_a_step_going_back_is_refused_naming_both_steps_and_nothing_of_it_is_kept(tmp_path):
    with Recorder(tmp_path / "s", run="r") as rec:
        rec.log({"loss": 1.0}, step=7)
        with pytest.raises(SomatizeValueError, match=r"step=3\) after step 7: steps never go back"):
            rec.log({"loss": 2.0}, step=3)
        rec.log({"loss": 3.0})
    assert curve(tmp_path / "s", "r", "loss").tolist() == [1.0, 3.0]
    assert curve(tmp_path / "s", "r", "step").tolist() == [7, 8]


@pytest.mark.parametrize("step", [-1, 1.5, True, "3", torch.tensor(2.0)])
def test_a_step_is_a_whole_number_from_0(tmp_path, step):
    with Recorder(tmp_path / "s", run="r") as rec, pytest.raises((SomatizeTypeError, SomatizeValueError),
                                                                  match="step"):
        rec.log({"loss": 1.0}, step=step)


def test_a_loop_that_numbers_its_steps_otherwise_keeps_its_numbers(tmp_path):
    """Forwards count the steps logged, from 0, as every reader counts steps;
    a step numbered otherwise than its forward says its own number too."""
    with Recorder(tmp_path / "s", run="from-0") as rec:
        for step in (0, 1, 2):
            rec.log({"loss": float(step)}, step=step)
    with Recorder(tmp_path / "s", run="every-10th") as rec:
        for step in (0, 10, 20):
            rec.log({"loss": float(step)}, step=step)
        rec.log({"loss": 21.0})  # the next: 21
    assert "step" not in {f["fact"] for n in range(3) for f in facts(tmp_path / "s", "from-0", forward=n)}
    said = curve(tmp_path / "s", "every-10th", "step")
    assert said.index.tolist() == [1, 2, 3] and said.tolist() == [10, 20, 21]
    assert curve(tmp_path / "s", "every-10th", "loss").index.tolist() == [0, 1, 2, 3]


def test_a_resumed_run_goes_on_from_its_last_step(tmp_path):
    with Recorder(tmp_path / "s", run="r") as rec:
        for step in (5, 6, 7):
            rec.log({"loss": float(step)}, step=step)
    with Recorder(tmp_path / "s", run="r", resume=True) as rec:
        with pytest.raises(SomatizeValueError, match="after step 7"):
            rec.log({"loss": 0.0}, step=6)
        rec.log({"loss": 8.0})
        rec.log({"val_loss": 1.0}, step=8)
    assert curve(tmp_path / "s", "r", "step").tolist() == [5, 6, 7, 8]
    assert curve(tmp_path / "s", "r", "val_loss").index.tolist() == [3]


def test_a_rewound_run_logs_on_from_where_it_was_cut(tmp_path):
    with Recorder(tmp_path / "s", run="r") as rec:
        for step in range(5):
            rec.log({"loss": float(step)})
        rec.rewind(3)
        rec.log({"loss": 30.0})
    assert curve(tmp_path / "s", "r", "loss").tolist() == [0.0, 1.0, 2.0, 30.0]


class Lazy:
    """A value whose reading costs: its kind counts the reads and what each read."""

    reads: list = []

    def __init__(self, value):
        self.value = value


register_bulk(Lazy, lambda v: v, lambda held: Lazy.reads.append(len(held)) or [v.value for v in held])


def test_values_read_in_bulk_are_held_and_read_many_at_once(tmp_path):
    Lazy.reads.clear()
    store = tmp_path / "s"
    with Recorder(store, run="r", summarising=["a"]) as rec:
        rec.log({"a": Lazy(0.0), "b": 1.0, "c": Lazy(2.0)})
        for step in range(1, 100):
            rec.log({"a": Lazy(float(step)), "b": 1.0, "c": Lazy(2.0)})
        # a read at each step that began 32 steps after the first value held: before that step's own values
        assert Lazy.reads == [64, 64, 64]
        assert curve(store, "r", "a").tolist() == list(map(float, range(100)))  # a query reads what is held first
        assert Lazy.reads == [64, 64, 64, 8]
    assert runs(store)["a.last"].tolist() == [99.0]


def test_values_held_are_read_at_the_first_step_a_quarter_second_after_them(tmp_path, monkeypatch):
    monkeypatch.setattr(_logged, "READ_AT_MOST_NS", 250_000_000)
    Lazy.reads.clear()
    now = [0]
    with Recorder(tmp_path / "s", run="r") as rec:
        rec.log({"b": 1.0})
        rec._logging.clock = lambda: now[0]
        rec.log({"a": Lazy(1.0)})  # the first held, at 0 s
        now[0] = 200_000_000
        rec.log({"a": Lazy(2.0)})
        rec.log({"a": Lazy(2.5)}, step=2)  # the same step: read at a step's beginning only
        assert Lazy.reads == []
        now[0] = 250_000_000
        rec.log({"a": Lazy(3.0)})  # due: what came before is read, not this step's
        assert Lazy.reads == [3]
    assert Lazy.reads == [3, 1]


def test_each_kind_is_read_in_one_call_and_tensors_in_one_host_sync(tmp_path):
    Lazy.reads.clear()
    w = torch.nn.Parameter(torch.ones(()))
    counted = HostSyncs(torch.optim.SGD([w], lr=0.1))
    with Recorder(tmp_path / "s", run="r") as rec:
        with counted:
            for _ in range(10):
                rec.log({"loss": w * 2, "seen": torch.tensor(3), "a": Lazy(1.0)})
            assert counted.count == 0  # logging read nothing
            rec.flush()
            assert counted.count == 1 and Lazy.reads == [10]
    assert curve(tmp_path / "s", "r", "seen").tolist() == [3.0] * 10


def test_a_tensor_changed_in_place_after_it_was_logged_is_not_recorded_with_its_new_value(tmp_path):
    total = torch.zeros(())
    with Recorder(tmp_path / "s", run="r") as rec:
        for _ in range(3):
            total += 1.0
            rec.log({"total": total, "fresh": total.clone()})
        with pytest.warns(RuntimeWarning, match=r"'total' of step 0, 'total' of step 1 changed in place"):
            rec.flush()
    assert curve(tmp_path / "s", "r", "fresh").tolist() == [1.0, 2.0, 3.0]
    assert curve(tmp_path / "s", "r", "total").tolist() == [3.0]  # the last, unchanged since; the others None
    assert [f["value"] for f in facts(tmp_path / "s", "r", forward=0) if f["fact"] == "total"] == [None]


@pytest.mark.parametrize("value, says", [
    ("0.5", "values['x'] is a str, not a number"),
    ({"a": 1}, "values['x'] is a dict, not a number"),
    (True, "values['x'] is a bool, not a number: log it as a number: int(x)"),
    (torch.ones(2, 3), "values['x'] is a tensor of shape (2, 3), not one number"),
    (torch.tensor(1j), "values['x'] is a complex64 tensor, not a real number"),
    (None, "values['x'] is a NoneType, not a number"),
])
def test_a_value_that_is_not_one_number_is_refused_naming_its_key(tmp_path, value, says):
    with Recorder(tmp_path / "s", run="r") as rec:
        with pytest.raises((SomatizeTypeError, SomatizeValueError), match=re.escape(says)):
            rec.log({"loss": 1.0, "x": value})
        rec.log({"loss": 2.0})
    assert curve(tmp_path / "s", "r", "loss").tolist() == [2.0]  # nothing of the refused step is kept


def test_numpy_numbers_are_numbers(tmp_path):
    with Recorder(tmp_path / "s", run="r") as rec:
        rec.log({"a": np.float32(0.5), "b": np.int64(3), "c": np.array(1.5)})
    assert [(f["fact"], f["value"]) for f in facts(tmp_path / "s", "r", forward=0)][:3] == [
        ("a", 0.5), ("b", 3), ("c", 1.5)]


def test_values_must_come_as_a_dict_of_at_least_one(tmp_path):
    with Recorder(tmp_path / "s", run="r") as rec:
        with pytest.raises(SomatizeTypeError, match=r"rec.log\(\{'loss': value\}\)"):
            rec.log(torch.tensor(1.0))
        with pytest.raises(SomatizeValueError, match="at least one value"):
            rec.log({})


@pytest.mark.parametrize("key, says", [
    ("ran", "one of the engine's own facts"),
    ("grad_norm", "e.g. 'my_grad_norm'"),
    ("trainer_us", "one of the Trainer's own facts"),
    ("grad_norm/body", "e.g. 'my_grad_norm_body'"),
    ("step", "log(values, step=n)"),
    ("wall_s", "the clock log() says itself"),
    ("config", "the columns of the run's config"),
    ("my loss", "write 'my_loss'"),
    ("", "not a fact's name"),
    (3, "a key is a fact's name, a str"),
])
def test_a_key_that_would_be_read_as_another_fact_is_refused(tmp_path, key, says):
    with Recorder(tmp_path / "s", run="r") as rec:
        with pytest.raises((SomatizeTypeError, SomatizeValueError)) as e:
            rec.log({key: 1.0})
        assert says in str(e.value)


def test_the_trainers_loss_lr_and_evaluations_are_a_loops_too(tmp_path):
    with Recorder(tmp_path / "s", run="r") as rec:
        rec.log({"loss": 1.0, "lr": 0.1, "val_loss": 2.0, "train/acc": 0.5, "val_f1": 0.2})
    assert {f["fact"] for f in facts(tmp_path / "s", "r", forward=0)} >= {"loss", "lr", "val_loss", "train/acc"}


def test_nan_and_infinities_are_kept_and_summarised_as_the_record_does(tmp_path):
    with Recorder(tmp_path / "s", run="r", summarising=["loss"]) as rec:
        for v in (2.0, float("nan"), torch.tensor(float("inf")), 0.5, torch.tensor(float("nan"))):
            rec.log({"loss": v})
    got = curve(tmp_path / "s", "r", "loss").tolist()
    assert got[0] == 2.0 and math.isnan(got[1]) and got[2] == math.inf and got[3] == 0.5 and math.isnan(got[4])
    r = row(runs(tmp_path / "s"), "r")
    # min and max leave NaN out; last is the last as it was; steps count every loss
    assert (r["loss.min"], r["loss.max"], r["loss.best"], r["steps"]) == (0.5, math.inf, 0.5, 5)
    assert math.isnan(r["loss.last"])


def test_a_recorder_a_trainer_watches_is_refused_and_the_other_way_round(tmp_path):
    g = built()
    rec = Recorder(tmp_path / "s", run="t")
    Trainer(g, objective=MSE, optimizer=torch.optim.SGD(parameters(g), lr=0.1), watching=rec)
    with pytest.raises(SomatizeValueError, match="a Trainer watches this Recorder"):
        rec.log({"loss": 1.0})
    rec.close()
    with Recorder(tmp_path / "s", run="l") as rec:
        rec.log({"loss": 1.0})
        with pytest.raises(SomatizeValueError, match="records a loop's log"):
            Trainer(g, objective=MSE, optimizer=torch.optim.SGD(parameters(g), lr=0.1), watching=rec)


def test_a_closed_recorder_refuses_to_log(tmp_path):
    rec = Recorder(tmp_path / "s", run="r")
    rec.close()
    with pytest.raises(SomatizeValueError, match="is closed"):
        rec.log({"loss": 1.0})


KILLED = """
import os, signal, sys, torch
import somatize.torch
from somatize import Recorder
r = Recorder(sys.argv[1], run="r", summarising=["loss"])
for step in range(40):
    r.log({"loss": torch.tensor(float(step)), "lr": 0.1})
    if step == 20:
        r.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_loop_killed_outright_leaves_its_run_readable_and_interrupted(tmp_path):
    path = tmp_path / "s"
    done = subprocess.run([sys.executable, "-c", KILLED, str(path)], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    r = row(runs(path), "r")
    assert (r["state"], r["cause"]) == ("interrupted", LOST)
    kept = curve(path, "r", "loss").tolist()
    assert len(kept) >= 21 and kept == list(map(float, range(len(kept))))  # what was flushed, in order, once
    assert r["steps"] == len(kept)
    with Recorder(path, run="r", resume=True) as rec:  # and it goes on from its last step
        rec.log({"loss": -1.0})
    assert curve(path, "r", "loss").index.tolist() == list(range(len(kept) + 1))


def test_a_recorder_on_another_rank_logs_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    rec = Recorder(tmp_path / "s", run="r")
    rec.log({"loss": torch.tensor(1.0)})
    rec.close()
    assert not (tmp_path / "s" / "runs").exists() or not any((tmp_path / "s" / "runs").iterdir())
