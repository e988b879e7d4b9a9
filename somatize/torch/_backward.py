"""Backward time per node, seen from the edges between nodes.

The rule kept here: the engine never knows it is timed, and the arithmetic
never changes. On a recorded step (the instruments' sampling: ``due``), the
engine's outputs hook hands over each node's output; when it is a tensor
that takes gradients, a hook is put on it (a pre-hook on the function that
made it, called as its gradient arrives) that only notes the moment its
gradient arrives (the hook returns None: the gradient is not touched). A
node's backward begins when the gradient of its output arrives and runs
until the next arrival at any node's output (or the end of the backward
pass): autograd works through the graph in the reverse order of the forward
(on the CPU, in the caller's thread), so those intervals tile the backward
pass, the objective's own part (from its start to the first arrival) left
out.

What it cannot see: a node whose output is not a tensor (a tuple, a dict),
or does not take gradients (a frozen node), gets no time of its own; its
backward is counted in the node before it in the reverse order. Branches of
a graph that fans out are not interleaved by autograd, so each is credited
its own. On a GPU each arrival waits for the device first
(``torch.cuda.synchronize``), on recorded steps only.

The Trainer calls ``began()`` and ``ended()`` around the backward it makes;
a clock made with ``finish`` (``somatize.torch.watch``, which does not make
the backward) ends itself: the first arrival of a backward queues a callback
to autograd's engine, which runs it as that backward ends, and the callback
calls ``ended()`` and then ``finish()``.

Facts, one per node that received a gradient, among the step's facts:
``{"fact": "backward_us", "node": <node>, "value": <int>}`` (µs in that
node's backward, over every backward of the step when ``micro=N``), in the
series ``backward_us/<node>``.
"""

from __future__ import annotations

from time import perf_counter_ns

import torch

from .._base.errors import SomatizeValueError


def backward(loss, index):
    """``loss.backward()`` of step ``index``; a loss that depends on no
    trainable parameter is refused, saying so."""
    try:
        loss.backward()
    except RuntimeError:
        # asked only once backward refused, not on every step
        if not loss.requires_grad:
            raise SomatizeValueError(
                f"step {index}: the loss does not depend on any trainable parameter, so there "
                "is nothing to train. Is every node frozen, or does the objective detach its input?"
            ) from None
        raise


class BackwardClock:
    """Notes when each node's output gradient arrives, on the steps it is
    armed for, and hands over each node's backward time."""

    __slots__ = ("emit", "armed", "finish", "_stamps", "_spent", "_began", "_cuda")

    def __init__(self, emit, finish=None):
        self.emit = emit
        self.armed = False  # a hook was put on some output this step
        # None: the caller calls began() and ended() around each backward; else called as a backward ends, ended
        self.finish = finish
        self._stamps = []  # (ns, node) in the order the gradients arrived
        self._spent = {}  # node -> ns this step
        self._began = 0
        self._cuda = False

    def reset(self):
        """A new step begins: nothing armed, nothing spent (nor stamped by a
        backward that raised before it ended)."""
        self.armed = False
        self._spent.clear()
        self._stamps.clear()

    def output(self, name, t):
        """The engine's outputs hook (through the instruments): ``t`` is a
        tensor leaving node ``name``."""
        if not t.requires_grad:
            return
        stamps = self._stamps
        device = None
        if t.is_cuda:
            self._cuda = True
            device = t.device
        if self.finish is not None:
            queue = torch.autograd.Variable._execution_engine.queue_callback  # run as this backward ends
            end = self._end

            def arrived(_):
                if device is not None:
                    torch.cuda.synchronize(device)
                if not stamps:  # the first arrival of this backward
                    queue(end)
                stamps.append((perf_counter_ns(), name))
        elif device is not None:
            def arrived(_):
                torch.cuda.synchronize(device)
                stamps.append((perf_counter_ns(), name))
        else:
            def arrived(_):
                stamps.append((perf_counter_ns(), name))

        fn = t.grad_fn
        if fn is not None:
            # A pre-hook on the function that made t runs when t's gradient arrives, as a hook on t
            # would (autograd calls both as that function begins), without Tensor.register_hook's
            # Python wrapper, which costs more an output.
            fn.register_prehook(arrived)
        else:  # a leaf that takes gradients, handed on as it is
            t.register_hook(arrived)
        self.armed = True

    def began(self):
        self._stamps.clear()
        self._began = perf_counter_ns()

    def ended(self):
        """After a backward: the intervals between arrivals, each credited to
        the node whose gradient arrived at its start."""
        if self._cuda:
            torch.cuda.synchronize()
        end = perf_counter_ns()
        stamps = sorted(self._stamps)
        spent = self._spent
        for (t, name), (after, _) in zip(stamps, stamps[1:] + [(end, None)]):
            spent[name] = spent.get(name, 0) + after - t
        self._stamps.clear()

    def _end(self):
        self.ended()
        self.finish()

    def hand_over(self):
        """The step's facts: one ``backward_us`` per node that received a
        gradient; then disarmed until a hook is put on an output again."""
        self.armed = False
        if not self._spent:
            return
        emit = self.emit
        for name, ns in self._spent.items():
            emit({"fact": "backward_us", "node": name, "value": ns // 1000})
        self._spent.clear()
