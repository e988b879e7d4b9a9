"""Reading a training's numbers off the device in bulk, so no step waits
for it.

The rule kept here: the record is the same as if every fact had been handed
over as it happened. A step keeps its loss as a 0-d tensor and holds its
facts, and the engine's, back in one list (``_graph.watchers.held``: a
forward's beginning as ``None``); the instruments hand their numbers over as
0-d tensors with the facts they fill (``owe``). ``read_held`` then reads
them all in one ``.tolist()`` (one host sync; a handful of calls into torch
however many numbers are owed), writes each value into its fact, and hands
every fact held to the watchers in order (``Watchers.replay``; a Recorder
takes them in one ``list.extend``).

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

from .._base.errors import NonFiniteLoss

READ_EVERY, READ_AT_MOST_NS = 32, 250_000_000


class Reading:
    """What a Trainer holds until it reads, and when it reads: the losses
    not read yet (0-d tensors, of consecutive steps), their loss facts, the
    instruments' numbers owed (0-d tensors, the facts they fill and how),
    and the facts held back from ``watchers``. ``last``: the last loss read
    (a float). ``every``: the Trainer's ``read_every``; ``due``: the clock
    (``clock()``, perf_counter_ns) by which the losses are read in any case.
    Data parallel (``ranks``): ``rank_losses``, beside each loss held, each
    rank's own (times its examples, a tensor), read only to name a rank
    whose loss was not finite."""

    __slots__ = ("held", "losses", "loss_facts", "owed", "last", "rank_losses", "watchers", "every", "ranks",
                 "due", "_clock", "_unraised")

    def __init__(self, watchers, every, ranks, clock):
        self.held = []
        self.losses = []
        self.loss_facts = []
        self.owed = []
        self.last = None
        self.rank_losses = []
        self.watchers, self.every, self.ranks, self._clock = watchers, every, ranks, clock
        self.due = clock() + READ_AT_MOST_NS
        self._unraised = None  # a non-finite loss read where it could not be refused

    def owe(self, tensors, facts, finish, counts=0):
        """``tensors`` (0-d, on the device) fill the facts' ``value`` on the
        next read: ``finish`` turns the list of their values (floats, in
        order) into one value per fact. The last ``counts`` of them are
        integers (counts), the others floating: told, not asked of each
        tensor when read."""
        self.owed.append((tensors, facts, finish, counts))

    def value(self, loss, index):
        """A step's loss (a 0-d tensor), detached; read off the device here
        only with ``read_every=1`` in one process, and refused then, before
        its backward, when it is not finite."""
        if self.every > 1 or self.ranks is not None:  # ranks: the loss over every rank's is checked
            return loss.detach()
        value = self.last = loss.item()
        if value - value != 0.0:  # nan for inf and nan: not finite
            e = NonFiniteLoss(
                f"step {index}: the loss is {value}; nothing was updated (the weights, the "
                "optimizer's state and any open group's gradients are as before the group "
                "began). Look at this batch, lower the learning rate, or pass clip= to the Trainer."
            )
            e.step, e.loss, e.ranks = index, value, []
            raise e
        return loss.detach()

    def refuse(self, loss, index):
        """Data parallel, ``read_every=1``: the loss over every rank's
        examples read off the device right after the all-reduce, before any
        update; refused on every rank at once when it is not finite."""
        value = self.last = loss.item()
        if value - value != 0.0:
            own = not_finite(self.ranks.losses)
            e = NonFiniteLoss(
                f"step {index}: the loss over every rank's examples is {value} ({_own(own)}); nothing was "
                "updated on any rank (the weights, the optimizer's state and any open group's gradients are as "
                "before the group began), and every rank raises this. Look at that rank's share of this batch, "
                "lower the learning rate, or pass clip= to the Trainer."
            )
            e.step, e.loss, e.ranks = index, value, [r for r, _ in own]
            raise e

    def read(self, steps, check=True, last=None, every_rank=False):
        """Read what is held and hand the facts over (``read_held``); ``steps``:
        the steps begun, ``last``: the step of the last loss held (by default
        the last step). Raises ``NonFiniteLoss`` naming the first step whose
        loss was not finite, unless ``check`` is False: then it is kept, and
        refused at the next read that checks. Data parallel: a non-finite
        loss is refused at a read every rank makes at the same point
        (``every_rank``: deliver, close_group, checkpoint), or at the end of
        the step ``read_every - 1`` after it, by which every rank has read it
        (a rank reads whenever ``read_every`` losses are held); until then it
        is kept, and read for each step (its reads by time or by a watcher
        differ from rank to rank)."""
        found = self.read_held(steps - 1 if last is None else last)
        self.due = self._clock() + READ_AT_MOST_NS
        bad, self._unraised = self._unraised or found, None
        if bad is None:
            return
        ranks = self.ranks
        if ranks is not None and not every_rank and steps < bad[0] + self.every:
            check = False
        if not check:
            self._unraised = bad  # refused at the next read that can
            if ranks is not None:
                self.due = 0  # the step it is refused at ends in a read on every rank
            return
        later = f"read off the device {steps - 1 - bad[0]} steps later (read_every={self.every})"
        if ranks is None:
            e = NonFiniteLoss(
                f"step {bad[0]}: the loss is {bad[1]}, {later}, so those steps ran, and updated the weights, "
                "after it. Resume from a checkpoint kept before it, look at that batch, lower the learning "
                "rate or pass clip=; read_every=1 refuses a non-finite loss before its backward, touching "
                "nothing."
            )
        else:
            e = NonFiniteLoss(
                f"step {bad[0]}: the loss over every rank's examples is {bad[1]} ({_own(bad[2])}), {later}, "
                "so those steps ran, and updated the weights on every rank, after it; every rank raises "
                "this at the same step. Resume from a checkpoint kept before it, look at that rank's share "
                "of the batch, lower the learning rate or pass clip=; read_every=1 refuses a non-finite "
                "loss before the update, the weights untouched."
            )
        e.step, e.loss, e.ranks = bad[0], bad[1], [] if bad[2] is None else [r for r, _ in bad[2]]
        raise e

    def read_held(self, last_step):
        """Read everything held off the device in one go and hand the facts
        held to the watchers. Returns ``(step, value, ranks)`` of the first
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
            self.watchers.replay(taken)
        return bad


def _own(ranks):
    """Which ranks' own loss was not finite, in words."""
    if not ranks:
        return "no rank's own loss was: their sum overflowed"
    return "; ".join(f"rank {r}'s own loss was {v}" for r, v in ranks)


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
