"""Panels on the Python side: Live's counts and curve, the throttle, the
static pictures, progress, spent and the graph panel, read back from real
stores written by real runs."""

import math
import re
import subprocess
import sys
import threading
from pathlib import Path

import comm
import numpy as np
import pytest
import torch
from comm.base_comm import BaseComm

import somatize.torch  # noqa: F401  (registers the tensor codec)
from somatize import Graph, Node, Recorder, Store
from somatize._pictures import _chart, _svg
from somatize.record import Live, facts, progress, spent
from somatize.record import curve as record_curve
from somatize.torch import Trainer, parameters

from pictures import SVG, curve, durations, fill_of, parse, percents, reads_as, stats, text_of
from torch_models import Body, Head


class RecordingComm(BaseComm):
    """A comm that keeps what a kernel would send to the front end, each
    message with the time the test's clock says, up to a cap: a broken
    throttle fails the test, not the machine's memory. `on_update`, when set,
    runs as a status update is sent (what another thread may do meanwhile)."""

    sent = []
    CAP = 5_000
    clock = staticmethod(lambda: None)
    on_update = None

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        if len(RecordingComm.sent) < self.CAP:
            RecordingComm.sent.append((RecordingComm.clock(), msg_type, data))
        if RecordingComm.on_update is not None and msg_type == "comm_msg":
            RecordingComm.on_update(len(status_updates(RecordingComm.sent)))


@pytest.fixture
def recorded(monkeypatch):
    RecordingComm.sent = []
    RecordingComm.clock = staticmethod(lambda: None)
    RecordingComm.on_update = None
    monkeypatch.setattr(comm, "create_comm", RecordingComm)  # comm's own hook for a kernel's comm
    return RecordingComm


def status_updates(sent):
    return [
        (t, data["state"]["status"])
        for t, kind, data in sent
        if kind == "comm_msg" and data.get("method") == "update" and "status" in data.get("state", {})
    ]


class FakeTime:
    """A clock and timers that move only when the test says so: `clock()` is
    `now`, and a timer fires when `advance_to` passes its moment."""

    def __init__(self):
        self.now = 0.0
        self.pending = []  # [when, fn]

    def clock(self):
        return self.now

    def timer(self, wait, fn):
        fake = self

        class Timer:
            def start(self):
                fake.pending.append((fake.now + wait, fn))

        return Timer()

    def advance_to(self, t):
        while due := [p for p in self.pending if p[0] <= t]:
            first = min(due, key=lambda p: p[0])
            self.pending.remove(first)
            self.now = max(self.now, first[0])
            first[1]()
        self.now = t


class JoinableTimer(threading.Timer):
    """The default timer, remembered so that a test can wait for every one
    (however long each takes) instead of sleeping."""

    made = []

    def __init__(self, *args):
        super().__init__(*args)
        JoinableTimer.made.append(self)

    @classmethod
    def join_all(cls):
        while cls.made:
            cls.made.pop(0).join(60)  # a guard against a hang, not a measurement


def displayed_live(recorded, fake=None, **kw):
    live = Live(clock=fake.clock, timer=fake.timer, **kw) if fake else Live(timer=JoinableTimer, **kw)
    if fake:
        recorded.clock = fake.clock
    live._repr_mimebundle_()  # displayed: from now on it sends
    return live


def trained(tmp_path, steps=300, watching=()):
    torch.manual_seed(0)
    g = Graph.somatize(Body().named("body") >> Head().named("head"))
    store = Store(tmp_path / "store")
    recorder = Recorder(store, run="a-run", summarising=["loss"])
    trainer = Trainer(g, objective=torch.nn.functional.mse_loss,
                      optimizer=torch.optim.Adam(parameters(g), lr=1e-2), watching=[recorder, *watching])
    truth = torch.randn(8, 1)
    losses = []
    for _ in range(steps):
        x = torch.randn(16, 8)
        losses.append(trainer.step((x, x @ truth)).item())  # a 0-d tensor: read it
    recorder.close()
    return g, store, losses


def feed(live, losses):
    for v in losses:
        live.forward_began()
        live({"fact": "ran", "node": "body", "began_us": 1, "took_us": 3})
        live({"fact": "finished", "took_us": 5})
        live({"fact": "updated"})
        live({"fact": "loss", "value": v})


# --- Live -----------------------------------------------------------------------


def test_live_counts_a_real_run(tmp_path):
    live = Live(title="training")
    _, _, losses = trained(tmp_path, steps=300, watching=[live])
    live.end()
    snap = live.snapshot()
    assert (snap["steps"], snap["forwards"], snap["updates"]) == (300, 300, 300)
    assert snap["last"] == pytest.approx(losses[-1])
    assert snap["best"] == pytest.approx(min(losses))
    assert snap["state"] == "finished"
    # 300 steps fit the curve unbucketed: every loss is there, in order.
    assert [p[1] for p in snap["curve"]] == pytest.approx(losses)


def test_a_displayed_live_beside_a_recorder_takes_a_trainer_s_held_facts_without_locking_itself(tmp_path):
    """The Trainer holds its steps' facts and reads them in bulk; a displayed
    Live sends from inside that replay, and sending asked the Trainer for what
    it holds, under the throttle's lock: the replay came back into the lock and
    a notebook's training cell hung forever (notebook 03, in a kernel). Every
    poke sends here (the clock moves a second a call)."""
    class Ticking:
        now = 0.0

        def clock(self):
            self.now += 1.0
            return self.now

    ticking = Ticking()
    live = Live(clock=ticking.clock, timer=FakeTime().timer)
    live._repr_mimebundle_()  # displayed: from now on it sends
    sent = []
    live._view.observe(lambda change: sent.append(change["new"]["steps"]), ["status"])
    store = Store(tmp_path / "store")

    def train():  # all of it on one thread: a Trainer hands over what it holds to its own thread's asks
        torch.manual_seed(0)
        g = Graph.somatize(Body().named("body") >> Head().named("head"))
        recorder = Recorder(store, run="a-run")
        trainer = Trainer(g, objective=torch.nn.functional.mse_loss,
                          optimizer=torch.optim.Adam(parameters(g), lr=1e-2), watching=[recorder, live])
        for _ in range(70):  # past two bulk reads (every 32 steps)
            trainer.step((torch.randn(16, 8), torch.randn(16, 1)))
        live.end()
        recorder.close()

    worker = threading.Thread(target=train, daemon=True)
    worker.start()
    worker.join(120)  # a guard against the hang this test is about, not a measurement
    assert not worker.is_alive(), "training with a displayed Live hung"
    assert (live.steps, live.state) == (70, "finished")
    assert sent[-1] == 70 and sent == sorted(sent)  # each picture sent holds every step read, in order
    assert len(record_curve(store, run="a-run")) == 70  # the Recorder took every loss once, none twice


def test_live_speaks_of_a_run_in_the_record_s_words():
    """A run's state is one vocabulary: Live's is the record's (a run a
    raised error ended is interrupted, with its cause), and sending a
    picture is send(), never flush() (a Recorder's word for durable)."""
    from somatize.record._summary import STATES

    live = Live()
    feed(live, [1.0, 0.5])
    assert live.state == "running" and live.state in STATES
    live.end(RuntimeError("boom"))
    assert (live.state, live.cause) == ("interrupted", "RuntimeError")
    assert live.snapshot()["state"] in STATES and live.snapshot()["cause"] == "RuntimeError"
    assert "interrupted (RuntimeError)" in text_of(parse(live.to_html()))
    assert callable(live.send) and not hasattr(live, "flush")


def test_live_curve_stays_bounded_and_keeps_the_mean():
    values = [math.sin(i / 50) + 2 for i in range(1_000_003)]
    live = Live()
    for v in values:
        live({"fact": "loss", "value": v})
    snap = live.snapshot()
    pts, stride = snap["curve"], snap["stride"]
    assert len(pts) <= 513 and stride > 1  # a million steps, sent as at most 512 buckets and the open one
    # Oracle: each closed bucket is the plain mean, min and max of its stride of steps, at its middle step.
    closed = len(values) // stride
    arr = np.array(values[: closed * stride]).reshape(-1, stride)
    steps, mean, lo, hi = np.array(pts[:closed]).T
    assert np.allclose(mean, arr.mean(axis=1)) and np.allclose(lo, arr.min(axis=1)) and np.allclose(hi, arr.max(axis=1))
    assert np.allclose(steps, np.arange(closed * stride).reshape(-1, stride).mean(axis=1))  # from 0
    rest = values[closed * stride:]
    assert pts[closed:] == [pytest.approx((closed * stride + (len(rest) - 1) / 2, np.mean(rest), min(rest), max(rest)))]


def test_live_ignores_nonfinite_losses_for_best_and_picture():
    live = Live()
    feed(live, [3.0, float("nan"), 2.0, float("inf")])
    snap = live.snapshot()
    assert snap["best"] == 2.0 and snap["last"] is None and snap["steps"] == 4
    parse(live.to_html())


def loss_at(fake, live, t, value):
    """The clock reads `t` when Live is handed a loss."""
    fake.advance_to(t)
    live({"fact": "loss", "value": value})


def test_throttle_sends_at_most_ten_a_second_each_with_the_state_of_its_moment(recorded):
    fake = FakeTime()
    live = displayed_live(recorded, fake)
    for k in range(100):  # a step every 10 ms, between the tenths of a second
        fake.advance_to(0.005 + 0.01 * k)
        feed(live, [1.0 / (k + 1)])
    fake.advance_to(5.0)
    updates = status_updates(recorded.sent)
    # the display sent its state at 0 s; each fact after waits for the next tenth
    assert [t for t, _ in updates] == pytest.approx([0.1 * i for i in range(1, 11)])
    assert [(u["steps"], u["last"]) for _, u in updates] == [(10 * i, 1.0 / (10 * i)) for i in range(1, 11)]
    assert updates[-1][1] == live.snapshot()
    live.end()
    ended = status_updates(recorded.sent)
    assert len(ended) == 11 and ended[-1][1]["state"] == "finished" and ended[-1][1] == live.snapshot()


def test_throttle_a_burst_of_a_million_facts_is_one_send(recorded):
    fake = FakeTime()
    live = displayed_live(recorded, fake)
    fake.advance_to(0.05)
    feed(live, (1.0 / (i + 1) for i in range(200_000)))  # 5 facts a step: 1M facts in one instant
    assert status_updates(recorded.sent) == []  # held back: the display sent 50 ms ago
    fake.advance_to(1.0)
    (update,) = status_updates(recorded.sent)
    assert update[0] == pytest.approx(0.1) and update[1]["steps"] == 200_000 and update[1] == live.snapshot()


def test_a_fact_after_a_quiet_interval_is_sent_at_once(recorded):
    fake = FakeTime()
    live = displayed_live(recorded, fake)
    loss_at(fake, live, 1.0, 5.0)
    assert [u["last"] for _, u in status_updates(recorded.sent)] == [5.0] and fake.pending == []


def test_the_last_state_arrives_without_another_fact(recorded):
    fake = FakeTime()
    live = displayed_live(recorded, fake)
    loss_at(fake, live, 1.0, 5.0)  # sent at once
    loss_at(fake, live, 1.05, 4.0)  # within the interval: held back, a timer armed
    assert [u["last"] for _, u in status_updates(recorded.sent)] == [5.0]
    fake.advance_to(2.0)  # no more facts: the timer sends it
    assert [(t, u["last"]) for t, u in status_updates(recorded.sent)] == [(1.0, 5.0), (pytest.approx(1.1), 4.0)]


def test_a_fact_that_slips_in_while_the_timer_sends_is_sent_after(recorded):
    fake = FakeTime()
    live = displayed_live(recorded, fake)
    loss_at(fake, live, 0.5, 5.0)  # sent at once
    loss_at(fake, live, 0.55, 4.0)  # within the interval: a timer is armed
    # the timer's send, the second update: the training thread hands over a fact meanwhile
    recorded.on_update = lambda n: live({"fact": "loss", "value": 3.0}) if n == 2 else None
    fake.advance_to(5.0)  # no more facts from here: only a re-armed timer can send 3.0
    updates = status_updates(recorded.sent)
    assert [(t, u["last"]) for t, u in updates] == [(0.5, 5.0), (pytest.approx(0.6), 4.0), (pytest.approx(0.7), 3.0)]
    assert updates[-1][1] == live.snapshot()


def test_the_real_timer_sends_the_last_state(recorded):
    live = displayed_live(recorded)  # the real clock and threading timers
    feed(live, [5.0])
    feed(live, [4.0])
    JoinableTimer.join_all()  # however slow the machine, once every timer has run
    assert status_updates(recorded.sent)[-1][1] == live.snapshot() and live.snapshot()["last"] == 4.0


def test_facts_from_another_thread_still_end_in_the_final_state(recorded):
    live = displayed_live(recorded)
    worker = threading.Thread(target=feed, args=(live, [float(v) for v in range(50_000, 0, -1)]))
    worker.start()
    worker.join(120)  # a guard against a hang (the panel's lock), not a measurement
    assert not worker.is_alive(), "the thread feeding the panel still ran after 120 s: it hung"
    JoinableTimer.join_all()
    assert status_updates(recorded.sent)[-1][1] == live.snapshot() and live.snapshot()["steps"] == 50_000


@pytest.mark.parametrize("losses, log", [
    ([1.0 / (i + 1) for i in range(300)], True),  # spans more than two decades: a log axis
    ([2.0 + math.sin(i / 20) for i in range(300)], False),
])
def test_a_300_step_live_picture_shows_its_numbers_and_curve(losses, log):
    fake = FakeTime()
    live = Live(title="t", clock=fake.clock, timer=fake.timer)
    for i, v in enumerate(losses):
        fake.advance_to(0.01 * i)
        feed(live, [v])
    root = parse(live.to_html())
    shown = stats(root)
    assert reads_as(shown["steps"], 300) and shown["steps"] == "300"
    # a loss to four significant digits: enough to see it still falling
    assert reads_as(shown["last loss"], losses[-1], 4) and reads_as(shown["best loss"], min(losses), 4)
    assert reads_as(shown["steps/s"], 300 / 2.99)  # the clock said 2.99 s from the first forward to the last
    assert durations(shown["elapsed"]) == pytest.approx([2.99e6], abs=0.05e6)
    svg = root.find(f"{SVG}svg")
    assert ("loss (log scale)" if log else "loss") in [text_of(t) for t in svg.iter(f"{SVG}text")]
    read, (dx, dy) = curve(svg, log=log)
    assert len(read) == 300
    for step, ((x, y), v) in enumerate(zip(read, losses)):  # every step where it belongs, at its loss
        assert abs(x - step) <= dx
        assert abs(math.log10(y) - math.log10(v)) <= dy if log else abs(y - v) <= dy


def test_live_bundle_carries_widget_and_static_picture(tmp_path):
    live = Live(title="pic")
    trained(tmp_path, steps=40, watching=[live])
    live.end()
    bundle = live._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    root = parse(bundle["text/html"])
    curve = root.find(f".//{SVG}polyline[@class='curve']")
    assert len(curve.get("points").split()) == 40
    text = "".join(root.itertext())
    assert "finished" in text and "pic" in text and "step" in text and "loss" in text


# --- progress --------------------------------------------------------------------


def recorded_losses(tmp_path, losses, run="r", store=None):
    """A store whose run `run` has one forward and one loss a step."""
    store = store or Store(tmp_path / "s")
    with Recorder(store, run=run) as rec:
        for v in losses:
            rec.forward_began()
            rec({"fact": "finished", "took_us": 1})
            rec({"fact": "loss", "value": v})
    return store


def ema(values, weight):
    """The oracle: each point the mean of all before it, weighted weight**age."""
    out, acc, norm = [], 0.0, 0.0
    for v in values:
        acc, norm = weight * acc + v, weight * norm + 1
        out.append(acc / norm)
    return np.array(out)


LONG = np.arange(10_000, dtype=float) ** 0.5 + np.sin(np.arange(10_000))


def sent_line(view, i=0):
    """(steps, values) of the i-th line the panel is sent."""
    pts = np.array(view.chart["series"][i]["points"])
    return pts[:, 0], pts[:, 1]


def test_a_long_curve_is_drawn_as_bucket_means_at_their_mean_step(tmp_path):
    x, y = sent_line(progress(recorded_losses(tmp_path, LONG), run="r").widget())
    # at most 2000 points sent: ten thousand steps in buckets of five, steps from 0
    assert np.allclose(y, LONG.reshape(2000, 5).mean(axis=1))
    assert np.allclose(x, np.arange(10_000).reshape(2000, 5).mean(axis=1))


def test_smoothing_is_applied_to_every_step_before_the_curve_is_thinned(tmp_path):
    view = progress(recorded_losses(tmp_path, LONG), run="r").widget()
    view.smoothing = 0.9
    assert np.allclose(sent_line(view)[1], ema(LONG, 0.9).reshape(2000, 5).mean(axis=1))
    raw = np.array(view.chart["series"][0]["raw"])[:, 1]  # the raw trace, faded behind
    assert np.allclose(raw, LONG.reshape(2000, 5).mean(axis=1))
    view.smoothing = 0.0
    assert np.allclose(sent_line(view)[1], LONG.reshape(2000, 5).mean(axis=1))
    assert view.chart["series"][0]["raw"] == []


def test_smoothing_keeps_a_constant_and_lags_a_step(tmp_path):
    losses = np.r_[np.full(10, 3.0), np.full(10, 4.0)]
    view = progress(recorded_losses(tmp_path, losses), run="r").widget()
    view.smoothing = 0.5
    y = sent_line(view)[1]
    assert np.allclose(y[:10], 3.0)  # debiased: the first points are not pulled towards 0
    assert 3 < y[10] < 4 and y[-1] == pytest.approx(4, abs=1e-3)
    assert np.allclose(y, ema(losses, 0.5))


def two_runs(tmp_path):
    store = Store(tmp_path / "s")
    for run, scale in (("small", 1.0), ("big", 10.0)):
        recorded_losses(tmp_path, [scale / (i + 1) for i in range(30)], run=run, store=store)
    return store


def test_progress_overlays_runs_with_a_legend(tmp_path):
    p = progress(two_runs(tmp_path), run=["small", "big"])
    series = p.widget().chart["series"]
    assert [s["name"] for s in series] == ["small", "big"] and series[0]["color"] != series[1]["color"]
    assert p.colors == {"small": series[0]["color"], "big": series[1]["color"]}  # one colour a run, one place
    root = parse(p._repr_mimebundle_()["text/html"])
    assert len(root.findall(f".//{SVG}polyline")) == 2
    legend = "".join(root.itertext())
    assert "small" in legend and "big" in legend


def test_progress_steps_count_from_zero_as_live_and_forwards_do(tmp_path):
    p = progress(two_runs(tmp_path), run="small")
    live = Live()
    feed(live, [1.0 / (i + 1) for i in range(30)])
    x, y = sent_line(p.widget())
    assert list(x) == [pt[0] for pt in live.snapshot()["curve"]] == list(range(30))
    assert list(y) == pytest.approx([pt[1] for pt in live.snapshot()["curve"]])


def test_progress_counts_steps_not_forwards_when_a_step_runs_several(tmp_path):
    store = Store(tmp_path / "s")
    with Recorder(store, run="micro") as rec:  # micro=4: four forwards, then the step's loss
        for step in range(5):
            for _ in range(4):
                rec.forward_began()
                rec({"fact": "finished", "took_us": 1})
            rec({"fact": "loss", "value": 1.0 / (step + 1)})
    assert list(sent_line(progress(store, run="micro").widget())[0]) == [0, 1, 2, 3, 4]


def axis_reads(p):
    """The static picture's curve read back through its own tick labels, and
    (dx, dy): what a pixel is worth. The axis describes the line when this
    reading gives the data back."""
    root = parse(p.to_html())
    return curve(root.find(f".//{SVG}svg"), log=p.chart()["log"])


@pytest.mark.parametrize("log", [True, False, True])
def test_progress_axis_describes_the_line_after_the_scale_toggles(tmp_path, log):
    """Switched to linear the ticks are linear; back to log they are decades again (issue 9, item 1)."""
    losses = [1.0 / (i + 1) for i in range(30)]
    p = progress(recorded_losses(tmp_path, losses), run="r")  # 1 down to 1/30: starts linear
    view = p.widget()
    view.log = log
    assert view.chart["log"] is log
    ticks_ = [t for t, _ in view.chart["yticks"]]
    if log:
        assert all(t > 0 for t in ticks_) and len(ticks_) >= 3
    else:  # evenly spaced on a linear axis
        assert len(set(np.round(np.diff(ticks_), 9))) == 1
    read, (dx, dy) = axis_reads(p)
    for (x, y), v, step in zip(read, losses, range(30)):
        assert abs(x - step) <= dx
        assert abs(math.log10(y) - math.log10(v)) <= dy if log else abs(y - v) <= dy


def test_progress_starts_in_log_scale_when_the_loss_spans_decades(tmp_path):
    store = recorded_losses(tmp_path, [10.0 ** (-i / 100) for i in range(300)])
    view = progress(store, run="r").widget()
    assert view.chart["log"] and view.log is None  # chosen from the data until the reader picks


def test_progress_smoothing_redraws_every_run(tmp_path):
    view = progress(two_runs(tmp_path), run=["small", "big"]).widget()
    view.smoothing = 0.9
    for i, scale in enumerate((1.0, 10.0)):
        assert np.allclose(sent_line(view, i)[1], ema([scale / (i + 1) for i in range(30)], 0.9))
    view.smoothing = 0.0
    assert np.allclose(sent_line(view, 1)[1], [10.0 / (i + 1) for i in range(30)])


def test_progress_zoom_fits_both_axes_to_the_window_and_reset_shows_all(tmp_path):
    losses = [100.0] * 5 + [1.0 + 0.01 * i for i in range(95)]
    p = progress(recorded_losses(tmp_path, losses), run="r")
    view = p.widget()
    view.log = False
    view.window = [40, 60]
    x0, x1 = view.chart["x"]
    assert (x0, x1) == (40, 60) and all(40 <= t <= 60 for t, _ in view.chart["xticks"])
    lo, hi = view.chart["y"]  # fitted to the steps shown: 1.35..1.55, not 1..100
    assert lo > 1.3 and hi < 1.6
    read, (dx, dy) = axis_reads(p)  # the picture of the window reads back as the data
    inside = [(x, y) for x, y in read if 40 - dx <= x <= 60 + dx]
    assert inside and all(abs(y - losses[round(x)]) <= dy for x, y in inside)
    view.window = []
    assert view.chart["x"] == [0, 99]


def test_progress_ignoring_outliers_leaves_a_spike_out_of_the_y_range(tmp_path):
    losses = [1.0 + 0.001 * i for i in range(200)]
    losses[50] = 1e6
    view = progress(recorded_losses(tmp_path, losses), run="r").widget()
    assert view.chart["log"]  # the spike spans decades
    view.log, view.outliers = False, True
    lo, hi = view.chart["y"]
    assert hi < 2 and lo > 0.9


def test_step_ticks_are_whole_numbers_at_any_length():
    for n in (2, 3, 7, 12, 300, 10_001):
        data = _chart.chart([{"name": "l", "color": "c", "points": [(i, 1.0 + i) for i in range(n)]}], log=False)
        steps = [t for t, _ in data["xticks"]]
        assert len(steps) >= 2 and all(float(t).is_integer() for t in steps), (n, steps)


def test_log_ticks_are_few_inside_the_range_and_evenly_spread_on_the_axis():
    """No gap on a log axis much wider than another (1-5 ticks left gaps of
    0.3 and 0.7 decade), at most MAX_TICKS, all inside the range, every decade
    crossed by at least one label once the range spans three."""
    rng = np.random.default_rng(0)
    spans = [(0.002, 3.0), (0.03, 2.4), (0.07, 90.0), (1.0, 500.0), (3e-7, 2e-3), (0.5, 1.2), (3e-13, 5e-13),
             (1e300, 1.7e308), (1e-320, 5e-320)]
    spans += [tuple(sorted(10.0 ** rng.uniform(-300, 300, 2))) for _ in range(300)]
    spans += [(v, v * rng.uniform(1.05, 30)) for v in 10.0 ** rng.uniform(-300, 300, 300)]
    for lo, hi in spans:
        got = _chart.log_ticks(lo, hi)
        assert 2 <= len(got) <= _chart.MAX_TICKS and all(lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9) for t in got)
        gaps = np.diff(np.log10(got))
        assert gaps.max() <= 1.5 * gaps.min(), (lo, hi, got)
        if 3 <= math.log10(hi) - math.log10(lo) < 7:  # up to seven decades: a label in each one the range covers
            whole = range(math.ceil(math.log10(lo)), math.floor(math.log10(hi)))
            assert all(any(10.0**k <= t < 10.0 ** (k + 1) * (1 - 1e-9) for t in got) for k in whole), (lo, hi, got)


@pytest.mark.parametrize("lo, hi, log", [(1000.1, 1000.2, False), (2e-13, 2.08e-13, True), (5e6, 5e6 + 3, False)])
def test_no_two_ticks_of_an_axis_read_the_same(lo, hi, log):
    data = _chart.chart([{"name": "l", "color": "c", "points": [(0, lo), (1, hi)]}], log=log)
    labels = [label for _, label in data["yticks"]]
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    # and each reads as its value, to a hundredth of the gap to the next
    gap = data["yticks"][1][0] - data["yticks"][0][0]
    assert all(abs(float(label.replace(",", "")) - t) <= gap / 100 for t, label in data["yticks"]), labels


def test_a_log_axis_near_the_largest_float_is_drawn():
    # padded by 5%, the range of a loss near 1.5e308 runs past what a float holds
    data = _chart.chart([{"name": "l", "color": "c", "points": [(0, 1e300), (1, 1e307), (2, 1.5e308)]}], log=True)
    assert [label for _, label in data["yticks"]][-1] == "1e308"


def test_a_diverging_log_axis_keeps_its_labels_few_and_apart():
    """21 decades are not 21 labels on top of each other (issue 9, item 6)."""
    data = _chart.chart([{"name": "l", "color": "c", "points": [(i, 10.0 ** (i - 3)) for i in range(22)]}], log=True)
    values = [t for t, _ in data["yticks"]]
    assert 3 <= len(values) <= _chart.MAX_TICKS
    gaps = np.diff(np.log10(values))
    assert len(set(np.round(gaps, 9))) == 1  # evenly spaced decades


# --- spent ------------------------------------------------------------------------


class Step(Node):
    def forward(self, x, ctx):
        return (sum(x) if isinstance(x, tuple) else x) + 1


def twenty_graph():
    """Twenty nodes with branches; one is named "slow"."""
    nodes = [Step().named(f"n{i:02d}") for i in range(19)]
    expr = nodes[0] >> [nodes[1] >> nodes[2], nodes[3] >> Step().named("slow"), nodes[4]] >> nodes[5]
    for n in nodes[6:]:
        expr = expr >> n
    return Graph.somatize(expr)


SLOW_US, FAST_US, ENGINE_US = 3000, 30, 200


def took(name, i, forward):
    """The chosen time of node `i` (in run order) in `forward`: all different, "slow" a hundred times the rest."""
    return (SLOW_US if name == "slow" else FAST_US) + i + 7 * forward


def twenty(tmp_path, forwards=5):
    """The twenty-node graph and a record of `forwards` forwards of it, made
    of the facts an engine hands a Recorder, with chosen times (no clock)."""
    g = twenty_graph()
    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as rec:
        for f in range(forwards):
            rec.forward_began()
            at = 0
            for i, node in enumerate(g.nodes):
                rec({"fact": "ran", "node": node.name, "began_us": at, "took_us": took(node.name, i, f)})
                at += took(node.name, i, f)
            rec({"fact": "finished", "took_us": at + ENGINE_US})
    return g, store


def test_spent_makes_the_slow_node_of_twenty_obvious(tmp_path):
    g, store = twenty(tmp_path)
    s = spent(store, run="r")
    assert s.slowest == "slow" and s.rows[0]["label"] == "slow"
    assert sum(r["kind"] == "node" for r in s.rows) == 20
    root = parse(s._repr_mimebundle_()["text/html"])
    bars = root.findall(f".//{SVG}rect[@class='bar']")
    assert len(bars) == 21  # twenty nodes and the engine
    fills = [fill_of(b) for b in bars if b.get("data-kind") == "node"]
    assert [b.get("data-node") for b in bars if fills.count(fill_of(b)) == 1] == ["slow"]  # one colour of its own
    spans = root.findall(f".//{SVG}rect[@class='span']")
    assert len(spans) == 20


def test_spent_totals_and_means_are_the_records_own(tmp_path):
    g, store = twenty(tmp_path, forwards=6)
    said = facts(store, run="r")
    oracle = {}
    for f in said:
        if f["fact"] == "ran":
            oracle[f["node"]] = oracle.get(f["node"], 0) + f["took_us"]
    finished = sum(f["took_us"] for f in said if f["fact"] == "finished")
    rows = {r["label"]: r for r in spent(store, run="r").rows}
    for name, total in oracle.items():
        assert rows[name]["total_us"] == total and rows[name]["mean_us"] == pytest.approx(total / 6)
    engine = rows["engine (outside nodes)"]
    assert engine["kind"] == "engine" and engine["total_us"] == finished - sum(oracle.values())
    assert sum(r["share"] for r in rows.values()) == pytest.approx(1.0)


def test_spent_bars_say_the_records_numbers(tmp_path):
    g, store = twenty(tmp_path, forwards=3)
    rows = {r["label"]: r for r in spent(store, run="r").rows}
    svg = parse(spent(store, run="r").to_html()).find(f".//{SVG}svg")
    items = list(svg)
    bars = [(i, e) for i, e in enumerate(items) if e.get("class") == "bar"]
    assert len(bars) == 21
    for i, bar in bars:  # label left of the bar, its numbers right of it
        row = rows[text_of(items[i - 1])]
        said = text_of(items[i + 1])
        assert durations(said) == pytest.approx([row["total_us"], row["mean_us"]], rel=0.005)
        assert percents(said) == pytest.approx([row["share"]], abs=0.005)
        tip = text_of(bar.find(f"{SVG}title"))
        assert durations(tip) == pytest.approx([row["total_us"], row["mean_us"]], rel=0.005)
    widths = {e.get("data-node"): float(e.get("width")) for _, e in bars}
    per_us = widths["slow"] / rows["slow"]["total_us"]  # the longest bar
    assert all(w == pytest.approx(max(1.0, rows[n]["total_us"] * per_us), abs=0.1) for n, w in widths.items())


def test_a_nodes_max_is_its_slowest_run_not_its_cache_write(tmp_path):
    from somatize.record import nodes

    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as rec:
        for took_us in (10, 40):
            rec.forward_began()
            rec({"fact": "ran", "node": "body", "began_us": 0, "took_us": took_us})
            rec({"fact": "kept", "node": "body", "took_us": 500})  # writing its output to the cache
            rec({"fact": "finished", "took_us": 600})
        rec.forward_began()
        rec({"fact": "recalled", "node": "body", "began_us": 0, "took_us": 30})
        rec({"fact": "finished", "took_us": 35})
    (row,) = nodes(store, run="r").to_dict("records")
    assert (row["ran"], row["recalled"], row["kept"], row["max_us"]) == (2, 1, 2, 40)
    assert row["total_us"] == 10 + 40 + 30 + 2 * 500  # the cache writes are the node's time too
    (bar,) = [r for r in spent(store, run="r").rows if r["kind"] == "node"]
    assert bar["total_us"] == row["total_us"] and bar["count"] == 3


def test_spent_shows_the_trainers_own_time_as_a_grey_bar(tmp_path):
    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as rec:
        for i in range(4):  # the facts a Trainer step leaves, its own time last
            rec.forward_began()
            rec({"fact": "ran", "node": "body", "began_us": 1, "took_us": 50})
            rec({"fact": "finished", "took_us": 60})
            rec({"fact": "loss", "value": 1.0})
            rec({"fact": "trainer_us", "value": 100 * (i + 1)})
    s = spent(store, run="r")
    trainer = next(r for r in s.rows if r["kind"] == "trainer")
    assert (trainer["total_us"], trainer["mean_us"], trainer["count"]) == (1000, 250, 4)
    assert s.rows[0] is trainer and s.slowest == "body"  # the longest bar, yet not a node
    root = parse(s.to_html())
    fill = {b.get("data-kind"): fill_of(b) for b in root.iter(f"{SVG}rect") if b.get("class") == "bar"}
    assert fill["trainer"] == fill["engine"] != fill["node"]  # grey: time outside the nodes
    assert "Trainer" in text_of(root)


def test_spent_timeline_is_the_last_forward_in_order(tmp_path):
    g, store = twenty(tmp_path, forwards=3)
    s = spent(store, run="r")
    ran = [f for f in facts(store, run="r", forward=2) if f["fact"] == "ran"]
    assert s.timeline["forward"] == 2
    assert [(x["node"], x["began_us"], x["took_us"]) for x in s.timeline["spans"]] == \
        [(f["node"], f["began_us"], f["took_us"]) for f in ran]
    xs = [float(r.get("x")) for r in parse(s.to_html()).findall(f".//{SVG}rect[@class='span']")]
    assert xs == sorted(xs)  # drawn left to right as they ran
    assert spent(store, run="r", forward=0).timeline["forward"] == 0


def test_spent_on_the_graph_marks_the_slow_node_with_the_records_times(tmp_path):
    g, store = twenty(tmp_path)
    s = spent(store, run="r", graph=g)
    root = parse(s.to_html())
    nodes = {e.get("data-node"): e for e in root.iter(f"{SVG}g") if e.get("data-node")}
    assert len(nodes) == 22  # twenty nodes, the input and the output
    assert [k for k, e in nodes.items() if "slowest" in e.get("class")] == ["slow"]
    rows = {r["label"]: r for r in s.rows}
    last = {f["node"]: f["took_us"] for f in facts(store, run="r", forward=4) if f["fact"] == "ran"}
    widths = {}
    for name, e in nodes.items():
        if name in ("input", "output"):
            continue
        # what a reader reads on the node and in its hover text, against the record
        (mean,), (share,) = durations(text_of(e.find(f"{SVG}text[@class='timing']"))), \
            percents(text_of(e.find(f"{SVG}text[@class='timing']")))
        assert mean == pytest.approx(rows[name]["mean_us"], rel=0.005)
        assert share == pytest.approx(rows[name]["share"], abs=0.005)
        tip = e.find(f"{SVG}title").text
        assert durations(tip) == pytest.approx([rows[name]["mean_us"], last[name]], rel=0.005)
        assert "in forward 4" in tip
        widths[name] = float(e.find(f"{SVG}rect[@class='share']").get("width"))
    assert max(widths, key=widths.get) == "slow"
    # the bar along a node's foot is its share of the run
    per_share = widths["slow"] / rows["slow"]["share"]
    assert all(w == pytest.approx(max(1.5, rows[n]["share"] * per_share), abs=0.1) for n, w in widths.items())


def test_the_graph_panel_counts_a_nodes_calls_under_the_key_its_front_end_reads(tmp_path):
    """A node's timing carries its calls (ran + recalled) as "calls", the key graph.js reads."""
    from somatize._widgets._spent import spent_data, timings
    from somatize.record import nodes

    g, store = twenty(tmp_path)
    table = nodes(store, run="r")
    t = timings(spent_data(store, "r"))
    assert {n: v["calls"] for n, v in t.items()} == {str(n): int(c) for n, c in zip(table["node"], table["calls"])}
    js = (Path(__file__).resolve().parents[1] / "js" / "widgets" / "graph.js").read_text()
    assert "t.calls" in js and "t.runs" not in js


def test_panels_read_without_importing_jupyter(tmp_path):
    g, store = twenty(tmp_path, forwards=2)
    code = (
        "import sys\n"
        "from somatize.record import Live, facts, progress, spent\n"
        f"s = spent({str(store.path)!r}, run='r')\n"
        "assert s.slowest == 'slow' and 'slow' in s.to_html()\n"
        "Live().to_html()\n"
        "print(sorted(m for m in ('anywidget', 'ipywidgets', 'bqplot', 'IPython') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- the graph panel -------------------------------------------------------------


class Plus(Node):
    def forward(self, x, ctx):
        return x


def drawn(g):
    """The graph's picture as a reader sees it: each node's box (x, y, w, h)
    and each edge's path, as [(command, [points])]."""
    root = parse(g._repr_mimebundle_()["text/html"])
    boxes = {e.get("data-node"): tuple(float(e.find(f"{SVG}rect").get(k)) for k in ("x", "y", "width", "height"))
             for e in root.iter(f"{SVG}g") if e.get("data-node")}
    edges = {(p.get("data-from"), p.get("data-to")):
             [(cmd, [tuple(map(float, xy.split(","))) for xy in args.split()])
              for cmd, args in re.findall(r"([MCL])([^MCL]*)", p.get("d"))]
             for p in root.iter(f"{SVG}path") if p.get("class") == "edge"}
    return root, boxes, edges


def test_graph_layout_points_every_edge_down_and_never_overlaps():
    a, b = Plus().named("a"), Plus().named("b")
    branches = [Plus().named(f"m{i}") >> Plus().named(f"k{i}") for i in range(4)]
    g = Graph.somatize(a >> branches >> b >> Plus().frozen().named("tail"))
    root, boxes, edges = drawn(g)
    assert set(edges) == {*g.edges, *((o, "output") for o in g.outputs), ("input", "a")}
    # every edge leaves the foot of one box and enters the top of a lower one
    for (src, dst), path in edges.items():
        (x1, y1), (x2, y2) = path[0][1][0], path[-1][1][-1]
        sx, sy, sw, sh = boxes[src]
        dx, dy, dw, _ = boxes[dst]
        assert (x1, y1) == (sx + sw / 2, sy + sh) and x2 == dx + dw / 2 and sy + sh < y2 < dy
    placed = list(boxes.values())
    for i, (x1, y1, w1, h1) in enumerate(placed):
        for x2, y2, _, h2 in placed[i + 1:]:
            assert abs(x1 - x2) >= w1 or y1 + h1 <= y2 or y2 + h2 <= y1
    assert root.find(f".//{SVG}g[@data-node='tail']/{SVG}rect[@class='badge-frozen']") is not None


def test_an_edge_that_skips_layers_runs_beside_the_nodes_it_passes():
    a, b, c = Plus().named("a"), Plus().named("b"), Plus().named("c")
    g = Graph.somatize(a >> [b >> c >> Plus().named("d"), Plus().named("short")] >> Plus().named("join"))
    _, boxes, edges = drawn(g)
    path = edges[("short", "join")]
    straight = [(path[i - 1][1][-1], pts[0]) for i, (cmd, pts) in enumerate(path) if cmd == "L"]
    assert len(straight) == 2  # "short" feeds "join" two layers further down: straight through both
    for (vx, top), (vx2, foot) in straight:
        assert vx == vx2 and foot > top
        for name, (x, y, w, h) in boxes.items():
            beside = vx < x or vx > x + w
            apart = foot <= y or top >= y + h
            assert beside or apart, f"the edge short -> join passes behind {name}"


def test_displaying_a_graph_shows_nodes_edges_and_badges():
    g = Graph.somatize(Body().named("body").frozen() >> Head().named("head"))
    bundle = g._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    root = parse(bundle["text/html"])
    named = {e.get("data-node") for e in root.iter(f"{SVG}g")}
    assert named == {"input", "body", "head", "output"}
    assert len(root.findall(f".//{SVG}path[@class='edge']")) == 3
    assert "frozen" in "".join(root.itertext())


def test_a_graph_displayed_alone_shows_structure_and_no_times():
    g = Graph.somatize(Body().named("body").frozen().cached() >> Head().named("head"))
    root = parse(g._repr_mimebundle_()["text/html"])
    assert root.find(f".//{SVG}text[@class='timing']") is None and root.find(f".//{SVG}rect[@class='share']") is None
    assert root.find(f".//{SVG}path[@data-from='body'][@data-to='head']") is not None
    badges = {e.get("class") for e in root.iter(f"{SVG}rect") if (e.get("class") or "").startswith("badge")}
    assert badges == {"badge-frozen", "badge-cached"}
    cells = [c.text for c in root.iter("td")]
    assert g.fingerprints()["body"][:23] + "…" in cells  # the table readers without widgets get


def test_a_graph_displayed_after_a_recorded_run_reads_no_record(tmp_path):
    # Reads are pure: displaying g used to find the Recorder of its last
    # forward, fsync it and read the run back. A run's times are drawn on the
    # graph when the run is named: spent(store, run=..., graph=g).
    g, store = twenty_graph(), Store(tmp_path / "s")
    with Recorder(store, run="r") as rec:
        for _ in range(3):
            g.forward(0, watching=rec)
    html = g._repr_mimebundle_()["text/html"]
    assert parse(html).find(f".//{SVG}text[@class='timing']") is None and "run 'r'" not in html
    timed = parse(spent(store, run="r", graph=g).to_html()).findall(f".//{SVG}text[@class='timing']")
    assert len(timed) == 20


def test_the_front_end_is_sent_the_javascript_of_js_widgets(recorded, tmp_path):
    g, store = twenty(tmp_path, forwards=1)
    losses = recorded_losses(tmp_path, [2.0, 1.0], store=Store(tmp_path / "p"))
    for panel in (Live(), spent(store, run="r"), g, progress(losses, run="r")):
        panel._repr_mimebundle_()
    opened = [data["state"] for _, kind, data in recorded.sent if kind == "comm_open" and "_esm" in data["state"]]
    source = Path(__file__).parents[1] / "js" / "widgets"
    chart = (source / "chart.js").read_text()  # one chart renderer, in front of each module that draws a chart
    assert [o["_esm"] for o in opened] == [chart + "\n" + (source / "live.js").read_text(),
                                           (source / "spent.js").read_text(), (source / "graph.js").read_text(),
                                           chart + "\n" + (source / "progress.js").read_text()]
    css = (source / "chart.css").read_text() + "\n" + (source / "panel.css").read_text()  # the chart's look first
    assert all(o["_css"] == css for o in opened)


def test_each_panel_s_text_says_the_flag_that_shows_its_picture_in_an_export(recorded, tmp_path):
    """What a reader without the widget gets: the panel's repr, then how an
    executed HTML export shows its picture (nbclient keeps the widgets' state,
    and nbconvert then draws an empty widget view offline)."""
    from somatize._widgets._views import EXPORT_FLAG, EXPORT_HINT

    g, store = twenty(tmp_path, forwards=1)
    losses = recorded_losses(tmp_path, [2.0, 1.0], store=Store(tmp_path / "p"))
    assert EXPORT_FLAG in EXPORT_HINT
    for panel in (Live(), spent(store, run="r"), g, progress(losses, run="r")):
        bundle = panel._repr_mimebundle_()
        assert "application/vnd.jupyter.widget-view+json" in bundle
        assert bundle["text/plain"] == f"{panel!r}\n{EXPORT_HINT}", bundle["text/plain"]

def test_the_chart_s_own_palette_is_the_pictures():
    """chart.js colours a series sent without a colour (the run browser's) from
    its PALETTE: the very list the pictures and the panels colour from."""
    source = (Path(__file__).parents[1] / "js" / "widgets" / "chart.js").read_text()
    listed = re.search(r"export const PALETTE = \[(.*?)\];", source, re.S).group(1)
    assert re.findall(r'"([^"]+)"', listed) == _svg.SERIES


def test_a_title_is_escaped_in_the_static_picture():
    title = "<script>alert(1)</script> & co"
    root = parse(Live(title=title).to_html())
    assert root.find(".//script") is None and title in "".join(root.itertext())


def test_a_diverging_live_run_marks_the_step_that_went_non_finite():
    """Issue 9, item 6: the last loss says nan, the chart marks the step, steps are whole numbers."""
    live = Live()
    feed(live, [10.0 ** k for k in range(21)] + [float("nan"), float("nan")])
    snap = live.snapshot()
    assert snap["last_text"] == "nan" and snap["not_finite_at"] == 21
    root = parse(live.to_html())
    assert stats(root)["last loss"] == "nan"
    svg = root.find(f".//{SVG}svg")
    marks = [text_of(t) for t in svg.iter(f"{SVG}text") if "not finite" in text_of(t)]
    assert marks == ["not finite from step 21"]
    labels = [t for t in svg.iter(f"{SVG}text") if t.get("class") == "tick"]
    y_labels = [t for t in labels if t.get("text-anchor") == "end"]
    assert 3 <= len(y_labels) <= _chart.MAX_TICKS
    ys = sorted(float(t.get("y")) for t in y_labels)
    assert min(np.diff(ys)) >= 14  # 11px labels never on top of each other
    assert all(float(text_of(t).replace(",", "")).is_integer() for t in labels if t.get("text-anchor") == "middle")


def test_live_tells_the_time_to_go_when_the_number_of_steps_is_known():
    fake = FakeTime()
    live = Live(total_steps=100, clock=fake.clock, timer=fake.timer)
    for i in range(25):
        fake.advance_to(0.1 * i)
        feed(live, [1.0])
    snap = live.snapshot()  # 25 steps in 2.4 s: 75 to go at that rate
    assert snap["eta_s"] == pytest.approx(75 / (25 / 2.4), abs=0.1)
    assert stats(parse(live.to_html()))["steps"] == "25 of 100"


def test_a_long_node_name_is_cut_to_its_box_and_the_title_stays_short():
    """Issue 9, item 7: names never overflow the fixed boxes; a big graph's title does not list every node."""
    long_name = "a_node_with_a_very_long_descriptive_name_indeed"
    nodes = [Step().named(long_name)] + [Step().named(f"step{i:02d}") for i in range(30)]
    expr = nodes[0]
    for n in nodes[1:]:
        expr = expr >> n
    g = Graph.somatize(expr)
    bundle = g._repr_mimebundle_()
    root = parse(bundle["text/html"])
    box = next(e for e in root.iter(f"{SVG}g") if e.get("data-node") == long_name)
    name = next(t for t in box.iter(f"{SVG}text") if t.get("font-weight") == "600")
    assert text_of(name).endswith("…") and long_name.startswith(text_of(name)[:-1])
    assert len(text_of(name)) * 13 * 0.68 <= 170 - 20  # the bold 13px name fits the node's width
    assert long_name in text_of(box.find(f"{SVG}title"))  # the whole name on hover
    title = "".join(root.find("div").itertext())
    assert "31 nodes" in title and "step17" not in title


def test_spent_gives_median_and_p95_beside_the_mean_with_the_warm_up_apart(tmp_path):
    g, store = twenty(tmp_path, forwards=6)
    said = facts(store, run="r")
    s = spent(store, run="r")
    for i, node in enumerate(g.nodes):
        times = [took(node.name, i, f) for f in range(6)]
        got = s.data["spread"]["nodes"][node.name]
        assert got["first_us"] == times[0]  # the first call, apart
        assert got["median_us"] == np.median(times[1:]) and got["p95_us"] == np.percentile(times[1:], 95)
    whole = [f["took_us"] for f in said if f["fact"] == "finished"]
    assert s.data["spread"]["forward"] == {"median_us": np.median(whole[1:]), "p95_us": np.percentile(whole[1:], 95),
                                           "first_us": whole[0]}
    table = parse(s.to_html()).find(".//table[@class='spread']")
    rows = {text_of(tr[0]): [text_of(td) for td in tr[1:]] for tr in table.findall("tr")[1:]}
    slow = s.data["spread"]["nodes"]["slow"]
    assert durations(" ".join(rows["slow"])) == pytest.approx(
        [s.data["rows"][0]["mean_us"], slow["median_us"], slow["p95_us"], slow["first_us"]], rel=5e-3)


def test_live_draws_the_facts_it_is_told_to_beside_the_loss_smoothed_over_its_raw_trace():
    live = Live(also=["val_loss"], smoothing=0.5)
    for i in range(40):
        feed(live, [1.0 / (i + 1)])
        if i % 10 == 9:
            live({"fact": "val_loss", "value": 2.0 / (i + 1)})
    loss, val = live.snapshot()["chart"]["series"]
    assert val["name"] == "val_loss" and [p[0] for p in val["points"]] == [9, 19, 29, 39]
    raw = [1.0 / (i + 1) for i in range(40)]
    assert [p[1] for p in loss["raw"]] == pytest.approx(raw)  # the raw trace, drawn faded behind
    assert [p[1] for p in loss["points"]] == pytest.approx(ema(raw, 0.5))
    root = parse(live.to_html())
    svg = root.find(f".//{SVG}svg")
    assert len(svg.findall(f".//{SVG}polyline[@class='curve']")) == 2
    assert len(svg.findall(f".//{SVG}polyline[@class='raw']")) == 2
    assert "val_loss" in [text_of(t) for t in svg.iter(f"{SVG}text")]  # the legend


@pytest.mark.parametrize("us, said", [(0, "0 µs"), (38.24, "38.2 µs"), (999.4, "999 µs"), (999.7, "1 ms"),
                                      (1000, "1 ms"), (1094, "1.09 ms"), (999_499, "999 ms"), (999_700, "1 s"),
                                      (2_360_000, "2.36 s")])
def test_a_duration_is_rounded_before_its_unit_is_chosen(us, said):
    """999.7 µs read "1e+03 µs" on spent's Trainer bar: rounded to three digits
    first, it is 1 ms."""
    from somatize._pictures._svg import duration_us

    assert duration_us(us) == said
