"""Small runs for the diagnosis tests, healthy and sick on purpose."""

import torch

from somatize import Graph, Node, Opaque, Recorder
from somatize.torch import Trainer, parameters

from torch_models import batches, built

ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "none": lambda x: x}


class Layer(Node):
    """Linear, then an activation; ``scale`` multiplies its input (huge
    inputs saturate a sigmoid), ``bias`` sets the Linear's bias (a large
    negative one kills a ReLU)."""

    def __init__(self, n_in, n_out, act="relu", scale=1.0, bias=None):
        self.linear = torch.nn.Linear(n_in, n_out)
        if bias is not None:
            torch.nn.init.constant_(self.linear.bias, bias)
        self.act, self.scale = act, scale

    def forward(self, x, ctx):
        return Opaque(ACTIVATIONS[self.act](self.linear(x * self.scale)))

    def parameters(self):
        return list(self.linear.parameters())


def deep(seed=0, dead=False, saturated=False, width=32):
    """Six nodes: relu, tanh, relu, tanh, relu, out; one made sick on request."""
    torch.manual_seed(seed)
    layers = [
        Layer(8, width, "relu").named("l1"),
        Layer(width, width, "sigmoid" if saturated else "tanh", scale=100.0 if saturated else 1.0).named("l2"),
        Layer(width, width, "relu", bias=-100.0 if dead else None).named("l3"),
        Layer(width, width, "tanh").named("l4"),
        Layer(width, width, "relu").named("l5"),
        Layer(width, 1, "none").named("out"),
    ]
    g = layers[0]
    for layer in layers[1:]:
        g = g >> layer
    return Graph.somatize(g)


def train(store, run, g=None, optimizer=None, steps=200, seed=0, params=None, lr=None, kind="adam"):
    """Train ``g`` (the reference model by default) for ``steps`` steps, watched
    by a Recorder; a NonFiniteLoss ends it early. Returns the Trainer."""
    g = g if g is not None else built(seed)
    params = params if params is not None else parameters(g)
    if optimizer is None:
        if kind == "adam":
            optimizer = torch.optim.Adam(params, lr=lr or 1e-2)
        else:
            optimizer = torch.optim.SGD(params, lr=lr or 1e-2, momentum=0.9)
    with Recorder(store, run=run) as recorder:
        trainer = Trainer(g, torch.nn.functional.mse_loss, optimizer, watching=recorder)
        for b in batches(steps, seed=seed + 1):
            try:
                trainer.step(b)
            except FloatingPointError:
                break
    return trainer
