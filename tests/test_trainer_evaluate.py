"""trainer.evaluate(batches, metrics=...): each against an oracle, a
hand-written torch loop or a run that never evaluated."""

import copy

import pytest
import torch

from somatize import Graph, Node, Opaque, Recorder, SomatizeError, Store
from somatize.record import curve, facts, forwards
from somatize.torch import Trainer, parameters

CLASSES = 3


class Body(Node):
    """Trainable, with what eval mode changes: BatchNorm and dropout."""

    def __init__(self):
        self.net = torch.nn.Sequential(torch.nn.Linear(5, 12), torch.nn.BatchNorm1d(12), torch.nn.ReLU(),
                                       torch.nn.Dropout(0.3))

    def forward(self, x, ctx):
        return Opaque(self.net(x))

    def parameters(self):
        return list(self.net.parameters())


class Head(Node):
    def __init__(self):
        self.out = torch.nn.Linear(12, CLASSES)

    def forward(self, x, ctx):
        return Opaque(self.out(x))

    def parameters(self):
        return list(self.out.parameters())


def graph(seed=0):
    torch.manual_seed(seed)
    return Graph.somatize(Body().named("body") >> Head().named("head"))


def data(sizes, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, 5, generator=gen), torch.randint(0, CLASSES, (n,), generator=gen)) for n in sizes]


def trainer(g, **kw):
    return Trainer(g, objective=torch.nn.functional.cross_entropy,
                   optimizer=torch.optim.SGD(parameters(g), lr=0.1, momentum=0.9), **kw)


def mae_of_first(out, y):  # a metric of the user's own: a function of output and target
    return (out[:, 0] - y.double()).abs().mean()


def test_val_loss_and_metrics_equal_a_hand_written_loop_weighted_by_examples():
    g = graph()
    t = trainer(g)
    for batch in data([16] * 5):
        t.step(batch)
    val = data([10, 7, 3], seed=2)  # unequal batches: a batch counts by its examples
    said = t.evaluate(val)
    net = torch.nn.Sequential(copy.deepcopy(g.node("body").net), copy.deepcopy(g.node("head").out)).eval()
    loss = right = mae = 0.0
    with torch.no_grad():
        for x, y in val:
            out = net(x)
            loss += torch.nn.functional.cross_entropy(out, y).item() * len(x)
            right += (out.argmax(dim=1) == y).sum().item()
            mae += mae_of_first(out, y).item() * len(x)
    assert said == {"val_loss": loss / 20}
    said = t.evaluate(val, metrics=("accuracy",))
    assert said == {"val_loss": loss / 20, "val_accuracy": right / 20}
    said = t.evaluate(val, metrics={"mae": mae_of_first})
    assert said == {"val_loss": loss / 20, "val_mae": mae / 20}


def test_an_evaluation_moves_no_weight_and_gives_every_module_its_mode_back():
    g = graph()
    t = trainer(g)
    t.step(data([16])[0])
    before = t.export()
    body, head = g.node("body").net, g.node("head").out
    body[3].eval()  # a mix of modes, each to be given back as it was
    head.eval()
    modes = [m.training for m in (*body.modules(), head)]
    seen = []

    def all_in_eval(out, y):
        seen.append(any(m.training for m in (*body.modules(), head)))
        return 0.0

    t.evaluate(data([8, 8], seed=3), metrics={"probe": all_in_eval})
    assert seen == [False, False]
    assert [m.training for m in (*body.modules(), head)] == modes
    after = t.export()
    for node, named in before.items():
        for k, v in named.items():
            assert torch.equal(after[node][k], v), (node, k)


def test_an_evaluation_changes_no_random_stream_of_training():
    """Training with dropout, groups of two steps, an evaluation in the middle
    of a group, over batches a shuffled DataLoader (which draws from torch's
    random stream) yields: the training ends as one that never evaluated."""
    train = data([16] * 8)
    x, y = (torch.cat(p) for p in zip(*data([9] * 4, seed=3)))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=9, shuffle=True)
    runs = []
    for evaluating in (False, True):
        g = graph()
        t = trainer(g, every=2)
        torch.manual_seed(11)
        losses = []
        for i, batch in enumerate(train):
            losses.append(t.step(batch))
            if evaluating and i in (2, 4):
                state = torch.get_rng_state()
                t.evaluate(loader, metrics=("accuracy",))
                assert torch.equal(torch.get_rng_state(), state)
        t.close_group()
        runs.append((losses, t.export()))
    (losses, weights), (losses_e, weights_e) = runs
    assert losses_e == losses
    for node, named in weights.items():
        for k, v in named.items():
            assert torch.equal(weights_e[node][k], v), (node, k)


def _training_facts(store, run, forward):
    """The facts of a forward as a run without evaluation has them (times apart)."""
    return [(f["fact"], f.get("node"), f.get("value") if f["fact"] == "loss" else None)
            for f in facts(store, run=run, forward=forward) if not f["fact"].startswith(("val_", "eval_"))]


def test_an_evaluation_shifts_no_training_forward_and_its_facts_land_at_the_current_step(tmp_path):
    store = Store(tmp_path)
    train, val = data([16] * 6), data([8, 8], seed=4)
    for run, evaluating in (("plain", False), ("evaluated", True)):
        g = graph()
        with Recorder(store, run=run) as rec:
            t = trainer(g, watching=rec)
            torch.manual_seed(5)
            if evaluating:
                t.evaluate(val)  # before any step: at step 0, shifting nothing
            for i, batch in enumerate(train):
                t.step(batch)
                if evaluating and i == 3:
                    t.evaluate(val, metrics=("accuracy",))
            if evaluating:
                t.evaluate(val)
    assert len(forwards(store, run="evaluated")) == len(forwards(store, run="plain")) == 6
    for n in range(6):
        assert _training_facts(store, "evaluated", n) == _training_facts(store, "plain", n), n
    assert curve(store, run="evaluated").equals(curve(store, run="plain"))
    assert curve(store, run="evaluated", name="val_loss").index.tolist() == [0, 3, 5]
    assert curve(store, run="evaluated", name="val_accuracy").index.tolist() == [3]
    took = curve(store, run="evaluated", name="eval_us")
    assert took.index.tolist() == [0, 3, 5] and (took >= 0).all()
    assert [f["fact"] for f in facts(store, run="evaluated", forward=3)][-3:] == ["val_loss", "val_accuracy",
                                                                                "eval_us"]


def test_an_unwatched_trainer_evaluates_and_says_nothing():
    g = graph()
    said = trainer(g).evaluate(data([4]), metrics="accuracy")
    assert set(said) == {"val_loss", "val_accuracy"}


@pytest.mark.parametrize(("metrics", "words"), [
    (("top5",), r"'top5' is not a metric somatize knows.*metrics=\{'top5': lambda out, y"),
    ({"loss": mae_of_first}, r"'loss' is the objective's, said as val_loss"),
    ({"mae": 3}, r"'mae' maps to 3, which is not callable"),
    (5, r"metrics=5: give names of metrics"),
])
def test_a_metric_that_cannot_be_computed_is_refused_before_any_batch_is_read(metrics, words):
    read = []

    def batches():
        read.append(1)
        yield from data([4])

    with pytest.raises(SomatizeError, match=words):
        trainer(graph()).evaluate(batches(), metrics=metrics)
    assert read == []


def test_accuracy_on_outputs_that_are_not_class_scores_is_refused_naming_a_function_to_write():
    g = graph()
    t = Trainer(g, objective=lambda out, y: out.square().mean(), optimizer=torch.optim.SGD(parameters(g), lr=0.1))
    with pytest.raises(SomatizeError, match=r"metric 'accuracy' takes class scores.*\(out > 0\)"):
        t.evaluate([(torch.randn(4, 5), torch.rand(4))], metrics=("accuracy",))


def test_no_batch_at_all_is_refused():
    with pytest.raises(SomatizeError, match="held no example"):
        trainer(graph()).evaluate([])
