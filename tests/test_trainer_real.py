"""A real training loop, against a hand-written torch loop: schedules per
update, bf16/fp16 autocast with a gradient scaler, a device, mapping
batches, and steps that never wait for the device (host syncs counted)."""

import collections
import copy
import math
import os
import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode

import somatize
from somatize import Recorder, Store
from somatize.record import curve, progress
from somatize.torch import NonFiniteLoss, Trainer, _reading, parameters

from pictures import svg_markup
from torch_models import HostSyncs, batches, built

MSE = torch.nn.functional.mse_loss


def net_of(g):
    return torch.nn.Sequential(copy.deepcopy(g.node("body").net), copy.deepcopy(g.node("head").out))


def weights_equal(trainer, net, atol):
    got = trainer.export()
    want = {"body": {"net." + k: v for k, v in net[0].state_dict().items()},
            "head": {"out." + k: v for k, v in net[1].state_dict().items()}}
    for node in want:
        for k in want[node]:
            torch.testing.assert_close(got[node][k], want[node][k], atol=atol, rtol=0)


def step_lr(opt):
    return torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


# -- schedules -------------------------------------------------------------


@pytest.mark.parametrize("every, micro", [(1, 1), (2, 2), (3, 1)])
def test_a_schedule_steps_once_per_update_as_in_a_hand_written_loop(every, micro):
    g = built(dtype=torch.float64)
    net = net_of(g)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = step_lr(opt)
    data = batches(4 * every, n=16, dtype=torch.float64)
    for k in range(0, len(data), every):
        group = data[k:k + every]
        MSE(net(torch.cat([b[0] for b in group])), torch.cat([b[1] for b in group])).backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    topt = torch.optim.SGD(parameters(g), lr=0.1, momentum=0.9)
    t = Trainer(g, MSE, topt, every=every, micro=micro, schedule=step_lr(topt))
    for b in data:
        t.step(b)
    assert t.updates == 4 and t.schedule.last_epoch == 4
    assert topt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5 ** 2)
    weights_equal(t, net, atol=1e-12)


def test_a_schedule_over_another_optimizer_is_refused():
    g = built()
    other = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    with pytest.raises(ValueError, match="same one"):
        Trainer(g, MSE, torch.optim.SGD(parameters(g), lr=0.1), schedule=step_lr(other))


def test_the_learning_rate_of_each_group_is_recorded_where_the_clocks_are(tmp_path):
    g = built()
    body, head = g.node("body").parameters(), g.node("head").parameters()
    opt = torch.optim.SGD([{"params": body}, {"params": head, "lr": 0.01}], lr=0.1)
    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as rec:
        t = Trainer(g, MSE, opt, schedule=step_lr(opt), watching=rec)
        for b in batches(12, n=8):
            t.step(b)
    lr = curve(store, run="r", name="lr")
    assert list(lr)[:4] == pytest.approx([0.1, 0.1, 0.05, 0.05])  # the rate each step's update used
    assert list(curve(store, run="r", name="lr/group1"))[:4] == pytest.approx([0.01, 0.01, 0.005, 0.005])
    assert len(lr) == 10  # the first ten steps say their clocks (and every 20th: none here)
    drawn = svg_markup(progress(store, run="r", name="lr").to_html())
    assert "polyline" in drawn  # progress draws it with no extra argument


# -- mixed precision ---------------------------------------------------------


def hand_written_autocast(g, data, dtype, objective, scaled):
    net = net_of(g)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    sched = step_lr(opt)
    scaler = torch.amp.GradScaler("cpu") if scaled else None
    updates = 0
    for x, y in data:
        with torch.autocast("cpu", dtype=dtype):
            loss = objective(net(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
            skipped = False
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            before = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
            skipped = scaler.get_scale() < before
        opt.zero_grad()
        if not skipped:
            updates += 1
            sched.step()
    return net, updates, sched


@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_autocast_training_matches_the_hand_written_autocast_loop(precision, dtype):
    data = batches(8, n=32)
    g = built()
    net, updates, _ = hand_written_autocast(g, data, dtype, MSE, scaled=precision == "fp16")
    opt = torch.optim.Adam(parameters(g), lr=1e-2)
    t = Trainer(g, MSE, opt, precision=precision, schedule=step_lr(opt))
    for b in data:
        t.step(b)
    assert t.updates == updates >= 7  # fp16 may skip one, as the hand-written loop does
    assert (t.scaler is not None) == (precision == "fp16")
    weights_equal(t, net, atol=1e-6)


def test_an_update_fp16_skips_is_not_counted_and_does_not_step_the_schedule():
    huge = lambda out, y: 1e3 * MSE(out, y)  # noqa: E731  scaled by 65536, its gradients overflow fp16
    data = batches(16, n=32)
    g = built()
    net, updates, sched = hand_written_autocast(g, data, torch.float16, huge, scaled=True)
    opt = torch.optim.Adam(parameters(g), lr=1e-2)
    t = Trainer(g, huge, opt, precision="fp16", schedule=step_lr(opt))
    for b in data:
        t.step(b)
    assert 0 < t.updates == updates < 16  # some were skipped, as in the hand-written loop
    assert t.schedule.last_epoch == sched.last_epoch == updates
    weights_equal(t, net, atol=1e-6)


def test_fp16_groups_keep_one_scale_and_match_a_hand_written_accumulation_loop():
    # every=2, micro=2: four pieces a group, each loss weighted by its share,
    # scaled by the one scale of the group, unscaled once before clip.
    data = batches(8, n=32)
    g = built()
    net = net_of(g)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu")
    for k in range(0, 8, 2):
        for x, y in data[k:k + 2]:
            for xi, yi in zip(x.tensor_split(2), y.tensor_split(2)):
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = MSE(net(xi), yi)
                scaler.scale(loss * (16 / 64)).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(list(net.parameters()), 0.5)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    t = Trainer(g, MSE, torch.optim.Adam(parameters(g), lr=1e-2), every=2, micro=2, clip=0.5, precision="fp16")
    for b in data:
        t.step(b)
    assert t.updates == 4 and t.scaler.get_scale() == scaler.get_scale()
    weights_equal(t, net, atol=1e-6)


def test_precision_must_be_bf16_or_fp16():
    g = built()
    with pytest.raises(ValueError, match="'bf16', 'fp16'"):
        Trainer(g, MSE, torch.optim.SGD(parameters(g), lr=0.1), precision="half")


# -- devices and batches -------------------------------------------------------


def test_a_mapping_batch_trains_as_its_pair_with_the_keys_named():
    data = batches(4, n=16, dtype=torch.float64)
    runs = []
    for as_dict in (False, True):
        g = built(dtype=torch.float64)
        t = Trainer(g, MSE, torch.optim.Adam(parameters(g), lr=1e-2), every=2, micro=2,
                    keys=("pixels", "label") if as_dict else None, device="cpu")
        for x, y in data:
            t.step({"pixels": x, "label": y, "id": torch.arange(16)} if as_dict else (x, y))
        runs.append(t.export())
    for node in runs[0]:
        for k in runs[0][node]:
            assert torch.equal(runs[0][node][k], runs[1][node][k])


def test_a_mapping_batch_without_keys_is_refused_naming_them():
    g = built()
    t = Trainer(g, MSE, torch.optim.SGD(parameters(g), lr=0.1))
    with pytest.raises(TypeError, match=r"keys=\('input_key', 'target_key'\)"):
        t.step({"x": torch.zeros(2, 8), "y": torch.zeros(2, 1)})
    t = Trainer(g, MSE, torch.optim.SGD(parameters(g), lr=0.1), keys=("x", "label"))
    with pytest.raises(ValueError, match="no key 'label'"):
        t.step({"x": torch.zeros(2, 8), "y": torch.zeros(2, 1)})


def test_a_batch_is_moved_to_the_device_tensors_inside_tuples_lists_and_dicts_too():
    from somatize.torch._batch import moved

    class Recording(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.Tensor.to:
                self.calls.append((args[1:], kwargs))
            return func(*args, **kwargs)

    batch = {"a": torch.ones(2), "b": [torch.ones(1), (torch.ones(3), 7)], "c": "text"}
    with Recording() as mode:
        out = moved(batch, torch.device("cpu"))
    assert len(mode.calls) == 3 and all(kw == {"non_blocking": True} for _, kw in mode.calls)
    assert out["b"][1][1] == 7 and out["c"] == "text" and isinstance(out["b"][1], tuple)


def test_parameters_on_another_device_are_refused_saying_to_move_them_first():
    g = built()
    with pytest.raises(ValueError, match=r"module.to\('meta'\)"):
        Trainer(g, MSE, torch.optim.SGD(parameters(g), lr=0.1), device="meta")


# -- no host sync on the step path -----------------------------------------------


@pytest.mark.parametrize("instruments", [False, True])
def test_a_watched_step_reads_nothing_off_the_device_the_losses_are_read_in_bulk(tmp_path, monkeypatch, instruments):
    monkeypatch.setattr(_reading, "READ_AT_MOST_NS", 10**15)  # the read by time, out of the way
    g = built()
    opt = torch.optim.Adam(parameters(g), lr=1e-2)
    store = Store(tmp_path / "s")
    rec = Recorder(store, run="r")
    t = Trainer(g, MSE, opt, watching=rec, read_every=16, instruments=instruments)
    data = batches(48, n=16)
    for b in data[:8]:
        t.step(b)
    t.deliver()
    per_step = []
    with HostSyncs(opt) as syncs:
        for b in data[8:24]:  # with instruments, updates 8 and 9 are recorded (norms, outputs): read later too
            before = syncs.count
            t.step(b)
            per_step.append(syncs.count - before)
    assert per_step[:15] == [0] * 15  # the 16th step's end reads the 16 losses held
    assert per_step[15] == 1
    rec.close()
    assert len(curve(store, run="r", name="loss")) == 24
    if instruments:
        assert len(curve(store, run="r", name="grad_norm/body")) == 10


@pytest.mark.parametrize("instruments, budget", [(False, 16), (True, 19)])
def test_a_watched_step_stays_a_few_calls_of_our_own_counted_not_timed(tmp_path, instruments, budget):
    """The step's cost under a Recorder, counted where a clock would only be
    noise: every call into somatize's own Python over 64 steady steps (reads
    and the instruments' recorded updates 120 and 160 among them): the
    engine's two nodes, the Trainer's step, the facts held, the modes check.
    A new call a step must be argued for (bench/bench_step.py measures what
    it costs)."""
    root = os.path.dirname(somatize.__file__)
    g = built()
    rec = Recorder(Store(tmp_path / "s"), run="r")
    t = Trainer(g, MSE, torch.optim.Adam(parameters(g), lr=1e-2), watching=rec, instruments=instruments)
    data = batches(164, n=16)
    for b in data[:100]:
        t.step(b)
    calls = []

    def counted(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            calls.append(frame.f_code.co_name)

    sys.setprofile(counted)
    try:
        for b in data[100:164]:
            t.step(b)
    finally:
        sys.setprofile(None)
    rec.close()
    assert len(calls) / 64 <= budget, sorted(collections.Counter(calls).items(), key=lambda kv: -kv[1])[:12]
    assert len(curve(rec.root, run="r", name="loss")) == 164


def test_a_non_finite_loss_is_refused_on_the_read_naming_its_step():
    g = built(dtype=torch.float64)
    t = Trainer(g, MSE, torch.optim.SGD(parameters(g), lr=0.01), read_every=4)
    data = batches(8, n=16, dtype=torch.float64)
    x, y = data[1]
    x = x.clone()
    x[0, 0] = math.inf
    t.step(data[0])
    t.step((x, y))  # not read yet
    t.step(data[2])
    with pytest.raises(NonFiniteLoss, match=r"step 1: the loss is (nan|inf), read off the device 2 steps later"):
        t.step(data[3])
    assert t.updates == 4  # the cost of not waiting: the steps after it ran


def test_the_losses_held_are_read_by_time_too_with_the_trainers_clock_driven_here(monkeypatch):
    """read_every=32, yet a step that begins READ_AT_MOST_NS after the last
    read ends in a read: a slow run's watchers are not left 31 steps behind.
    The clock is the test's (the suite turns the read by time off: conftest)."""
    from somatize.torch import _trainer

    now = [10**12]
    monkeypatch.setattr(_trainer, "perf_counter_ns", lambda: now[0])
    monkeypatch.setattr(_reading, "READ_AT_MOST_NS", 250_000_000)
    seen = []
    g = built()
    t = Trainer(g, MSE, torch.optim.SGD(parameters(g), lr=0.01), watching=seen.append, read_every=32,
                instruments=False)
    data = batches(5, n=8)

    def losses():
        return sum(f["fact"] == "loss" for f in seen)

    t.step(data[0])
    now[0] += 249_999_999
    t.step(data[1])
    assert losses() == 0  # not due yet
    now[0] += 1
    t.step(data[2])  # began 0.25 s after the Trainer's last read (its making)
    assert losses() == 3
    t.step(data[3])
    assert losses() == 3  # the clock starts again at that read
    now[0] += 250_000_000
    t.step(data[4])
    assert losses() == 5


def test_read_every_1_reads_each_loss_as_its_step_ends():
    g = built()
    opt = torch.optim.SGD(parameters(g), lr=0.01)
    t = Trainer(g, MSE, opt, read_every=1)
    with HostSyncs(opt) as syncs:
        value = t.step(batches(1)[0])
    assert syncs.count == 1 and t.loss == value.item()


def test_a_recorder_and_a_live_panel_are_handed_what_is_held_whenever_they_look(tmp_path, monkeypatch):
    monkeypatch.setattr(_reading, "READ_AT_MOST_NS", 10**15)
    from somatize.record import Live, facts

    store = Store(tmp_path / "s")
    rec, live = Recorder(store, run="r"), Live(title="t")
    g = built()
    t = Trainer(g, MSE, torch.optim.SGD(parameters(g), lr=0.01), watching=[rec, live])
    assert t.read_every == 32  # both ask for what is held before they look
    for b in batches(5, n=8):
        t.step(b)
    assert live.snapshot()["steps"] == 5  # drawn: the steps held are handed over first
    for b in batches(2, n=8):
        t.step(b)
    assert [f["fact"] for f in facts(store, run="r", forward=6)][-1] == "trainer_us"  # queried
    t.step(batches(1, n=8)[0])
    rec.close()  # closed: the last step is written too
    assert len(curve(store, run="r", name="loss")) == 8


def test_a_plain_function_watching_sees_each_step_as_it_ends():
    seen = []
    g = built()
    t = Trainer(g, MSE, torch.optim.SGD(parameters(g), lr=0.01), watching=seen.append)
    assert t.read_every == 1
    t.step(batches(1)[0])
    assert [f["fact"] for f in seen].count("loss") == 1
