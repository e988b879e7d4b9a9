"""Any ``torch.nn.Module`` as a node, in one line: ``Module(net).named("backbone")``.

The rule kept here: a wrapped module is a node like a hand-written one. Its
input is handed to ``net`` (a tuple spread as arguments, a dict as keyword
arguments), its output crosses as ``Opaque`` (autograd intact, as a
hand-written node's ``Opaque(self.net(x))``); its weights, its mode and its
freezing are found where every node's are (``self.net``, an attribute:
``_weights.modules``, ``state``); and its fingerprint counts the wrapped
module's code (its classes) and structure (its submodules' names, classes
and settings), so a ``.cached()`` one never serves what another net computed.
"""

from __future__ import annotations

import torch

from .._base.errors import SomatizeTypeError
from .._base.values import Opaque
from .._graph.node import Node

_PLAIN = (type(None), bool, int, float, str)


class Module(Node):
    """A graph node that runs a ``torch.nn.Module``: ``Module(net).named("backbone") >> head``.

    ``forward`` hands its input to ``net``: a tuple as positional arguments
    (``net(*x)``, the outputs of a fan-in ``[a, b] >> Module(net)`` too), a
    dict as keyword arguments (``net(**x)``), anything else whole
    (``net(x)``); with ``unpack=False`` always whole. What ``net`` returns
    crosses as ``Opaque`` (it stays in this process, autograd intact: what a
    hand-written node returns as ``Opaque(self.net(x))``), a tensor, a tuple
    or a model's output object alike.

    The node's parameters are ``net.parameters()`` (``parameters(g)`` and the
    Trainer find them), its modes are the Trainer's, ``freeze(g)`` freezes
    it and ``export``/``load`` name its weights ``"net.<name in net>"``. Its
    fingerprint counts, beyond its weights' digest once ``freeze(g)`` ran,
    the code of each class among ``net``'s submodules (classes of torch
    itself by their name and torch's version), each submodule's name in
    ``net`` and its settings (plain attributes such as a convolution's
    ``stride`` or a dropout's ``p``), so a frozen, cached one recomputes when
    the net's code, layout or weights change.
    """

    def __init__(self, net, unpack=True):
        if not isinstance(net, torch.nn.Module):
            raise SomatizeTypeError(_not_a_module(net))
        if not isinstance(unpack, bool):
            raise SomatizeTypeError(f"Module(net, unpack={unpack!r:.40}): unpack is True or False")
        self.net = net
        self.unpack = unpack

    def forward(self, x, ctx):
        """``Opaque(net(*x))`` for a tuple, ``Opaque(net(**x))`` for a dict (unless
        ``unpack=False``), else ``Opaque(net(x))``."""
        if self.unpack:
            if x.__class__ is tuple:
                return Opaque(self.net(*x))
            if x.__class__ is dict:
                return Opaque(self.net(**x))
        return Opaque(self.net(x))

    def parameters(self):
        """``net``'s parameters: what an optimizer trains unless the node is frozen."""
        return list(self.net.parameters())

    def _sz_reaches(self):
        """What the fingerprint counts of ``net`` beyond its weights: torch's
        version, then for each submodule in order its name, its class (one
        of torch's by name, any other by its code, as the engine counts a
        node's class) and its plain attributes."""
        yield f"torch {torch.__version__}"
        for name, m in self.net.named_modules():
            klass = type(m)
            yield f"module {name!r}"
            if klass.__module__ == "torch" or klass.__module__.startswith("torch."):
                yield f"torch class {klass.__module__}.{klass.__qualname__}"
            else:
                yield klass
            for attr, v in sorted(vars(m).items()):
                if attr.startswith("_") or attr == "training":
                    continue
                yield f"attribute {attr}"
                yield _setting(v)

    def __repr__(self):
        return f"Module({type(self.net).__name__})" + super().__repr__().removeprefix("Module()")


def _setting(v):
    """A submodule's plain attribute as the fingerprint reads it: numbers,
    text and tuples or lists of them by their repr, anything else as is
    (a function by its code, an object by its type)."""
    if _plain(v):
        return repr(v)
    return v


def _plain(v):
    if isinstance(v, (tuple, list)):
        return all(map(_plain, v))
    return v.__class__ in _PLAIN


def _not_a_module(net):
    if isinstance(net, type) and issubclass(net, torch.nn.Module):
        return f"Module({net.__name__}) was given the class; give it a module: Module({net.__name__}(...))"
    if isinstance(net, Node):
        return f"Module({net!r}) was given a node; a node goes in the graph as it is: write {net!r} >> ..."
    return (
        f"Module(net) runs a torch.nn.Module; got a {type(net).__module__}.{type(net).__qualname__}. "
        "Wrap a function in a Node subclass with forward(self, x, ctx), or in a torch.nn.Module"
    )
