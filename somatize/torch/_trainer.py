"""The Trainer: one training run over a graph that never knows it is trained.

The rule kept here: a group of steps pulls exactly as one plain step over the
concatenation of its batches would. Each piece's loss is weighted by its share
of the group's examples, so ``every=N`` (N steps, one update) and ``micro=N``
(one step cut into N pieces) are the same arithmetic as one big batch, and
they multiply. This assumes what torch's losses do by default: the objective
is a mean over the examples of its batch (``reduction="mean"``).

How the weights are chosen: a piece of n examples in a group whose first
batch held B is scaled by ``n / (every * B)``; when the group closes holding
T examples instead of ``every * B`` (the batches differed in size, or the
group is left partial), its gradients are multiplied by ``every * B / T``
once before the update. A full group of equal batches is never rescaled.

A group left open when training ends is closed by ``close_group()`` (``fit``
calls it at the end of each epoch, so a group never spans two epochs): its partial
gradients are rescaled as above, so the update is exactly one step on the
concatenated batches it holds (not one divided by ``every``, the mistake
Lightning's issue #19987 is about). Its ``updated`` fact follows the last
step's facts, so it belongs to that step's last forward.

Facts, after the engine's ``finished`` of the step's last forward (with
``micro=N`` a step runs N forwards): ``{"fact": "updated"}`` when the step
closed a group (and the update was not skipped by fp16's scaler), then
``{"fact": "loss", "value": <float>}``, the loss of the whole batch of the
step, then, on the first 10 steps, every 20th and any step a second after
the last that did (``CLOCKS_*`` below), ``{"fact": "wall_s", "value":
<float>}``, the clock (seconds since 1970) when the step began, and its
parts in µs, ``objective_us`` (the objective included), ``backward_us`` and
``update_us`` (unscale, clip, the optimizer's step, zero_grad, the
schedule's step; 0 when the step closed no group), and ``{"fact": "lr"}``,
the learning rate of the optimizer's first parameter group as the step
began (one more with ``"group": i`` per further group), then on the
instruments' recorded steps one ``backward_us`` per node (``_backward``),
and last ``{"fact": "trainer_us", "value": <int>}``, the µs the step spent
outside the graph's forwards: the three parts and the Trainer's own
bookkeeping (handing its facts over and a bulk read of the losses
included). A step's wall time is its forwards plus ``trainer_us``;
``close_group()``'s update belongs to no step and is not in it. Steps count
from 0, like forwards.

No step waits for the device: a step keeps its loss as a 0-d tensor and
holds its facts back; they are read off the device in bulk and handed to
the watchers in order later (``_reading.py`` says when and how).

A step that raises (a node failed, the objective was refused, Ctrl-C) drops
the open group: with ``micro=N`` some of its pieces may already have run
backward, and a group holding part of a step would no longer be one step on
its batches. The weights and the optimizer's state are as they were before
the group began; the next step opens a new group; the facts held are handed
over. A non-finite loss is refused on the read that finds it
(``NonFiniteLoss`` naming its step, its facts handed over first): the cost
of not waiting is that the steps after it, up to that read, have already
run and updated the weights with its gradients. With ``read_every=1`` each
loss is read as its step ends (one host sync a step) and a non-finite one
is refused before its backward, the weights, the optimizer's state and the
open group untouched.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from time import perf_counter_ns, time

import torch

from .._base.errors import LoaderNotResumable, NonFiniteLoss, SomatizeTypeError, SomatizeValueError
from .._base.values import Opaque
from .._graph import engine as _engine
from .._graph.watchers import Watchers, held
from .._store.store import as_store
from . import _checkpoint as _kept
from . import _cursor, _distributed, _evaluate, _reading, _schedule
from ._batch import checked_keys, moved, pair
from ._instruments import Instruments, due
from ._modes import Modes
from ._weights import export, freeze, frozen_parameters, load, not_frozen_in_torch

# Which steps say their clocks (wall_s and the three parts): the first
# CLOCKS_FIRST, every CLOCKS_EVERY-th, and any step that begins
# CLOCKS_AT_MOST_NS after the last that did (a slow run still gets one a
# second). Said every step they were four more facts a step for a Recorder
# to take, encode and write (bench/RESULTS.md, Trainer: what a step costs
# now); sampled, the time axis is interpolated between them
# (_widgets._progress.clock_of) and spent scales their shares to the
# Trainer's whole bar. The indexes make the record of a run the same
# whatever the machine's speed; the clock only adds steps.
CLOCKS_FIRST, CLOCKS_EVERY, CLOCKS_AT_MOST_NS = 10, 20, 1_000_000_000
PRECISIONS = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _positive_int(what, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise SomatizeValueError(f"{what}={v!r}: it must be a positive integer, like {what}=4")
    return int(v)


class Trainer:
    """Trains ``g`` with ``optimizer`` on ``objective(output, y)``.

    ``step((x, y))`` is the primitive; ``fit(batches, epochs=1)`` is sugar
    over it. ``every=N``: one update per N steps. ``micro=N``: each step's
    batch is run as N pieces. ``clip``: max norm of the gradients (all the
    optimizer's parameters together) before each update. ``store`` is passed
    to every forward, so cached nodes are kept and recalled there.

    ``schedule``: a ``torch.optim.lr_scheduler`` over ``optimizer``. One
    whose ``step()`` takes no value is stepped once per update (never per
    step or piece, never on an update that fp16 skipped). One whose ``step``
    needs the value it watches (``ReduceLROnPlateau``, or a scheduler of
    one's own with ``step(self, metrics)``) is stepped once per evaluation
    (``evaluate``, or ``fit``'s ``evaluate=``), never per update, on the
    evaluation's ``val_loss``, or on the value ``schedule_on=`` names:
    ``schedule_on="val_accuracy"`` with ``metrics=("accuracy",)``; an
    evaluation that does not measure it is refused before it runs. A
    scheduler whose ``step`` needs anything else is refused here, naming it.
    Each step that says its clocks records the learning rate its
    update used, ``lr`` (one more fact, with ``group``, per further
    parameter group), so ``progress(store, run=..., name="lr")`` draws it.

    ``precision="bf16"`` or ``"fp16"``: the forward and the objective run
    under ``torch.autocast``; ``fp16`` scales the loss with a
    ``torch.amp.GradScaler`` (``trainer.scaler``), unscaled once before
    ``clip``; an update it skips (inf or nan gradients) is not counted and
    does not step the schedule. ``device="cuda"``: each batch is moved there
    (tensors in tuples, lists and mappings too, non-blocking); the graph's
    modules must be there already (move them before building the optimizer,
    as in any torch loop). ``keys=("x", "y")``: the keys of a mapping batch
    (a dict, as a Hugging Face dataset's DataLoader yields) that hold the
    input and the target.

    ``read_every=N``: the losses are read off the device every N steps (and
    at most 0.25 s apart, at ``close_group``, ``deliver``, a checkpoint, the
    end of ``fit``, and whenever a Recorder or Live watching is flushed,
    closed or drawn), in one go, so a step waits for no device; a watched
    step's facts reach the watchers then, in order. A non-finite loss is
    refused on that read, naming its step; the steps after it until the
    read have already run and updated the weights with it (the cost of not
    waiting). ``read_every=1`` reads each loss as its step ends and refuses
    a non-finite one before its backward, touching nothing, at one host sync
    a step. By default (None) it is 32, or 1 when a watcher is a plain
    function (which expects each step's facts as the step ends; a watcher
    that defines ``held_by(hand_over)``, as the Recorder and Live do, is
    handed what is held whenever it looks).

    A frozen node whose torch side is not frozen yet (gradients on, or no
    weights digest) is frozen here with ``freeze(g)``; an optimizer holding
    a frozen node's parameters is refused.

    ``instruments=True`` (when watched): gradient, weight and update norms
    per node, and statistics of each node's output, recorded for
    ``somatize.diagnose`` (see ``_instruments``); ``instruments=False`` turns
    them off.

    ``checkpoint="a-name"`` with ``checkpoint_every=N`` keeps a checkpoint in
    ``store`` under that name every N steps (``checkpoint()``), and a Trainer
    made with a name already kept resumes from it (``resume()``): a task
    retried after its process died goes on as if never stopped.
    ``checkpoint_also=[...]``: more objects whose state goes with it (any
    with ``state_dict``/``load_state_dict``, or a ``torch.Generator``).

    Data parallel (``_distributed``): once ``torch.distributed`` is
    initialised (torchrun, or ``somatize.torch.launch`` from a notebook), or
    given ``group=`` a process group, the Trainer trains one model across the
    ranks: rank 0's weights broadcast as it is made, each rank given its own
    share of every batch, the gradients all-reduced once per update (never
    per step or piece) and averaged over every rank's examples, so the
    weights are the same on every rank after every update (each rank's
    losses weighted by 1/ranks, so its backward sees the numbers one
    process on the whole batch would; fp16's scaler unscales the
    all-reduced gradients, so every rank skips the same updates and keeps
    one scale). The loss said is the mean over every rank's examples
    (``ranks`` says over how many);
    only rank 0's ``watching=`` hears the job, with each rank's time in a
    step and before it, loading its data (``rank_us``, ``rank_before_us``:
    ``spent`` names the rank the others wait for); a checkpoint is one, kept
    by rank 0 with each rank's own random streams, resumed on as many ranks.
    ``group=False`` trains in this process alone. The ranks read at the same
    steps (``read_every`` the least any rank asks for: 1 when rank 0 is
    watched by a plain function), and a non-finite loss, over every rank's
    examples, is refused by every rank at the same step (with
    ``read_every=1`` before the update), the ``NonFiniteLoss`` naming the
    rank whose own loss it was. Every rank makes the same calls in the same
    order (``step``, ``close_group``, ``checkpoint``, ``evaluate``, ``fit``:
    each holds a collective), on as many batches; a rank that stops makes the
    others raise ``RankLost`` within the process group's timeout.
    """

    def __init__(self, g, objective, optimizer, every=1, micro=1, watching=None, clip=None, store=None,
                 schedule=None, precision=None, device=None, keys=None, read_every=None,
                 checkpoint=None, checkpoint_every=None, checkpoint_also=(), instruments=True, group=None,
                 schedule_on=None):
        if not isinstance(g, _engine.Graph):
            raise SomatizeTypeError(
                f"Trainer(g, ...) takes a Graph; got {type(g).__name__}. Build one with Graph.somatize(a >> b)."
            )
        if not callable(objective):
            raise SomatizeTypeError(
                f"objective={objective!r:.60} is not callable: give a function of (output, y) "
                "returning a scalar tensor, like torch.nn.functional.mse_loss"
            )
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise SomatizeTypeError(
                f"optimizer= takes a torch.optim.Optimizer; got {type(optimizer).__name__}. "
                "Write optimizer=torch.optim.Adam(parameters(g), lr=1e-3)."
            )
        self.every = _positive_int("every", every)
        self.micro = _positive_int("micro", micro)
        if clip is not None:
            if isinstance(clip, bool) or not isinstance(clip, numbers.Real) or not clip > 0 or not math.isfinite(clip):
                raise SomatizeValueError(f"clip={clip!r}: give the max gradient norm as a positive number, "
                                         "or clip=None")
            clip = float(clip)
        self._schedule_on = _schedule.checked(schedule, optimizer, schedule_on)  # None: stepped per update
        self.g, self.objective, self.optimizer, self.clip, self.store = g, objective, optimizer, clip, store
        self.schedule = schedule
        self._per_update = schedule if self._schedule_on is None else None  # what an update steps
        self.keys = checked_keys(keys)

        params = [p for group in optimizer.param_groups for p in group["params"]]
        frozen = frozen_parameters(g)
        held_by = sorted({frozen[id(p)] for p in params if id(p) in frozen})
        if held_by:
            raise SomatizeValueError(
                f"the optimizer holds parameters of frozen node(s) {held_by}; a frozen node is "
                "settled and its weights may not move. Build the optimizer over "
                "somatize.torch.parameters(g), which leaves frozen nodes out."
            )
        if not_frozen_in_torch(g):
            freeze(g)
        self._modes = Modes(g)
        self._params = params
        self._ranks = ranks = _distributed.ranks_of(group)  # None: this process trains alone
        if ranks is not None:
            ranks.broadcast(params, "broadcasting rank 0's weights")  # every rank starts from rank 0's
            ranks.check_frozen(g.fingerprints())  # frozen nodes are not broadcast: they must agree already
            if ranks.rank != 0:
                watching = None  # one writer per run: rank 0's watchers hear the job (_distributed.py)
        self.device = self._checked_device(device, params)
        where = self.device.type if self.device is not None else (params[0].device.type if params else "cpu")
        if precision is not None and precision not in PRECISIONS:
            raise SomatizeValueError(f"precision={precision!r}: give 'bf16', 'fp16' or None (the weights' own)")
        self.precision = precision
        self._autocast = None if precision is None else (where, PRECISIONS[precision])
        self.scaler = torch.amp.GradScaler(where) if precision == "fp16" else None

        self._watchers = Watchers(watching, where="the Trainer's watching=")  # the watchers, as given
        self._watched = bool(self._watchers.all)
        if read_every is None:  # hold back only from watchers that ask for what is held before they look
            holdable = all(callable(getattr(w, "held_by", None)) for w in self._watchers.all)
            read_every = _reading.READ_EVERY if holdable else 1
        self.read_every = _positive_int("read_every", read_every)
        if ranks is not None:  # every rank reads at the same steps, so all refuse a non-finite loss together
            self.read_every = ranks.least(self.read_every, "agreeing on read_every")
        self._reading = reading = _reading.Reading()  # what is held until the next read (_reading.py)
        self._losses, self._loss_facts = reading.losses, reading.loss_facts  # on the step's path
        defer = self._watched and self.read_every > 1
        self._emitting = held(reading.held) if defer else self._watchers  # what the graph and the facts go to
        if defer:
            for w in self._watchers.all:
                if callable(getattr(w, "held_by", None)):
                    w.held_by(self._hand_over)  # a Recorder flushed or closed gets what was done first
        self._unraised = None  # a non-finite loss read where it could not be refused (_hand_over)
        self._resumable = [w for w in self._watchers.all
                           if callable(getattr(w, "checkpoint", None)) and callable(getattr(w, "rewind", None))]
        self._instruments = (Instruments(g, optimizer, self._emitting.emit, reading.owe if defer else None)
                             if instruments and self._watched else None)
        self._graph_forward = g.forward
        self._fast = (self.every == 1 and self.micro == 1 and self._autocast is None and self.device is None
                      and ranks is None)
        self._step_began = None  # perf_counter_ns when the step under way began (its busy time, for the ranks)
        self._step_loss = None  # (the step's loss here, its examples): what the update's all-reduce carries
        self._global_loss = None  # that loss over every rank's examples, once all-reduced
        self._rank_us = None  # each rank's work µs in the last step, then its µs before it (a tensor; _distributed)
        self._began_s = 0.0  # the clock when the last step that said its clocks began: its wall_s
        self._split = [0, 0, 0]  # ns of the step in the objective, the backward, the update (when it says clocks)
        self._lrs = []  # each parameter group's learning rate as a step that says its clocks began
        self._clocks_due = 0  # perf_counter_ns by which a step says its clocks whatever its index
        self._clock = self._instruments.clock if self._instruments is not None else None
        self._recording = False  # whether this step's update is recorded by the instruments (due)
        self.steps = 0  # steps begun, counted from 0 in error messages
        self.updates = 0
        self._read_due = perf_counter_ns() + _reading.READ_AT_MOST_NS  # by when the losses are read in any case
        self._open = 0  # steps in the open group
        self._group_n = 0  # examples in the open group
        self._first_n = 0  # examples in the open group's first batch
        self._in_graph = 0  # ns spent inside the graph's forwards this step (timed when watched)
        self._fit_at = None  # inside fit: [epoch, batches done, the RNG as that epoch drew its order]
        self._resume_at = None  # resumed: where fit stood, for the next fit to go on from
        self._fit_loader = None  # inside fit: a loader that keeps its own place (state_dict)
        self._also = _kept.checked_also(checkpoint_also)
        self._checkpoint_name = _kept.checked_name(store, checkpoint, checkpoint_every)
        self._checkpoint_every = None if checkpoint_every is None else _positive_int("checkpoint_every",
                                                                                     checkpoint_every)
        if self._checkpoint_name is not None:
            self.resume()

    # -- the primitive
    def step(self, batch):
        """Forward, loss, backward; an update when the group closes.

        Returns the loss of the whole batch as a 0-d tensor, detached, on the
        device, without waiting for it: ``float(trainer.step(b))`` reads it
        (a host sync); ``trainer.loss`` is the last one read off the device."""
        began = self._step_began = perf_counter_ns()
        if batch.__class__ is tuple and len(batch) == 2 and batch[0].__class__ is torch.Tensor and self.keys is None:
            x, y = batch  # the common case, checked in one line
        else:
            x, y = pair(batch, self.keys)
        if self.device is not None:
            x, y = moved(x, self.device), moved(y, self.device)
        index = self.steps
        self.steps = index + 1
        self._in_graph = 0
        self._modes.train()  # frozen nodes' modules in eval mode, the others' in train mode
        # Whether this step says its clocks (CLOCKS_*): only such a step is
        # timed part by part; the others time only their forwards.
        clocks = self._watched and (
            index < CLOCKS_FIRST or index % CLOCKS_EVERY == 0 or began >= self._clocks_due)
        if clocks:
            self._clocks_due = began + CLOCKS_AT_MOST_NS
            self._began_s = time()
            self._split[:] = (0, 0, 0)
            self._lrs = [group["lr"] for group in self.optimizer.param_groups]  # what this step's update uses
        if self._ranks is not None:
            self._ranks.stepping(index, began)  # launch names the last step of a rank that stops answering
        if index == 0 and self._ranks is not None and self._watched:
            self._emitting.emit({"fact": "ranks", "value": self._ranks.size})  # the loss is over this many
        if self._instruments is not None:
            self._instrument()
        try:
            if self._fast and not clocks:
                loss = self.objective(self._forward(x), y)
                value = self._value(loss, index)
                if self._clock is None or not self._clock.armed:  # self._backward's own test, inlined:
                    _backward(loss, index)  # one call less on every step that is not recorded
                else:
                    self._backward(loss, index)
                updated = self._update()
            elif self._fast:
                value, updated = self._timed(x, y, index)
            else:
                value, updated = self._grouped(x, y, index, clocks)
        except NonFiniteLoss as e:  # read_every=1: refused before its backward
            self._drop()
            if self._watched:
                self._facts(e.loss, False, began, clocks)
            raise
        except BaseException:
            self._drop()
            self._read(check=False, last=index - 1)  # what was held (the failed forward's facts) is handed over
            raise
        losses = self._losses
        if self.read_every > 1:
            losses.append(value)  # the losses held are those of the steps just before the last
        if self._watched:
            self._facts(value, updated, began, clocks)
        elif len(losses) >= self.read_every or began >= self._read_due:
            self._read()
        if self._checkpoint_every and self.steps % self._checkpoint_every == 0:
            self.checkpoint()
        return value

    def _grouped(self, x, y, index, clocks):
        n = _count(x, y, self.micro, index)
        if self._open == 0:
            self._first_n = n
        unit = 1.0 / (self.every * self._first_n)
        if self._ranks is not None:  # this rank's share of the job's examples (_distributed.Ranks.sync)
            unit /= self._ranks.size
        value = None
        pieces = zip(x.tensor_split(self.micro), y.tensor_split(self.micro)) if self.micro > 1 else ((x, y),)
        split, now = self._split, perf_counter_ns if clocks else _no_clock
        autocast, scaler = self._autocast, self.scaler
        for xi, yi in pieces:
            if autocast is None:
                out = self._forward(xi)
                t = now()
                loss = self.objective(out, yi)
            else:
                with torch.autocast(autocast[0], dtype=autocast[1]):
                    out = self._forward(xi)
                    t = now()
                    loss = self.objective(out, yi)
            k = xi.shape[0]
            part = self._value(loss, index)
            value = part if k == n else part * (k / n) if value is None else value + part * (k / n)
            scale = k * unit
            t1 = now()
            scaled = loss * scale if scale != 1.0 else loss
            self._backward(scaled if scaler is None else scaler.scale(scaled), index)
            t2 = now()
            split[0] += t1 - t
            split[1] += t2 - t1
        self._open += 1
        self._group_n += n
        closed = self._open == self.every
        ranks = self._ranks
        if closed:
            t = now()
            self._step_loss = (value, n)
            closed = self._close()
            split[2] += now() - t
            if ranks is not None:
                value = self._global_loss
        elif ranks is not None:
            t = now()
            value, self._rank_us = ranks.sync_loss(value, n, self._step_began)
            split[2] += now() - t
            if self.read_every == 1:
                self._refused(value, index)
        if ranks is not None and self.read_every > 1:
            self._reading.rank_losses.append(ranks.losses)  # beside its loss: to name a rank if not finite
        return value, closed

    def _timed(self, x, y, index):
        """A plain step, watched: its objective, backward and update each timed."""
        out = self._forward(x)
        t0 = perf_counter_ns()
        loss = self.objective(out, y)
        value = self._value(loss, index)
        t1 = perf_counter_ns()
        self._backward(loss, index)
        t2 = perf_counter_ns()
        updated = self._update()
        self._split[:] = (t1 - t0, t2 - t1, perf_counter_ns() - t2)
        return value, updated

    def _backward(self, loss, index):
        clock = self._clock
        if clock is None or not clock.armed:  # armed only on the instruments' recorded steps
            return _backward(loss, index)
        clock.began()
        _backward(loss, index)
        clock.ended()

    def close_group(self):
        """Close a group left open (fewer than ``every`` steps since the last
        update): update as one step on the concatenation of its batches, and
        read the losses held (``deliver``). Returns whether an update happened."""
        if self._open == 0:
            self.deliver()
            return False
        self._step_began = None  # no step under way: no rank is busy in it
        self._recording = self._instruments is not None and due(self.updates)
        updated = self._close()
        if updated and self._watched:
            self._emitting.emit({"fact": "updated"})
        self.deliver()
        return updated

    def _close(self):
        expected = self.every * self._first_n
        if self._group_n != expected:
            grads = [p.grad for p in self._params if p.grad is not None]
            if grads:
                torch._foreach_mul_(grads, expected / self._group_n)
        return self._update()

    def _update(self):
        """Clip, the optimizer's step, zero_grad; the schedule's step. Returns
        whether the weights moved (fp16's scaler skips an update whose
        gradients hold inf or nan)."""
        if self._ranks is not None:  # the one place gradients cross ranks (_distributed.py)
            loss, n = self._step_loss or (None, 0)
            began, self._step_loss = self._step_began, None
            self._global_loss, self._rank_us = self._ranks.sync(self._params, self._group_n, loss, n, began)
            if loss is not None and self.read_every == 1:  # refused on every rank before the weights move
                self._refused(self._global_loss, self.steps - 1)
        probe = self._instruments if self._recording else None
        scaler = self.scaler
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        if probe is not None:
            probe.before_update()
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self._params, self.clip)
        if scaler is None:
            self.optimizer.step()
            moved_ = True
        else:
            scale = scaler.get_scale()
            scaler.step(self.optimizer)
            scaler.update()
            moved_ = scaler.get_scale() >= scale  # the scale backs off exactly when the update was skipped
        if probe is not None:
            probe.after_update()
        self.optimizer.zero_grad()
        self._open = self._group_n = 0
        if moved_:
            self.updates += 1
            if self._per_update is not None:
                self._per_update.step()
        return moved_

    def _drop(self):
        self.optimizer.zero_grad()
        self._open = self._group_n = 0

    # -- the losses, read off the device in bulk (_reading.py)
    @property
    def loss(self):
        """The last loss read off the device (a float), or None."""
        return self._reading.last

    def deliver(self):
        """Read the losses of the steps not read yet off the device, in one
        go, and hand every fact held back since to the watchers, in order.
        Raises ``NonFiniteLoss`` naming the first step whose loss was nan or
        inf. ``step`` does it every ``read_every`` steps; call it to see the
        facts of the steps so far now."""
        self._read(every_rank=True)

    def _hand_over(self):
        """A Recorder is flushed, closed or read: what is held back goes first."""
        self._read(check=False)

    def _read(self, check=True, last=None, every_rank=False):
        """Read what is held (``_reading``); ``last``: the step of the last
        loss held (by default the last step). Data parallel: a non-finite
        loss is refused at a read every rank makes at the same point
        (``every_rank``: deliver, close_group, checkpoint), or at the end of
        the step ``read_every - 1`` after it, by which every rank has read it
        (a rank reads whenever ``read_every`` losses are held); until then it
        is kept, and read for each step (its reads by time or by a watcher
        differ from rank to rank)."""
        found = self._reading.read(self._watchers, self.steps - 1 if last is None else last)
        self._read_due = perf_counter_ns() + _reading.READ_AT_MOST_NS
        bad, self._unraised = self._unraised or found, None
        if bad is not None and self._ranks is not None and not every_rank and self.steps < bad[0] + self.read_every:
            check = False
        if bad is not None and not check:
            self._unraised = bad  # refused at the next read that can
            if self._ranks is not None:
                self._read_due = 0  # the step it is refused at ends in a read on every rank
        elif bad is not None:
            self._drop()
            later = f"read off the device {self.steps - 1 - bad[0]} steps later (read_every={self.read_every})"
            if self._ranks is None:
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

    def _refused(self, loss, index):
        """Data parallel, read_every=1: the loss over every rank's examples
        read off the device (one sync a step, as read_every=1 asks) right
        after the all-reduce, before any update; refused on every rank at
        once when it is not finite."""
        value = self._reading.last = loss.item()
        if value - value != 0.0:
            own = _reading.not_finite(self._ranks.losses)
            e = NonFiniteLoss(
                f"step {index}: the loss over every rank's examples is {value} ({_own(own)}); nothing was "
                "updated on any rank (the weights, the optimizer's state and any open group's gradients are as "
                "before the group began), and every rank raises this. Look at that rank's share of this batch, "
                "lower the learning rate, or pass clip= to the Trainer."
            )
            e.step, e.loss, e.ranks = index, value, [r for r, _ in own]
            raise e

    # -- sugar
    def fit(self, batches, epochs=1, progress=True, evaluate=None, metrics=None):
        """``step`` over every batch, ``epochs`` times, with a progress bar
        (tqdm's text bar on stderr, in a terminal and in a notebook alike: a
        widget bar would be saved in a notebook as it was when it appeared,
        "0%", whereas the text keeps its last state). A group left open at the
        end of an epoch is closed there (see ``close_group``).

        ``evaluate=held_out`` (batches, as ``evaluate`` takes them): after
        each epoch, once its group is closed, the Trainer evaluates on them
        with ``metrics`` (see ``evaluate``), so ``val_loss`` and
        ``val_<metric>`` land on the epoch's last step. A resumed ``fit``
        evaluates only after the epochs it runs.

        Resumed from a checkpoint kept inside ``fit``, it goes on at the batch
        and epoch where that stood: the epochs before are not run again (no
        group closed in them), and that epoch draws its batches in the same
        order (torch's RNG and a DataLoader's ``generator`` are put back as
        they were when the epoch began). The batches already done are
        skipped without loading them by a DataLoader loading in this process
        from a map-style dataset (``num_workers=0``: its sampler is
        advanced; one whose iterator lacks the torch internals this needs is
        refused with ``LoaderNotResumable`` before anything moves) or a
        loader that keeps its own place (``state_dict``/``load_state_dict``,
        as torchdata's StatefulDataLoader); any other iterable loads them
        again and drops them."""
        epochs = _positive_int("epochs", epochs)
        if epochs > 1 and _one_shot(batches):
            raise SomatizeTypeError(
                f"fit(batches, epochs={epochs}) got a one-shot iterator, which the second epoch "
                "would find empty. Give something that can be iterated again: a list, a "
                "DataLoader, or list(batches)."
            )
        if evaluate is None and metrics is not None:
            raise SomatizeValueError(
                f"fit(..., metrics={metrics!r:.60}) names metrics of an evaluation, but no batches to "
                "evaluate on: write fit(batches, evaluate=held_out, metrics=...)"
            )
        if evaluate is not None and _one_shot(evaluate):
            raise SomatizeTypeError(
                "fit(..., evaluate=...) got a one-shot iterator, which the second evaluation would "
                "find empty. Give something that can be iterated again: a list, a DataLoader, or list(...)."
            )
        if evaluate is not None:  # a schedule stepped on an evaluation's value: it must measure it
            _schedule.check_measured(self.schedule, self._schedule_on, _evaluate.checked_metrics(metrics))
        total = len(batches) if hasattr(batches, "__len__") else None
        at, self._resume_at = self._resume_at, None
        resumed = at  # put back when the loader cannot go on from there (_cursor), nothing moved
        if at is not None and at[0] is None:  # a checkpoint kept outside fit: the steps done are batches done
            at = [self.steps // total, self.steps % total, None, None] if total else [0, self.steps, None, None]
        keeps_place = callable(getattr(batches, "state_dict", None)) and callable(
            getattr(batches, "load_state_dict", None))
        self._fit_loader = batches if keeps_place else None
        bar = None
        if progress:
            import sys

            from tqdm.std import tqdm

            bar = tqdm(total=total * epochs if total is not None else None, unit="step", leave=True, file=sys.stderr)
            if at is not None:
                bar.update(at[0] * (total or 0) + at[1])
        generator = getattr(batches, "generator", None)
        generator = generator if isinstance(generator, torch.Generator) else None
        first = at[0] if at is not None else 0
        shown = None
        try:
            for epoch in range(first, epochs):
                it = self._epoch_begins(batches, epoch, at if epoch == first else None, generator, total)
                for batch in it:
                    self._fit_at[1] += 1
                    self.step(batch)
                    if bar is not None:
                        bar.update(1)
                        if self.loss is not shown:
                            shown = self.loss
                            bar.set_postfix(epoch=epoch, loss=f"{shown:.4g}", refresh=False)
                self.close_group()
                if evaluate is not None:
                    self.evaluate(evaluate, metrics)
        except LoaderNotResumable:
            self._resume_at = resumed  # so that a fit over a loader that can go on from there resumes
            raise
        finally:
            self._fit_at = self._fit_loader = None
            if bar is not None:
                bar.close()
        return self

    def _epoch_begins(self, batches, epoch, at, generator, total):
        """An iterator over the batches of ``epoch`` still to do; ``at``:
        where a resumed run stood in it ([epoch, batches done, the RNG as the
        epoch drew its order, the loader's state])."""
        skip, drawn, loader = (0, None, None) if at is None else at[1:]
        now = None if at is None else _rng_of(generator)  # the RNG as the checkpoint left it
        if drawn is not None:
            _put_rng(drawn, generator)  # the order this epoch drew
        sampler = getattr(batches, "sampler", None)
        if callable(getattr(sampler, "set_epoch", None)):  # a DistributedSampler draws each epoch's order anew
            sampler.set_epoch(epoch)
        self._fit_at = [epoch, skip, _rng_of(generator)]
        if loader is not None:  # a loader that keeps its own place (torchdata's StatefulDataLoader)
            batches.load_state_dict(loader)
            skip = 0
        it = iter(batches)
        if skip:
            try:
                _cursor.skip(batches, it, skip)  # all of them too: the epoch draws what it draws to its end (see below)
            except LoaderNotResumable:
                _put_rng(now, generator)  # as the checkpoint left them
                raise
        if now is not None:
            # Torch's RNG goes back to where the checkpoint left it; the loader's
            # generator stays where drawing this epoch's order left it, as it
            # was then: a fresh process's loader holds a generator seeded anew,
            # and a sampler draws from it again as its epoch ends (RandomSampler
            # asks for one more permutation), so the next epoch's order depends on it.
            _put_rng(now, None)
        return it

    # -- evaluation (see _evaluate.py)
    def evaluate(self, batches, metrics=None):
        """The objective and ``metrics`` on ``batches`` (pairs ``(x, y)``, as
        ``step`` takes), each the mean over all their examples, under
        ``torch.no_grad()`` with every module in eval mode (each given back
        its mode after). ``metrics``: names (``("accuracy",)``) or a dict of
        name -> ``fn(output, y)`` returning the batch's mean. Said to the
        watchers as ``val_loss``, ``val_<name>`` and ``eval_us`` at the
        current step; ``Live`` and ``progress`` draw them beside the loss.
        No weight, no random stream of training and no forward's number
        moves. Returns ``{"val_loss": v, "val_<name>": v, ...}``. A schedule
        stepped on an evaluation's value (``schedule_on``) is stepped once
        on it, after; an evaluation that does not measure that value is
        refused before any batch is read."""
        if self._schedule_on is None:
            return _evaluate.evaluate(self, batches, metrics)
        _schedule.check_measured(self.schedule, self._schedule_on, _evaluate.checked_metrics(metrics))
        said = _evaluate.evaluate(self, batches, metrics)
        self.schedule.step(said[self._schedule_on])
        return said

    # -- weights
    def export(self):
        """The graph's weights node by node: ``{"body": {"net.0.weight": t, ...}, ...}``."""
        return export(self.g)

    def load(self, exported):
        """Put an export back into the graph (in place; the optimizer keeps
        its references). Refuses mismatched nodes, names or shapes."""
        load(self.g, exported)
        return self

    # -- checkpoints: kept in a store, resumed from (see _checkpoint.py)
    def checkpoint(self, store=None, name=None):
        """Keep everything training needs to go on in ``store`` under
        ``name`` (by default the Trainer's ``store`` and ``checkpoint=``):
        the weights, the optimizer's, schedule's and gradient scaler's state,
        the step and update counters, an open group's gradients, torch's RNG
        streams, ``checkpoint_also``'s states, where ``fit`` stands, and the
        position of each watcher that can resume (a Recorder: how many
        forwards it holds, flushed first, so the record holds what the
        checkpoint has done). The losses are read first (``deliver``).
        Tensors go through the tensor codec; nothing is pickled. Returns the
        digest. Data parallel: every rank calls it (a collective), rank 0
        writes one checkpoint holding each rank's own streams and open
        gradients and returns the digest; the other ranks return None."""
        store, name = self._where(store, name)
        self._read(every_rank=True)
        fit = None
        if self._fit_at is not None:
            epoch, done, (cpu, gen) = self._fit_at
            loader = None if self._fit_loader is None else self._fit_loader.state_dict()
            fit = {"epoch": epoch, "batches": done, "rng": cpu, "generator": gen, "loader": loader}
        value = {
            "format": _kept.FORMAT,
            "counters": {"steps": self.steps, "updates": self.updates, "open": self._open,
                         "examples": self._group_n, "first": self._first_n},
            "fit": fit,
            "weights": export(self.g),
            "optimizer": _kept.optimizer_state(self.optimizer),
            "grads": _kept.grads(self._params),
            "schedule": None if self.schedule is None else self.schedule.state_dict(),
            "scaler": None if self.scaler is None else self.scaler.state_dict(),
            "rng": _kept.rng(),
            "also": [_kept.state_of(obj) for obj in self._also],
            "watchers": [w.checkpoint() for w in self._resumable],
        }
        ranks = self._ranks
        if ranks is not None:  # one checkpoint for the job, written by rank 0 (_checkpoint.py)
            fit_rng = None if self._fit_at is None else self._fit_at[2]
            value["ranks"] = _kept.per_rank(ranks, self._params, fit_rng)
            if ranks.rank != 0:
                return None
        return store.keep(name, value)

    def resume(self, store=None, name=None):
        """Go on from a checkpoint kept by ``checkpoint()``: everything it
        holds put back as it was; each watcher that can resume is rewound to
        its position then (a Recorder drops the forwards after it, so the
        steps done again are recorded once). ``fit`` then goes on where it
        stood; a loop of ``step`` goes on from ``trainer.steps``. Returns
        False, changing nothing, when nothing is kept under the name."""
        store, name = self._where(store, name)
        if store.lookup(name) is None:
            return False
        value = _kept.checked(store.recall(name), name, store, self._params, self.schedule, self.scaler,
                              self._also, self._resumable)
        mine = _kept.own_part(value, self._ranks, name)
        if mine is not None:  # this rank's own streams and gradients
            value["rng"], value["grads"] = mine["rng"], mine["grads"]
            if value["fit"] is not None and mine["fit"] is not None:
                value["fit"]["rng"], value["fit"]["generator"] = mine["fit"]
        load(self.g, value["weights"])
        _kept.load_optimizer(self.optimizer, value["optimizer"], name)
        _kept.put_grads(self._params, value["grads"])
        if self.schedule is not None:
            self.schedule.load_state_dict(value["schedule"])
        if self.scaler is not None:
            self.scaler.load_state_dict(value["scaler"])
        for obj, state in zip(self._also, value["also"]):
            _kept.put_state(obj, state)
        _kept.set_rng(value["rng"])
        c = value["counters"]
        self.steps, self.updates = c["steps"], c["updates"]
        self._open, self._group_n, self._first_n = c["open"], c["examples"], c["first"]
        fit = value["fit"]
        self._resume_at = ([None, self.steps, None, None] if fit is None
                           else [fit["epoch"], fit["batches"], (fit["rng"], fit["generator"]), fit["loader"]])
        if value["watchers"]:
            for w, position in zip(self._resumable, value["watchers"]):
                w.rewind(position)
        return True

    def _where(self, store, name):
        store = self.store if store is None else store
        name = self._checkpoint_name if name is None else name
        if store is None or name is None:
            raise SomatizeValueError(
                "checkpoint()/resume() need a store and a name: write trainer.checkpoint(store, "
                "'a-run/checkpoint'), or make the Trainer with store= and checkpoint="
            )
        return as_store(store), name

    # -- helpers
    def _pair(self, batch):
        """``(x, y)`` of a batch, on the Trainer's device (``_batch``)."""
        x, y = pair(batch, self.keys)
        if self.device is not None:
            x, y = moved(x, self.device), moved(y, self.device)
        return x, y

    @staticmethod
    def _checked_device(device, params):
        if device is None:
            return None
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise SomatizeValueError(f"device={device!r:.40}: {e}; give one like 'cuda', 'cuda:1' or 'cpu'") from None
        away = next((p for p in params if p.device.type != device.type
                     or device.index is not None and p.device.index != device.index), None)
        if away is not None:
            raise SomatizeValueError(
                f"device={str(device)!r}, but the optimizer's parameters are on {away.device}: move the "
                f"graph's modules there first (module.to({str(device)!r})), then build the optimizer"
            )
        return device

    def _forward(self, x):
        if not self._watched:  # nobody reads trainer_us: no clocks
            return self._graph_forward(Opaque(x), self.store, self._emitting)
        t = perf_counter_ns()
        out = self._graph_forward(Opaque(x), self.store, self._emitting)
        self._in_graph += perf_counter_ns() - t
        return out

    def _instrument(self):
        """Before a step: the run's first facts once, and the outputs hook on
        the steps whose update is recorded."""
        inst = self._instruments
        if not inst.started:
            inst.start()
        if inst.clock.armed:  # a step that raised left it armed
            inst.clock.reset()
        # asked once a step: the update at its end (if any) is recorded with its outputs
        self._recording = recording = due(self.updates)
        self._emitting.output = inst.output if recording else None

    def _value(self, loss, index):
        """The loss, detached; read off the device here only with read_every=1."""
        if loss.__class__ is not torch.Tensor or loss.ndim != 0:
            if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
                what = (f"a tensor of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor)
                        else f"a {type(loss).__name__}")
                raise SomatizeTypeError(
                    f"the objective {_name(self.objective)} returned {what} at step {index}; it must "
                    "return a scalar tensor (the mean loss of the batch), e.g. with reduction='mean'"
                )
        if self.read_every > 1 or self._ranks is not None:  # ranks: the loss over every rank's is checked
            return loss.detach()
        value = self._reading.last = loss.item()
        if value - value != 0.0:  # nan for inf and nan: not finite (math.isfinite cost a step ~0.8 µs)
            e = NonFiniteLoss(
                f"step {index}: the loss is {value}; nothing was updated (the weights, the "
                "optimizer's state and any open group's gradients are as before the group "
                "began). Look at this batch, lower the learning rate, or pass clip= to the Trainer."
            )
            e.step, e.loss, e.ranks = index, value, []
            raise e
        return loss.detach()

    def _facts(self, value, updated, began, clocks):
        emit = self._emitting.emit
        if updated:
            emit({"fact": "updated"})
        if self.read_every > 1:
            fact = {"fact": "loss", "value": value}  # its value read off the device in bulk (_read)
            self._loss_facts.append(fact)
            emit(fact)
        else:
            # read_every=1: the step's loss was read as it ended (a micro step's pieces: their sum is read here)
            whole = value if value.__class__ is float else self._reading.last if self.micro == 1 else value.item()
            emit({"fact": "loss", "value": whole})
        if clocks:
            emit({"fact": "wall_s", "value": self._began_s})
            objective, backward, update = self._split
            emit({"fact": "objective_us", "value": objective // 1000})
            emit({"fact": "backward_us", "value": backward // 1000})
            emit({"fact": "update_us", "value": update // 1000})
            for i, lr in enumerate(self._lrs):
                lr = lr if lr.__class__ is float else float(lr)
                emit({"fact": "lr", "value": lr} if i == 0 else {"fact": "lr", "group": i, "value": lr})
            if self._rank_us is not None:  # every rank's work in this step, and its time before it (_distributed.py)
                said = [{"fact": fact, "rank": rank, "value": None} for fact in ("rank_us", "rank_before_us")
                        for rank in range(self._ranks.size)]
                if self.read_every > 1:
                    self._reading.owe(self._rank_us.unbind(), said, list)  # read off the device with the losses
                else:
                    for fact, us in zip(said, self._rank_us.tolist()):
                        fact["value"] = us
                for fact in said:
                    emit(fact)
        if self._clock is not None and self._clock.armed:
            self._clock.hand_over()
        if len(self._losses) >= self.read_every or began >= self._read_due:
            self._read()
        # Taken last so that handing the facts above to the watchers counts too.
        emit({"fact": "trainer_us", "value": (perf_counter_ns() - began - self._in_graph) // 1000})

    def __repr__(self):
        return (
            f"Trainer({self.g!r}, every={self.every}, micro={self.micro}, clip={self.clip}, "
            f"steps={self.steps}, updates={self.updates})"
        )


def _own(ranks):
    """Which ranks' own loss was not finite, in words."""
    if not ranks:
        return "no rank's own loss was: their sum overflowed"
    return "; ".join(f"rank {r}'s own loss was {v}" for r, v in ranks)


def _backward(loss, index):
    try:
        loss.backward()
    except RuntimeError:
        # Asked only once backward refused: asking every step cost ~0.3 µs.
        if not loss.requires_grad:
            raise SomatizeValueError(
                f"step {index}: the loss does not depend on any trainable parameter, so there "
                "is nothing to train. Is every node frozen, or does the objective detach its input?"
            ) from None
        raise


def _no_clock():
    return 0


def _one_shot(batches):
    """Whether ``batches`` is an iterator, empty once iterated. Asked of its
    type: calling ``iter()`` on a DataLoader to find out would draw a seed
    from its generator (or torch's RNG), a draw a hand-written loop does not make."""
    return isinstance(batches, Iterator)


def _rng_of(generator):
    return [torch.get_rng_state(), generator.get_state() if generator is not None else None]


def _put_rng(kept, generator):
    torch.set_rng_state(kept[0])
    if generator is not None and kept[1] is not None:
        generator.set_state(kept[1])


def _count(x, y, micro, index):
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


def _name(f):
    return getattr(f, "__qualname__", None) or type(f).__qualname__
