"""The Trainer's contract beyond arithmetic: its facts and where they land,
refusals of bad input (each naming the fix), non-finite losses, fit."""

import math
import time

import pytest
import torch

import somatize.torch  # noqa: F401
from somatize import Data, Graph, Node, Opaque, Recorder, SomatizeError, Store
from somatize._base.errors import WatcherError
from somatize._graph.watchers import INSTRUMENT_FACTS
from somatize.record import facts, forwards, spent
from somatize.torch import NonFiniteLoss, Trainer, parameters

from torch_models import Oracle, batches, built, trained_optimizer

MSE = torch.nn.functional.mse_loss


def trainer(g=None, **kw):
    g = g or built()
    kw.setdefault("optimizer", trained_optimizer("adam", g))
    kw.setdefault("objective", MSE)
    return Trainer(g, **kw)


def names(seen):
    """(fact, node) of the engine's and the Trainer's own facts (the
    instruments' are tested in tests/test_diagnose.py)."""
    return [(f["fact"], f.get("node")) for f in seen
            if f["fact"] not in INSTRUMENT_FACTS and not (f["fact"] == "backward_us" and "node" in f)]


# after a step's loss: when it began, then its parts, before trainer_us
SPLIT = [("wall_s", None), ("objective_us", None), ("backward_us", None), ("update_us", None), ("lr", None)]


def test_facts_of_a_step_follow_the_engines_and_are_typed():
    seen = []
    t = trainer(watching=seen.append, read_every=32)
    value = t.step(batches(1)[0])
    assert seen == []  # held back until the losses are read off the device
    t.deliver()
    assert names(seen) == [("ran", "body"), ("ran", "head"), ("finished", None), ("updated", None), ("loss", None),
                           *SPLIT, ("trainer_us", None)]
    (loss,) = [f for f in seen if f["fact"] == "loss"]
    assert loss == {"fact": "loss", "value": value.item()} and isinstance(loss["value"], float)
    assert isinstance(value, torch.Tensor) and value.ndim == 0 and not value.requires_grad


def test_instruments_false_records_none_of_them():
    seen = []
    t = trainer(watching=seen.append, instruments=False)
    t.step(batches(1)[0])
    t.deliver()
    assert [f for f in seen if f["fact"] in INSTRUMENT_FACTS] == [] and len(seen) == 11


@pytest.mark.parametrize("micro", [1, 2])
def test_trainer_us_is_the_steps_time_outside_its_forwards(micro):
    seen = []
    t = trainer(micro=micro, watching=seen.append)
    for b in batches(3):
        seen.clear()
        began = time.perf_counter_ns()
        t.step(b)
        wall_us = (time.perf_counter_ns() - began) // 1000
        t.deliver()
        (mine,) = [f["value"] for f in seen if f["fact"] == "trainer_us"]
        forwards_us = sum(f["took_us"] for f in seen if f["fact"] == "finished")
        assert type(mine) is int and mine > 0
        # what the forwards took and what the Trainer took do not overlap
        assert mine + forwards_us <= wall_us


class Sleepy(Node):
    def __init__(self, seconds):
        self.seconds = seconds
        self.linear = torch.nn.Linear(8, 1)

    def forward(self, x, ctx):
        time.sleep(self.seconds)
        return Opaque(self.linear(x))

    def parameters(self):
        return list(self.linear.parameters())


def test_trainer_us_holds_the_objective_and_not_the_nodes():
    g = Graph.somatize(Sleepy(0.03).named("slow"))

    def slow_objective(out, y):
        time.sleep(0.01)
        return MSE(out, y)

    seen = []
    t = Trainer(g, objective=slow_objective, optimizer=torch.optim.SGD(parameters(g), lr=0.1), watching=seen.append)
    began = time.perf_counter_ns()
    t.step(batches(1)[0])
    wall_us = (time.perf_counter_ns() - began) // 1000
    t.deliver()
    mine = next(f["value"] for f in seen if f["fact"] == "trainer_us")
    took = next(f["took_us"] for f in seen if f["fact"] == "finished")
    assert mine >= 10_000 and took >= 30_000  # each sleep is where it happened
    assert mine + took <= wall_us  # so the node's sleep is not in trainer_us


def test_a_micro_step_is_several_forwards_and_one_loss():
    seen = []
    t = trainer(micro=2, every=2, watching=seen.append)
    b = batches(2)
    t.step(b[0])
    t.deliver()
    assert names(seen) == [("ran", "body"), ("ran", "head"), ("finished", None)] * 2 + [("loss", None), *SPLIT,
                                                                                        ("trainer_us", None)]
    seen.clear()
    t.step(b[1])
    t.deliver()
    assert names(seen)[-8:] == [("updated", None), ("loss", None), *SPLIT, ("trainer_us", None)]


def test_the_record_tags_the_trainers_facts_to_their_forward(tmp_path):
    store = Store(tmp_path / "s")
    recorder = Recorder(store, run="r", summarising=["loss"])
    t = trainer(micro=2, watching=recorder)
    values = [t.step(b) for b in batches(3)]
    t.deliver()
    # forwards count from 0; with micro=2 step k ends with forward 2k+1
    assert [f for f, _ in names(facts(store, run="r", forward=2))] == ["ran", "ran", "finished"]
    last = names(facts(store, run="r", forward=5))
    assert last == [("ran", "body"), ("ran", "head"), ("finished", None), ("updated", None), ("loss", None), *SPLIT,
                    ("trainer_us", None)]
    assert next(f for f in facts(store, run="r", forward=5) if f["fact"] == "loss")["value"] == values[2].item()


def test_spent_draws_the_trainers_time_from_the_record(tmp_path):
    store = Store(tmp_path / "s")
    seen = []
    t = trainer(watching=[Recorder(store, run="r"), seen.append])
    for b in batches(4):
        t.step(b)
    t.deliver()
    mine = [f["value"] for f in seen if f["fact"] == "trainer_us"]
    assert forwards(store, run="r")["trainer_us"].tolist() == mine
    (bar,) = [r for r in spent(store, run="r").rows if r["kind"] == "trainer"]
    assert (bar["count"], bar["total_us"]) == (4, sum(mine))


@pytest.mark.parametrize("arg", ["every", "micro"])
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_every_and_micro_must_be_positive_integers(arg, bad):
    with pytest.raises(SomatizeError, match=f"{arg}="):
        trainer(**{arg: bad})


def test_every_and_micro_take_any_integer_type():
    import numpy as np

    t = trainer(every=np.int64(2), micro=np.int32(2))
    assert (t.every, t.micro) == (2, 2) and type(t.every) is int


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, "1", True])
def test_clip_must_be_a_positive_number(bad):
    with pytest.raises(SomatizeError, match="clip="):
        trainer(clip=bad)


def test_the_wrong_things_in_the_wrong_places_are_refused():
    g = built()
    with pytest.raises(SomatizeError, match=r"Graph\.somatize"):
        Trainer(g.node("body"), objective=MSE, optimizer=trained_optimizer("sgd", g))
    with pytest.raises(SomatizeError, match="mse_loss"):
        Trainer(g, objective="mse", optimizer=trained_optimizer("sgd", g))
    with pytest.raises(SomatizeError, match="torch.optim"):
        Trainer(g, objective=MSE, optimizer=parameters(g))


def test_an_optimizer_holding_a_frozen_nodes_parameters_is_refused_naming_it():
    g = built(frozen_body=True)
    everything = [p for n in g.nodes for p in n.parameters()]
    with pytest.raises(SomatizeError, match=r"frozen node\(s\) \['body'\].*parameters\(g\)"):
        Trainer(g, objective=MSE, optimizer=torch.optim.Adam(everything))


@pytest.mark.parametrize("grads_off_by_hand", [False, True])
def test_a_trainer_over_a_frozen_node_freezes_it(grads_off_by_hand):
    g = built(frozen_body=True)
    if grads_off_by_hand:  # not enough: the digest must still be taken
        g.node("body").net.requires_grad_(False)
    trainer(g)
    assert not any(p.requires_grad for p in g.node("body").net.parameters())
    assert g.node("body")._sz_weights is not None


def test_x_may_come_wrapped_and_data_cuts_autograd_as_at_any_edge():
    x, y = batches(1)[0]
    kept, cut = x.clone().requires_grad_(), x.clone().requires_grad_()
    a, b = trainer(), trainer()
    assert a.step((Opaque(kept), y)) == b.step((Data(cut), y)) == trainer().step((x, y))
    assert kept.grad is not None and cut.grad is None


def test_micro_larger_than_the_batch_is_refused():
    t = trainer(micro=8)
    x, y = batches(1, n=5)[0]
    with pytest.raises(SomatizeError, match=r"micro=8.*5 examples"):
        t.step((x, y))


def test_micro_needs_a_y_with_a_row_per_example():
    t = trainer(micro=2)
    x, y = batches(1, n=8)[0]
    with pytest.raises(SomatizeError, match="one row per example"):
        t.step((x, y[:4]))


@pytest.mark.parametrize("bad", [torch.zeros(3), (torch.zeros(2, 8),), [1, 2, 3]])
def test_a_batch_that_is_not_a_pair_is_refused(bad):
    with pytest.raises(SomatizeError, match=r"step\(\(x, y\)\)"):
        trainer().step(bad)


def test_an_objective_must_return_a_scalar_tensor():
    x, y = batches(1)[0]
    per_example = lambda out, y: MSE(out, y, reduction="none")  # noqa: E731
    with pytest.raises(SomatizeError, match=r"shape \[64, 1\] at step 0.*scalar"):
        trainer(objective=per_example).step((x, y))
    with pytest.raises(SomatizeError, match="returned a float"):
        trainer(objective=lambda out, y: 1.0).step((x, y))


def test_a_loss_that_does_not_depend_on_the_weights_is_refused():
    x, y = batches(1)[0]
    with pytest.raises(SomatizeError, match="does not depend"):
        trainer(objective=lambda out, y: MSE(out.detach(), y)).step((x, y))


def test_a_batch_of_the_wrong_shape_names_the_node_and_the_record_keeps_what_came_before(tmp_path):
    store = Store(tmp_path / "s")
    recorder = Recorder(store, run="r")
    t = trainer(watching=recorder)
    for b in batches(3):
        t.step(b)
    with pytest.raises(SomatizeError, match="node 'body'"):
        t.step((torch.zeros(64, 7), torch.zeros(64, 1)))
    assert names(facts(store, run="r", forward=2))[-7:] == [("loss", None), *SPLIT, ("trainer_us", None)]
    failed = facts(store, run="r", forward=3)
    assert [(f["fact"], f.get("node")) for f in failed] == [("failed", "body")]


def test_with_read_every_1_a_non_finite_loss_is_refused_recorded_and_touches_nothing():
    g = built(dtype=torch.float64)
    oracle = Oracle(g, "adam")
    seen = []
    t = Trainer(g, objective=MSE, optimizer=trained_optimizer("adam", g), every=2, watching=seen.append,
                read_every=1)
    good = batches(4, dtype=torch.float64)
    t.step(good[0])
    t.step(good[1])
    oracle.update(good[:2])
    weights = t.export()
    state = {i: {k: v.clone() for k, v in s.items()} for i, s in t.optimizer.state_dict()["state"].items()}

    t.step(good[2])  # opens a group that the bad step will drop
    x, y = good[3]
    x = x.clone()
    x[5, 2] = math.nan
    seen.clear()
    with pytest.raises(NonFiniteLoss, match=r"step 3: the loss is nan"):
        t.step((x, y))
    assert names(seen)[-7:] == [("loss", None), *SPLIT, ("trainer_us", None)] and math.isnan(seen[-7]["value"])
    now = t.export()
    assert all(torch.equal(now[n][k], weights[n][k]) for n in weights for k in weights[n])
    for i, s in t.optimizer.state_dict()["state"].items():
        assert all(torch.equal(v, state[i][k]) for k, v in s.items())
    assert all(p.grad is None for p in parameters(g))

    # training goes on: the next group holds only what came after
    more = batches(2, dtype=torch.float64, seed=7)
    for b in more:
        t.step(b)
    oracle.update(more)
    assert t.updates == 2
    for n, named in oracle.weights().items():
        for k, w in named.items():
            torch.testing.assert_close(t.export()[n][k], w, rtol=0, atol=1e-6)


def test_a_watcher_that_raises_on_a_trainer_fact_is_named():
    def picky(fact):
        if fact["fact"] == "loss":
            raise RuntimeError("no losses here")

    with pytest.raises(WatcherError, match="picky"):
        trainer(watching=picky, read_every=1).step(batches(1)[0])  # read_every=1: handed over as the step ends
    t = trainer(watching=picky, read_every=8)  # asked to hold facts back from a plain function
    t.step(batches(1)[0])
    with pytest.raises(WatcherError, match="picky"):
        t.deliver()


def test_fit_steps_every_batch_every_epoch():
    data = batches(5)
    seen = []
    t = trainer(watching=seen.append).fit(data, epochs=3, progress=False)
    assert (t.steps, t.updates) == (15, 15)
    assert sum(f["fact"] == "loss" for f in seen) == 15


def test_fit_shows_a_progress_bar(capsys):
    trainer().fit(batches(3))
    assert "3/3" in capsys.readouterr().err


def test_fit_refuses_a_one_shot_iterator_for_several_epochs():
    with pytest.raises(SomatizeError, match="one-shot iterator"):
        trainer().fit(iter(batches(3)), epochs=2)
    t = trainer().fit((b for b in batches(3)), progress=False)  # one epoch is fine
    assert t.updates == 3


def test_every_fact_the_trainer_says_is_reserved_from_the_nodes():
    from somatize._graph.watchers import RESERVED

    seen = []
    t = trainer(watching=seen.append, every=2)
    for b in batches(3):
        t.step(b)
    t.close_group()
    assert {f["fact"] for f in seen} <= RESERVED
    assert {"updated", "loss", "trainer_us"} <= {f["fact"] for f in seen}
