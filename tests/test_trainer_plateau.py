"""A schedule that watches a value (ReduceLROnPlateau): stepped once per
evaluation on the value it is told, as a hand-written loop steps it, kept and
resumed exactly; a scheduler whose step needs what the Trainer cannot give
is refused when the Trainer is made."""

import copy

import pytest
import torch

from somatize import SomatizeTypeError, SomatizeValueError, Store
from somatize.torch import Trainer, parameters

from torch_models import batches, built

MSE = torch.nn.functional.mse_loss
EPOCHS = 6
METRICS = {"mae": lambda out, y: (out - y).abs().mean()}


def plateau(opt):
    # patience=0 and a 20% improvement asked for: it lowers the rate in some epochs and not in others
    return torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0, threshold=0.2)


def data():
    drawn = batches(8, n=16)
    return drawn[:5], drawn[5:]


def by_hand(g, train, held_out, measure):
    """A hand-written loop: an epoch of updates, then the held-out value
    (each batch's mean weighted by its examples) and the schedule stepped on it."""
    net = torch.nn.Sequential(copy.deepcopy(g.node("body").net), copy.deepcopy(g.node("head").out))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    sched = plateau(opt)
    lrs = []
    for _ in range(EPOCHS):
        for x, y in train:
            MSE(net(x), y).backward()
            opt.step()
            opt.zero_grad()
        total = examples = 0
        with torch.no_grad():
            for x, y in held_out:
                total += float(measure(net(x), y)) * len(x)
                examples += len(x)
        sched.step(total / examples)
        lrs.append(opt.param_groups[0]["lr"])
    return net, sched, lrs


@pytest.mark.parametrize("on", [None, "val_mae"])
def test_a_plateau_schedule_steps_once_per_evaluation_as_a_hand_written_loop_does(on):
    train, held_out = data()
    g = built()
    net, hand, lrs = by_hand(g, train, held_out, MSE if on is None else METRICS["mae"])
    kept = [a == b for a, b in zip(lrs, lrs[1:])]
    assert any(kept) and not all(kept)  # kept after some evaluations, lowered after others
    opt = torch.optim.SGD(parameters(g), lr=0.01, momentum=0.9)
    seen = []
    trainer = Trainer(g, MSE, opt, schedule=plateau(opt), schedule_on=on)
    for _ in range(EPOCHS):
        trainer.fit(train, progress=False, evaluate=held_out, metrics=METRICS)
        seen.append(opt.param_groups[0]["lr"])
    assert seen == lrs
    assert trainer.schedule.state_dict() == hand.state_dict()  # stepped once per evaluation, on the same values
    got = trainer.export()
    want = {"body": {"net." + k: v for k, v in net[0].state_dict().items()},
            "head": {"out." + k: v for k, v in net[1].state_dict().items()}}
    for node in want:
        for k in want[node]:
            assert torch.equal(got[node][k], want[node][k]), (node, k)


class TwoValues:
    """A scheduler of one's own whose step needs two values the Trainer does not have."""

    def __init__(self, optimizer):
        self.optimizer, self.steps = optimizer, 0

    def step(self, loss, batch_size):
        self.steps += 1

    def state_dict(self):
        return {"steps": self.steps}

    def load_state_dict(self, state):
        self.steps = state["steps"]


class Named(TwoValues):
    """One value, under a name that does not say it is the value watched."""

    def step(self, grad_norm):
        self.steps += 1


@pytest.mark.parametrize("kind", [TwoValues, Named])
def test_a_scheduler_whose_step_needs_what_the_trainer_cannot_give_is_refused_naming_it(kind):
    g = built()
    opt = torch.optim.SGD(parameters(g), lr=0.1)
    weights = copy.deepcopy(g.node("head").out.state_dict())
    with pytest.raises(SomatizeTypeError) as refused:
        Trainer(g, MSE, opt, schedule=kind(opt))
    said = str(refused.value)
    assert f"schedule={kind.__name__}" in said and "step(metrics)" in said and "leave schedule= out" in said
    assert all(torch.equal(t, weights[k]) for k, t in g.node("head").out.state_dict().items())


def test_schedule_on_a_value_the_evaluation_does_not_measure_is_refused_before_it_runs():
    train, held_out = data()
    g = built()
    opt = torch.optim.SGD(parameters(g), lr=0.1)
    trainer = Trainer(g, MSE, opt, schedule=plateau(opt), schedule_on="val_mae")
    with pytest.raises(SomatizeValueError, match=r"val_mae.*measures val_loss, val_accuracy.*'mae'"):
        trainer.evaluate(held_out, metrics={"accuracy": lambda out, y: 0.0})
    with pytest.raises(SomatizeValueError, match="val_mae"):
        trainer.fit(train, progress=False, evaluate=held_out)
    assert trainer.steps == 0 and trainer.schedule.last_epoch == 0
    with pytest.raises(SomatizeValueError, match="StepLR.step.. takes none"):
        Trainer(g, MSE, opt, schedule=torch.optim.lr_scheduler.StepLR(opt, 2), schedule_on="val_loss")
    with pytest.raises(SomatizeValueError, match="schedule_on='val_mae'"):
        Trainer(g, MSE, opt, schedule=plateau(opt), schedule_on="mae")


class Stop(Exception):
    pass


def test_a_plateau_schedule_resumed_goes_on_as_if_never_stopped(tmp_path):
    """Kept every 7 steps, stopped at step 23 (epoch 4: the rate lowered
    already), resumed in a new Trainer with a new schedule: the same rates,
    the same schedule state and the same weights, bit for bit."""
    train, held_out = data()

    def made(store=None, objective=MSE):
        g = built()
        opt = torch.optim.SGD(parameters(g), lr=0.01, momentum=0.9)
        return Trainer(g, objective, opt, schedule=plateau(opt), store=store, checkpoint="t/c" if store else None,
                       checkpoint_every=7 if store else None)

    whole = made().fit(train, epochs=EPOCHS, progress=False, evaluate=held_out)
    trained = [0]

    def stopping(out, y):
        if torch.is_grad_enabled():  # a training step's, not an evaluation's
            if trained[0] == 23:
                raise Stop
            trained[0] += 1
        return MSE(out, y)

    store = Store(tmp_path / "s")
    first = made(store, stopping)
    with pytest.raises(Stop):
        first.fit(train, epochs=EPOCHS, progress=False, evaluate=held_out)
    assert first.optimizer.param_groups[0]["lr"] < 0.01  # lowered before the checkpoint at step 21
    again = made(store)
    assert again.steps == 21
    again.fit(train, epochs=EPOCHS, progress=False, evaluate=held_out)
    assert again.schedule.state_dict() == whole.schedule.state_dict()
    assert again.optimizer.param_groups[0]["lr"] == whole.optimizer.param_groups[0]["lr"]
    got, want = again.export(), whole.export()
    for node in want:
        for k in want[node]:
            assert torch.equal(got[node][k], want[node][k]), (node, k)
