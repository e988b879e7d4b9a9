"""Panels on the Python side: Live's counts and curve, the throttle, the
static pictures, progress, spent and the graph panel, read back from real
stores written by real runs."""

import math
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

import comm
import numpy as np
import pytest
import torch
from comm.base_comm import BaseComm

import somatize.torch  # noqa: F401  (registers the tensor codec)
from somatize import Graph, Node, Opaque, Recorder, Store
from somatize._widgets import _live, _progress, _svg
from somatize._widgets._graph import describe
from somatize.record import Live, facts, progress, spent
from somatize.torch import Trainer, parameters

from torch_models import Body, Head

SVG = "{http://www.w3.org/2000/svg}"


class RecordingComm(BaseComm):
    """A comm that keeps what a kernel would send to the front end, up to a
    cap: a broken throttle fails the test, not the machine's memory."""

    sent = []
    CAP = 5_000

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        if len(RecordingComm.sent) < self.CAP:
            RecordingComm.sent.append((time.monotonic(), msg_type, data))


@pytest.fixture
def recorded(monkeypatch):
    RecordingComm.sent = []
    monkeypatch.setattr(comm, "create_comm", RecordingComm)
    return RecordingComm.sent


def status_updates(sent):
    return [
        (t, data["state"]["status"])
        for t, kind, data in sent
        if kind == "comm_msg" and data.get("method") == "update" and "status" in data.get("state", {})
    ]


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
        losses.append(trainer.step((x, x @ truth)))
    recorder.close()
    return g, store, losses


def parse(html):
    return ET.fromstring(html)  # the static pictures are well-formed XML, or this raises


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


def test_live_curve_stays_bounded_and_keeps_the_mean():
    values = [math.sin(i / 50) + 2 for i in range(1_000_003)]
    curve = _live.Curve(size=512)
    for v in values:
        curve.add(v)
    pts = curve.points()
    assert len(pts) <= 513
    # Oracle: each closed bucket is the plain mean, min and max of its stride of steps.
    stride = curve.stride
    arr = np.array(values[: len(curve.mean) * stride]).reshape(-1, stride)
    assert np.allclose(curve.mean, arr.mean(axis=1))
    assert np.allclose(curve.lo, arr.min(axis=1)) and np.allclose(curve.hi, arr.max(axis=1))
    # the open bucket sits at its middle step, steps counted from 0
    assert pts[-1][0] == pytest.approx(len(curve.mean) * stride + (len(values) - arr.size - 1) / 2)
    assert pts[0][0] == pytest.approx((stride - 1) / 2)


def test_live_ignores_nonfinite_losses_for_best_and_picture():
    live = Live()
    feed(live, [3.0, float("nan"), 2.0, float("inf")])
    snap = live.snapshot()
    assert snap["best"] == 2.0 and snap["last"] is None and snap["steps"] == 4
    parse(live.to_html())


def test_throttle_a_burst_of_a_million_facts(recorded):
    live = Live(title="burst")
    live._repr_mimebundle_()  # displayed: from now on it sends
    began = time.monotonic()
    feed(live, (1.0 / (i + 1) for i in range(200_000)))  # 5 facts a step: 1M facts
    steps = 200_000
    while time.monotonic() - began < 1.2:  # and on, so that the rate is seen over a second
        feed(live, [0.5] * 1000)
        steps += 1000
    wall = time.monotonic() - began
    time.sleep(3 * _live.INTERVAL_S)  # the armed timer sends the last state
    updates = status_updates(recorded)
    during = [u for u in updates if u[0] <= began + wall]
    # the contract, written out: at most ten updates a second (not whatever
    # INTERVAL_S happens to say), and the last one is the final state
    assert len(during) <= 10 * wall + 2
    gaps = [b[0] - a[0] for a, b in zip(updates, updates[1:])]
    assert len(gaps) >= 8 and min(gaps) >= 0.1 * 0.9
    assert updates[-1][1] == live.snapshot()
    assert updates[-1][1]["steps"] == steps


def test_the_last_state_arrives_without_another_fact(recorded):
    live = Live()
    live._repr_mimebundle_()
    feed(live, [5.0])
    feed(live, [4.0])  # within the interval: held back, a timer armed
    time.sleep(3 * _live.INTERVAL_S)
    assert status_updates(recorded)[-1][1]["last"] == 4.0


class Interrupting:
    """A view that, on its second update, is handed one more fact while the
    update is being sent: what the training thread does while Live's timer
    thread sends."""

    def __init__(self, live, late_value):
        self.live, self.late, self.statuses = live, late_value, []

    @property
    def status(self):
        return self.statuses[-1]

    @status.setter
    def status(self, value):
        self.statuses.append(value)
        if len(self.statuses) == 2:  # the timer's send: the fact slips in now
            self.live({"fact": "loss", "value": self.late})


def test_a_fact_that_slips_in_while_the_timer_sends_is_sent_after(recorded):
    live = Live()
    view = Interrupting(live, 3.0)
    live._view = view
    live({"fact": "loss", "value": 5.0})  # sent at once
    live({"fact": "loss", "value": 4.0})  # within the interval: a timer is armed
    time.sleep(5 * 0.1)  # no more facts from here: only a re-armed timer can send 3.0
    assert [s["last"] for s in view.statuses] == [5.0, 4.0, 3.0]
    assert view.statuses[-1] == live.snapshot()


def test_facts_from_another_thread_still_end_in_the_final_state(recorded):
    live = Live()
    live._repr_mimebundle_()
    worker = threading.Thread(target=feed, args=(live, [float(v) for v in range(50_000, 0, -1)]))
    worker.start()
    worker.join()
    time.sleep(3 * _live.INTERVAL_S)
    assert status_updates(recorded)[-1][1] == live.snapshot()


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


def test_thinned_is_bucket_means():
    values = np.arange(10_000, dtype=float) ** 0.5
    x, y = _progress.thinned(values, points=100)
    assert len(y) == 100
    assert np.allclose(y, values.reshape(100, 100).mean(axis=1))
    # steps count from 1, as Live counts them
    assert np.allclose(x, np.arange(1, 10_001).reshape(100, 100).mean(axis=1))


def test_smoothing_keeps_a_constant_and_lags_a_step():
    assert np.allclose(_progress.smoothed(np.full(50, 3.0), 0.9), 3.0)
    jump = _progress.smoothed(np.r_[np.zeros(10), np.ones(10)], 0.5)
    assert 0 < jump[10] < 1 and jump[-1] == pytest.approx(1, abs=1e-3)


def two_runs(tmp_path):
    store = Store(tmp_path / "s")
    for run, scale in (("small", 1.0), ("big", 10.0)):
        with Recorder(store, run=run) as rec:
            for i in range(30):
                rec.forward_began()
                rec({"fact": "finished", "took_us": 1})
                rec({"fact": "loss", "value": scale / (i + 1)})
    return store


def figure_parts(p):
    title, controls, fig = p.widget().children
    log, smooth, reset, hint = controls.children
    return fig, log, smooth, reset


def test_progress_overlays_runs_with_a_legend(tmp_path):
    p = progress(two_runs(tmp_path), run=["small", "big"])
    fig, *_ = figure_parts(p)
    lines = [m for m in fig.marks if type(m).__name__ == "Lines"]
    assert [m.labels for m in lines] == [["small"], ["big"]]
    assert all(m.display_legend for m in lines) and lines[0].colors != lines[1].colors
    root = parse(p._repr_mimebundle_()["text/html"])
    assert len(root.findall(f".//{SVG}polyline")) == 2
    legend = "".join(root.itertext())
    assert "small" in legend and "big" in legend


def test_progress_steps_count_from_zero_as_live_and_forwards_do(tmp_path):
    p = progress(two_runs(tmp_path), run="small")
    live = Live()
    feed(live, [1.0 / (i + 1) for i in range(30)])
    fig, *_ = figure_parts(p)
    assert list(fig.marks[0].x) == [pt[0] for pt in live.snapshot()["curve"]] == list(range(30))
    assert list(fig.marks[0].y) == pytest.approx([pt[1] for pt in live.snapshot()["curve"]])


def test_progress_counts_steps_not_forwards_when_a_step_runs_several(tmp_path):
    store = Store(tmp_path / "s")
    with Recorder(store, run="micro") as rec:  # micro=4: four forwards, then the step's loss
        for step in range(5):
            for _ in range(4):
                rec.forward_began()
                rec({"fact": "finished", "took_us": 1})
            rec({"fact": "loss", "value": 1.0 / (step + 1)})
    fig, *_ = figure_parts(progress(store, run="micro"))
    assert list(fig.marks[0].x) == [0, 1, 2, 3, 4]


def test_progress_log_toggle_swaps_the_y_scale_and_back(tmp_path):
    p = progress(two_runs(tmp_path), run="small")  # 1 down to 1/30: under two decades, starts linear
    fig, log, _, _ = figure_parts(p)
    assert not log.value and type(fig.axes[1].scale).__name__ == "LinearScale"
    log.value = True
    assert type(fig.axes[1].scale).__name__ == "LogScale"
    assert all(m.scales["y"] is fig.axes[1].scale for m in fig.marks)
    assert fig.interaction.scales["y"] == [fig.axes[1].scale]  # zoom follows the new scale
    log.value = False
    assert type(fig.axes[1].scale).__name__ == "LinearScale"


def test_progress_starts_in_log_scale_when_the_loss_spans_decades(tmp_path):
    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as rec:
        for i in range(300):
            rec.forward_began()
            rec({"fact": "loss", "value": 10.0 ** (-i / 100)})
    fig, log, _, _ = figure_parts(progress(store, run="r"))
    assert log.value and type(fig.axes[1].scale).__name__ == "LogScale"


def test_progress_smoothing_redraws_the_line_from_the_full_curve(tmp_path):
    p = progress(two_runs(tmp_path), run=["small", "big"])
    fig, _, smooth, _ = figure_parts(p)
    smooth.value = 0.9
    for line, (x, y) in zip(fig.marks[:2], p.thin.values()):
        assert np.allclose(line.y, _progress.smoothed(y, 0.9))
    smooth.value = 0.0
    assert np.allclose(fig.marks[1].y, p.thin["big"][1])


def test_progress_hovers_values_and_zooms(tmp_path):
    p = progress(two_runs(tmp_path), run=["small", "big"])
    fig, _, _, reset = figure_parts(p)
    dots = [m for m in fig.marks if type(m).__name__ == "Scatter"]
    assert len(dots) == 2 and all(d.tooltip.fields == ["x", "y"] for d in dots)
    assert type(fig.interaction).__name__ == "PanZoom"
    x_scale = fig.axes[0].scale
    x_scale.min, x_scale.max = 5.0, 10.0  # as a drag would
    reset.click()
    assert (x_scale.min, x_scale.max) == (None, None)


# --- spent ------------------------------------------------------------------------


class Busy(Node):
    def __init__(self, us):
        self.us = us

    def forward(self, x, ctx):
        end = time.perf_counter() + self.us / 1e6
        while time.perf_counter() < end:
            pass
        return (sum(x) if isinstance(x, tuple) else x) + 1


def test_spent_makes_the_slow_node_of_twenty_obvious(tmp_path):
    g, store = twenty(tmp_path)
    s = spent(store, run="r")
    assert s.slowest == "slow" and s.rows[0]["label"] == "slow"
    assert sum(r["kind"] == "node" for r in s.rows) == 20
    root = parse(s._repr_mimebundle_()["text/html"])
    bars = root.findall(f".//{SVG}rect[@class='bar']")
    assert len(bars) == 21  # twenty nodes and the engine
    spans = root.findall(f".//{SVG}rect[@class='span']")
    assert len(spans) == 20


def twenty(tmp_path, forwards=5):
    """A twenty-node graph with branches, one node a hundred times slower, recorded."""
    nodes = [Busy(30).named(f"n{i:02d}") for i in range(19)]
    expr = nodes[0] >> [nodes[1] >> nodes[2], nodes[3] >> Busy(3000).named("slow"), nodes[4]] >> nodes[5]
    for n in nodes[6:]:
        expr = expr >> n
    g = Graph.somatize(expr)
    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as rec:
        for _ in range(forwards):
            g.forward(0, watching=rec)
    return g, store


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
    bar = root.find(f".//{SVG}rect[@data-kind='trainer']")
    assert bar.get("fill") == _svg.OVERHEAD and "Trainer" in "".join(root.itertext())
    assert root.find(f".//{SVG}rect[@data-node='body']").get("fill") == _svg.SLOW


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
        text = "".join(e.find(f"{SVG}text[@class='timing']").itertext())
        assert text.startswith(_svg.duration_us(rows[name]["mean_us"]))
        assert _svg.duration_us(last[name]) in e.find(f"{SVG}title").text
        widths[name] = float(e.find(f"{SVG}rect[@class='share']").get("width"))
    assert max(widths, key=widths.get) == "slow" and widths["slow"] > 50 * widths["n10"]


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


def test_graph_layout_points_every_edge_down_and_never_overlaps():
    a, b = Plus().named("a"), Plus().named("b")
    branches = [Plus().named(f"m{i}") >> Plus().named(f"k{i}") for i in range(4)]
    g = Graph.somatize(a >> branches >> b >> Plus().frozen().named("tail"))
    d = describe(g)
    by = {n["id"]: n for n in d["nodes"]}
    # every edge leaves the foot of one box and enters the top of a lower one
    assert all(by[e["to"]]["y"] > by[e["from"]]["y"] + by[e["from"]]["h"] for e in d["edges"])
    boxes = [(n["x"], n["y"], n["h"]) for n in d["nodes"]]
    for i, (x1, y1, h1) in enumerate(boxes):
        for x2, y2, h2 in boxes[i + 1:]:
            apart_x = abs(x1 - x2) >= d["node_w"]
            apart_y = y1 + h1 <= y2 or y2 + h2 <= y1
            assert apart_x or apart_y
    assert by["tail"]["frozen"] and by["tail"]["fingerprint"] == g.fingerprints()["tail"]


def test_an_edge_that_skips_layers_runs_beside_the_nodes_it_passes():
    a, b, c = Plus().named("a"), Plus().named("b"), Plus().named("c")
    g = Graph.somatize(a >> [b >> c >> Plus().named("d"), Plus().named("short")] >> Plus().named("join"))
    d = describe(g)
    long = next(e for e in d["edges"] if e["from"] == "short")
    assert len(long["via"]) == 2  # "short" feeds "join" two layers further down
    for vx, top, foot in long["via"]:
        for n in d["nodes"]:
            beside = vx < n["x"] or vx > n["x"] + d["node_w"]
            apart = foot <= n["y"] or top >= n["y"] + n["h"]
            assert beside or apart, f"the edge short -> join passes behind {n['id']}"


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
    g, store = twenty(tmp_path)  # run under a Recorder of run "r"
    html = g._repr_mimebundle_()["text/html"]
    root = parse(html)
    assert root.find(f".//{SVG}text[@class='timing']") is None and "run 'r'" not in html
    assert not hasattr(g, "_watched")  # the graph keeps nothing of who watched it
    timed = parse(spent(store, run="r", graph=g).to_html()).findall(f".//{SVG}text[@class='timing']")
    assert len(timed) == 20


def test_a_title_is_escaped_in_the_static_picture():
    title = "<script>alert(1)</script> & co"
    root = parse(Live(title=title).to_html())
    assert root.find(".//script") is None and title in "".join(root.itertext())
