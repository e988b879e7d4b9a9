"""Reading a training's numbers off the device in bulk, so no step waits
for it.

The rule kept here: the record is the same as if every fact had been handed
over as it happened. A step keeps its loss as a 0-d tensor and holds its
facts, and the engine's, back in one list (``_graph.watchers.held``: a
forward's beginning as ``None``); the instruments hand their numbers over as
tensors with the facts they fill (``owe``). ``read`` then reads them all in
one ``torch.cat(...).tolist()`` (one host sync), writes each value into its
fact, and hands every fact held to the watchers in order
(``Watchers.replay``; a Recorder takes them in one ``list.extend``).

When the Trainer reads: every ``read_every`` steps (32), at most
``READ_AT_MOST_NS`` (0.25 s) after the last read, at ``close_group()``,
``deliver()``, a checkpoint, and whenever a Recorder or Live watching is
flushed, closed, queried or drawn from the training's thread (their
``held_by``). A watcher that is a plain function is never held back from:
with one, ``read_every`` defaults to 1 and each loss is read as its step
ends. What a watcher sees is up to ``read_every`` steps late; a non-finite
loss is found on the read, after the steps up to it have run (the Trainer
refuses it then, naming its step).
"""

from __future__ import annotations

import torch

READ_EVERY, READ_AT_MOST_NS = 32, 250_000_000


class Reading:
    """What a Trainer holds until it reads: the losses not read yet (0-d
    tensors, of consecutive steps), their loss facts, the instruments'
    numbers owed (a tensor and the facts it fills), and the facts held back
    from the watchers. ``last``: the last loss read (a float)."""

    __slots__ = ("held", "losses", "loss_facts", "owed", "last")

    def __init__(self):
        self.held = []
        self.losses = []
        self.loss_facts = []
        self.owed = []
        self.last = None

    def owe(self, values, facts):
        """``values`` (a tensor) fills the facts' ``value``, in order, on the next read."""
        self.owed.append((values, facts))

    def read(self, watchers, last_step):
        """Read everything held off the device in one go and hand the facts
        held to ``watchers``. Returns ``(step, value)`` of the first loss
        that is not finite (``last_step``: the step of the last loss held),
        or None."""
        losses, owed = self.losses, self.owed
        values = None
        if owed:
            parts = [t.reshape(-1).double() for t, _ in owed]
            if losses:
                parts.append(torch.stack(losses).double())
            flat = torch.cat(parts).tolist()  # the one host sync
            at = 0
            for _, facts in owed:
                for fact in facts:
                    fact["value"] = flat[at]
                    at += 1
            owed.clear()
            values = flat[at:]
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
                    bad = (last_step - len(values) + 1 + i, v)
                    break
            self.last = values[-1]
            losses.clear()
        items = self.held
        if items:
            # Out of the list before they are handed over: a watcher that asks
            # for what is held while taking these (Live drawing, a Recorder
            # flushed) reads again and finds nothing twice.
            taken = items[:]
            items.clear()
            watchers.replay(taken)
        return bad
