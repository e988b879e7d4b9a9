"""Train and eval modes: the Trainer's, never the graph's.

The rule kept here: a frozen node is settled, so its torch modules are in
eval mode (BatchNorm's running statistics stay still, dropout is off), from
``freeze(g)`` on and during every step; a trainable node's modules are in
train mode during a step. An evaluation puts every module in eval mode and
gives each back the mode it had. The modules are found on the nodes
(``_weights.modules``: attributes that are torch modules, in lists and dicts
too); a node is never asked.
"""

from __future__ import annotations

from contextlib import contextmanager

from ._weights import modules


class Modes:
    """The modes of a graph's modules, read once when the Trainer is made.

    ``train()`` (before each step) puts each module back in the mode its node
    wants if anything moved it: a check of one flag a module when nothing did.
    A module held by a frozen node and by a trainable one stays in eval mode:
    a frozen node's state may not move.
    """

    __slots__ = ("_tops", "_flat")

    def __init__(self, g):
        wanted = {}  # id(top module) -> (module, wants train mode)
        for node in g.nodes:
            for m in modules(node):
                have = wanted.get(id(m))
                wanted[id(m)] = (m, not node.is_frozen and (have is None or have[1]))
        self._tops = list(wanted.values())
        # every submodule with its top's wish: one flag to read each, per step
        self._flat = tuple((sub, want, top) for top, want in self._tops for sub in top.modules())

    def train(self):
        """Frozen nodes' modules in eval mode, the others' in train mode."""
        for sub, want, top in self._flat:
            if sub.training is not want:
                top.train(want)  # the top's own train() (a subclass may do more than set flags)

    @contextmanager
    def evaluating(self):
        """Every module in eval mode inside; each submodule's own mode back after."""
        was = [(sub, sub.training) for sub, _, _ in self._flat]
        try:
            for top, _ in self._tops:
                top.train(False)  # eval mode
            yield
        finally:
            for sub, training in was:
                sub.training = training
