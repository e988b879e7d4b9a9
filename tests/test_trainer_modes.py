"""Train and eval modes belong to the Trainer: a frozen node's modules are in
eval mode from freeze(g) on, a trainable node's in train mode during a step.
Each is checked against a hand-written torch loop or the module's own state."""

import copy

import torch

from somatize import Graph, Node, Opaque, Store
from somatize.torch import Trainer, freeze, parameters


class Backbone(Node):
    """A frozen part with state that train mode would move: BatchNorm's
    running statistics, and dropout."""

    def __init__(self, p=0.0):
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                       torch.nn.Dropout(p))

    def forward(self, x, ctx):
        return Opaque(self.net(x))

    def parameters(self):
        return list(self.net.parameters())


class Head(Node):
    def __init__(self, p=0.0):
        self.layers = [torch.nn.Dropout(p), torch.nn.Linear(16, 1)]  # modules in a list are found too
        self.seen = []  # the mode each forward saw

    def forward(self, x, ctx):
        self.seen.append(self.layers[0].training)
        return Opaque(self.layers[1](self.layers[0](x)))

    def parameters(self):
        return list(self.layers[1].parameters())


def graph(p_body=0.0, p_head=0.0, cached=False, seed=0):
    torch.manual_seed(seed)
    body = Backbone(p_body).named("body").frozen()
    if cached:
        body = body.cached()
    return Graph.somatize(body >> Head(p_head).named("head"))


def data(k, n=32, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, 6, generator=gen) * 3 + 1, torch.randn(n, 1, generator=gen)) for _ in range(k)]


def test_freeze_puts_a_frozen_nodes_modules_in_eval_mode_and_leaves_the_others():
    g = graph()
    freeze(g)
    assert not any(m.training for m in g.node("body").net.modules())
    assert all(m.training for m in g.node("head").layers)


def test_a_frozen_batchnorm_nodes_statistics_do_not_move_over_100_steps():
    g = graph()
    bn = g.node("body").net[1]
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    t = Trainer(g, objective=torch.nn.functional.mse_loss, optimizer=torch.optim.SGD(parameters(g), lr=1e-2))
    for batch in data(100):
        t.step(batch)
    after = bn.state_dict()
    for k, v in before.items():
        assert torch.equal(after[k], v), k
    assert int(after["num_batches_tracked"]) == 0


def test_a_frozen_node_put_back_in_train_mode_by_hand_is_in_eval_mode_again_at_the_next_step():
    g = graph()
    t = Trainer(g, objective=torch.nn.functional.mse_loss, optimizer=torch.optim.SGD(parameters(g), lr=1e-2))
    g.node("body").net.train()
    g.node("head").layers[0].eval()
    t.step(data(1)[0])
    assert not any(m.training for m in g.node("body").net.modules())
    assert g.node("head").seen == [True]  # the trainable node's dropout was in train mode during the step
    assert torch.equal(g.node("body").net[1].running_mean, torch.zeros(16))


def test_dropout_in_a_frozen_backbone_is_off_exactly_as_a_hand_written_loop_with_it_in_eval_mode():
    g = graph(p_body=0.5, p_head=0.3)
    body, head = copy.deepcopy(g.node("body").net), copy.deepcopy(torch.nn.Sequential(*g.node("head").layers))
    body.requires_grad_(False)
    body.eval()
    head.train()
    oracle = torch.optim.SGD(head.parameters(), lr=0.05)
    t = Trainer(g, objective=torch.nn.functional.mse_loss, optimizer=torch.optim.SGD(parameters(g), lr=0.05))
    batches = data(20)
    torch.manual_seed(7)
    for batch in batches:
        t.step(batch)
    torch.manual_seed(7)  # the head's dropout draws the same masks: the body's draws none
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(head(body(x)), y)
        loss.backward()
        oracle.step()
        oracle.zero_grad()
    for a, b in zip(g.node("head").layers[1].parameters(), head[1].parameters()):
        assert torch.equal(a, b)


def test_a_cached_frozen_batchnorm_node_trains_on_without_being_blamed_for_changed_weights(tmp_path):
    g = graph(cached=True)
    t = Trainer(g, objective=torch.nn.functional.mse_loss, optimizer=torch.optim.SGD(parameters(g), lr=1e-2),
                store=Store(tmp_path))
    batch = data(1)[0]
    first = t.step(batch)
    for _ in range(3):  # the same batch again: recalled from the cache, weights still as frozen
        t.step(batch)
    assert t.steps == 4 and first > 0
