"""`spent` of a run recorded with `somatize.torch.watch` (and of a Trainer's,
the same rule): the instruments' reading of each node's output, which a
measured forward's `finished` time holds, is a row of its own
(`instruments (measuring)`, from the `instruments_us` facts), not the
engine's; and the means a forward are over the forwards that said their
time (a watch's measured ones), not over every forward of the run.

The oracles: the record's own facts (each row's total and count summed from
them), and a clock the test drives (`perf_counter_ns` of the watch, the
instruments and the engine), under which each part of the module takes a
chosen time and reading each output another, so the engine's row must be 0
exactly, the instruments' row the reads' time, each node its own."""

import pytest
import torch

import somatize.torch._instruments as instruments_module
import somatize.torch._watch as watch_module
from somatize import Graph, Recorder, Store
from somatize._graph import engine as engine_module
from somatize._widgets._spent import _forward_mean, spent_data
from somatize.record import facts, forwards, spent
from somatize.torch import Module, Trainer, parameters, watch
from somatize.torch._instruments import EVERY, FIRST, Instruments

from pictures import SVG, parse, text_of

STEPS = FIRST + EVERY + 2  # the first ten measured, then the 40th, and one more unmeasured
MEASURED = list(range(FIRST)) + [EVERY]
READ_US = 300  # what reading one node's output takes on the test's clock
TICKS = {"first": 1_000, "act": 50, "second": 700, "out": 200}  # each part's own µs on the test's clock


class Clock:
    """The test's clock: ns, moved only by the parts' forwards and the outputs' reads."""

    def __init__(self):
        self.now = 10**12

    def __call__(self):
        return self.now


class Tick(torch.nn.Module):
    """A part that takes ``us`` on ``clock`` and computes ``inner`` (a Linear, a ReLU)."""

    def __init__(self, clock, us, inner):
        super().__init__()
        self.clock, self.us, self.inner = clock, us, inner

    def forward(self, x):
        self.clock.now += self.us * 1000
        return self.inner(x)


def ticking(clock):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[Tick(clock, TICKS[name], inner) for name, inner in (
        ("first", torch.nn.Linear(8, 16)), ("act", torch.nn.ReLU()), ("second", torch.nn.Linear(16, 16)),
        ("out", torch.nn.Linear(16, 1)))])


@pytest.fixture
def clock(monkeypatch):
    """The watch's, the instruments' and the engine's clock is the test's;
    reading an output (the instruments' counts, the backward clock's hook)
    takes READ_US on it, besides doing what it does."""
    c = Clock()
    for module in (watch_module, instruments_module, engine_module):
        monkeypatch.setattr(module, "perf_counter_ns", c)
    read = Instruments._read

    def slow_read(self, name, value):
        read(self, name, value)
        c.now += READ_US * 1000

    monkeypatch.setattr(Instruments, "_read", slow_read)
    return c


def data(k=STEPS, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 8, generator=gen), torch.randn(16, 1, generator=gen)) for _ in range(k)]


def loop(net, rec, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    w = watch(net, rec, optimizer=opt)
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        rec.log({"loss": loss})
    w.remove()
    return w


def rows_of(store, run):
    return {r["label"]: r for r in spent_data(store, run)["rows"]}


def oracle(store, run):
    """Each node's total and calls, the forwards that said their time, the
    sum of their times and of their instruments_us, from the facts alone."""
    nodes, timed, took, measuring, measured = {}, [], 0, 0, []
    for f in facts(store, run=run):
        if f["fact"] == "ran":
            total, calls = nodes.get(f["node"], (0, 0))
            nodes[f["node"]] = (total + f["took_us"], calls + 1)
        elif f["fact"] == "finished":
            timed.append(f)
            took += f["took_us"]
        elif f["fact"] == "instruments_us":
            measuring += f["value"]
            measured.append(f)
    return nodes, len(timed), took, measuring, len(measured)


def test_a_watched_runs_engine_row_holds_no_measuring_and_its_means_are_over_the_measured_forwards(tmp_path, clock):
    store = Store(tmp_path)
    with Recorder(store, run="r") as rec:
        w = loop(ticking(clock), rec, data())
    assert list(w.nodes) == ["0", "1", "2", "3"]
    took = forwards(store, "r")
    assert took.index[took["took_us"].notna()].tolist() == MEASURED  # a measured forward says its time
    assert took.index[took["instruments_us"].notna()].tolist() == MEASURED  # and its reads'
    rows = rows_of(store, "r")
    n = len(MEASURED)
    for node, us in zip(w.nodes, TICKS.values()):
        assert (rows[node]["total_us"], rows[node]["count"], rows[node]["mean_us"]) == (us * n, n, us)
    # each forward read its four outputs inside its time: that is the instruments', the engine took nothing
    reads = len(TICKS) * READ_US
    assert took.loc[MEASURED, "took_us"].tolist() == [sum(TICKS.values()) + reads] * n
    assert took.loc[MEASURED, "instruments_us"].tolist() == [reads] * n
    engine, measuring = rows["engine (outside nodes)"], rows["instruments (measuring)"]
    assert (engine["total_us"], engine["mean_us"], engine["count"]) == (0, 0, n)
    assert (measuring["kind"], measuring["total_us"], measuring["mean_us"], measuring["count"]) == (
        "instruments", reads * n, reads, n)
    d = spent_data(store, "r")
    assert (d["forwards"], d["timed"]) == (STEPS, n)
    assert _forward_mean(d) == sum(TICKS.values()) + reads  # a whole forward: over the 11 that said theirs


def test_a_watched_runs_rows_add_up_to_its_facts_on_the_real_clock(tmp_path):
    """The real clock, any load: whatever the times, the rows are the facts'
    sums, the means over the forwards that said them, and what the reads
    took lies inside each forward's time outside its nodes."""
    store = Store(tmp_path)
    with Recorder(store, run="r") as rec:
        loop(ticking(Clock()), rec, data())
    nodes, timed, took, measuring, measured = oracle(store, "r")
    assert timed == measured == len(MEASURED)
    rows = rows_of(store, "r")
    for node, (total, calls) in nodes.items():
        assert (rows[node]["total_us"], rows[node]["count"]) == (total, calls) and calls == timed
    engine = rows["engine (outside nodes)"]
    outside = took - sum(total for total, _ in nodes.values())
    assert engine["total_us"] == outside - measuring >= 0
    assert (engine["count"], engine["mean_us"]) == (timed, pytest.approx((outside - measuring) / timed))
    assert rows["instruments (measuring)"]["total_us"] == measuring
    assert rows["instruments (measuring)"]["mean_us"] == pytest.approx(measuring / timed)
    for forward in MEASURED:  # the reads are between the nodes, inside the forward's time
        said = facts(store, run="r", forward=forward)
        (finished,) = [f["took_us"] for f in said if f["fact"] == "finished"]
        (read,) = [f["value"] for f in said if f["fact"] == "instruments_us"]
        assert read + sum(f["took_us"] for f in said if f["fact"] == "ran") <= finished
    assert sum(r["share"] for r in rows.values()) == pytest.approx(1.0)


def test_the_picture_says_the_measured_forwards_and_the_instruments_bar(tmp_path, clock):
    store = Store(tmp_path)
    with Recorder(store, run="r") as rec:
        loop(ticking(clock), rec, data())
    s = spent(store, run="r")
    n = len(MEASURED)
    assert repr(s).splitlines()[0] == f"spent(run='r'): {STEPS} forwards, {n} measured"
    svg = parse(s.to_html()).find(f".//{SVG}svg")
    bars = {b.get("data-node"): b for b in svg.iter(f"{SVG}rect") if b.get("class") == "bar"}
    assert bars["instruments (measuring)"].get("data-kind") == "instruments"
    tip = text_of(bars["instruments (measuring)"].find(f"{SVG}title"))
    reads = len(TICKS) * READ_US
    assert tip.startswith(f"instruments (measuring): {reads * n / 1000:.1f} ms in all, 1.2 ms a measured forward "
                          f"over {n} measured forwards")
    assert f"over {n} measured forwards" in text_of(bars["engine (outside nodes)"].find(f"{SVG}title"))
    assert f"Total time over its {n} measured forwards" in s.to_html()
    said = [text_of(t) for t in svg.iter(f"{SVG}text")]
    assert "grey: the engine's and the instruments' own time, not any node's" in said  # the legend


def test_a_trainers_run_shows_its_instruments_apart_too_its_means_over_every_forward(tmp_path, clock):
    """The Trainer's engine hands each node's output to the instruments on
    their recorded steps, inside the forward's time: the same row, the same
    rule; its forwards all say their time, so the engine's mean is over all."""
    def node(name):
        return Module(Tick(clock, TICKS[name], torch.nn.Linear(8, 8) if name != "out" else torch.nn.Linear(8, 1)))

    g = Graph.somatize(node("first").named("first") >> node("out").named("out"))
    store = Store(tmp_path)
    with Recorder(store, run="t") as rec:
        t = Trainer(g, torch.nn.functional.mse_loss, torch.optim.SGD(parameters(g), lr=0.01), watching=rec)
        for x, y in data():
            t.step((x, y))
        t.deliver()
    took = forwards(store, "t")
    assert took["took_us"].notna().all()  # every forward of a Trainer says its time
    assert took.index[took["instruments_us"].notna()].tolist() == MEASURED  # its recorded steps their reads'
    reads = 2 * READ_US
    assert took.loc[MEASURED, "instruments_us"].tolist() == [reads] * len(MEASURED)
    rows = rows_of(store, "t")
    engine, measuring = rows["engine (outside nodes)"], rows["instruments (measuring)"]
    assert (engine["total_us"], engine["count"]) == (0, STEPS)
    assert (measuring["total_us"], measuring["mean_us"], measuring["count"]) == (
        reads * len(MEASURED), reads, len(MEASURED))
    assert (rows["first"]["mean_us"], rows["out"]["mean_us"]) == (TICKS["first"], TICKS["out"])
    d = spent_data(store, "t")
    assert d["timed"] == d["forwards"] == STEPS
    assert _forward_mean(d) == pytest.approx(TICKS["first"] + TICKS["out"] + reads * len(MEASURED) / STEPS)
    s = spent(store, run="t")
    assert repr(s).splitlines()[0] == f"spent(run='t'): {STEPS} forwards"
    svg = parse(s.to_html()).find(f".//{SVG}svg")
    assert "grey: the engine's, the instruments' and the Trainer's own time" in [
        text_of(t) for t in svg.iter(f"{SVG}text")]
    assert "Total time over the run" in s.to_html()
    # its instruments' mean is over fewer forwards than the engine's: the bar says which
    texts = [text_of(t) for t in svg.iter(f"{SVG}text")]
    (said,) = [t for t in texts if t.startswith(f"{reads * len(MEASURED) / 1000:.1f} ms ·")]
    assert said.endswith(" · 600 µs a measured forward")
    (said,) = [t for t in texts if t.startswith("0 µs ·")]
    assert said.endswith(" · 0 µs a forward")  # the engine's, over every forward


def test_a_run_recorded_before_instruments_us_shows_the_engine_row_as_it_was(tmp_path):
    """A record without instruments_us (made before it was said): no
    instruments row, the engine's the time outside the nodes, its mean
    over the forwards that said their time."""
    store = Store(tmp_path)
    with Recorder(store, run="old") as rec:
        for i in range(4):
            rec.forward_began()
            if i % 2 == 0:  # a watch of old: the even forwards measured
                rec({"fact": "ran", "node": "a", "began_us": 0, "took_us": 100})
                rec({"fact": "finished", "took_us": 130})
            rec({"fact": "loss", "value": 1.0})
    rows = rows_of(store, "old")
    assert "instruments (measuring)" not in rows
    engine = rows["engine (outside nodes)"]
    assert (engine["total_us"], engine["mean_us"], engine["count"]) == (60, 30, 2)
