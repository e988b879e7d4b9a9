"""The update group: the steps and pieces whose gradients one update applies.

The rule kept here: a group of steps pulls exactly as one plain step over the
concatenation of its batches would. Each piece's loss is weighted by its share
of the group's examples, so ``every=N`` (N steps, one update) and ``micro=N``
(one step cut into N pieces) are the same arithmetic as one big batch, and
they multiply. This assumes what torch's losses do by default: the objective
is a mean over the examples of its batch (``reduction="mean"``).

How the weights are chosen: a piece of n examples in a group whose first
batch held B is scaled by ``n / (every * B)`` (and by ``1 / ranks`` in a
data-parallel job, ``_distributed``); when the group closes holding T
examples instead of ``every * B`` (the batches differed in size, or the
group is left partial), its gradients are multiplied by ``every * B / T``
once before the update. A full group of equal batches is never rescaled, and
a group that is one step in one piece in one process (``every=1``,
``micro=1``) is not weighed at all: its loss is the objective's, as in a
hand-written loop.

The update (``update``): fp16's scaler unscales the gradients, the
instruments read them, ``clip`` bounds their norm, the optimizer steps (or
the scaler skips a step whose gradients hold inf or nan), the instruments
read the change, the gradients are zeroed, and a schedule stepped once per
update steps, on an update that moved the weights only.
"""

from __future__ import annotations

import math
import numbers

import torch

from .._base.errors import SomatizeValueError


def checked_clip(clip):
    """``clip=``: the max norm of the gradients before each update, a
    positive finite number, or None."""
    if clip is None:
        return None
    if isinstance(clip, bool) or not isinstance(clip, numbers.Real) or not clip > 0 or not math.isfinite(clip):
        raise SomatizeValueError(f"clip={clip!r}: give the max gradient norm as a positive number, or clip=None")
    return float(clip)


def positive_int(what, v):
    """``v`` as an int, refused unless it is a positive integer (a count the Trainer is given)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise SomatizeValueError(f"{what}={v!r}: it must be a positive integer, like {what}=4")
    return int(v)


class Group:
    """The open group of one Trainer: its settings (``every``, ``micro``,
    ``clip``, the optimizer and the schedule it steps per update) and its
    counts: ``open`` steps in it, ``examples`` in them, ``first`` the examples
    of its first step. ``whole``: every step is a group of one piece in one
    process (``every=1``, ``micro=1``), never weighed nor counted."""

    __slots__ = ("optimizer", "params", "every", "micro", "clip", "schedule", "size", "whole", "open", "examples",
                 "first")

    def __init__(self, optimizer, params, every, micro, clip, schedule, ranks):
        self.optimizer, self.params, self.clip, self.schedule = optimizer, params, clip, schedule
        self.every, self.micro = every, micro
        self.size = 1 if ranks is None else ranks.size
        self.whole = every == 1 and micro == 1 and ranks is None
        self.open = self.examples = self.first = 0

    def cut(self, x, y, index):
        """A step's batch joining the group: ``(pieces, n, unit)``, its
        pieces ``[(x, y), ...]``, its examples and the weight of one example
        (a piece of k examples weighs ``k * unit``). Not asked of a ``whole``
        group: its one piece is the step's batch, its loss not weighed."""
        micro = self.micro
        n = _count(x, y, micro, index)
        if self.open == 0:
            self.first = n
        unit = 1.0 / (self.every * self.first)
        if self.size != 1:  # this rank's share of the job's examples (_distributed.Ranks.sync)
            unit /= self.size
        pieces = zip(x.tensor_split(micro), y.tensor_split(micro)) if micro > 1 else ((x, y),)
        return pieces, n, unit

    def add(self, n):
        """The step of ``n`` examples is done; returns whether it filled the
        group. Not asked of a ``whole`` group: each step fills it."""
        self.open += 1
        self.examples += n
        return self.open == self.every

    def update(self, probe, scaler):
        """Apply the group's gradients (see the module's docstring) and open a
        new group. ``probe``: the instruments when this update is recorded,
        else None; ``scaler``: fp16's GradScaler (the Trainer's) or None.
        Returns whether the weights moved (fp16's scaler skips an update
        whose gradients hold inf or nan)."""
        if not self.whole:
            expected = self.every * self.first
            if self.examples != expected:
                grads = [p.grad for p in self.params if p.grad is not None]
                if grads:
                    torch._foreach_mul_(grads, expected / self.examples)
        optimizer = self.optimizer
        if scaler is not None:
            scaler.unscale_(optimizer)
        if probe is not None:
            probe.before_update()
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        if scaler is None:
            optimizer.step()
            moved = True
        else:
            scale = scaler.get_scale()
            scaler.step(optimizer)
            scaler.update()
            moved = scaler.get_scale() >= scale  # the scale backs off exactly when the update was skipped
        if probe is not None:
            probe.after_update()
        optimizer.zero_grad()
        self.open = self.examples = 0
        if moved and self.schedule is not None:
            self.schedule.step()
        return moved

    def drop(self):
        """Forget the open group: its gradients zeroed, nothing applied."""
        self.optimizer.zero_grad()
        self.open = self.examples = 0

    def counts(self):
        """The counts a checkpoint keeps: ``{"open", "examples", "first"}``."""
        return {"open": self.open, "examples": self.examples, "first": self.first}

    def put_back(self, counts):
        self.open, self.examples, self.first = counts["open"], counts["examples"], counts["first"]


def _count(x, y, micro, index):
    """The examples of a step's batch, after checking it can be cut and counted."""
    if x.ndim == 0:
        raise SomatizeValueError(
            f"step {index}: x is a 0-d tensor; a batch holds its examples along dim 0. "
            "Give x of shape (examples, ...), e.g. x.unsqueeze(0) for one example."
        )
    n = x.shape[0]
    if micro > 1 and (not isinstance(y, torch.Tensor) or y.ndim == 0 or y.shape[0] != n):
        what = f"shape {list(y.shape)}" if isinstance(y, torch.Tensor) else type(y).__name__
        raise SomatizeValueError(
            f"step {index}: micro={micro} cuts x and y along dim 0, but x holds {n} examples "
            f"and y is {what}; give a y with one row per example"
        )
    if micro > n:
        raise SomatizeValueError(
            f"step {index}: micro={micro} pieces of a batch of {n} examples would leave some "
            f"empty; use micro<={n} or a larger batch"
        )
    return n
