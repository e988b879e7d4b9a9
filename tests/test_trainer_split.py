"""The Trainer's time split into objective, backward and update, and each
node's backward time seen from the edges: what the Trainer records, and what
`spent` draws of it. Times are related to each other, never to the clock."""

import statistics

import pytest
import torch

import somatize.torch  # noqa: F401  (registers the tensor codec)
from somatize import Graph, Node, Opaque, Recorder, Store
from somatize.record import curve, forwards, spent
from somatize.torch import Trainer, parameters

from pictures import SVG, durations, parse, text_of
from torch_models import batches, built

MSE = torch.nn.functional.mse_loss
PARTS = ("objective_us", "backward_us", "update_us")


def step_facts(seen):
    """The Trainer's own facts of each step, in order: [{name: value}]."""
    steps, current = [], {}
    for f in seen:
        if "node" in f:
            continue
        if f["fact"] in PARTS or f["fact"] in ("loss", "trainer_us", "updated"):
            current[f["fact"]] = f.get("value", True)
        if f["fact"] == "trainer_us":
            steps.append(current)
            current = {}
    return steps


@pytest.mark.parametrize("shape", [{}, {"every": 2}, {"micro": 2}, {"every": 2, "micro": 2}])
def test_a_watched_step_says_its_objective_backward_and_update_inside_its_trainer_us(shape):
    seen = []
    g = built()
    trainer = Trainer(g, objective=MSE, optimizer=torch.optim.SGD(parameters(g), lr=0.01), watching=seen.append,
                      **shape)
    for b in batches(6):
        trainer.step(b)
    trainer.deliver()
    said = step_facts(seen)
    assert len(said) == 6
    for s in said:
        assert all(isinstance(s[p], int) and s[p] >= 0 for p in PARTS)
        assert s["objective_us"] + s["backward_us"] + s["update_us"] <= s["trainer_us"]  # parts of the whole
        if "updated" not in s:  # a step that closed no group made no update
            assert s["update_us"] == 0
    assert sum(s["backward_us"] for s in said) > 0 and sum(s["update_us"] for s in said) > 0


def test_the_clocks_are_said_on_the_first_ten_steps_and_every_twentieth_not_on_every_step():
    """Five facts every step cost a Recorder-watched step time (bench/bench_step.py):
    the Trainer says its clocks on the first 10 steps, every 20th, and (whatever the index)
    a second after the last that did."""
    seen = []
    g = built()
    trainer = Trainer(g, objective=MSE, optimizer=torch.optim.SGD(parameters(g), lr=0.01), watching=seen.append)
    for b in batches(45):
        trainer.step(b)
    trainer.deliver()
    steps, told, index = [], set(), 0
    for f in seen:
        if f["fact"] == "wall_s":
            told.add(index)
        if f["fact"] in PARTS and "node" not in f:
            steps.append((index, f["fact"]))
        if f["fact"] == "trainer_us":
            index += 1
    assert set(range(10)) | {20, 40} <= told
    assert len(told) < 45  # every step would have to take over a second
    assert sorted(steps) == sorted((i, p) for i in told for p in PARTS)  # all three parts with each wall_s


CHOSEN = [(100, 10, 50, 30), (200, 20, 110, 60), (300, 30, 160, 90), (400, 40, 230, 120), (500, 50, 300, 140)]


def split_record(tmp_path, parts=(0, 2, 4)):
    """A record of five Trainer steps with chosen times (no clock): trainer_us
    and, on the steps `parts` names, its objective, backward and update."""
    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as rec:
        for i, (whole, objective, backward, update) in enumerate(CHOSEN):
            rec.forward_began()
            rec({"fact": "ran", "node": "body", "began_us": 1, "took_us": 50})
            rec({"fact": "finished", "took_us": 60})
            rec({"fact": "loss", "value": 1.0})
            if i in parts:
                for name, v in zip(PARTS, (objective, backward, update)):
                    rec({"fact": name, "value": v})
            rec({"fact": "trainer_us", "value": whole})
    return store, CHOSEN


def test_spent_cuts_the_trainers_bar_into_its_parts_as_the_record_says(tmp_path):
    """The shares of the steps that said their parts (the first, warm-up, left out),
    scaled to the Trainer's whole bar."""
    store, chosen = split_record(tmp_path)
    s = spent(store, run="r")
    (trainer,) = [r for r in s.rows if r["kind"] == "trainer"]
    whole = sum(c[0] for c in chosen)
    told = [chosen[2], chosen[4]]
    scale = whole / sum(c[0] for c in told)
    parts = [sum(c[i] for c in told) * scale for i in (1, 2, 3)]
    assert [p["total_us"] for p in trainer["parts"]] == pytest.approx([*parts, whole - sum(parts)])
    svg = parse(s.to_html()).find(f".//{SVG}svg")
    (bar,) = [b for b in svg.iter(f"{SVG}rect") if b.get("class") == "bar" and b.get("data-kind") == "trainer"]
    cut = [r for r in svg.iter(f"{SVG}rect") if r.get("class") == "part"]
    assert [r.get("data-part") for r in cut] == ["objective_us", "backward_us", "update_us", "rest"]
    widths = [float(r.get("width")) + 1 for r in cut]  # each drawn a pixel short, a gap to the next
    per_us = float(bar.get("width")) / whole
    assert widths == pytest.approx([p["total_us"] * per_us for p in trainer["parts"]], abs=0.15)
    assert sum(widths) == pytest.approx(float(bar.get("width")), abs=0.15)  # the parts fill the bar
    assert float(cut[0].get("x")) == float(bar.get("x"))
    # what a reader reads under the bar: each part's mean a step
    said = [text_of(t) for t in svg.iter(f"{SVG}text") if t.get("class") == "part-text"]
    assert [durations(t)[0] for t in said] == pytest.approx([p["total_us"] / 5 for p in trainer["parts"]], rel=5e-3)
    assert said[1].startswith("backward") and said[2].startswith("optimizer update")


def test_an_older_record_without_the_parts_still_draws_the_trainers_bar_whole(tmp_path):
    store, chosen = split_record(tmp_path, parts=())
    s = spent(store, run="r")
    (trainer,) = [r for r in s.rows if r["kind"] == "trainer"]
    assert trainer["total_us"] == sum(c[0] for c in chosen) and trainer["parts"] is None
    root = parse(s.to_html())
    assert not [r for r in root.iter(f"{SVG}rect") if r.get("class") == "part"]
    assert "Trainer" in text_of(root)


# --- backward time per node ----------------------------------------------------


class Heavier(torch.autograd.Function):
    """The identity forward; its backward passes the gradient on unchanged
    after some extra work, so the node using it is the heaviest in backward
    and no heavier than the others in forward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        w = torch.ones(200, 200) / 200
        busy = w
        for _ in range(60):
            busy = busy @ w
        return grad + 0 * busy.sum()


class Layer(Node):
    def __init__(self, width=16, heavy=False):
        self.lin = torch.nn.Linear(width, width)
        self.heavy = heavy

    def forward(self, x, ctx):
        y = self.lin(x)
        return Opaque(Heavier.apply(y) if self.heavy else y)

    def parameters(self):
        return list(self.lin.parameters())


def test_the_node_made_heavier_in_backward_has_the_most_backward_time(tmp_path):
    torch.manual_seed(0)
    g = Graph.somatize(Layer().named("first") >> Layer(heavy=True).named("middle") >> Layer().named("last"))
    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as rec:
        trainer = Trainer(g, objective=MSE, optimizer=torch.optim.SGD(parameters(g), lr=0.01), watching=rec)
        for _ in range(12):  # the instruments' first ten updates are all measured, then one in forty
            x = torch.randn(8, 16)
            trainer.step((x, x))
    names = ("first", "middle", "last")
    per_node = {n: curve(store, run="r", name=f"backward_us/{n}") for n in names}
    assert all(list(c.index) == list(range(10)) for c in per_node.values())  # steps 0-9 measured, 10 and 11 not
    medians = {n: statistics.median(c) for n, c in per_node.items()}
    assert max(medians, key=medians.get) == "middle"
    whole = forwards(store, run="r")["backward_us"]
    for step in range(10):  # the nodes' parts lie inside the step's whole backward
        assert sum(int(per_node[n][step]) for n in names) <= whole[step]
    # spent says it beside each node's forward time, the heaviest the largest
    s = spent(store, run="r")
    back = {r["label"]: r["backward_us"] for r in s.rows if r["kind"] == "node"}
    assert max(back, key=back.get) == "middle"
    table = parse(s.to_html()).find(".//table[@class='spread']")
    head = [text_of(th) for th in table.find("tr")]
    column = head.index("backward")
    rows = {text_of(tr[0]): text_of(tr[column]) for tr in table.findall("tr")[1:]}
    for n in names:
        assert durations(rows[n]) == pytest.approx([back[n]], rel=5e-3)


def test_a_nodes_backward_mean_leaves_its_first_recorded_step_out_as_a_forwards_first_is(tmp_path):
    """The first recorded backward pays for the backward's set-up: on a short
    run of ~17 recorded steps it alone could make a node's mean longer than a
    whole step's backward. Left out like a forward's first (the warm-up); a
    node recorded once keeps its one."""
    store = Store(tmp_path / "s")
    body = [9_000, 100, 120, 110]  # the first: the warm-up
    with Recorder(store, run="r") as rec:
        for i in range(6):
            rec.forward_began()
            rec({"fact": "ran", "node": "body", "began_us": 0, "took_us": 400})
            rec({"fact": "ran", "node": "head", "began_us": 400, "took_us": 100})
            rec({"fact": "finished", "took_us": 520})
            if i < len(body):
                rec({"fact": "backward_us", "node": "body", "value": body[i]})
            if i == 0:
                rec({"fact": "backward_us", "node": "head", "value": 70})
    s = spent(store, run="r")
    back = {r["label"]: (r["backward_us"], r["backward_steps"]) for r in s.rows if r["kind"] == "node"}
    assert back == {"body": (statistics.mean(body[1:]), 3), "head": (70, 1)}
    table = parse(s.to_html()).find(".//table[@class='spread']")
    column = [text_of(th) for th in table.find("tr")].index("backward")
    rows = {text_of(tr[0]): text_of(tr[column]) for tr in table.findall("tr")[1:]}
    assert durations(rows["body"]) == [110] and durations(rows["head"]) == [70]
    assert "the first (warm-up) left out" in " ".join(text_of(e) for e in parse(s.to_html()).iter("div"))
