"""The digits CNN: scikit-learn's 1,797 real 8x8 handwritten digits (shipped
inside the package, nothing downloaded), a small CNN cut into two nodes, and
the same modules trained by a hand-written loop. Shared by the tests and
bench/bench_digits.py."""

import torch

from somatize import Graph, Node, Opaque


class Features(Node):
    """Two convolutions and a pooling: 1x8x8 -> 32x4x4."""

    def __init__(self, dropout=0.0):
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Dropout(dropout),
        )

    def forward(self, x, ctx):
        return Opaque(self.net(x))

    def parameters(self):
        return list(self.net.parameters())


class Classifier(Node):
    def __init__(self, dropout=0.0):
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(32 * 4 * 4, 64), torch.nn.ReLU(), torch.nn.Dropout(dropout),
            torch.nn.Linear(64, 10),
        )

    def forward(self, x, ctx):
        return Opaque(self.net(x))

    def parameters(self):
        return list(self.net.parameters())


def cnn(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    return Graph.somatize(Features(dropout).named("features") >> Classifier(dropout).named("classifier"))


def modules(g):
    """The graph's modules as one torch.nn.Sequential (the same objects: training one trains the other)."""
    return torch.nn.Sequential(g.node("features").net, g.node("classifier").net)


def digits(dtype=torch.float32):
    """(train, test) datasets of (image 1x8x8 scaled to [0, 1], label): 1,437 and 360, a fixed split."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=dtype).unsqueeze(1) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    cut = 1437
    train = torch.utils.data.TensorDataset(x[:cut], y[:cut])
    test = torch.utils.data.TensorDataset(x[cut:], y[cut:])
    return train, test


def epoch_batches(seed=3, size=64):
    """One shuffled epoch of the training digits as a list of batches (the
    order fixed by ``seed``): what the benches of a hand loop time."""
    train, _ = digits()
    shuffled = torch.utils.data.DataLoader(train, batch_size=size, shuffle=True,
                                           generator=torch.Generator().manual_seed(seed))
    return list(shuffled)
