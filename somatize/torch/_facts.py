"""A watched step's facts, after the engine's, and the clocks they carry.

The rule kept here: a step's facts come in one order, whatever path the step
took, and its clocks add up to its wall time outside the graph. After the
engine's ``finished`` of the step's last forward (with ``micro=N`` a step
runs N forwards; on the instruments' recorded steps each forward's
``finished`` is followed by its ``instruments_us``, ``_instruments``):
``{"fact": "updated"}`` when the step closed a group (and the update was
not skipped by fp16's scaler), then ``{"fact": "loss",
"value": <float>}``, the loss of the whole batch of the step, then, on the
steps that say their clocks, ``{"fact": "wall_s", "value": <float>}``, the
clock (seconds since 1970) when the step began, and its parts in µs,
``objective_us`` (the objective included), ``backward_us`` and
``update_us`` (unscale, clip, the optimizer's step, zero_grad, the
schedule's step; 0 when the step closed no group), and ``{"fact": "lr"}``,
the learning rate of the optimizer's first parameter group as the step
began (one more with ``"group": i`` per further group), and data parallel,
on rank 0, each rank's ``rank_us`` and ``rank_before_us``; then on the
instruments' recorded steps one ``backward_us`` per node (``_backward``),
and last ``{"fact": "trainer_us", "value": <int>}``, the µs the step spent
outside the graph's forwards: the three parts and the Trainer's own
bookkeeping (handing its facts over and a bulk read of the losses
included). A step's wall time is its forwards plus ``trainer_us``.

Which steps say their clocks (``wall_s``, the three parts, ``lr`` and the
ranks' times) is the Trainer's to say (``CLOCKS_*`` in ``_trainer.py``).
"""

from __future__ import annotations

from time import time


class StepFacts:
    """What a watched Trainer says of each step, to ``emit`` (the watchers,
    or the list that holds their facts until the next read, ``_reading``).

    The step adds its forwards' time to ``in_graph`` and, when it says its
    clocks (``begin``), its objective's, backward's and update's to
    ``split`` (ns); ``rank_us`` holds each rank's clocks of the last
    all-reduce (a tensor, ``_distributed``). ``said`` then hands the step's
    facts over, ``trainer_us`` aside: the step says that one last, after
    any read of what is held, so that the read counts too."""

    __slots__ = ("emit", "in_graph", "split", "rank_us", "due", "_reading", "_optimizer", "_micro", "_ranks",
                 "_clock", "_began_s", "_lrs")

    def __init__(self, emit, reading, optimizer, micro, ranks, clock):
        self.emit = emit
        self.in_graph = 0  # ns inside the graph's forwards this step
        self.split = [0, 0, 0]  # ns of the step in the objective, the backward, the update
        self.rank_us = None  # each rank's work µs in the last step, then its µs before it
        self._reading, self._optimizer, self._micro, self._ranks = reading, optimizer, micro, ranks
        self._clock = clock  # the instruments' backward clock, or None
        self._began_s = 0.0  # the clock when the last step that said its clocks began: its wall_s
        self._lrs = []  # each parameter group's learning rate as that step began
        self.due = 0  # perf_counter_ns by which a step says its clocks whatever its index

    def begin(self, due):
        """A step that says its clocks begins; the next one that says them
        whatever its index is one that begins at ``due`` (perf_counter_ns) or later."""
        self.due = due
        self._began_s = time()
        self.split[:] = (0, 0, 0)
        self._lrs = [group["lr"] for group in self._optimizer.param_groups]  # what this step's update uses

    def said(self, value, updated, clocks):
        """The step's facts, ``trainer_us`` aside: ``value`` its loss (a 0-d
        tensor, or a float when read already), ``updated`` whether its update
        moved the weights, ``clocks`` whether the step says its clocks."""
        emit, reading = self.emit, self._reading
        if updated:
            emit({"fact": "updated"})
        if reading.every > 1:
            fact = {"fact": "loss", "value": value}  # its value read off the device in bulk (_reading)
            reading.loss_facts.append(fact)
            emit(fact)
        else:
            # read_every=1: the step's loss was read as it ended (a micro step's pieces: their sum is read here)
            whole = value if value.__class__ is float else reading.last if self._micro == 1 else value.item()
            emit({"fact": "loss", "value": whole})
        if clocks:
            emit({"fact": "wall_s", "value": self._began_s})
            objective, backward, update = self.split
            emit({"fact": "objective_us", "value": objective // 1000})
            emit({"fact": "backward_us", "value": backward // 1000})
            emit({"fact": "update_us", "value": update // 1000})
            for i, lr in enumerate(self._lrs):
                lr = lr if lr.__class__ is float else float(lr)
                emit({"fact": "lr", "value": lr} if i == 0 else {"fact": "lr", "group": i, "value": lr})
            if self.rank_us is not None:  # every rank's work in this step, and its time before it (_distributed)
                said = [{"fact": fact, "rank": rank, "value": None} for fact in ("rank_us", "rank_before_us")
                        for rank in range(self._ranks.size)]
                if reading.every > 1:
                    reading.owe(self.rank_us.unbind(), said, list)  # read off the device with the losses
                else:
                    for fact, us in zip(said, self.rank_us.tolist()):
                        fact["value"] = us
                for fact in said:
                    emit(fact)
        clock = self._clock
        if clock is not None and clock.armed:
            clock.hand_over()

