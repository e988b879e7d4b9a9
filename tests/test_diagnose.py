"""Diagnosis from the record alone: constructed sick runs are each found
(the node, the kind, the steps), healthy runs give no finding at all, and a
fresh process without torch reads the same findings from the store, also
from a run killed half-way."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from diagnosis_models import deep, train

import somatize
from somatize import Store
from somatize._base.errors import SomatizeValueError
from somatize._graph.watchers import INSTRUMENT_FACTS
from somatize.record import curve as record_curve
from somatize.record import facts

from torch_models import batches, built

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)


def kinds(found):
    return {(f.node, f.kind) for f in found}


def only(found, allowed):
    """Every finding is one of ``allowed`` ((node, kind) pairs; node None: the loss)."""
    extra = kinds(found) - set(allowed)
    assert not extra, [str(f) for f in found]


def test_a_node_whose_parameters_the_optimizer_does_not_hold_is_not_updated_over_the_whole_run(tmp_path):
    store = Store(tmp_path)
    g = built(0)
    train(store, "r", g=g, params=g.node("body").parameters(), steps=300)
    (f,) = somatize.diagnose(store, run="r")
    assert (f.node, f.kind, f.first, f.last) == ("head", "not_updated", 0, 299)
    assert f.evidence["not_in_optimizer"] == 33  # Linear(32, 1): its weight and bias
    assert "optimizer does not hold" in str(f) and "steps 0-299" in str(f)


def test_a_learning_rate_far_too_high_is_exploding_from_the_first_steps_where_it_shows(tmp_path):
    store = Store(tmp_path)
    train(store, "r", lr=1.0, kind="sgd", steps=100)  # blows up (NonFiniteLoss) in its fourth step
    found = somatize.diagnose(store, run="r")
    only(found, {("body", "exploding"), ("head", "exploding"), (None, "diverged")})
    exploding = [f for f in found if f.kind == "exploding"]
    assert {f.node for f in exploding} == {"body", "head"}
    for f in exploding:
        assert f.first <= 2 and f.last == len(record_curve(store, "r", "loss")) - 1
        assert f.evidence["grad_norm"] > f.threshold["explode"] * f.evidence["rose_from"]
    assert found[0].kind == "diverged"  # worst first


def test_a_relu_layer_pushed_dead_by_a_large_negative_bias_is_dying(tmp_path):
    store = Store(tmp_path)
    train(store, "r", g=deep(0, dead=True), steps=150)
    found = somatize.diagnose(store, run="r")
    (dying,) = [f for f in found if f.kind == "dying"]
    assert (dying.node, dying.first, dying.last) == ("l3", 0, 149)
    assert dying.evidence["out_zeros"] == 1.0 and found[0] is dying  # the cause comes first
    # what is upstream gets no gradient through it, so no update: said, and nothing else
    only(found, {("l3", "dying"), ("l1", "not_updated"), ("l2", "not_updated"), (None, "plateaued")})


def test_a_sigmoid_layer_fed_huge_inputs_is_saturated(tmp_path):
    store = Store(tmp_path)
    train(store, "r", g=deep(0, saturated=True), steps=150)
    found = somatize.diagnose(store, run="r")
    (sat,) = [f for f in found if f.kind == "saturated"]
    assert (sat.node, sat.first, sat.last) == ("l2", 0, 149)
    assert sat.evidence["out_saturated"] >= 0.5
    only(found, {("l2", "saturated"), ("l2", "vanishing"), ("l1", "vanishing"), (None, "plateaued")})


def test_a_learning_rate_far_too_low_puts_the_update_ratio_below_its_band(tmp_path):
    store = Store(tmp_path)
    train(store, "r", lr=1e-8, kind="sgd", steps=200)
    found = somatize.diagnose(store, run="r")
    low = {f.node: f for f in found if f.kind == "ratio_low"}
    assert set(low) == {"body", "head"}
    for f in low.values():
        assert (f.first, f.last) == (0, 199) and f.evidence["update_ratio"] < f.threshold["ratio"][0]
    assert (None, "plateaued") in kinds(found)  # and so the loss does not move
    only(found, {("body", "ratio_low"), ("head", "ratio_low"), (None, "plateaued")})


@pytest.mark.parametrize("seed", range(10))
def test_healthy_runs_of_the_reference_model_give_no_finding(tmp_path, seed):
    store = Store(tmp_path)
    train(store, "r", seed=seed, kind="adam" if seed % 2 else "sgd", steps=200)
    assert somatize.diagnose(store, run="r") == []


@pytest.mark.parametrize("seed", range(10))
def test_healthy_runs_of_a_six_node_model_give_no_finding(tmp_path, seed):
    store = Store(tmp_path)
    train(store, "r", g=deep(seed), seed=seed, kind="adam" if seed % 2 else "sgd", steps=200)
    assert somatize.diagnose(store, run="r") == []


FRESH = """
import json, sys
import somatize
found = somatize.diagnose(sys.argv[1], run=sys.argv[2])
print(json.dumps({"found": [f.to_dict() for f in found], "torch": "torch" in sys.modules}))
"""


def fresh(store_path, run):
    out = subprocess.run(
        [sys.executable, "-c", FRESH, str(store_path), run], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def as_json(found):
    return json.loads(json.dumps([f.to_dict() for f in found]))


def test_a_fresh_process_without_torch_finds_the_same_from_the_store_alone(tmp_path):
    store = Store(tmp_path)
    g = deep(0, dead=True)
    train(store, "r", g=g, params=[p for n in g.nodes[:-1] for p in n.parameters()], steps=120)
    here = somatize.diagnose(store, run="r")
    assert {"dying", "not_updated"} <= {f.kind for f in here}
    there = fresh(tmp_path, "r")
    assert there["torch"] is False
    assert there["found"] == as_json(here)


KILLED = """
import sys
sys.path.insert(0, {tests!r})
import torch
from somatize import Recorder, Store
from somatize.torch import Trainer
from torch_models import batches, built

g = built(0)
opt = torch.optim.Adam(g.node("body").parameters(), lr=1e-2)  # head left out
recorder = Recorder(Store(sys.argv[1]), run="r")
trainer = Trainer(g, torch.nn.functional.mse_loss, opt, watching=recorder)
data = batches(50)
for i in range(120):
    trainer.step(data[i % 50])
recorder.flush()
print("half", flush=True)
while True:
    for b in data:
        trainer.step(b)
"""


def test_a_run_killed_with_kill_9_half_way_is_diagnosed_on_what_it_recorded(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED.format(tests=HERE), str(tmp_path)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    try:
        assert child.stdout.readline().strip() == "half"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        child.stdout.close()
    steps = len(record_curve(tmp_path, "r", "loss"))
    assert steps >= 120
    (f,) = somatize.diagnose(tmp_path, run="r")
    assert (f.node, f.kind, f.first) == ("head", "not_updated", 0)
    # to the last step recorded: its loss, or only its first facts when the kill cut the step's flush
    assert steps - 1 <= f.last <= steps
    assert fresh(tmp_path, "r")["found"] == as_json([f])


def test_the_first_updates_are_all_recorded_then_one_in_every(tmp_path):
    from somatize.torch._instruments import EVERY, FIRST

    store = Store(tmp_path)
    n = FIRST + 3 * EVERY
    train(store, "r", steps=n)
    steps = record_curve(store, "r", "grad_norm/body").index.tolist()
    later = [s for s in range(FIRST, n) if s % EVERY == 0]
    assert steps == list(range(FIRST)) + later and len(later) >= 3
    assert record_curve(store, "r", "out_zeros/head").index.tolist() == steps


def test_the_instruments_facts_of_a_step_come_after_the_nodes_and_before_updated(tmp_path):
    store = Store(tmp_path)
    train(store, "r", steps=1)
    said = [(f["fact"], f.get("node")) for f in facts(store, "r", forward=0)]
    nodes = ("body", "head")
    # the forward's, and the time its outputs' reading took in it (instruments_us)
    assert said[:6] == [*((k, n) for n in nodes for k in ("ran", "out_zeros")), ("finished", None),
                        ("instruments_us", None)]
    update = [s for s in said[6:] if s[0] in INSTRUMENT_FACTS]
    assert update == [(k, n) for n in nodes for k in ("grad_norm", "weight_norm", "update_norm", "grad_zeros")]
    assert said[6 + len(update):] == [
        ("updated", None), ("loss", None), ("wall_s", None), ("objective_us", None), ("backward_us", None),
        ("update_us", None), ("lr", None), ("backward_us", "head"), ("backward_us", "body"), ("trainer_us", None),
    ]  # each node's backward: the gradient reaches head first


@pytest.mark.parametrize("name", sorted(INSTRUMENT_FACTS))
def test_a_node_may_not_forge_an_instrument_fact(name):
    from somatize import Graph, Node

    class Forger(Node):
        def forward(self, x, ctx):
            ctx.fact(name, value=0.0)
            return x

    with pytest.raises(somatize.NodeError, match=f"{name}' is one of the Trainer's own facts"):
        Graph.somatize(Forger()).forward(1.0, watching=lambda f: None)


def test_the_update_ratio_curve_shows_the_threshold_that_decided(tmp_path):
    from somatize._diagnose import curve

    store = Store(tmp_path)
    train(store, "r", lr=1e-8, kind="sgd", steps=40)
    f = next(f for f in somatize.diagnose(store, run="r") if f.kind == "ratio_low")
    shown = curve(store, "r", f)
    assert shown.index.name == "step" and shown.index[0] == 0 and len(shown) >= 10
    assert (shown < f.line).all()  # every point below the line drawn
    norms = record_curve(store, "r", f"update_norm/{f.node}") / record_curve(store, "r", f"weight_norm/{f.node}")
    assert shown.tolist() == norms.tolist()


def test_a_threshold_is_an_argument_that_changes_the_opinion(tmp_path):
    store = Store(tmp_path)
    train(store, "r", steps=60)
    assert somatize.diagnose(store, run="r") == []
    strict = somatize.diagnose(store, run="r", ratio=(0.2, 0.3))  # a band healthy Adam steps sit below
    assert {f.kind for f in strict} == {"ratio_low"}
    with pytest.raises(SomatizeValueError, match="explod"):
        somatize.diagnose(store, run="r", exploding=3)


def test_a_run_without_instruments_is_judged_on_its_loss_alone(tmp_path):
    from somatize import Graph, Node, Recorder

    class Noop(Node):
        def forward(self, x, ctx):
            return x

    g = Graph.somatize(Noop())
    with Recorder(tmp_path, run="forwards-only") as rec:
        for i in range(5):
            g.forward(i, watching=rec)
    assert somatize.diagnose(tmp_path, run="forwards-only") == []
    g = built(0)
    with Recorder(tmp_path, run="no-instruments") as rec:
        sgd = torch.optim.SGD(somatize.torch.parameters(g), lr=1.0)
        t = somatize.torch.Trainer(g, torch.nn.functional.mse_loss, sgd, watching=rec, instruments=False)
        with pytest.raises(somatize.torch.NonFiniteLoss):
            for b in batches(50):
                t.step(b)
    (f,) = somatize.diagnose(tmp_path, run="no-instruments")  # no node's numbers: no node's finding
    assert (f.node, f.kind, f.first) == (None, "diverged", 2)


def test_diagnosing_writes_nothing(tmp_path):
    train(Store(tmp_path), "r", steps=30)

    def files():
        return {(p, p.stat().st_size, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")}

    before = files()
    somatize.diagnose(tmp_path, run="r")
    assert files() == before


@pytest.mark.parametrize("bad", [
    {"explode": "100"}, {"dying": -1}, {"ratio": (0.3, 1e-5)}, {"ratio": 0.1}, {"sustain": 2.5}, {"plateau": True},
    {"vanish": float("nan")},
])
def test_a_threshold_that_is_not_a_positive_number_is_refused_naming_it(tmp_path, bad):
    train(Store(tmp_path), "r", steps=5)
    (name,) = bad
    with pytest.raises(SomatizeValueError, match=f"{name}=") as e:
        somatize.diagnose(tmp_path, run="r", **bad)
    assert "like" in str(e.value)  # and what to write instead


def test_a_forged_instrument_value_is_read_as_no_count_not_a_crash(tmp_path):
    from somatize import Recorder

    with Recorder(tmp_path, run="forged") as rec:
        rec({"fact": "not_optimized", "node": "x", "value": float("nan")})
        rec({"fact": "loss", "value": 1.0})
    assert somatize.diagnose(tmp_path, run="forged") == []


def test_the_curve_of_another_runs_finding_is_refused_naming_the_node(tmp_path):
    from somatize._diagnose import curve

    store = Store(tmp_path)
    g = built(0)
    train(store, "sick", g=g, params=g.node("body").parameters(), steps=20)
    (f,) = somatize.diagnose(store, run="sick")
    with somatize.Recorder(store, run="other") as rec:
        rec({"fact": "loss", "value": 1.0})
    with pytest.raises(somatize.SomatizeError, match="node 'head'"):
        curve(store, "other", f)
