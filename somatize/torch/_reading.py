"""Reading a training's numbers off the device in bulk, so no step waits
for it.

The rule kept here: the record is the same as if every fact had been handed
over as it happened. A step keeps its loss as a 0-d tensor and holds its
facts, and the engine's, back in one list (``_graph.watchers.held``: a
forward's beginning as ``None``); the instruments hand their numbers over as
0-d tensors with the facts they fill (``owe``). ``read`` then reads them all
in one ``.tolist()`` (one host sync; a handful of calls into torch however
many numbers are owed), writes each value into its fact, and hands every
fact held to the watchers in order
(``Watchers.replay``; a Recorder takes them in one ``list.extend``).

When the Trainer reads: every ``read_every`` steps (32), at most
``READ_AT_MOST_NS`` (0.25 s) after the last read, at ``close_group()``,
``deliver()``, a checkpoint, and whenever a Recorder or Live watching is
flushed, closed, queried or drawn from the training's thread (their
``held_by``). A watcher that is a plain function is never held back from:
with one, ``read_every`` defaults to 1 and each loss is read as its step
ends. What a watcher sees is up to ``read_every`` steps late; a non-finite
loss is found on the read, after the steps up to it have run (the Trainer
refuses it then, naming its step; data parallel, at a step every rank
refuses it at, naming the rank).
"""

from __future__ import annotations

import torch

READ_EVERY, READ_AT_MOST_NS = 32, 250_000_000


class Reading:
    """What a Trainer holds until it reads: the losses not read yet (0-d
    tensors, of consecutive steps), their loss facts, the instruments'
    numbers owed (0-d tensors, the facts they fill and how), and the facts held back
    from the watchers. ``last``: the last loss read (a float). Data parallel:
    ``rank_losses``, beside each loss held, each rank's own (times its
    examples, a tensor), read only to name a rank whose loss was not finite."""

    __slots__ = ("held", "losses", "loss_facts", "owed", "last", "rank_losses")

    def __init__(self):
        self.held = []
        self.losses = []
        self.loss_facts = []
        self.owed = []
        self.last = None
        self.rank_losses = []

    def owe(self, tensors, facts, finish, counts=0):
        """``tensors`` (0-d, on the device) fill the facts' ``value`` on the
        next read: ``finish`` turns the list of their values (floats, in
        order) into one value per fact. The last ``counts`` of them are
        integers (counts), the others floating: told, not asked of each
        tensor when read (~0.5 µs a tensor, measured)."""
        self.owed.append((tensors, facts, finish, counts))

    def read(self, watchers, last_step):
        """Read everything held off the device in one go and hand the facts
        held to ``watchers``. Returns ``(step, value, ranks)`` of the first
        loss that is not finite (``last_step``: the step of the last loss
        held; ``ranks``: the ranks whose own loss was not finite then, or
        None in one process), or None."""
        losses, owed = self.losses, self.owed
        values = None
        if owed:
            floats, ints = [], []
            for ts, _, _, k in owed:
                if k:
                    floats += ts[:len(ts) - k]
                    ints += ts[len(ts) - k:]
                else:
                    floats += ts
            got_f, got_i = split_values_of(floats + losses, ints)  # the one host sync
            at_f = at_i = 0
            for ts, facts, finish, k in owed:
                n = len(ts) - k
                got = got_f[at_f:at_f + n] + got_i[at_i:at_i + k] if k else got_f[at_f:at_f + n]
                for fact, v in zip(facts, finish(got)):
                    fact["value"] = v
                at_f += n
                at_i += k
            owed.clear()
            values = got_f[at_f:]
        elif losses:
            try:
                values = torch.stack(losses).tolist()  # the one host sync
            except RuntimeError:  # losses on several devices
                values = [t.item() for t in losses]
        bad = None
        if losses:
            facts = self.loss_facts
            if facts:
                for fact, v in zip(facts, values):
                    fact["value"] = v
                facts.clear()
            for i, v in enumerate(values):
                if v - v != 0.0:  # nan for inf and nan: not finite
                    bad = (last_step - len(values) + 1 + i, v, not_finite(self.rank_losses[i])
                           if self.rank_losses else None)
                    break
            self.last = values[-1]
            losses.clear()
            self.rank_losses.clear()
        items = self.held
        if items:
            # Out of the list before they are handed over: a watcher that asks
            # for what is held while taking these (Live drawing, a Recorder
            # flushed) reads again and finds nothing twice.
            taken = items[:]
            items.clear()
            watchers.replay(taken)
        return bad


def not_finite(rank_losses):
    """The ranks whose own loss (its slot of the all-reduce) was not finite, and each one's value."""
    return [(rank, v) for rank, v in enumerate(rank_losses.tolist()) if v - v != 0.0]


def split_values_of(floats, ints):
    """The values of 0-d floating tensors and of 0-d integer ones, as two
    lists of floats, in one host sync: each kind stacked apart as float64
    (torch promotes among the floating ones exactly; no count past 2**24 is
    rounded to a float32)."""
    try:
        f = torch.stack(floats).double()
        if not ints:
            return f.tolist(), []
        got = torch.cat([f, torch.stack(ints).double()]).tolist()
    except RuntimeError:  # on several devices
        return [float(t.item()) for t in floats], [float(t.item()) for t in ints]
    return got[:len(floats)], got[len(floats):]


def values_of(tensors):
    """The values of 0-d tensors as floats, in order, in one host sync: the
    floating ones stacked (torch promotes among them exactly), the integer
    ones (counts) apart, both as float64, so no count past 2**24 is rounded
    to a float32."""
    ints = [i for i, t in enumerate(tensors) if not t.is_floating_point()]
    try:
        if not ints:
            return torch.stack(tensors).double().tolist()
        taken = set(ints)
        floats = [i for i in range(len(tensors)) if i not in taken]
        parts = [torch.stack([tensors[i] for i in ints]).double()]
        if floats:
            parts.insert(0, torch.stack([tensors[i] for i in floats]).double())
        got = torch.cat(parts).tolist()
    except RuntimeError:  # on several devices
        return [float(t.item()) for t in tensors]
    out = [0.0] * len(tensors)
    for i, v in zip(floats + ints, got):
        out[i] = v
    return out
