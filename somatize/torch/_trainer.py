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
closed a group, then ``{"fact": "loss", "value": <float>}``, the loss of the
whole batch of the step, then, on the first 10 steps, every 20th and any
step a second after the last that did (``CLOCKS_*`` below), ``{"fact":
"wall_s", "value": <float>}``, the clock (seconds since 1970) when the step
began, and its parts in µs, ``objective_us`` (the objective, reading the
loss included), ``backward_us`` and ``update_us`` (clip, the optimizer's
step, zero_grad; 0 when the step closed no group),
then on the instruments' recorded steps one ``backward_us`` per node
(``_backward``), and last ``{"fact": "trainer_us", "value": <int>}``, the
µs the step spent outside the graph's forwards: the three parts and the
Trainer's own bookkeeping (handing its facts to the watchers included). A
step's wall time is its forwards plus ``trainer_us``; ``close_group()``'s
update belongs to no step and is not in it. Steps count from 0, like
forwards.

A step that raises (a node failed, the objective was refused, the loss is
not finite, Ctrl-C) drops the open group: with ``micro=N`` some of its
pieces may already have run backward, and a group holding part of a step
would no longer be one step on its batches. The weights and the optimizer's
state are as they were before the group began; the next step opens a new
group. A non-finite loss is refused before its backward, and its ``loss``
(and ``trainer_us``) facts are still handed to the watchers; the error names
the step.
"""

from __future__ import annotations

import math
import numbers
import warnings
from time import perf_counter_ns, time

import torch

from .._base.errors import NonFiniteLoss, SomatizeTypeError, SomatizeValueError
from .._base.values import Data, Opaque
from .._graph import engine as _engine
from .._graph.watchers import Watchers
from . import _evaluate, _state
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

    A frozen node whose torch side is not frozen yet (gradients on, or no
    weights digest) is frozen here with ``freeze(g)``; an optimizer holding
    a frozen node's parameters is refused.

    ``instruments=True`` (when watched): gradient, weight and update norms
    per node, and statistics of each node's output, recorded for
    ``somatize.diagnose`` (see ``_instruments``); ``instruments=False`` turns
    them off.

    ``state="a-name"`` with ``keep_every=N`` keeps the Trainer's state in
    ``store`` under that name every N steps (``keep_state``), and a Trainer
    made with a name already kept resumes from it (``load_state``): a task
    retried after its process died continues where the state was kept.
    """

    def __init__(self, g, objective, optimizer, every=1, micro=1, watching=None, clip=None, store=None,
                 state=None, keep_every=None, instruments=True):
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
        self.g, self.objective, self.optimizer, self.clip, self.store = g, objective, optimizer, clip, store
        self._watchers = Watchers(watching, where="the Trainer's watching=")
        self._watched = bool(self._watchers.all)

        params = [p for group in optimizer.param_groups for p in group["params"]]
        frozen = frozen_parameters(g)
        held = sorted({frozen[id(p)] for p in params if id(p) in frozen})
        if held:
            raise SomatizeValueError(
                f"the optimizer holds parameters of frozen node(s) {held}; a frozen node is "
                "settled and its weights may not move. Build the optimizer over "
                "somatize.torch.parameters(g), which leaves frozen nodes out."
            )
        if not_frozen_in_torch(g):
            freeze(g)
        self._modes = Modes(g)
        self._params = params
        self._instruments = Instruments(g, optimizer, self._watchers.emit) if instruments and self._watched else None
        self._graph_forward = g.forward
        self._fast = self.every == 1 and self.micro == 1
        self._began_s = 0.0  # the clock when the last step that said its clocks began: its wall_s
        self._split = [0, 0, 0]  # ns of the step in the objective, the backward, the update (when it says clocks)
        self._clocks_due = 0  # perf_counter_ns by which a step says its clocks whatever its index
        self._clock = self._instruments.clock if self._instruments is not None else None
        self.steps = 0  # steps begun, counted from 0 in error messages
        self.updates = 0
        self._open = 0  # steps in the open group
        self._group_n = 0  # examples in the open group
        self._first_n = 0  # examples in the open group's first batch
        self._in_graph = 0  # ns spent inside the graph's forwards this step (timed when watched)
        self._keeping(state, keep_every)

    # -- the primitive
    def step(self, batch):
        """Forward, loss, backward; an update when the group closes.
        Returns the loss of the whole batch as a float."""
        began = perf_counter_ns()
        x, y = self._pair(batch)
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
        if self._instruments is not None:
            self._instrument()
        try:
            if self._fast and not clocks:
                loss = self.objective(self._forward(x), y)
                value = self._value(loss, index)
                self._backward(loss, index)
                self._update()
                updated = True
            elif self._fast:
                value = self._timed(x, y, index)
                updated = True
            else:
                value, updated = self._grouped(x, y, index, clocks)
        except NonFiniteLoss as e:
            self._drop()
            if self._watched:
                self._facts(e.loss, False, began, clocks)
            raise
        except BaseException:
            self._drop()
            raise
        if self._watched:
            self._facts(value, updated, began, clocks)
        if self._keep_every and self.steps % self._keep_every == 0:
            self.keep_state()
        return value

    def _grouped(self, x, y, index, clocks):
        n = _count(x, y, self.micro, index)
        if self._open == 0:
            self._first_n = n
        unit = 1.0 / (self.every * self._first_n)
        value = 0.0
        pieces = zip(x.tensor_split(self.micro), y.tensor_split(self.micro)) if self.micro > 1 else ((x, y),)
        split, now = self._split, perf_counter_ns if clocks else _no_clock
        for xi, yi in pieces:
            out = self._forward(xi)
            t = now()
            loss = self.objective(out, yi)
            k = xi.shape[0]
            value += self._value(loss, index) * k / n
            scale = k * unit
            t1 = now()
            self._backward(loss * scale if scale != 1.0 else loss, index)
            t2 = now()
            split[0] += t1 - t
            split[1] += t2 - t1
        self._open += 1
        self._group_n += n
        closed = self._open == self.every
        if closed:
            t = now()
            self._close()
            split[2] += now() - t
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
        self._update()
        self._split[:] = (t1 - t0, t2 - t1, perf_counter_ns() - t2)
        return value

    def _backward(self, loss, index):
        clock = self._clock
        if clock is None or not clock.armed:  # armed only on the instruments' recorded steps
            return _backward(loss, index)
        clock.began()
        _backward(loss, index)
        clock.ended()

    def close_group(self):
        """Close a group left open (fewer than ``every`` steps since the last
        update): update as one step on the concatenation of its batches.
        Returns whether an update happened."""
        if self._open == 0:
            return False
        self._close()
        if self._watched:
            self._watchers.emit({"fact": "updated"})
        return True

    def flush(self):
        """Deprecated: ``close_group()``. (``flush`` makes a Recorder's facts
        durable and sends a Live panel's to the browser; here it meant
        something else.)"""
        warnings.warn(
            "Trainer.flush() is now Trainer.close_group(): it closes the open group of steps "
            "with an update (flush means making facts durable, on a Recorder)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.close_group()

    def _close(self):
        expected = self.every * self._first_n
        if self._group_n != expected:
            grads = [p.grad for p in self._params if p.grad is not None]
            if grads:
                torch._foreach_mul_(grads, expected / self._group_n)
        self._update()

    def _update(self):
        probe = self._instruments if self._instruments is not None and due(self.updates) else None
        if probe is not None:
            probe.before_update()
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self._params, self.clip)
        self.optimizer.step()
        if probe is not None:
            probe.after_update()
        self.optimizer.zero_grad()
        self.updates += 1
        self._open = self._group_n = 0

    def _drop(self):
        self.optimizer.zero_grad()
        self._open = self._group_n = 0

    # -- sugar
    def fit(self, batches, epochs=1, progress=True):
        """``step`` over every batch, ``epochs`` times, with a progress bar
        (tqdm's text bar on stderr, in a terminal and in a notebook alike: a
        widget bar would be saved in a notebook as it was when it appeared,
        "0%", whereas the text keeps its last state). A group left open at the
        end of an epoch is closed there (see ``close_group``)."""
        epochs = _positive_int("epochs", epochs)
        if epochs > 1 and iter(batches) is batches:
            raise SomatizeTypeError(
                f"fit(batches, epochs={epochs}) got a one-shot iterator, which the second epoch "
                "would find empty. Give something that can be iterated again: a list, a "
                "DataLoader, or list(batches)."
            )
        total = len(batches) if hasattr(batches, "__len__") else None
        bar = None
        if progress:
            import sys

            from tqdm.std import tqdm

            bar = tqdm(total=total * epochs if total is not None else None, unit="step", leave=True, file=sys.stderr)
        try:
            done = self._resumed_steps  # a resumed Trainer skips the steps its state has done
            self._resumed_steps = 0
            if bar is not None and done:
                bar.update(done)
            for epoch in range(epochs):
                for batch in batches:
                    if done:
                        done -= 1
                        continue
                    value = self.step(batch)
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(epoch=epoch, loss=f"{value:.4g}", refresh=False)
                self.close_group()
        finally:
            if bar is not None:
                bar.close()
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
        moves. Returns ``{"val_loss": v, "val_<name>": v, ...}``."""
        return _evaluate.evaluate(self, batches, metrics)

    # -- weights
    def export(self):
        """The graph's weights node by node: ``{"body": {"net.0.weight": t, ...}, ...}``."""
        return export(self.g)

    def load(self, exported):
        """Put an export back into the graph (in place; the optimizer keeps
        its references). Refuses mismatched nodes, names or shapes."""
        load(self.g, exported)
        return self

    # -- state: kept in a store, resumed from it (see _state.py)
    def _keeping(self, name, every):
        self._resumed_steps = 0
        self._state_name = _state.checked(self.store, name, every)
        self._keep_every = None if every is None else _positive_int("keep_every", every)
        if self._state_name is not None:
            self.load_state()

    def keep_state(self, store=None, name=None):
        """Keep everything training needs to go on in ``store`` under
        ``name`` (by default the Trainer's ``store`` and ``state=``): the
        weights, the optimizer's state, the step and update counters, an open
        group's gradients, and how many forwards each Recorder watching holds
        (each is flushed first: the record holds what the state has done).
        Tensors go through the tensor codec; nothing is pickled. Returns the
        digest."""
        store, name = _state.where(self, store, name)
        return _state.keep(self, store, name)

    def load_state(self, store=None, name=None):
        """Resume from state kept by ``keep_state``: weights, optimizer state,
        counters and open group as they were; each Recorder watching is
        rewound to the forwards it held then (``Recorder.rewind``), so the
        steps done again are recorded once. ``fit`` then skips the steps
        already done; a loop of ``step`` goes on from ``trainer.steps``.
        Returns False, changing nothing, when nothing is kept under the name."""
        store, name = _state.where(self, store, name)
        return _state.load(self, store, name)

    # -- helpers
    def _forward(self, x):
        if not self._watched:  # nobody reads trainer_us: no clocks
            return self._graph_forward(Opaque(x), self.store, self._watchers)
        t = perf_counter_ns()
        out = self._graph_forward(Opaque(x), self.store, self._watchers)
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
        self._watchers.output = inst.output if due(self.updates) else None

    def _value(self, loss, index):
        if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
            what = (f"a tensor of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor)
                    else f"a {type(loss).__name__}")
            raise SomatizeTypeError(
                f"the objective {_name(self.objective)} returned {what} at step {index}; it must "
                "return a scalar tensor (the mean loss of the batch), e.g. with reduction='mean'"
            )
        value = loss.item()
        if value - value != 0.0:  # nan for inf and nan: not finite (math.isfinite cost a step ~0.8 µs)
            e = NonFiniteLoss(
                f"step {index}: the loss is {value}; nothing was updated (the weights, the "
                "optimizer's state and any open group's gradients are as before the group "
                "began). Look at this batch, lower the learning rate, or pass clip= to the Trainer."
            )
            e.step, e.loss = index, value
            raise e
        return value

    def _facts(self, value, updated, began, clocks):
        emit = self._watchers.emit
        if updated:
            emit({"fact": "updated"})
        emit({"fact": "loss", "value": value})
        if clocks:
            emit({"fact": "wall_s", "value": self._began_s})
            objective, backward, update = self._split
            emit({"fact": "objective_us", "value": objective // 1000})
            emit({"fact": "backward_us", "value": backward // 1000})
            emit({"fact": "update_us", "value": update // 1000})
        if self._clock is not None and self._clock.armed:
            self._clock.hand_over()
        # Taken last so that handing the facts above to the watchers counts too.
        emit({"fact": "trainer_us", "value": (perf_counter_ns() - began - self._in_graph) // 1000})

    def _pair(self, batch):
        if batch.__class__ is tuple and len(batch) == 2 and batch[0].__class__ is torch.Tensor:
            return batch  # the common case, checked in one line
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise SomatizeTypeError(
                f"step(batch) takes a pair (x, y) of tensors; got {type(batch).__name__}"
                f"{f' of {len(batch)} items' if isinstance(batch, (tuple, list)) else ''}. "
                "Write trainer.step((x, y))."
            )
        x, y = batch
        if isinstance(x, Opaque):  # the Trainer wraps x in Opaque itself; unwrapping is harmless
            x = x.value
        elif isinstance(x, Data) and isinstance(x.value, torch.Tensor):
            x = x.value.detach()  # Data means autograd is cut, here as at any edge
        if not isinstance(x, torch.Tensor):
            raise SomatizeTypeError(
                f"step((x, y)): x is a {type(x).__name__}; the Trainer feeds the graph a tensor "
                "(it crosses into the graph as Opaque(x)). Convert it with torch.as_tensor(x)."
            )
        return x, y

    def __repr__(self):
        return (
            f"Trainer({self.g!r}, every={self.every}, micro={self.micro}, clip={self.clip}, "
            f"steps={self.steps}, updates={self.updates})"
        )


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
