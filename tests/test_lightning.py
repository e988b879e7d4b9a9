"""`somatize.lightning.Logger`: a Lightning fit recorded as a run (issue 32,
item 3). The real lightning, no stand-ins: a LightningModule on the digits
CNN (tests/digits_models.py) fitted on the CPU, and the oracle is what
Lightning computed, collected by the module itself (each step's loss, each
validation's `val_loss` as Lightning's callback metrics hold it)."""

import argparse
import logging
import math
import pathlib

import lightning as L
import numpy as np
import pytest
import torch
from digits_models import cnn, digits, modules
from lightning.pytorch.callbacks import ModelCheckpoint

from somatize import Recorder, Store
from somatize._base.errors import SomatizeValueError
from somatize.cli import runs_table
from somatize.lightning import Logger, fact_name
from somatize.record import curve, facts, nodes, runs

CE = torch.nn.functional.cross_entropy
BATCHES = 4  # training batches an epoch
pytestmark = [
    # lightning's own, about torch's pytree API it calls
    pytest.mark.filterwarnings("ignore:.*LeafSpec.* is deprecated:FutureWarning"),
]
logging.getLogger("lightning").setLevel(logging.ERROR)
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)


class Digits(L.LightningModule):
    """The digits CNN as a LightningModule that keeps, as an oracle, the loss
    of each training step and each validation's val_loss as Lightning
    computed them; ``fail_at``: a training step (global) that raises."""

    def __init__(self, lr=1e-3, optim=None, fail_at=None):
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.net = modules(cnn())
        self.losses, self.val_losses, self.grad_norms = {}, {}, {}

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, i):
        if self.global_step == self.hparams.fail_at:
            raise ValueError(f"no batch {self.global_step} today")
        loss = CE(self(batch[0]), batch[1])
        self.log("train_loss", loss)
        self.losses[self.global_step] = loss.item()
        return loss

    def on_after_backward(self):
        # the first convolution's gradient as the step's backward ends (its weight's and bias's)
        self.grad_norms[self.global_step] = torch.cat([p.grad.flatten() for p in self.net[0][0].parameters()]).norm()

    def validation_step(self, batch, i):
        self.log("val_loss", CE(self(batch[0]), batch[1]), sync_dist=True)  # over every rank's batches

    def on_validation_epoch_end(self):
        # what Lightning made of this validation's batches (their mean, by batch size)
        self.val_losses[self.global_step - 1] = float(self.trainer.callback_metrics["val_loss"])

    def test_step(self, batch, i):
        self.log("test_acc", (self(batch[0]).argmax(1) == batch[1]).float().mean())

    def predict_step(self, batch, i):
        return self(batch[0]).argmax(1)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


@pytest.fixture(scope="module")
def loaders():
    train, test = digits()
    return (torch.utils.data.DataLoader(train, batch_size=64),
            torch.utils.data.DataLoader(test, batch_size=120))


def trainer(tmp, logger, epochs=2, callbacks=(), **kw):
    return L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=[logger], callbacks=list(callbacks),
                     enable_progress_bar=False, enable_model_summary=False, limit_train_batches=BATCHES,
                     limit_val_batches=2, num_sanity_val_steps=0, log_every_n_steps=1, default_root_dir=tmp,
                     **kw)


def steps_of(store, run):
    """Each forward's step: its `step` fact, else the forward."""
    n = int(runs(store).set_index("run").loc[run, "forwards"])
    steps = np.arange(n)
    try:
        said = curve(store, run, "step")
        steps[said.index.to_numpy()] = said.to_numpy()
    except KeyError:
        pass
    return steps


def test_a_fit_is_recorded_as_a_trainers_run(tmp_path, loaders):
    store = Store(tmp_path / "store")
    logger = Logger(store, run="digits", config={"note": "first"})
    model = Digits(lr=2e-3, optim={"betas": [0.9, 0.99], "name": "adam"})
    trainer(tmp_path, logger).fit(model, *loaders)

    assert logger.version == "digits" and (tmp_path / "lightning_logs" / "digits" / "checkpoints").is_dir()
    loss = curve(store, "digits", "loss")
    # one forward a step, the losses Lightning computed, in order
    assert loss.index.tolist() == list(range(2 * BATCHES))
    assert loss.tolist() == [model.losses[s] for s in range(2 * BATCHES)]
    # a validation at the end of each epoch, at that epoch's last step
    val = curve(store, "digits", "val_loss")
    assert val.index.tolist() == [BATCHES - 1, 2 * BATCHES - 1]
    assert val.tolist() == pytest.approx([model.val_losses[BATCHES - 1], model.val_losses[2 * BATCHES - 1]],
                                         rel=1e-6)
    # Lightning's epoch, once a step (a validation says it again: not recorded twice)
    assert curve(store, "digits", "epoch").tolist() == [0] * BATCHES + [1] * BATCHES
    assert [f["fact"] for f in facts(store, "digits", forward=0)][:2] == ["loss", "epoch"]

    row = runs(store).set_index("run").loc["digits"]
    assert row["state"] == "finished" and row["steps"] == row["forwards"] == 2 * BATCHES
    assert row["loss.last"] == model.losses[2 * BATCHES - 1] and row["loss.min"] == min(model.losses.values())
    assert row["val_loss.last"] == pytest.approx(model.val_losses[2 * BATCHES - 1], rel=1e-6)
    # the hyperparameters as its config, nested ones as dotted columns, the Logger's own keys over them
    assert row["config.lr"] == 2e-3 and row["config.optim.name"] == "adam" and row["config.note"] == "first"
    assert row["config.fail_at"] is None or math.isnan(row["config.fail_at"])
    # the command line lists it as it lists a Trainer's
    listed = runs_table(store.path)
    assert "digits" in listed and "finished" in listed
    assert logger.experiment.run == "digits" and "closed" in repr(logger.experiment)


def test_a_test_after_the_fit_adds_to_its_run_at_its_last_step(tmp_path, loaders):
    store = Store(tmp_path / "store")
    logger = Logger(store, run="r")
    fitter = trainer(tmp_path, logger, epochs=1)
    model = Digits()
    fitter.fit(model, *loaders)
    fitter.test(model, loaders[1])
    row = runs(store).set_index("run").loc["r"]
    acc = curve(store, "r", "test_acc")
    assert row["state"] == "finished" and len(acc) == 1 and 0 <= acc.iloc[0] <= 1
    assert steps_of(store, "r").tolist() == list(range(BATCHES + 1))  # Lightning's test is at the step after


def test_a_validation_later_adds_to_its_run_and_a_prediction_records_nothing(tmp_path, loaders):
    store = Store(tmp_path / "store")
    model = Digits()
    trainer(tmp_path, Logger(store, run="r"), epochs=1).fit(model, *loaders)
    # a new Trainer numbers its steps from 0: the values land at the run's last step
    trainer(tmp_path / "later", Logger(store, run="r")).validate(model, loaders[1])
    val = curve(store, "r", "val_loss")
    assert val.index.tolist() == [BATCHES - 1] * 2 and val.iloc[0] == val.iloc[1]
    row = runs(store).set_index("run").loc["r"]
    assert row["state"] == "finished" and row["forwards"] == BATCHES
    trainer(tmp_path / "p", Logger(store, run="p")).predict(model, loaders[1])
    assert store.runs() == ["r"]


def test_a_fit_that_raises_is_interrupted_with_its_cause(tmp_path, loaders):
    store = Store(tmp_path / "store")
    model = Digits(fail_at=3)
    with pytest.raises(ValueError, match="no batch 3 today"):
        trainer(tmp_path, Logger(store, run="failed")).fit(model, *loaders)
    row = runs(store).set_index("run").loc["failed"]
    assert row["state"] == "interrupted"
    assert row["cause"] == "ValueError: no batch 3 today"
    assert curve(store, "failed", "loss").tolist() == [model.losses[s] for s in range(3)]


@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty:UserWarning")  # Lightning's
def test_a_resumed_fit_continues_its_run_with_no_step_twice(tmp_path, loaders):
    store = Store(tmp_path / "store")
    kept = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1)
    first = Digits(fail_at=2 * BATCHES + 2)  # dies in its third epoch, after the second's checkpoint
    with pytest.raises(ValueError):
        trainer(tmp_path / "a", Logger(store, run="long"), epochs=3, callbacks=[kept]).fit(first, *loaders)
    assert steps_of(store, "long").tolist() == list(range(2 * BATCHES + 2))  # two steps past the checkpoint
    checkpoint = tmp_path / "ckpt" / f"epoch=1-step={2 * BATCHES}.ckpt"
    assert checkpoint.exists()

    again = Digits()
    trainer(tmp_path / "b", Logger(store, run="long"), epochs=3,
            callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1)]).fit(again, *loaders,
                                                                                        ckpt_path=checkpoint)

    assert runs(store)["run"].tolist() == ["long"]
    row = runs(store).set_index("run").loc["long"]
    assert row["state"] == "finished" and row["steps"] == 3 * BATCHES
    assert steps_of(store, "long").tolist() == list(range(3 * BATCHES))  # each step once, in order
    # the first fit's losses up to its checkpoint, then the resumed fit's
    want = [first.losses[s] for s in range(2 * BATCHES)] + [again.losses[s] for s in range(2 * BATCHES, 3 * BATCHES)]
    assert curve(store, "long", "loss").tolist() == want
    assert curve(store, "long", "val_loss").index.tolist() == [BATCHES - 1, 2 * BATCHES - 1, 3 * BATCHES - 1]
    assert row["config.lr"] == 1e-3


def test_a_new_fit_into_a_run_in_the_store_is_refused_before_anything_is_written(tmp_path, loaders):
    store = Store(tmp_path / "store")
    trainer(tmp_path, Logger(store, run="taken"), epochs=1).fit(Digits(), *loaders)
    before = runs(store).set_index("run").loc["taken"]
    with pytest.raises(SomatizeValueError, match=r"run 'taken' is already in the store.*run='taken-2'"):
        trainer(tmp_path / "again", Logger(store, run="taken"), epochs=1).fit(Digits(), *loaders)
    after = runs(store).set_index("run").loc["taken"]
    assert after["state"] == "finished" and after["forwards"] == before["forwards"]
    assert after["updated"] == before["updated"]


@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty:UserWarning")  # Lightning's
def test_an_unnamed_logger_draws_a_run_and_records_the_resumed_fit_as_a_new_one(tmp_path, loaders):
    store = Store(tmp_path / "store")
    kept = ModelCheckpoint(dirpath=tmp_path / "ckpt")
    logger = Logger(store)
    assert logger.version.startswith("run-") and logger.experiment is None
    trainer(tmp_path / "a", logger, epochs=1, callbacks=[kept]).fit(Digits(), *loaders)
    other = Logger(store)
    trainer(tmp_path / "b", other, epochs=2, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt")]).fit(
        Digits(), *loaders, ckpt_path=kept.best_model_path)
    assert sorted(runs(store)["run"]) == sorted([logger.version, other.version])
    assert steps_of(store, other.version).tolist() == list(range(BATCHES, 2 * BATCHES))


def test_hyperparameters_become_a_config_json_holds(tmp_path):
    store = Store(tmp_path / "store")
    logger = Logger(store, run="h")

    def activation(x):
        return x

    class Thing:
        pass

    logger.log_hyperparams(argparse.Namespace(
        lr=torch.tensor(0.5), layers=(64, 64), act=activation, thing=Thing(), path=pathlib.Path("/data"),
        nested=argparse.Namespace(depth=3, rate=float("nan")), big=2**70, flag=True))
    logger.log_metrics({"train_loss": 1.5, "epoch": 0}, step=0)
    logger.finalize("success")
    config = runs(store).set_index("run").loc["h"]
    assert config["config.lr"] == 0.5 and config["config.layers"] == [64, 64]
    assert config["config.act"].endswith("activation") and " at 0x" not in config["config.thing"]
    assert config["config.path"] == "/data" and config["config.nested.depth"] == 3
    assert config["config.nested.rate"] == "nan" and config["config.big"] == str(2**70)
    assert config["config.flag"] is True or config["config.flag"] == True  # noqa: E712


@pytest.mark.parametrize("key, fact", [
    ("train_loss", "loss"), ("train/loss", "loss"), ("training_loss", "loss"), ("train_loss_step", "loss"),
    ("train_loss_epoch", "loss_epoch"), ("loss", "loss"), ("loss_step", "loss"), ("train_acc", "acc"),
    ("val_loss", "val_loss"), ("val/acc", "val_acc"), ("valid_loss", "val_loss"), ("validation_f1", "val_f1"),
    ("val_loss_epoch", "val_loss"), ("val_loss_step", "val_loss_step"), ("test_acc", "test_acc"),
    ("test/acc_epoch", "test_acc"), ("epoch", "epoch"), ("lr-Adam", "lr"), ("lr-Adam-momentum", "lr-Adam-momentum"),
    ("grad_norm", "grad_norm_total"), ("my_metric", "my_metric"),
])
def test_lightnings_names_become_the_trainers(key, fact):
    assert fact_name(key) == fact


def test_a_metric_no_fact_can_hold_is_left_out_and_named_once(tmp_path):
    store = Store(tmp_path / "store")
    logger = Logger(store, run="n")
    with pytest.warns(RuntimeWarning, match=r"is not recorded") as said:
        logger.log_metrics({"train_loss": 1.0, "wall_s": 3.0, "val_loss": "high"}, step=0)
        logger.log_metrics({"train_loss": 0.5, "wall_s": 4.0, "loss": 0.25, "val_loss": "low"}, step=1)
    told = [str(w.message) for w in said]
    assert len(told) == 2, told
    assert "'wall_s' is not recorded: 'wall_s' is the clock" in told[0]
    assert "'val_loss' is not recorded: its value 'high' is not one number" in told[1]
    logger.finalize("success")
    # loss and train_loss in one call: loss takes the fact, train_loss keeps its name
    assert curve(store, "n", "loss").tolist() == [1.0, 0.25]
    assert curve(store, "n", "train_loss").tolist() == [0.5]


def test_a_step_before_the_last_is_recorded_at_the_last(tmp_path):
    store = Store(tmp_path / "store")
    logger = Logger(store, run="s")
    logger.log_metrics({"train_loss": 1.0}, step=5)
    logger.log_metrics({"val_loss_step": 2.0}, step=0)  # a validation's per-batch value, numbered from 0
    logger.log_metrics({"train_loss": 0.5}, step=6)
    logger.finalize("failed")
    row = runs(store).set_index("run").loc["s"]
    assert row["state"] == "interrupted" and row["forwards"] == 2
    assert curve(store, "s", "val_loss_step").index.tolist() == [0]
    assert curve(store, "s", "step").tolist() == [5, 6]


def test_a_ddp_fit_on_two_processes_records_one_run(tmp_path, loaders):
    store = Store(tmp_path / "store")
    logger = Logger(store, run="ddp")
    fitter = L.Trainer(max_epochs=1, accelerator="cpu", devices=2, strategy="ddp_notebook", logger=[logger],
                       enable_progress_bar=False, enable_model_summary=False, limit_train_batches=BATCHES,
                       limit_val_batches=2, num_sanity_val_steps=0, log_every_n_steps=1,
                       default_root_dir=tmp_path, enable_checkpointing=False)
    fitter.fit(Digits(), *loaders)
    table = runs(store)
    assert table["run"].tolist() == ["ddp"]
    row = table.iloc[0]
    # rank 0's steps, each once (each rank takes BATCHES batches of its half): rank 1 wrote nothing
    assert row["state"] == "finished" and row["steps"] == row["forwards"] == BATCHES
    assert steps_of(store, "ddp").tolist() == list(range(BATCHES))
    assert len(curve(store, "ddp", "loss")) == BATCHES and curve(store, "ddp", "val_loss").index.tolist() == [3]
    assert logger.experiment is None  # the run was opened in rank 0's process, not in this one


def test_the_logger_refuses_what_it_cannot_take_before_a_fit(tmp_path):
    with pytest.raises(SomatizeValueError, match="run name"):
        Logger(tmp_path / "s", run="a run")
    with pytest.raises(TypeError, match="config"):
        Logger(tmp_path / "s", config={"f": object()})
    with pytest.raises(SomatizeValueError, match="watch"):
        Logger(tmp_path / "s", watch="yes")
    assert not (tmp_path / "s" / "runs").exists() or not list((tmp_path / "s" / "runs").iterdir())


def test_a_run_opened_elsewhere_is_not_taken_over(tmp_path):
    store = Store(tmp_path / "store")
    with Recorder(store, run="busy"):
        logger = Logger(store, run="busy")
        with pytest.raises(SomatizeValueError, match="already in the store"):
            logger.log_metrics({"loss": 1.0}, step=0)


def test_watch_records_the_modules_parts_and_changes_nothing(tmp_path, loaders):
    store = Store(tmp_path / "store")
    plain, watched = Digits(), Digits()
    trainer(tmp_path / "a", Logger(store, run="plain"), epochs=1).fit(plain, *loaders)
    trainer(tmp_path / "b", Logger(store, run="watched", watch=True), epochs=1).fit(watched, *loaders)
    assert watched.losses == plain.losses  # measured, trained bit for bit as the unwatched one
    assert curve(store, "watched", "loss").tolist() == [watched.losses[s] for s in range(BATCHES)]
    # the CNN's parts as nodes (named as named_modules names them), each timed and measured
    parts = [f"net.0.{i}" for i in range(7)] + [f"net.1.{i}" for i in range(5)]
    assert sorted(nodes(store, "watched")["node"]) == parts
    # the first ten steps are measured, each in its own forward, but the fit's last: its update is seen as
    # the next step begins, and there is none (the watch is not handed the optimizer, which Lightning steps
    # with a closure)
    grad = curve(store, "watched", "grad_norm/net.0.0")
    assert grad.index.tolist() == list(range(BATCHES - 1))
    assert grad.tolist() == pytest.approx([float(watched.grad_norms[s]) for s in range(BATCHES - 1)], rel=1e-5)
    with pytest.raises(KeyError):
        curve(store, "plain", "grad_norm/net.0.0")
    # the hooks are off once the fit ended
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in watched.modules())
