"""A training run survives its process: the Trainer keeps its state in the
store every N steps, and a new Trainer resumes from it while its Recorder
resumes the record. Killed with SIGKILL at step 150 of 300 and resumed, the
final weights are those of a run never stopped, and the record reads as one
run with every step once."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from somatize import Recorder, Store
from somatize.cli import check_report
from somatize.record import curve, facts, runs
from somatize.torch import Trainer, parameters

from torch_models import batches, built

MSE = torch.nn.functional.mse_loss
TESTS = Path(__file__).parent


def trainer(store=None, dtype=torch.float64, every=1, micro=1, objective=MSE, **kw):
    g = built(dtype=dtype)
    return Trainer(g, objective, torch.optim.Adam(parameters(g), lr=1e-2), every=every, micro=micro, store=store, **kw)


def same_weights(a, b, atol=0.0):
    ea, eb = a.export(), b.export()
    assert ea.keys() == eb.keys()
    for node in ea:
        for k in ea[node]:
            torch.testing.assert_close(ea[node][k], eb[node][k], atol=atol, rtol=0)


@pytest.mark.parametrize(("every", "micro"), [(1, 1), (3, 2)])
def test_a_trainer_resumed_from_kept_state_takes_the_same_steps_bit_for_bit(tmp_path, every, micro):
    store = Store(tmp_path / "s")
    data = batches(20, n=16, dtype=torch.float64)
    whole = trainer(every=every, micro=micro)
    for b in data:
        whole.step(b)
    first = trainer(every=every, micro=micro)
    for b in data[:10]:  # with every=3, a group is open: 10 = 3 * 3 + 1
        first.step(b)
    first.checkpoint(store, "t/checkpoint")
    second = trainer(every=every, micro=micro)
    assert second.resume(store, "t/checkpoint") is True
    assert (second.steps, second.updates) == (first.steps, first.updates)
    for b in data[second.steps:]:
        second.step(b)
    same_weights(second, whole)
    assert second.updates == whole.updates


def test_resume_from_a_name_not_kept_changes_nothing_and_says_so(tmp_path):
    t = trainer()
    before = t.export()
    assert t.resume(Store(tmp_path / "s"), "nothing/here") is False
    assert t.steps == 0 and all(torch.equal(before[n][k], v) for n in before for k, v in t.export()[n].items())


def test_a_trainer_made_with_a_kept_state_name_resumes_and_fit_skips_the_steps_done(tmp_path):
    store = Store(tmp_path / "s")
    data = batches(12, n=16, dtype=torch.float64)
    whole = trainer().fit(data, epochs=2, progress=False)
    first = trainer(store, checkpoint="t/checkpoint", checkpoint_every=5)
    for b in data[:7]:
        first.step(b)  # kept at step 5; steps 5 and 6 are lost with the process
    again = trainer(store, checkpoint="t/checkpoint", checkpoint_every=5)
    assert again.steps == 5
    again.fit(data, epochs=2, progress=False)
    assert again.steps == 24
    same_weights(again, whole)


def test_checkpoint_every_without_a_name_is_refused_saying_what_to_write():
    with pytest.raises(ValueError, match="checkpoint="):
        trainer(checkpoint_every=10)


def test_a_name_that_holds_something_else_is_refused_naming_it(tmp_path):
    store = Store(tmp_path / "s")
    store.keep("t/weights", {"a": 1})
    with pytest.raises(ValueError, match="'t/weights'.*not a Trainer.s checkpoint"):
        trainer().resume(store, "t/weights")


def test_a_recorder_rewound_drops_the_later_forwards_and_numbers_on_from_there(tmp_path):
    store = Store(tmp_path / "s")
    r = Recorder(store, run="a")
    for i in range(10):
        r.forward_began()
        r({"fact": "finished", "took_us": 1})
        r({"fact": "loss", "value": float(i)})
        if i % 3 == 0:
            r.flush()  # the cut falls inside a block
    r.rewind(4)
    assert r.forwards == 4
    for i in range(4, 6):
        r.forward_began()
        r({"fact": "finished", "took_us": 1})
        r({"fact": "loss", "value": i + 0.5})
    r.close()
    assert list(curve(store, "a", "loss")) == [0.0, 1.0, 2.0, 3.0, 4.5, 5.5]
    assert [f["value"] for f in facts(store, "a") if f["fact"] == "loss"] == [0.0, 1.0, 2.0, 3.0, 4.5, 5.5]
    row = runs(store).iloc[0]
    assert (row["forwards"], row["facts"], row["loss.last"], row["loss.min"]) == (6, 12, 5.5, 0.0)
    report, clean = check_report(store.path)
    assert clean, report


def test_a_recorder_refuses_to_rewind_past_what_it_holds(tmp_path):
    with Recorder(Store(tmp_path / "s"), run="a") as r:
        r.forward_began()
        r({"fact": "loss", "value": 1.0})
        with pytest.raises(ValueError, match="holds 1 forwards"):
            r.rewind(5)


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    from somatize import Recorder, Store
    from somatize.torch import Trainer, parameters
    from torch_models import batches, built

    store, every, micro, kill_at = Store(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    data = batches(300, n=8, dtype=torch.float64, seed=5)
    g = built(dtype=torch.float64)
    recorder = Recorder(store, run="train", resume=os.path.exists(os.path.join(sys.argv[1], "runs", "train")))
    t = Trainer(g, torch.nn.functional.mse_loss, torch.optim.Adam(parameters(g), lr=1e-2), every=every,
                micro=micro, watching=recorder, store=store, checkpoint="train/checkpoint", checkpoint_every=25)
    first_try = t.steps == 0
    for i in range(t.steps, len(data)):
        t.step(data[i])
        if first_try and i + 1 == kill_at:
            recorder.flush()  # the Trainer's held facts first: the record runs ahead of the checkpoint (125)
            os.kill(os.getpid(), signal.SIGKILL)
    t.close_group()
    recorder.close()
    store.keep("train/final", t.export())
    """
)


def test_killed_at_step_150_of_300_and_resumed_the_run_ends_as_if_never_stopped(tmp_path):
    every, micro = 3, 2  # the state kept at step 125 holds an open group of 2 steps; a step runs 2 forwards
    script = tmp_path / "train.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}

    def train(store, kill_at):
        return subprocess.run([sys.executable, str(script), str(store), str(every), str(micro), str(kill_at)],
                              env=env, capture_output=True, text=True, timeout=120)

    killed = train(tmp_path / "resumed", 150)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert runs(tmp_path / "resumed").iloc[0]["state"] == "interrupted"
    assert runs(tmp_path / "resumed").iloc[0]["forwards"] == 150 * micro  # ahead of the state (125 steps)
    done = train(tmp_path / "resumed", 150)  # the retry: the same script, the same command
    assert done.returncode == 0, done.stderr
    whole = train(tmp_path / "whole", 0)
    assert whole.returncode == 0, whole.stderr

    got = Store(tmp_path / "resumed").recall("train/final")
    want = Store(tmp_path / "whole").recall("train/final")
    for node in want:
        for k in want[node]:
            torch.testing.assert_close(got[node][k], want[node][k], atol=1e-12, rtol=0)

    loss = curve(tmp_path / "resumed", "train", "loss")
    assert list(loss.index) == [micro * i + micro - 1 for i in range(300)]  # each step once, in order
    assert list(loss) == list(curve(tmp_path / "whole", "train", "loss"))
    assert runs(tmp_path / "resumed").iloc[0]["state"] == "finished"
    steps = [f for f in facts(tmp_path / "resumed", "train") if f["fact"] == "loss"]
    assert len(steps) == 300
    report, clean = check_report(tmp_path / "resumed")
    assert clean, report


def test_fit_resumed_with_every_3_closes_no_group_in_the_epochs_it_skips(tmp_path):
    # 10 batches, 2 epochs, every=3: groups (0 1 2) (3 4 5) (6 7 8) (9) per
    # epoch. Kept at step 12 (epoch 1, batch 2, an open group of 2 steps);
    # the process dies at step 14. Resumed, fit must not close the kept
    # group at the end of the epoch it skips.
    store = Store(tmp_path / "s")
    data = batches(10, n=16, dtype=torch.float64)
    whole = trainer(every=3).fit(data, epochs=2, progress=False)
    first = trainer(store, every=3, checkpoint="t/checkpoint", checkpoint_every=4)
    done = 0
    for _ in range(2):
        for b in data:
            if done == 14:
                break
            first.step(b)
            done += 1
        else:
            first.close_group()
    again = trainer(store, every=3, checkpoint="t/checkpoint", checkpoint_every=4)
    assert again.steps == 12
    again.fit(data, epochs=2, progress=False)
    assert (again.steps, again.updates) == (whole.steps, whole.updates)
    same_weights(again, whole, atol=1e-12)


def test_fit_killed_in_a_fresh_process_and_resumed_ends_as_the_run_never_stopped(tmp_path):
    """10 batches a epoch, 2 epochs, every=3, a checkpoint every 4 steps:
    killed at step 14 (epoch 1, batch 4; the checkpoint at step 12 holds an
    open group of 2 steps), with dropout, a schedule, fp16's scaler and a
    shuffled loader; the retry ends where the uninterrupted run does."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}

    def train(store, kill_at):
        return subprocess.run([sys.executable, str(TESTS / "resume_child.py"), str(store), str(kill_at)],
                              env=env, capture_output=True, text=True, timeout=120)

    killed = train(tmp_path / "resumed", 14)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    done = train(tmp_path / "resumed", -1)
    assert done.returncode == 0, done.stderr
    assert "resumed at 12" in done.stdout
    whole = train(tmp_path / "whole", -1)
    assert whole.returncode == 0, whole.stderr

    got = Store(tmp_path / "resumed").recall("train/final")
    want = Store(tmp_path / "whole").recall("train/final")
    assert (got["updates"], got["lr"], got["scale"]) == (want["updates"], want["lr"], want["scale"])
    assert torch.equal(got["rng"], want["rng"])  # the RNG stream goes on as never stopped
    for node in want["weights"]:
        for k in want["weights"][node]:
            torch.testing.assert_close(got["weights"][node][k], want["weights"][node][k], atol=1e-6, rtol=0)
    assert list(curve(tmp_path / "resumed", "train", "loss")) == list(curve(tmp_path / "whole", "train", "loss"))
    assert runs(tmp_path / "resumed").iloc[0]["forwards"] == 20


class Counted(torch.utils.data.Dataset):
    """A map-style dataset that counts the examples it loads."""

    def __init__(self, x, y):
        self.x, self.y, self.loaded = x, y, 0

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        self.loaded += 1
        return self.x[i], self.y[i]


class Stop(Exception):
    pass


def shuffled(dataset, seed=7):
    return torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True,
                                       generator=torch.Generator().manual_seed(seed))


def stopping_at(step):
    calls = [0]

    def objective(out, y):
        if calls[0] == step:
            raise Stop
        calls[0] += 1
        return MSE(out, y)

    return objective


def test_fit_resumed_skips_a_dataloaders_batches_done_without_loading_them(tmp_path):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(80, 8, generator=gen, dtype=torch.float64)
    data = Counted(x, x.sum(1, keepdim=True))
    whole = trainer(every=3).fit(shuffled(data), epochs=2, progress=False)
    store = Store(tmp_path / "s")
    first = trainer(store, every=3, objective=stopping_at(17), checkpoint="t/c", checkpoint_every=8)
    with pytest.raises(Stop):
        first.fit(shuffled(data), epochs=2, progress=False)  # kept at step 16: epoch 1, 6 batches done
    again = trainer(store, every=3, checkpoint="t/c", checkpoint_every=8)
    data.loaded = 0
    again.fit(shuffled(data), epochs=2, progress=False)
    assert data.loaded == 4 * 8  # the last 4 batches of epoch 1, and no more
    assert (again.steps, again.updates) == (whole.steps, whole.updates)
    same_weights(again, whole, atol=1e-12)


@pytest.mark.parametrize("kept_at, stop_at", [(4, 6), (10, 12)])  # mid-epoch; at the epoch's last batch
def test_fit_resumed_in_an_early_epoch_draws_the_later_epochs_orders_as_never_stopped(tmp_path, kept_at, stop_at):
    """Kept in epoch 0 of 3 and resumed with a fresh loader (its generator
    seeded anew, as in a new process): epochs 1 and 2 draw the orders the
    run never stopped drew. (A sampler draws from the loader's generator at
    the end of an epoch too, so that generator must be left where drawing the
    epoch left it, not put back to the fresh loader's state.)"""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(80, 8, generator=gen, dtype=torch.float64)
    data = Counted(x, x.sum(1, keepdim=True))
    whole = trainer().fit(shuffled(data), epochs=3, progress=False)
    store = Store(tmp_path / "s")
    first = trainer(store, objective=stopping_at(stop_at), checkpoint="t/c", checkpoint_every=kept_at)
    with pytest.raises(Stop):
        first.fit(shuffled(data), epochs=3, progress=False)
    again = trainer(store, checkpoint="t/c", checkpoint_every=kept_at)
    assert again.steps == kept_at
    again.fit(shuffled(data), epochs=3, progress=False)
    assert (again.steps, again.updates) == (whole.steps, whole.updates) == (30, 30)
    same_weights(again, whole, atol=1e-12)


def test_fit_draws_from_a_loader_only_as_a_hand_written_loop_does():
    """fit over a shuffled DataLoader without a generator of its own (its order
    and seeds come from torch's RNG), evaluating after each epoch, takes the
    steps of a hand-written loop over the same loader: asking whether the
    batches (or the evaluation's) are a one-shot iterator draws nothing."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(40, 8, generator=gen, dtype=torch.float64)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    held_out = torch.utils.data.DataLoader(data, batch_size=16)  # even unshuffled, a DataLoader draws a seed

    def loader():
        return torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)

    torch.manual_seed(11)
    by_hand = trainer()
    for _ in range(2):
        for b in loader():
            by_hand.step(b)
    torch.manual_seed(11)
    fitted = trainer().fit(loader(), epochs=2, progress=False, evaluate=held_out)
    same_weights(fitted, by_hand)


class Resumable:
    """A loader that keeps its own place, as torchdata's StatefulDataLoader does."""

    def __init__(self, batches):
        self.batches, self.at, self.loaded = batches, 0, 0

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        while self.at < len(self.batches):
            self.at += 1
            self.loaded += 1
            yield self.batches[self.at - 1]
        self.at = 0

    def state_dict(self):
        return {"at": self.at}

    def load_state_dict(self, state):
        self.at = state["at"]


def test_fit_resumed_puts_a_stateful_loader_back_where_it_stood(tmp_path):
    data = batches(10, n=8, dtype=torch.float64)
    whole = trainer(every=3).fit(Resumable(data), epochs=2, progress=False)
    store = Store(tmp_path / "s")
    first = trainer(store, every=3, objective=stopping_at(15), checkpoint="t/c", checkpoint_every=4)
    with pytest.raises(Stop):
        first.fit(Resumable(data), epochs=2, progress=False)
    loader = Resumable(data)
    again = trainer(store, every=3, checkpoint="t/c", checkpoint_every=4)
    again.fit(loader, epochs=2, progress=False)
    assert loader.loaded == 8  # from step 12 (epoch 1, batch 2) on, nothing loaded twice
    same_weights(again, whole, atol=1e-12)


def test_checkpoint_also_keeps_a_users_objects_and_generators(tmp_path):
    class Counter:
        def __init__(self):
            self.n = 0

        def state_dict(self):
            return {"n": self.n}

        def load_state_dict(self, state):
            self.n = state["n"]

    store = Store(tmp_path / "s")
    counter, gen = Counter(), torch.Generator().manual_seed(1)
    first = trainer(store, checkpoint="t/c", checkpoint_also=[counter, gen])
    counter.n = 41
    torch.rand(5, generator=gen)
    first.checkpoint()
    want = torch.rand(3, generator=gen)
    other, gen2 = Counter(), torch.Generator()
    trainer(store, checkpoint="t/c", checkpoint_also=[other, gen2])
    assert other.n == 41 and torch.equal(torch.rand(3, generator=gen2), want)
    with pytest.raises(TypeError, match=r"checkpoint_also\[0\] is a dict"):
        trainer(store, checkpoint="t/c", checkpoint_also=[{}])


def test_a_checkpoint_kept_with_a_schedule_is_refused_by_a_trainer_without_one(tmp_path):
    store = Store(tmp_path / "s")
    g = built(dtype=torch.float64)
    opt = torch.optim.SGD(parameters(g), lr=0.1)
    Trainer(g, MSE, opt, schedule=torch.optim.lr_scheduler.StepLR(opt, 2), store=store, checkpoint="t/c").checkpoint()
    with pytest.raises(ValueError, match="with schedule=, and this one is without"):
        trainer(store, checkpoint="t/c")
