"""Panels on the Python side: Live's counts and curve, the throttle, the
static pictures, progress, spent and the graph panel, read back from real
stores written by real runs."""

import math
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
from somatize._widgets import _live, _progress
from somatize._widgets._graph import describe
from somatize.record import Live, progress, spent
from somatize.torch import Trainer, parameters

from torch_models import Body, Head

SVG = "{http://www.w3.org/2000/svg}"


class RecordingComm(BaseComm):
    """A comm that keeps what a kernel would send to the front end."""

    sent = []

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
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
    assert pts[-1][0] == pytest.approx(len(curve.mean) * stride + (len(values) - arr.size + 1) / 2)


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
    wall = time.monotonic() - began
    time.sleep(3 * _live.INTERVAL_S)  # the armed timer sends the last state
    updates = status_updates(recorded)
    during = [u for u in updates if u[0] <= began + wall]
    assert len(during) <= 10 * wall + 2
    gaps = [b[0] - a[0] for a, b in zip(updates, updates[1:])]
    assert min(gaps) >= _live.INTERVAL_S * 0.9
    assert updates[-1][1] == live.snapshot()
    assert updates[-1][1]["steps"] == 200_000


def test_the_last_state_arrives_without_another_fact(recorded):
    live = Live()
    live._repr_mimebundle_()
    feed(live, [5.0])
    feed(live, [4.0])  # within the interval: held back, a timer armed
    time.sleep(3 * _live.INTERVAL_S)
    assert status_updates(recorded)[-1][1]["last"] == 4.0


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
    assert np.allclose(x, np.arange(10_000).reshape(100, 100).mean(axis=1))


def test_smoothing_keeps_a_constant_and_lags_a_step():
    assert np.allclose(_progress.smoothed(np.full(50, 3.0), 0.9), 3.0)
    jump = _progress.smoothed(np.r_[np.zeros(10), np.ones(10)], 0.5)
    assert 0 < jump[10] < 1 and jump[-1] == pytest.approx(1, abs=1e-3)


def test_progress_overlays_runs_with_a_legend(tmp_path):
    store = Store(tmp_path / "s")
    for run, scale in (("small", 1.0), ("big", 10.0)):
        with Recorder(store, run=run) as rec:
            for i in range(30):
                rec.forward_began()
                rec({"fact": "finished", "took_us": 1})
                rec({"fact": "loss", "value": scale / (i + 1)})
    p = progress(store, run=["small", "big"])
    fig = p.widget().children[1]
    labels = [m.labels for m in fig.marks if m.labels]
    assert labels == [["small"], ["big"]]
    assert all(m.display_legend for m in fig.marks[:2])
    root = parse(p._repr_mimebundle_()["text/html"])
    assert len(root.findall(f".//{SVG}polyline")) == 2
    assert "big" in "".join(root.itertext())
    controls = p.widget().children[0].children
    controls[0].value = not controls[0].value  # the log toggle swaps the y scale
    assert type(fig.axes[1].scale).__name__ in {"LogScale", "LinearScale"}
    assert fig.marks[0].scales["y"] is fig.axes[1].scale


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
    nodes = [Busy(30).named(f"n{i:02d}") for i in range(19)]
    slow = Busy(3000).named("slow")
    expr = nodes[0] >> [nodes[1] >> nodes[2], nodes[3] >> slow, nodes[4]] >> nodes[5]
    for n in nodes[6:]:
        expr = expr >> n
    g = Graph.somatize(expr)
    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as rec:
        for _ in range(5):
            g.forward(0, watching=rec)
    s = spent(store, run="r")
    assert s.slowest == "slow" and s.rows[0]["label"] == "slow"
    assert sum(r["kind"] == "node" for r in s.rows) == 20
    root = parse(s._repr_mimebundle_()["text/html"])
    bars = root.findall(f".//{SVG}rect[@class='bar']")
    assert len(bars) == 21  # twenty nodes and the engine
    spans = root.findall(f".//{SVG}rect[@class='span']")
    assert len(spans) == 20


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
    assert all(by[e["to"]]["y"] > by[e["from"]]["y"] for e in d["edges"])
    boxes = [(n["x"], n["y"]) for n in d["nodes"]]
    for i, (x1, y1) in enumerate(boxes):
        for x2, y2 in boxes[i + 1:]:
            assert abs(x1 - x2) >= d["node_w"] or abs(y1 - y2) >= d["node_h"]
    assert by["tail"]["frozen"] and by["tail"]["fingerprint"] == g.fingerprints()["tail"]


def test_displaying_a_graph_shows_nodes_edges_and_badges():
    g = Graph.somatize(Body().named("body").frozen() >> Head().named("head"))
    bundle = g._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    root = parse(bundle["text/html"])
    named = {e.get("data-node") for e in root.iter(f"{SVG}g")}
    assert named == {"input", "body", "head", "output"}
    assert len(root.findall(f".//{SVG}path[@class='edge']")) == 3
    assert "frozen" in "".join(root.itertext())
