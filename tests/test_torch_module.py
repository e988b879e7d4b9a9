"""``somatize.torch.Module(net)``: any torch module as a node. Trained by the
Trainer it is the hand-written loop on the same net, bit for bit; its
parameters, modes, freezing, cache and export are a hand-written node's; its
fingerprint follows the net's code, layout and weights."""

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from digits_models import digits

from somatize import Graph, Node, Opaque, SomatizeTypeError, SomatizeValueError, Store
from somatize.torch import Module, Trainer, export, freeze, load, parameters

CE = torch.nn.functional.cross_entropy


class CNN(torch.nn.Module):
    """A user's own module: two convolutions, BatchNorm and dropout (state and
    randomness that the modes decide), features out."""

    def __init__(self, dropout=0.25):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.drop = torch.nn.Dropout(dropout)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv1(x)))
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.drop(x.flatten(1))


class Head(Node):
    """A hand-written node after the wrapped one."""

    def __init__(self):
        self.out = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x, ctx):
        return Opaque(self.out(x))

    def parameters(self):
        return list(self.out.parameters())


def graph(seed=0, dropout=0.25, frozen=False, cached=False):
    torch.manual_seed(seed)
    backbone = Module(CNN(dropout)).named("backbone")
    if frozen:
        backbone = backbone.frozen()
    if cached:
        backbone = backbone.cached()
    return Graph.somatize(backbone >> Head().named("head"))


def batches(k, n=64):
    train, _ = digits()
    return [(train.tensors[0][i * n:(i + 1) * n], train.tensors[1][i * n:(i + 1) * n]) for i in range(k)]


# --- trained: the hand-written loop -------------------------------------------------------


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_a_wrapped_net_trained_by_the_trainer_is_the_hand_written_loop_bit_for_bit(kind):
    g = graph()
    net = torch.nn.Sequential(copy.deepcopy(g.node("backbone").net), copy.deepcopy(g.node("head").out))

    def optimizer(params):
        return torch.optim.Adam(params, lr=1e-3) if kind == "adam" else torch.optim.SGD(params, lr=0.05, momentum=0.9)

    said = []
    trainer = Trainer(g, objective=CE, optimizer=optimizer(parameters(g)), watching=said.append)
    oracle = optimizer(net.parameters())
    data = batches(12)
    torch.manual_seed(7)  # the dropout masks: drawn in the same order by both
    for b in data:
        trainer.step(b)
    trainer.deliver()
    torch.manual_seed(7)
    want = []
    for x, y in data:
        loss = CE(net(x), y)
        want.append(loss.item())
        loss.backward()
        oracle.step()
        oracle.zero_grad()
    assert [f["value"] for f in said if f["fact"] == "loss"] == want
    got = export(g)
    assert list(got) == ["backbone", "head"]
    for k, t in net[0].state_dict().items():  # running statistics too
        assert torch.equal(got["backbone"]["net." + k], t), k
    for k, t in net[1].state_dict().items():
        assert torch.equal(got["head"]["out." + k], t), k


def test_the_graph_s_parameters_are_the_net_s_and_a_frozen_one_s_are_left_out():
    g = graph()
    net = g.node("backbone").net
    assert [id(p) for p in parameters(g)] == [id(p) for p in [*net.parameters(), *g.node("head").out.parameters()]]
    frozen = graph(frozen=True)
    assert [id(p) for p in parameters(frozen)] == [id(p) for p in frozen.node("head").out.parameters()]
    freeze(frozen)
    assert not any(p.requires_grad for p in frozen.node("backbone").net.parameters())


# --- modes: the Trainer's ------------------------------------------------------------------


def test_the_trainer_puts_the_net_in_train_mode_for_a_step_and_eval_mode_to_evaluate():
    g = graph(dropout=0.5)
    net = g.node("backbone").net
    net.eval()  # moved by hand: the Trainer's step puts it back
    trainer = Trainer(g, objective=CE, optimizer=torch.optim.SGD(parameters(g), lr=0.05))
    seen = []
    hook = net.drop.register_forward_hook(lambda m, i, o: seen.append(m.training))
    data = batches(3)
    trainer.step(data[0])
    net.train()
    got = trainer.evaluate(data[1:])
    hook.remove()
    assert seen == [True, False, False]
    assert net.training and net.drop.training  # its own mode given back
    with torch.no_grad():  # by hand: eval mode, dropout off, the mean over every example
        net.eval()
        total = sum(CE(g.node("head").out(net(x)), y, reduction="sum").item() for x, y in data[1:])
        net.train()
    assert got["val_loss"] == pytest.approx(total / 128, rel=1e-6)


def test_a_frozen_net_stays_in_eval_mode_and_its_batchnorm_statistics_do_not_move():
    g = graph(frozen=True)
    freeze(g)
    net = g.node("backbone").net
    before = {k: v.clone() for k, v in net.bn.state_dict().items()}
    trainer = Trainer(g, objective=CE, optimizer=torch.optim.SGD(parameters(g), lr=0.05))
    net.train()
    for b in batches(5):
        trainer.step(b)
    assert not any(m.training for m in net.modules())
    for k, v in net.bn.state_dict().items():
        assert torch.equal(v, before[k]), k


# --- frozen and cached ------------------------------------------------------------------------


def test_a_frozen_cached_net_keeps_its_outputs_and_recalls_them(tmp_path):
    g = graph(frozen=True, cached=True)
    freeze(g)
    store = Store(tmp_path)
    x = batches(1)[0][0]
    facts = []
    first = g.forward(Opaque(x), store=store, watching=facts.append)
    again = g.forward(Opaque(x), store=store, watching=facts.append)
    said = [(f["fact"], f.get("node")) for f in facts if f["fact"] in ("ran", "kept", "recalled")]
    assert said == [("ran", "backbone"), ("kept", "backbone"), ("ran", "head"),
                    ("recalled", "backbone"), ("ran", "head")]
    assert torch.equal(first, again)
    net = g.node("backbone").net
    with torch.no_grad():
        assert torch.equal(first, g.node("head").out(net(x)))  # eval mode: dropout off
    assert [n for n in store.names() if n.startswith("cache/backbone/")]


def test_new_weights_change_the_fingerprint_and_the_cache_computes_again(tmp_path):
    g = graph(frozen=True, cached=True)
    freeze(g)
    store = Store(tmp_path)
    x = batches(1)[0][0]
    g.forward(Opaque(x), store=store)
    before = g.fingerprints()["backbone"]
    net = g.node("backbone").net
    with torch.no_grad():  # trained further elsewhere: one step of another loop
        net.conv1.weight.add_(0.01)
    with pytest.raises(SomatizeValueError, match="changed after freeze"):
        g.forward(Opaque(x), store=store)  # never served stale
    freeze(g)
    assert g.fingerprints()["backbone"] != before
    facts = []
    out = g.forward(Opaque(x), store=store, watching=facts.append)
    assert ("kept", "backbone") in [(f["fact"], f.get("node")) for f in facts]
    with torch.no_grad():
        assert torch.equal(out, g.node("head").out(net(x)))


def test_a_frozen_cached_net_without_freeze_is_refused_naming_freeze(tmp_path):
    g = graph(frozen=True, cached=True)
    with pytest.raises(SomatizeValueError, match=r"freeze\(g\)"):
        g.forward(Opaque(batches(1)[0][0]), store=Store(tmp_path))


def fingerprint(net):
    g = Graph.somatize(Module(net).named("m").frozen())
    freeze(g)
    return g.fingerprints()["m"]


def test_the_fingerprint_follows_the_net_s_code_not_only_its_weights():
    # as in a notebook: the class redefined with the same name and weights, another forward
    space = {"torch": torch, "__name__": "notebook_cell"}
    made = []
    for act in ("relu", "tanh", "relu"):
        exec(textwrap.dedent(f"""
            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lin = torch.nn.Linear(4, 4)

                def forward(self, x):
                    return torch.{act}(self.lin(x))
        """), space)
        torch.manual_seed(0)
        made.append(fingerprint(space["Net"]()))
    assert made[0] != made[1] and made[0] == made[2]


def test_a_helper_the_net_calls_is_part_of_the_fingerprint():
    space = {"torch": torch, "__name__": "notebook_cell"}
    exec("def act(x):\n    return x * 2\n", space)
    exec("class Net(torch.nn.Module):\n    def forward(self, x):\n        return act(x)\n", space)
    net = space["Net"]()
    before = fingerprint(net)
    exec("def act(x):\n    return x * 3\n", space)
    assert fingerprint(net) != before


def test_the_fingerprint_follows_the_net_s_layout_and_settings():
    nn = torch.nn

    def seq(*layers):  # each made after the seed: the same weights
        torch.manual_seed(0)
        return fingerprint(nn.Sequential(*(make() for make in layers)))

    def linear():
        return nn.Linear(4, 4)

    base = seq(linear, nn.ReLU, lambda: nn.Dropout(0.1))
    assert seq(linear, nn.ReLU, lambda: nn.Dropout(0.1)) == base
    assert seq(linear, nn.ReLU, lambda: nn.Dropout(0.5)) != base
    assert seq(linear, nn.Tanh, lambda: nn.Dropout(0.1)) != base
    assert seq(linear, lambda: nn.Dropout(0.1), nn.ReLU) != base
    conv = seq(lambda: nn.Conv2d(1, 1, 3, padding=1))
    assert seq(lambda: nn.Conv2d(1, 1, 3, padding=1, padding_mode="reflect")) != conv


def test_a_cached_net_is_recalled_by_another_process(tmp_path):
    """The fingerprint is the same in every process (str hashing seeded anew
    each time): what one session kept, the next recalls."""
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from somatize import Graph, Opaque, Store
        from somatize.torch import freeze
        from test_torch_module import graph
        g = freeze(graph(frozen=True, cached=True))
        facts = []
        torch.manual_seed(1)
        g.forward(Opaque(torch.rand(4, 1, 8, 8)), store=Store({str(tmp_path)!r}), watching=facts.append)
        print(*[f["fact"] for f in facts if f.get("node") == "backbone"])
    """)
    said = [subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONHASHSEED": str(seed)},
                           capture_output=True, text=True, check=True).stdout.split() for seed in (1, 2)]
    assert said == [["ran", "kept"], ["recalled"]]


# --- what crosses its edges ---------------------------------------------------------------------


class Two(Node):
    def __init__(self, k):
        self.k = k

    def forward(self, x, ctx):
        return Opaque(x * self.k)


def test_a_tuple_is_spread_as_arguments_and_a_dict_as_keyword_arguments():
    torch.manual_seed(0)
    bilinear = torch.nn.Bilinear(3, 3, 2)
    x = torch.randn(5, 3)
    want = bilinear(x * 2, x * 3)
    fan_in = Graph.somatize([Two(2).named("a"), Two(3).named("b")] >> Module(bilinear).named("m"))
    assert torch.equal(fan_in.forward(Opaque(x)), want)
    by_name = Graph.somatize({"input2": Two(3).named("b"), "input1": Two(2).named("a")} >> Module(bilinear))
    assert torch.equal(by_name.forward(Opaque(x)), want)


def test_unpack_false_hands_a_tuple_whole():
    class Pair(torch.nn.Module):
        def forward(self, pair):
            return pair[0] - pair[1]

    x = torch.randn(3)
    g = Graph.somatize([Two(5).named("a"), Two(1).named("b")] >> Module(Pair(), unpack=False).named("m"))
    assert torch.equal(g.forward(Opaque(x)), x * 5 - x)


def test_the_output_crosses_as_opaque_autograd_intact_a_tuple_too():
    class Split(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            return y[:, :2], y[:, 2:]

    class Sum(Node):
        def forward(self, x, ctx):
            a, b = x
            return Opaque(a.sum() + b.sum())

    m = Module(Split()).named("split")
    out = Graph.somatize(m >> Sum().named("sum")).forward(Opaque(torch.randn(3, 4)))
    out.backward()
    assert m.net.lin.weight.grad is not None and m.net.lin.weight.grad.abs().sum() > 0


# --- weights out and back in ---------------------------------------------------------------------


def test_export_and_load_round_trip_a_wrapped_net():
    g = graph(seed=0)
    other = graph(seed=1)
    x = batches(1)[0][0]
    g.node("backbone").net.eval()
    other.node("backbone").net.eval()
    with torch.no_grad():
        assert not torch.equal(g.forward(Opaque(x)), other.forward(Opaque(x)))
        load(other, export(g))
        assert torch.equal(g.forward(Opaque(x)), other.forward(Opaque(x)))
    assert "net.bn.running_mean" in export(g)["backbone"]


# --- refused, and shown -------------------------------------------------------------------------


@pytest.mark.parametrize("given,says", [
    (lambda x: x, r"got a builtins\.function.*Node subclass"),
    (torch.nn.Linear, r"was given the class.*Module\(Linear\(\.\.\.\)\)"),
    (Head(), r"was given a node"),
    ("net", r"got a builtins\.str"),
])
def test_what_is_not_a_module_is_refused_naming_what_to_write(given, says):
    with pytest.raises(SomatizeTypeError, match=says):
        Module(given)


def test_unpack_is_true_or_false():
    with pytest.raises(SomatizeTypeError, match="unpack is True or False"):
        Module(torch.nn.ReLU(), unpack="yes")


def test_a_wrapped_net_shows_its_class():
    assert repr(Module(CNN()).named("backbone").frozen()) == "Module(CNN).named('backbone').frozen()"
