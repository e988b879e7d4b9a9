"""Panels over time: `progress(..., x="relative" | "wall")` and
`Live(x="relative")` draw over seconds read from the record (the Trainer's
`wall_s`) or from Live's own clock; the axis says its unit, and the tick
labels a reader sees match the data's range. Also: what reaches
`Live(also=...)`. Records are made of chosen facts (no clock)."""

import time

import pytest
import torch

import somatize.torch  # noqa: F401  (registers the tensor codec)
from somatize import Graph, Node, Opaque, Recorder, Store
from somatize._base.errors import SomatizeValueError
from somatize.record import Live, curve, progress
from somatize.torch import Trainer, parameters

from pictures import PIXEL, SVG, parse, text_of, ticks
from pictures import curve as read_curve
from torch_models import batches, built

T0 = 1_780_000_000.0  # a moment (seconds since 1970) the chosen records begin at


def record(tmp_path, every_s, steps=60, wall=True, run="r"):
    """A run whose step i began at T0 + every_s * i, its loss 1 / (i + 1)."""
    store = Store(tmp_path / "s")
    with Recorder(store, run=run) as rec:
        for i in range(steps):
            rec.forward_began()
            rec({"fact": "ran", "node": "body", "began_us": 0, "took_us": 10})
            rec({"fact": "finished", "took_us": 12})
            rec({"fact": "loss", "value": 1.0 / (i + 1)})
            if wall:
                rec({"fact": "wall_s", "value": T0 + every_s * i})
    return store


def plot(html):
    return parse(html).find(f".//{SVG}svg")


def xlabel(svg):
    """The x axis's own label: the text centred under the plot that is neither a tick nor turned (the y label)."""
    (label,) = [text_of(t) for t in svg.iter(f"{SVG}text")
                if t.get("text-anchor") == "middle" and t.get("class") != "tick" and not t.get("transform")]
    return label


@pytest.mark.parametrize("every_s, unit, per", [(0.5, "s", 1.0), (30.0, "min", 60.0), (400.0, "h", 3600.0)])
def test_progress_over_relative_time_reads_back_the_seconds_since_the_run_began(tmp_path, every_s, unit, per):
    store = record(tmp_path, every_s)
    svg = plot(progress(store, run="r", x="relative").to_html())
    assert xlabel(svg) == f"time since the run began ({unit})"
    labels = [v for v, _ in ticks(svg, "middle")]
    span = every_s * 59 / per
    assert labels[0] >= 0 and labels[-1] <= span * (1 + 1e-9) and labels[-1] - labels[0] >= span / 2
    (points, (dx, dy)) = read_curve(svg)
    assert [x for x, _ in points] == pytest.approx([every_s * i / per for i in range(60)], abs=dx)


def test_progress_over_the_clock_labels_ticks_as_a_clock_reads_them_where_the_data_is(tmp_path):
    store = record(tmp_path, 7.0)  # 413 s: ticks a minute or two apart
    svg = plot(progress(store, run="r", x="wall").to_html())
    assert xlabel(svg).startswith("clock time, " + time.strftime("%Y-%m-%d", time.localtime(T0)))
    day = time.mktime(time.localtime(T0)[:3] + (0, 0, 0, 0, 0, -1))  # local midnight before T0
    read = []
    for t in svg.iter(f"{SVG}text"):
        if t.get("class") == "tick" and t.get("text-anchor") == "middle":
            h, m, *s = text_of(t).split(":")
            read.append((day + int(h) * 3600 + int(m) * 60 + float(s[0] if s else 0), float(t.get("x"))))
    assert len(read) >= 3
    first, last = T0, T0 + 7.0 * 59
    assert all(first <= v <= last for v, _ in read)  # every label inside the data's range
    # and at the place the data's range puts it: the curve's first and last points are the range's ends
    line = svg.find(f".//{SVG}polyline[@class='curve']").get("points").split()
    p0, p1 = float(line[0].split(",")[0]), float(line[-1].split(",")[0])
    for v, px in read:
        assert px == pytest.approx(p0 + (v - first) / (last - first) * (p1 - p0), abs=PIXEL)


def test_progress_over_time_of_a_run_without_step_times_says_to_draw_it_over_steps(tmp_path):
    store = record(tmp_path, 1.0, wall=False)
    with pytest.raises(SomatizeValueError, match="x='step'") as e:
        progress(store, run="r", x="relative")
    assert "'r'" in str(e.value) and "wall_s" in str(e.value)
    with pytest.raises(SomatizeValueError, match="'relative'"):
        progress(store, run="r", x="seconds")


def test_the_trainer_says_when_each_step_began(tmp_path):
    store = Store(tmp_path / "s")
    g = built()
    before = time.time()
    with Recorder(store, run="r") as rec:
        trainer = Trainer(g, objective=torch.nn.functional.mse_loss,
                          optimizer=torch.optim.SGD(parameters(g), lr=0.01), watching=rec)
        for b in batches(5):
            trainer.step(b)
    after = time.time()
    wall = curve(store, run="r", name="wall_s").tolist()
    assert len(wall) == 5 and wall == sorted(wall) and before <= wall[0] and wall[-1] <= after


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_live_over_relative_time_draws_each_loss_at_the_seconds_its_clock_said():
    clock = FakeClock()
    live = Live(x="relative", clock=clock)
    for i in range(40):
        live.forward_began()
        clock.now = 100.0 + 1.5 * i
        live({"fact": "loss", "value": 1.0 / (i + 1)})
    svg = plot(live.to_html())
    assert xlabel(svg) == "time since the run began (s)"
    points, (dx, _) = read_curve(svg)
    assert [x for x, _ in points] == pytest.approx([1.5 * i for i in range(40)], abs=dx)
    labels = [v for v, _ in ticks(svg, "middle")]
    assert labels[0] >= 0 and labels[-1] <= 1.5 * 39


# --- what reaches Live(also=...) ------------------------------------------------------


class Scored(Node):
    """An evaluation's node: says its loss on the batch with ctx.fact."""

    def forward(self, pair, ctx):
        x, y = pair
        loss = torch.nn.functional.mse_loss(x, y)
        ctx.fact("val_loss", value=loss)
        return Opaque(loss)


def test_live_also_shows_a_nodes_fact_from_an_evaluation_outside_the_trainer(tmp_path):
    store = Store(tmp_path / "s")
    live = Live(also=["val_loss"])
    evaluation = Graph.somatize(Scored().named("score"))
    with Recorder(store, run="r") as rec:
        for i in range(3):
            for _ in range(4):  # training steps, as a Trainer says them
                live.forward_began()
                live({"fact": "loss", "value": 1.0})
            x = torch.full((4, 2), float(i))
            evaluation.forward(Opaque((x, torch.zeros(4, 2))), watching=[rec, live])
    (series,) = [s for s in live.snapshot()["chart"]["series"] if s["name"] == "val_loss"]
    assert series["points"] == [[3, 0.0], [7, 1.0], [11, 4.0]]  # at the step each came after
    assert curve(store, run="r", name="val_loss").tolist() == [0.0, 1.0, 4.0]  # and in the record


def test_live_also_reads_a_tensor_handed_over_directly_as_its_number():
    """An evaluation outside the Trainer hands its value over itself, often a
    0-d tensor: Live ignored it (only int and float were read)."""
    live = Live(also=["val_loss"])
    live.forward_began()
    live({"fact": "loss", "value": 1.0})
    live({"fact": "val_loss", "value": torch.tensor(0.25)})
    (series,) = [s for s in live.snapshot()["chart"]["series"] if s["name"] == "val_loss"]
    assert series["points"] == [[0, 0.25]]


def test_live_also_takes_one_name_as_a_str():
    """Live(also="val_loss") made eight curves named by its letters and drew none of val_loss."""
    live = Live(also="val_loss")
    live.forward_began()
    live({"fact": "loss", "value": 1.0})
    live({"fact": "val_loss", "value": 0.5})
    names = [s["name"] for s in live.snapshot()["chart"]["series"]]
    assert names == ["loss", "val_loss"]
