"""Nodes, and the expressions ``>>`` builds out of them.

The rule kept here: a node needs nothing from its subclass but
``forward(self, x, ctx)``. Subclasses never call ``super().__init__()``, so
every piece of engine state has a class-level default and is written to the
instance only when set.
"""

from __future__ import annotations

import re

from .._base.errors import SomatizeTypeError, SomatizeValueError


class _Expr:
    """What ``>>`` composes: a node, a chain, a fan. The one place ``>>`` is
    written; a list, tuple or dict on either side becomes a fan (``_expr``)."""

    __slots__ = ()

    def __rshift__(self, other):
        return _Chain((self, _expr(other)))

    def __rrshift__(self, other):
        return _Chain((_expr(other), self))


class Node(_Expr):
    """A step of a graph. Subclass it and define ``forward(self, x, ctx)``.

    Subclasses need not call ``super().__init__()``: the engine's state lives
    in class-level defaults and is written to the instance only when set.
    """

    _sz_name = None
    _sz_auto = False  # the name was given by Graph.somatize, not by the user
    _sz_frozen = False
    _sz_cached = False
    _sz_weights = None  # (digest, still) once somatize.torch.freeze ran
    # None, or a method returning what else the node's output depends on beyond
    # its class and attributes (classes, functions, text): hashed into its
    # fingerprint as the code it reaches (somatize.torch.Module: the wrapped
    # module's classes and structure)
    _sz_reaches = None

    def named(self, name):
        """Name this node (letters, digits, ``_``, ``-``, ``.``); returns the node,
        so it chains: ``Body().named("body") >> Head()``. Names are unique in a
        graph; the record's facts and ``nodes()`` rows go by them."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise SomatizeValueError(
                f"{name!r} cannot name a node: use letters, digits, '_', '-' or '.', "
                "starting with a letter or '_' (for example .named('body'))"
            )
        self._sz_name = name
        self._sz_auto = False
        return self

    def frozen(self):
        """This node is settled: its output depends on its input alone."""
        self._sz_frozen = True
        return self

    def cached(self):
        """This node's output is worth keeping in the Store (needs .frozen())."""
        self._sz_cached = True
        return self

    @property
    def name(self):
        """The node's name: given by ``.named()``; else, once a graph is built,
        its class name in snake case (``_2``, ``_3`` … for the same class again)."""
        return self._sz_name

    @name.setter
    def name(self, value):
        self.named(value)

    @property
    def is_frozen(self):
        """Whether ``.frozen()`` was called."""
        return self._sz_frozen

    @property
    def is_cached(self):
        """Whether ``.cached()`` was called."""
        return self._sz_cached

    def __repr__(self):
        badges = "".join(
            f".{b}()" for b, on in (("frozen", self._sz_frozen), ("cached", self._sz_cached)) if on
        )
        name = f".named({self._sz_name!r})" if self._sz_name and not self._sz_auto else ""
        return f"{type(self).__name__}(){name}{badges}"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


def set_weights(node, digest, still):
    """Record the digest of a node's weights (called by somatize.torch.freeze).

    ``still()`` answers whether the weights are still the ones digested; a
    cache is never served or written for a node whose weights moved.
    """
    node._sz_weights = (digest, still)


# --- composing ---------------------------------------------------------------


class _Chain(_Expr):
    __slots__ = ("parts",)

    def __init__(self, parts):
        flat = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, _Chain) else (p,))
        self.parts = tuple(flat)

    def __repr__(self):
        return " >> ".join(map(repr, self.parts))


class _Fan(_Expr):
    """Branches that each get the same input; their outputs meet as a tuple
    (from a list or tuple) or a dict (from a dict)."""

    __slots__ = ("branches", "keys")

    def __init__(self, branches, keys=None):
        self.branches = branches
        self.keys = keys

    def __repr__(self):
        if self.keys is None:
            return "[" + ", ".join(map(repr, self.branches)) + "]"
        return "{" + ", ".join(f"{k!r}: {b!r}" for k, b in zip(self.keys, self.branches)) + "}"


def _expr(x):
    if isinstance(x, _Expr):
        return x
    if isinstance(x, (list, tuple)):
        if not x:
            raise SomatizeValueError("an empty list cannot be a fan-out: give it at least one node")
        return _Fan(tuple(_expr(b) for b in x))
    if isinstance(x, dict):
        if not x:
            raise SomatizeValueError("an empty dict cannot be a fan-out: give it at least one node")
        for k in x:
            if not isinstance(k, str):
                raise SomatizeTypeError(
                    f"fan-out dict keys must be strings; got {k!r}: write {{'name': node, ...}}"
                )
        return _Fan(tuple(_expr(b) for b in x.values()), tuple(x))
    if isinstance(x, type) and issubclass(x, Node):
        raise SomatizeTypeError(
            f"{x.__name__} is a Node class, not a node: write {x.__name__}() to make one"
        )
    raise SomatizeTypeError(
        f"cannot compose {type(x).__name__} {x!r:.60} with >>: a graph is made of Node "
        "instances, lists/tuples of them (fan-out, their outputs meet as a tuple) and "
        "dicts of them (outputs meet as a dict). Wrap a function in a Node subclass "
        "with forward(self, x, ctx)."
    )
