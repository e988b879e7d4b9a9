"""The reference notebook's two nodes and a hand-written torch loop over the
same modules: the oracle the Trainer is tested against."""

import copy

import torch
from torch.overrides import TorchFunctionMode

from somatize import Graph, Node, Opaque
from somatize.torch import parameters


class Body(Node):
    def __init__(self, width=32, dropout=0.0):
        drop = [torch.nn.Dropout(dropout)] if dropout else []  # a random stream for a resume to keep
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, width), torch.nn.ReLU(), *drop, torch.nn.Linear(width, width)
        )

    def forward(self, x, ctx):
        return Opaque(self.net(x))

    def parameters(self):
        return list(self.net.parameters())


class Head(Node):
    def __init__(self, width=32):
        self.out = torch.nn.Linear(width, 1)

    def forward(self, x, ctx):
        return Opaque(self.out(x))

    def parameters(self):
        return list(self.out.parameters())


def built(seed=0, dtype=torch.float32, frozen_body=False):
    torch.manual_seed(seed)
    body = Body().named("body")
    if frozen_body:
        body = body.frozen()
    g = Graph.somatize(body >> Head().named("head"))
    for n in g.nodes:
        for p in n.parameters():
            p.data = p.data.to(dtype)
    return g


def batches(k, n=64, dtype=torch.float32, seed=1):
    gen = torch.Generator().manual_seed(seed)
    truth = torch.randn(8, 1, generator=gen, dtype=dtype)
    out = []
    for _ in range(k):
        x = torch.randn(n, 8, generator=gen, dtype=dtype)
        out.append((x, x @ truth + 0.1 * torch.randn(n, 1, generator=gen, dtype=dtype)))
    return out


def optimizer(kind, params):
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-2)
    return torch.optim.SGD(params, lr=1e-2, momentum=0.9)


class Oracle:
    """A plain torch loop on copies of a graph's modules: one update per
    call, on the concatenation of the batches it is given."""

    def __init__(self, g, kind, clip=None):
        self.net = torch.nn.Sequential(copy.deepcopy(g.node("body").net), copy.deepcopy(g.node("head").out))
        self.trainable = [p for m, n in zip(self.net, g.nodes) if not n.is_frozen for p in m.parameters()]
        for m, n in zip(self.net, g.nodes):
            if n.is_frozen:
                m.requires_grad_(False)
        self.opt = optimizer(kind, self.trainable)
        self.clip = clip
        self.norms = []

    def update(self, group):
        x = torch.cat([b[0] for b in group])
        y = torch.cat([b[1] for b in group])
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        loss.backward()
        if self.clip is not None:
            self.norms.append(float(torch.nn.utils.clip_grad_norm_(self.trainable, self.clip)))
        self.opt.step()
        self.opt.zero_grad()
        return loss.item()

    def weights(self):
        return {
            "body": {"net." + k: v for k, v in self.net[0].state_dict().items()},
            "head": {"out." + k: v for k, v in self.net[1].state_dict().items()},
        }


def trained_optimizer(kind, g):
    return optimizer(kind, parameters(g))


class HostSyncs(TorchFunctionMode):
    """Counts what reads a tensor's value into Python (a host sync on a GPU),
    outside the optimizer's own step (torch keeps Adam's step count on the
    CPU, so its .item() there waits for no device)."""

    READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__float__, torch.Tensor.__int__,
             torch.Tensor.__bool__, torch.Tensor.__index__, torch.Tensor.numpy, torch.Tensor.__format__}

    def __init__(self, optimizer):
        super().__init__()
        self.count = 0
        self.inside = 0
        step = optimizer.step

        def counted_step(*a, **k):
            self.inside += 1
            try:
                return step(*a, **k)
            finally:
                self.inside -= 1

        optimizer.step = counted_step

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.READS and not self.inside:
            self.count += 1
        return func(*args, **(kwargs or {}))
