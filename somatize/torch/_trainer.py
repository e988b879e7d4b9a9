"""The Trainer: one training run over a graph that never knows it is trained.

A front class over parts, each a file with one rule:

- ``_group``: the update group (``every``, ``micro``, ``clip``, the
  schedule stepped per update): the weights that make a group pull as one
  step on the concatenation of its batches, and the update itself;
- ``_facts``: a watched step's facts after the engine's, in one order, and
  the clocks they carry;
- ``_reading``: the losses and the instruments' numbers read off the device
  in bulk, the facts held until then, a non-finite loss refused;
- ``_fit``: ``fit``'s loop, where it stands, and its resume (``_cursor``:
  the batches done skipped);
- ``_checkpoint``: a checkpoint kept and put back;
- ``_distributed``: the ranks of a data-parallel job, the update's
  all-reduce;
- ``_evaluate``, ``_instruments``, ``_backward``, ``_modes``, ``_batch``,
  ``_schedule``: an evaluation, what is recorded for diagnosis, each node's
  backward time, the modules' modes, a batch taken apart, a schedule checked.

The step (``step``), one path for every setting: its batch cut into the
group's pieces, each piece's forward, objective and backward, then the
update when the group is full (data parallel, after the all-reduce); its
facts to the watchers (``_facts``), and a read of what is held when due
(``_reading``). Steps count from 0, like forwards; ``close_group()``'s
update belongs to no step.

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

from time import perf_counter_ns

import torch

from .._base.errors import NonFiniteLoss, SomatizeTypeError, SomatizeValueError
from .._base.values import Opaque
from .._graph import engine as _engine
from .._graph.watchers import Watchers, held
from . import _distributed, _evaluate, _fit, _reading, _schedule
from ._backward import backward
from ._batch import checked_device, checked_keys, taken
from ._checkpoint import Checkpoints
from ._facts import StepFacts
from ._group import Group, checked_clip, positive_int
from ._instruments import Instruments, due, graph_nodes
from ._modes import Modes
from ._weights import export, freeze, frozen_parameters, load, not_frozen_in_torch

# Which steps say their clocks (wall_s, the three parts, lr; _facts): the
# first CLOCKS_FIRST, every CLOCKS_EVERY-th, and any step that begins
# CLOCKS_AT_MOST_NS after the last that did (a slow run still gets one a
# second). Said every step they would be four more facts a step for a
# Recorder to take, encode and write; sampled, the time axis is interpolated
# between them (_widgets._progress.clock_of) and spent scales their shares
# to the Trainer's whole bar. The indexes make the record of a run the same
# whatever the machine's speed; the clock only adds steps.
CLOCKS_FIRST, CLOCKS_EVERY, CLOCKS_AT_MOST_NS = 10, 20, 1_000_000_000
PRECISIONS = {"bf16": torch.bfloat16, "fp16": torch.float16}


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
        self.every = positive_int("every", every)
        self.micro = positive_int("micro", micro)
        clip = checked_clip(clip)
        self._schedule_on = _schedule.checked(schedule, optimizer, schedule_on)  # None: stepped per update
        self.g, self.objective, self.optimizer, self.clip, self.store = g, objective, optimizer, clip, store
        self.schedule = schedule
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
        self._ranks = ranks = _distributed.ranks_of(group)  # None: this process trains alone
        if ranks is not None:
            ranks.broadcast(params, "broadcasting rank 0's weights")  # every rank starts from rank 0's
            ranks.check_frozen(g.fingerprints())  # frozen nodes are not broadcast: they must agree already
            if ranks.rank != 0:
                watching = None  # one writer per run: rank 0's watchers hear the job (_distributed.py)
        self.device = checked_device(device, params)
        where = self.device.type if self.device is not None else (params[0].device.type if params else "cpu")
        if precision is not None and precision not in PRECISIONS:
            raise SomatizeValueError(f"precision={precision!r}: give 'bf16', 'fp16' or None (the weights' own)")
        self.precision = precision
        self._autocast = None if precision is None else (where, PRECISIONS[precision])
        self.scaler = torch.amp.GradScaler(where) if precision == "fp16" else None
        self._group = Group(optimizer, params, self.every, self.micro, clip,
                            schedule if self._schedule_on is None else None, ranks)

        watchers = Watchers(watching, where="the Trainer's watching=")  # the watchers, as given
        if read_every is None:  # hold back only from watchers that ask for what is held before they look
            holdable = all(callable(getattr(w, "held_by", None)) for w in watchers.all)
            read_every = _reading.READ_EVERY if holdable else 1
        self.read_every = positive_int("read_every", read_every)
        if ranks is not None:  # every rank reads at the same steps, so all refuse a non-finite loss together
            self.read_every = ranks.least(self.read_every, "agreeing on read_every")
        # what is held until the next read (_reading.py); read by time on this module's clock
        self._reading = reading = _reading.Reading(watchers, self.read_every, ranks, perf_counter_ns)
        defer = bool(watchers.all) and self.read_every > 1
        self._emitting = held(reading.held) if defer else watchers  # what the graph and the facts go to
        if defer:
            for w in watchers.all:
                if callable(getattr(w, "held_by", None)):
                    w.held_by(self._hand_over)  # a Recorder flushed or closed gets what was done first
        self._instruments = (Instruments(graph_nodes(g), optimizer, self._emitting.emit,
                                         reading.owe if defer else None)
                             if instruments and watchers.all else None)
        self._facts = (StepFacts(self._emitting.emit, reading, optimizer, self.micro, ranks,
                                 None if self._instruments is None else self._instruments.clock)
                       if watchers.all else None)  # None: nobody hears the steps, nothing is timed
        self._graph_forward = g.forward
        self._plain = self.keys is None and self.device is None  # a pair (x, y) is the step's input as it is
        self.steps = 0  # steps begun, counted from 0 in error messages
        self.updates = 0
        self._fit = _fit.Fit()
        self._checkpoints = Checkpoints(store, checkpoint, checkpoint_every, checkpoint_also, watchers.all, g,
                                        optimizer, params, ranks)
        if self._checkpoints.name is not None:
            self.resume()

    # -- the primitive
    def step(self, batch):
        """Forward, loss, backward; an update when the group closes.

        Returns the loss of the whole batch as a 0-d tensor, detached, on the
        device, without waiting for it: ``float(trainer.step(b))`` reads it
        (a host sync); ``trainer.loss`` is the last one read off the device."""
        began = perf_counter_ns()
        if batch.__class__ is tuple and len(batch) == 2 and batch[0].__class__ is torch.Tensor and self._plain:
            x, y = batch  # the common case, checked in one line
        else:
            x, y = taken(batch, self.keys, self.device)
        index = self.steps
        self.steps = index + 1
        self._modes.train()  # frozen nodes' modules in eval mode, the others' in train mode
        facts, ranks, reading, group = self._facts, self._ranks, self._reading, self._group
        clocks = False
        if facts is not None:
            facts.in_graph = 0
            # Whether this step says its clocks (CLOCKS_*): only such a step is
            # timed part by part; the others time only their forwards.
            if index < CLOCKS_FIRST or index % CLOCKS_EVERY == 0 or began >= facts.due:
                clocks = True
                facts.begin(began + CLOCKS_AT_MOST_NS)
        if ranks is not None:
            ranks.stepping(index, began)  # launch names the last step of a rank that stops answering
            if index == 0 and facts is not None:
                facts.emit({"fact": "ranks", "value": ranks.size})  # the loss is over this many
        inst = self._instruments
        probe = clock = refused = None
        if inst is not None:
            probe = inst.stepping(self.updates, self._emitting)  # itself when this step's update is recorded
            clock = inst.clock
        try:
            whole = group.whole  # one step, one piece, one process: neither weighed nor counted
            if whole:
                pieces, n, unit = ((x, y),), None, None
            else:
                pieces, n, unit = group.cut(x, y, index)
            autocast, scaler, objective = self._autocast, self.scaler, self.objective
            value = None
            for xi, yi in pieces:
                if autocast is None:
                    out = self._forward(xi)
                    t0 = perf_counter_ns() if clocks else 0
                    loss = objective(out, yi)
                else:
                    with torch.autocast(autocast[0], dtype=autocast[1]):
                        out = self._forward(xi)
                        t0 = perf_counter_ns() if clocks else 0
                        loss = objective(out, yi)
                if loss.__class__ is not torch.Tensor or loss.ndim != 0:
                    _check_scalar(loss, index, objective)
                part = reading.value(loss, index)
                if whole:  # the loss as the objective gave it, as a hand-written loop has it
                    value, scaled = part, loss
                else:
                    k = xi.shape[0]
                    value = part if k == n else part * (k / n) if value is None else value + part * (k / n)
                    scale = k * unit
                    scaled = loss * scale if scale != 1.0 else loss
                t1 = perf_counter_ns() if clocks else 0
                if scaler is not None:
                    scaled = scaler.scale(scaled)
                if clock is None or not clock.armed:  # armed only on the instruments' recorded steps
                    backward(scaled, index)
                else:
                    clock.began()
                    backward(scaled, index)
                    clock.ended()
                if clocks:
                    split = facts.split
                    split[0] += t1 - t0
                    split[1] += perf_counter_ns() - t1
            if whole or group.add(n):
                t = perf_counter_ns() if clocks else 0
                if ranks is not None:
                    value = self._synced(value, n, began, index)
                updated = group.update(probe, scaler)
                if updated:
                    self.updates += 1
                if clocks:
                    facts.split[2] += perf_counter_ns() - t
            else:
                updated = False
                if ranks is not None:
                    value = self._synced_loss(value, n, began, index, clocks)
            if ranks is not None and reading.every > 1:
                reading.rank_losses.append(ranks.losses)  # beside its loss: to name a rank if not finite
        except NonFiniteLoss as e:  # read_every=1: refused before its backward (data parallel: its update)
            group.drop()
            if facts is None:
                raise
            refused, value, updated = e, e.loss, False  # its facts said below, then raised
        except BaseException:
            group.drop()
            self._read(check=False, last=index - 1)  # what was held (the failed forward's facts) is handed over
            raise
        losses = reading.losses
        if reading.every > 1:
            losses.append(value)  # the losses held are those of the steps just before the last
        if facts is not None:
            facts.said(value, updated, clocks)
        if len(losses) >= reading.every or began >= reading.due:
            self._read()
        if facts is not None:
            # Taken last, so that handing the facts above to the watchers counts too.
            facts.emit({"fact": "trainer_us", "value": (perf_counter_ns() - began - facts.in_graph) // 1000})
            if refused is not None:
                raise refused
        every = self._checkpoints.every
        if every is not None and self.steps % every == 0:
            self.checkpoint()
        return value

    def close_group(self):
        """Close a group left open (fewer than ``every`` steps since the last
        update): update as one step on the concatenation of its batches, and
        read the losses held (``deliver``). Returns whether an update happened."""
        group = self._group
        if group.open == 0:
            self.deliver()
            return False
        inst = self._instruments
        if self._ranks is not None:
            self._synced(None, 0, None, None)  # no step under way: no rank is busy in it
        updated = group.update(inst if inst is not None and due(self.updates) else None, self.scaler)
        if updated:
            self.updates += 1
            if self._facts is not None:
                self._facts.emit({"fact": "updated"})
        self.deliver()
        return updated

    def _synced(self, loss, n, began, index):
        """Data parallel, before the update: the gradients all-reduced
        (``_distributed``) with ``loss``, the step's over its ``n`` examples
        here (None when no step is under way: ``began``, ``index`` None), and
        with ``read_every=1`` the loss over every rank's examples refused
        before the weights move. Returns that loss."""
        group = self._group
        loss, rank_us = self._ranks.sync(group.params, group.examples, loss, n, began)
        if self._facts is not None:
            self._facts.rank_us = rank_us
        if index is not None and self._reading.every == 1:
            self._reading.refuse(loss, index)
        return loss

    def _synced_loss(self, loss, n, began, index, clocks):
        """Data parallel, a step that closes no group: its loss all-reduced
        alone (its time in ``update_us``), and with ``read_every=1`` the loss
        over every rank's examples refused. Returns that loss."""
        facts, reading = self._facts, self._reading
        t = perf_counter_ns() if clocks else 0
        loss, rank_us = self._ranks.sync_loss(loss, n, began)
        if clocks:
            facts.split[2] += perf_counter_ns() - t
        if facts is not None:
            facts.rank_us = rank_us
        if reading.every == 1:
            reading.refuse(loss, index)
        return loss

    def _forward(self, x):
        facts = self._facts
        if facts is None:  # nobody reads trainer_us: no clocks
            return self._graph_forward(Opaque(x), self.store, self._emitting)
        t = perf_counter_ns()
        emitting = self._emitting
        out = self._graph_forward(Opaque(x), self.store, emitting)
        facts.in_graph += perf_counter_ns() - t
        if emitting.output is not None:  # the instruments read this forward's outputs: how long, said apart
            self._instruments.measured()
        return out

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
        """Read what is held (``Reading.read``); a non-finite loss refused drops the open group."""
        try:
            self._reading.read(self.steps, check, last, every_rank)
        except NonFiniteLoss:
            self._group.drop()
            raise

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
        epochs = positive_int("epochs", epochs)
        _fit.check(batches, epochs, evaluate, metrics)
        if evaluate is not None:  # a schedule stepped on an evaluation's value: it must measure it
            _schedule.check_measured(self.schedule, self._schedule_on, _evaluate.checked_metrics(metrics))
        self._fit.run(self, batches, epochs, progress, evaluate, metrics)
        return self

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
        if self._schedule_on is not None:
            _schedule.check_measured(self.schedule, self._schedule_on, _evaluate.checked_metrics(metrics))
        said = _evaluate.evaluate(batches, metrics, g=self.g, store=self.store, objective=self.objective,
                                  modes=self._modes, keys=self.keys, device=self.device, ranks=self._ranks,
                                  emit=None if self._facts is None else self._facts.emit)
        if self._schedule_on is not None:
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
        store, name = self._checkpoints.where(self.store, store, name)
        self._read(every_rank=True)
        counters = {"steps": self.steps, "updates": self.updates, **self._group.counts()}
        return self._checkpoints.keep(store, name, counters, self._fit.position(), self._fit.rng(), self.schedule,
                                      self.scaler)

    def resume(self, store=None, name=None):
        """Go on from a checkpoint kept by ``checkpoint()``: everything it
        holds put back as it was; each watcher that can resume is rewound to
        its position then (a Recorder drops the forwards after it, so the
        steps done again are recorded once). ``fit`` then goes on where it
        stood; a loop of ``step`` goes on from ``trainer.steps``. Returns
        False, changing nothing, when nothing is kept under the name."""
        store, name = self._checkpoints.where(self.store, store, name)
        kept = self._checkpoints.put_back(store, name, self.schedule, self.scaler)
        if kept is None:
            return False
        counters, fit = kept
        self.steps, self.updates = counters["steps"], counters["updates"]
        self._group.put_back(counters)
        self._fit.resumed(fit, self.steps)
        return True

    def __repr__(self):
        return (
            f"Trainer({self.g!r}, every={self.every}, micro={self.micro}, clip={self.clip}, "
            f"steps={self.steps}, updates={self.updates})"
        )


def _check_scalar(loss, index, objective):
    """Refuse an objective's value that is not a 0-d tensor (a subclass of one passes)."""
    if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
        what = (f"a tensor of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor)
                else f"a {type(loss).__name__}")
        raise SomatizeTypeError(
            f"the objective {_name(objective)} returned {what} at step {index}; it must "
            "return a scalar tensor (the mean loss of the batch), e.g. with reduction='mean'"
        )


def _name(f):
    return getattr(f, "__qualname__", None) or type(f).__qualname__
