"""Instruments: what the Trainer records so that a run can be diagnosed from
its record alone (``somatize.diagnose``; why each one: docs/diagnosis.md).

The rule kept here: measure, never judge, and never change the arithmetic.
Every number is read from tensors under ``torch.no_grad()`` (norms, counts,
one copy of the weights before the update); the update itself is the
optimizer's, untouched, so the Trainer stays exact to a hand-written loop.

Facts, each ``{"fact": <name>, "node": <node>, "value": <number>}`` (reserved
in ``_graph/watchers.py``; each lands in the series ``<name>/<node>``):

- at the start of the run, for each node that is not frozen and holds
  parameters that take gradients but that the optimizer does not hold:
  ``not_optimized`` (value: how many entries);
- per recorded update, for each node that is not frozen and holds parameters
  taking gradients: ``grad_norm`` (L2 norm of its gradients as the update
  sees them, before ``clip``), ``weight_norm`` (L2 norm of its weights before
  the update), ``update_norm`` (L2 norm of the change the update made),
  ``grad_zeros`` (share of gradient entries exactly 0; a parameter with no
  gradient counts as all zeros);
- per recorded step, for each node whose output is a tensor taking
  gradients: ``backward_us``, the µs of its backward (``_backward``);
- per recorded step, for each node whose output is a floating tensor:
  ``out_zeros`` (share of entries exactly 0) and, when the output comes out
  of a saturating function (sigmoid, tanh, hardtanh: read from its
  ``grad_fn``), ``out_saturated`` (share of entries where that function's
  slope is under 2% of its peak: within 0.5% of its range from a bound);
- per forward of a recorded step, after its ``finished``: ``instruments_us``
  (``{"fact": "instruments_us", "value": <int>}``, no node), the µs that
  forward spent in ``output`` reading its nodes' outputs (the counts above
  and the backward clock's hooks), inside the forward's ``took_us``:
  ``spent`` shows it apart from the engine's own time, whose it is not.

Their values are read off the device without a host sync of their own: each
recorded step's numbers are 0-d tensors (each parameter's norms and nonzero
count, each output's counts) handed to ``settle`` (the Trainer's), which
reads them with the losses in its next bulk read; the sums node by node and
the shares are then taken in Python, in float64, and filled into the facts
before any watcher sees them (with ``read_every=1``, at once). ``watch``
(``_watch``) measures a plain module with the same instruments, its nodes
the module's parts, its numbers read with its loop's logged values. A recorded
update makes three calls into torch for all the parameters and two per
parameter (its copy, its nonzero count), a recorded output one: nothing is
stacked or summed on the device (stacking them there cost a recorded step
more than it saved the read: bench/RESULTS.md, the step path).

Which updates: the first ``FIRST`` always (a run that blows up in its third
step is diagnosed), then one in ``EVERY`` (the cost stays under 3% of a step;
measured: bench/RESULTS.md, Diagnosis). A step is recorded when the update
count at its start is due, so its outputs and its update are measured together.
"""

from __future__ import annotations

import math
from time import perf_counter_ns

import torch

from .._base.values import Opaque
from ._backward import BackwardClock
from ._reading import values_of
from ._weights import _node_params

FIRST = 10  # updates recorded one by one at the start of a run
EVERY = 40  # then one update in EVERY

# grad_fn of a saturating output -> (low, high) bounds of the function
_SATURATING = {
    "SigmoidBackward0": (0.0, 1.0),
    "TanhBackward0": (-1.0, 1.0),
    "HardtanhBackward0": (-1.0, 1.0),
    "HardsigmoidBackward0": (0.0, 1.0),
}
NEAR = 0.005  # share of the range from a bound where the slope is < 2% of its peak (sigmoid, tanh)


def due(updates):
    """Whether the update numbered ``updates`` (from 0) is recorded."""
    return updates < FIRST or updates % EVERY == 0


class Instruments:
    """The instruments of one Trainer: which parameters are measured, node
    by node, and the facts each recorded update and step hands over."""

    def __init__(self, nodes, optimizer, emit, settle=None, finish=None):
        """``nodes``: ``(name, parameters)`` of each node measured, in order
        (``graph_nodes(g)``, or a watched module's); a parameter is counted
        in the first node that holds it, and only one that takes gradients.
        ``optimizer``: what updates them (None: nobody's ``not_optimized``
        is said). ``finish``: the backward clock's (``_backward``)."""
        self.emit = emit
        # settle(tensors, facts, finish, counts): the 0-d tensors' values (the last `counts` of them
        # integers), read off the device, through finish (a list of floats into one per fact) into
        # the facts' "value"
        self.settle = settle or _settle_now
        held = None if optimizer is None else {id(p) for group in optimizer.param_groups for p in group["params"]}
        self.nodes, self.params, self.missing = [], [], []
        seen = set()
        for name, params in nodes:
            mine = [p for p in params if p.requires_grad and id(p) not in seen]
            seen.update(id(p) for p in mine)
            if not mine:
                continue
            self.nodes.append((name, len(self.params), len(self.params) + len(mine)))
            self.params.extend(mine)
            loose = 0 if held is None else sum(p.numel() for p in mine if id(p) not in held)
            if loose:
                self.missing.append((name, loose))
        self.sizes = [p.numel() for p in self.params]
        self.clock = BackwardClock(emit, finish)
        self._sums = _NodeSums(self.nodes, self.sizes)
        self.started = False
        self.measuring = 0  # ns in output() since the last measured() (or begin())
        self._before = None
        self._grads = None

    def start(self):
        """The run's first facts: the parameters nobody updates."""
        self.started = True
        for name, loose in self.missing:
            self.emit({"fact": "not_optimized", "node": name, "value": loose})

    def stepping(self, updates, watchers):
        """Before a step, ``updates`` done: the run's first facts once, and
        the engine's outputs hook on ``watchers`` (``Watchers.output``) when
        the update at the step's end, if any, is recorded (``due``), so that
        its outputs and its update are measured together. Returns this
        Instruments when it is, for the update to read, else None."""
        if self.begin(updates):
            watchers.output = self.output
            return self
        watchers.output = None
        return None

    def begin(self, updates):
        """A step begins, ``updates`` done: the run's first facts once, the
        backward clock made ready; whether the step is recorded (``due``)."""
        if not self.started:
            self.start()
        if self.clock.armed:  # a step that raised left it armed
            self.clock.reset()
        self.measuring = 0  # a forward that raised said none of its own
        return due(updates)

    def output(self, name, value):
        """The engine's hook (``Watchers.output``): one node's output as it is
        handed on; its time is added to ``measuring``."""
        began = perf_counter_ns()
        self._read(name, value)
        self.measuring += perf_counter_ns() - began

    def measured(self):
        """A forward whose outputs were handed to ``output`` ended: says
        ``instruments_us``, the µs they took in it, and counts the next
        forward's from 0."""
        ns, self.measuring = self.measuring, 0
        self.emit({"fact": "instruments_us", "value": ns // 1000})

    def _read(self, name, value):
        t = value.value if value.__class__ is Opaque else value
        if t.__class__ is not torch.Tensor or not t.is_floating_point() or not t.numel():
            return
        self.clock.output(name, t)
        n = t.numel()
        counts = [torch.count_nonzero(t)]  # an integer: autograd records nothing, no no_grad needed
        facts = [{"fact": "out_zeros", "node": name}]
        bounds = _SATURATING.get(type(t.grad_fn).__name__)
        if bounds is not None:
            lo, hi = bounds
            mid, half = (lo + hi) / 2, (hi - lo) / 2
            counts.append(torch.count_nonzero((t.detach() - mid).abs_() >= half * (1 - 2 * NEAR)))
            facts.append({"fact": "out_saturated", "node": name})
        # shares of n, in float64 (Python's float is one): out_zeros is what count_nonzero left out
        self.settle(counts, facts, _Shares(n), len(counts))
        for fact in facts:
            self.emit(fact)

    def before_update(self):
        """Gradients and weights, read before the optimizer moves anything."""
        params = self.params
        if not params:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        # Grad mode off without a context manager: torch.no_grad() costs more a recorded update.
        was = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            self._before = [p.clone() for p in params]  # (on the CPU, cheaper than a _foreach_ call)
            # the gradients' norms and the weights', in one call
            self._grads = torch._foreach_norm(grads + self._before), [torch.count_nonzero(g_) for g_ in grads]
        finally:
            torch._C._set_grad_enabled(was)

    def after_update(self):
        """The change the update made; hands over the update's facts."""
        if self._grads is None:
            return
        was = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            torch._foreach_sub_(self._before, self.params)  # the copy becomes minus the update: same norm
            moved = torch._foreach_norm(self._before)
        finally:
            torch._C._set_grad_enabled(was)
        norms, nz = self._grads
        self._before = self._grads = None
        facts = [{"fact": kind, "node": name} for name, _, _ in self.nodes
                 for kind in ("grad_norm", "weight_norm", "update_norm", "grad_zeros")]
        # Each parameter's three norms and nonzero count, summed node by node when read (_NodeSums):
        # no arithmetic on the device, so a recorded update adds three calls into torch, not twenty.
        self.settle([*norms, *moved, *nz], facts, self._sums, len(nz))
        emit = self.emit
        for fact in facts:  # node by node, as a reader expects them
            emit(fact)

    def drop_update(self):
        """Forget an update measured half (``before_update`` without its
        ``after_update``): nothing said of it."""
        self._before = self._grads = None


def graph_nodes(g):
    """``(name, parameters)`` of each node of ``g`` that is not frozen, in
    the graph's order: what a Trainer's instruments measure."""
    return [(node.name, _node_params(node)) for node in g.nodes if not node.is_frozen]


class _Shares:
    """An output's counts read off the device into shares of its ``n`` entries:
    the zeros (what ``count_nonzero`` did not count), then the saturated."""

    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n

    def __call__(self, counts):
        n = self.n
        return [1.0 - counts[0] / n, *(c / n for c in counts[1:])]


class _NodeSums:
    """An update's per-parameter numbers, read off the device (``k``
    gradient norms, ``k`` weight norms, ``k`` update norms, ``k`` nonzero
    counts), into each node's four facts: the L2 norm over the node's
    parameters (the square root of the sum of their norms squared, in
    float64, in the parameters' order) and the share of its gradient
    entries that are 0."""

    __slots__ = ("nodes", "sizes", "k")

    def __init__(self, nodes, sizes):
        self.nodes, self.k = nodes, len(sizes)
        self.sizes = [float(sum(sizes[a:b])) for _, a, b in nodes]

    def __call__(self, v):
        k = self.k
        out = []
        for (_, a, b), size in zip(self.nodes, self.sizes):
            for part in (0, k, 2 * k):
                total = 0.0
                for x in v[part + a:part + b]:
                    total += x * x
                out.append(math.sqrt(total))
            out.append(1.0 - sum(v[3 * k + a:3 * k + b]) / size)
        return out


def _settle_now(tensors, facts, finish, counts=0):
    """Read ``tensors`` (0-d) now, in one host sync, into the facts
    (``values_of`` asks each its kind: ``counts`` is not needed)."""
    for fact, v in zip(facts, finish(values_of(tensors))):
        fact["value"] = v
