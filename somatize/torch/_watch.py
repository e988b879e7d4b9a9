"""``watch(module, recorder)``: a plain ``torch.nn.Module`` trained by any
loop records what a Trainer's run records for ``spent`` and ``diagnose``:
each node's forward and backward time and the instruments (``_instruments``,
``_backward``), through hooks, into the run the loop writes with
``Recorder.log``.

The rule kept here: measure, never change the arithmetic. Every hook
returns None (nothing it is handed is replaced), every number is read under
``no_grad`` or from counts, no random number is drawn, so a watched model
trains bit for bit as the unwatched one. ``remove()`` takes every hook off.

Nodes: the module's parts, named as ``named_modules()`` names them. From
the module down, a ``ModuleList``, a ``ModuleDict`` or a ``Sequential``
whose ``forward`` is ``Sequential``'s own is looked into (it computes
nothing of its own); any other module is a node, whole (a ``Conv2d``, a
``ReLU``, a block with its own ``forward``): for a CNN ``features.0``,
``features.1``, ..., ``classifier``. A parameter that the module or a list
it looks into holds itself is a node of its own, measured, never timed
(``cls_token``). A module with no submodules is one node, named after its
class.

Steps: a forward of the watched module with gradients enabled begins a step
(one under ``torch.no_grad()`` or ``inference_mode``, an evaluation, is no
step and is not measured; a forward that accumulates gradients for a later
update is a step, as the Trainer's ``every=N`` steps are). The step is the
record's: the forward the loop's ``log()`` began for it, if the watched
forward has not joined one since, else a new one, which the loop's next
``log()`` numbers (``record/_logged``): a loop that logs after its forward,
before or not at all lands each step's facts and its loss in one forward,
as a Trainer's are.

Which steps are measured: the instruments' (``due``: the first ``FIRST``
updates, then one in ``EVERY``), counted in the optimizer's steps when
``optimizer=`` is given, else in steps. On a measured step, and only then,
hooks go on each node for that forward: each node says ``ran`` (its
``began_us``, from the module's forward's start, and ``took_us``) and its
outputs' ``out_zeros``/``out_saturated``; the module's forward says
``finished`` and then ``instruments_us``, the part of its time the hooks
spent reading the nodes' outputs (``spent`` shows it apart from the time
outside the nodes, as it does a Trainer's); each node's ``backward_us`` is said as that backward ends
(autograd's engine calls back). The other steps pay one hook on the module
(two on its optimizer).

The update (``grad_norm``, ``weight_norm``, ``update_norm``,
``grad_zeros``): with ``optimizer=``, around its ``step()`` (its step pre-
and post-hooks), so the gradients are the ones the update uses (after
unscaling by a GradScaler, and after any ``clip_grad_norm_`` the loop made,
where the Trainer reads them before its ``clip``); a ``step(closure)``
(LBFGS, Lightning) is measured once the closure's first call has made the
gradients, before any weight moves; its parameters that take
gradients but that it does not hold are said once (``not_optimized``).
Without it: the gradients and the weights as the measured step's backward
ends, and the update as what changed the weights by the next step's
beginning (the loop's update, between the two), said before that step's.

Their values are 0-d tensors, read with the loop's own logged tensors in
one host sync (``Logging.owe``); nothing here reads the device.
"""

from __future__ import annotations

from time import perf_counter_ns

import torch

from .._base.errors import SomatizeTypeError, SomatizeValueError
from ..record._logged import logging_of
from ..record._recorder import Recorder
from ._instruments import Instruments

# Looked into, never a node: they compute nothing of their own (a Sequential only when its forward is its own).
_LISTS = (torch.nn.ModuleList, torch.nn.ModuleDict)
_SEQUENTIAL_FORWARD = torch.nn.Sequential.forward


def watch(module, recorder, *, optimizer=None):
    """Record what a Trainer records for ``spent`` and ``diagnose`` of a
    plain ``torch.nn.Module`` trained by a loop of one's own, into the run
    the loop logs with ``recorder.log``:
    ``w = watch(net, rec, optimizer=opt)``, then ``w.remove()`` takes every
    hook off.

    The run's nodes are the module's parts, named as ``named_modules()``
    names them: lists (``Sequential``, ``ModuleList``, ``ModuleDict``) are
    looked into, any other module is one node (``features.0``,
    ``classifier``); ``w.nodes`` names them. A forward of ``module`` with
    gradients enabled begins a step, the one the loop's ``rec.log`` is at
    (or its next, which ``log`` numbers): a forward under
    ``torch.no_grad()`` (an evaluation) is none. On the steps the Trainer's
    instruments record (the first 10 updates, then one in 40) each node's
    forward time (``ran``), outputs (``out_zeros``, ``out_saturated``; the
    time reading them took in the forward, ``instruments_us``, which
    ``spent`` shows as the instruments' own) and backward time
    (``backward_us``), and each node's gradient, weight and
    update norms and share of zero gradients, as ``Trainer`` names them.
    ``optimizer``: the one that updates ``module``: its updates are counted
    and measured around its ``step()`` (the gradients it uses, after any
    clip the loop made), and parameters it does not hold are said
    (``not_optimized``); without it, steps are counted, and the update is
    what changed the weights from a measured step's backward to the next
    step. Nothing read waits for the device: the numbers are read with the
    loop's logged tensors. The model trains bit for bit as unwatched.

    One watch a Recorder (a second is refused: ``remove()`` the first);
    a watch ends itself at its module's next forward once its Recorder is
    closed. A module without parameters that take gradients is refused.
    On a data-parallel rank other than 0 (whose Recorder writes nothing) it
    hooks nothing."""
    if not isinstance(module, torch.nn.Module):
        raise SomatizeTypeError(f"watch(module, recorder): module is a torch.nn.Module, the model the loop "
                                f"trains; got {type(module).__name__}")
    if not isinstance(recorder, Recorder):
        raise SomatizeTypeError(f"watch(module, recorder): recorder is the somatize Recorder the loop logs into, "
                                f"like watch(net, Recorder(store, run='a-run')); got {type(recorder).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise SomatizeTypeError(f"watch(..., optimizer=): the torch.optim.Optimizer that updates the module; got "
                                f"{type(optimizer).__name__}")
    params = list(module.parameters())
    if not any(p.requires_grad for p in params):
        what = ("has no parameters" if not params else
                f"has {len(params)} parameters and none takes gradients (requires_grad is False)")
        raise SomatizeValueError(
            f"watch({type(module).__name__}): the module {what}, so nothing of it trains and the instruments "
            f"have nothing to measure. Watch the model the loop trains, the module whose parameters the "
            f"optimizer holds"
        )
    return Watch(module, recorder, optimizer)


class Watch:
    """What ``watch`` returns: the hooks on a module (and its optimizer)
    that record its steps; ``nodes``: the node names, in order;
    ``remove()`` takes every hook off."""

    def __init__(self, module, recorder, optimizer=None):
        self.module, self.recorder, self.optimizer = module, recorder, optimizer
        timed, measured, self._whole = nodes_of(module)
        self.nodes = tuple(name for name, _ in measured)
        self.removed = False
        self._handles = []
        self._node_handles = []
        if not recorder.recording:  # a data-parallel rank other than 0: its Recorder writes nothing
            return
        self._logging = logging = logging_of(recorder, "watch()")
        logging.attach(f"a watch of a {type(module).__name__}")
        self._said = logging.said
        self._inst = Instruments(measured, optimizer, logging.said, self._settle, finish=self._backward_ended)
        self._steps = 0  # steps begun
        self._updates = 0  # the optimizer's steps
        self._due = False  # this step is measured
        self._updating = False  # the optimizer's step under way is measured
        self._owed_update = False  # without optimizer=: a measured step's weights held until the next step
        self._timing = False  # the module's forward under way is measured
        self._start = 0
        self._starts: dict = {}
        self._hooks = [(m, *self._node_hooks(name)) for name, m in timed]
        self._handles.append(module.register_forward_pre_hook(self._forward_begins))
        self._handles.append(module.register_forward_hook(self._forward_ends, always_call=True))
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._update_begins))
            self._handles.append(optimizer.register_step_post_hook(self._update_ends))

    def remove(self):
        """Take every hook off the module and its optimizer; what a measured
        step had not said yet is not said."""
        if self.removed:
            return
        self.removed = True
        for handle in self._handles + self._node_handles:
            handle.remove()
        self._handles.clear()
        self._node_handles.clear()
        if self.recorder.recording:
            self._logging.detach()
            self._inst.clock.reset()
            self._inst.drop_update()

    def __repr__(self):
        state = "removed" if self.removed else f"into run {self.recorder.run!r}"
        return f"<watch of a {type(self.module).__name__}, {len(self.nodes)} nodes, {state}>"

    # -- the hooks ----------------------------------------------------------

    def _forward_begins(self, _module, _args):
        if not torch.is_grad_enabled():
            return  # an evaluation: no step
        inst = self._inst
        if self._owed_update:  # the last measured step's update, said in its step
            self._owed_update = False
            inst.after_update()
        if not self._logging.began():  # the Recorder was closed: this watch ends
            self.remove()
            return
        steps = self._steps
        self._steps = steps + 1
        self._due = due = inst.begin(steps if self.optimizer is None else self._updates)
        if due:
            self._timing = True
            add = self._node_handles.append
            for m, pre, post in self._hooks:
                add(m.register_forward_pre_hook(pre))
                add(m.register_forward_hook(post))
            self._start = perf_counter_ns()

    def _forward_ends(self, _module, _args, out):
        if not self._timing:
            return
        self._timing = False
        end = perf_counter_ns()
        for handle in self._node_handles:
            handle.remove()
        self._node_handles.clear()
        inst = self._inst
        if self._whole is not None:  # the module is its one node
            self._said({"fact": "ran", "node": self._whole, "began_us": 0, "took_us": (end - self._start) // 1000})
            inside = inst.measuring
            inst.output(self._whole, out)
            inst.measuring = inside  # its output is read after the forward's end: not in its time
        self._said({"fact": "finished", "took_us": (end - self._start) // 1000})
        inst.measured()  # instruments_us: the nodes' outputs read inside that time, for spent to tell apart

    def _node_hooks(self, name):
        starts, said, output = self._starts, self._said, self._inst.output

        def pre(_m, _args):
            starts[name] = perf_counter_ns()

        def post(_m, _args, out):
            t = perf_counter_ns()
            t0 = starts.get(name, t)
            said({"fact": "ran", "node": name, "began_us": (t0 - self._start) // 1000, "took_us": (t - t0) // 1000})
            output(name, out)

        return pre, post

    def _backward_ended(self):
        """A measured step's backward ended (autograd's engine calls it)."""
        if self.removed:
            return
        inst = self._inst
        inst.clock.hand_over()
        if self.optimizer is None and self._due and not self._owed_update:
            inst.before_update()  # the gradients as this backward left them, and the weights
            self._owed_update = True

    def _update_begins(self, _optimizer, args, kwargs):
        # torch hands the pre-hook step's own args, the optimizer first
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if closure is None:
            self._measure_update()
            return None
        # optimizer.step(closure) (LBFGS, Lightning): the forward and backward
        # run inside step, after this hook, so the update is measured once the
        # closure's first call has made the gradients (before any weight moves)
        first = [True]

        def measured(*a, **kw):
            result = closure(*a, **kw)
            if first[0]:
                first[0] = False
                self._measure_update()
            return result

        if "closure" in kwargs:
            return args, {**kwargs, "closure": measured}
        return (args[0], measured, *args[2:]), kwargs

    def _measure_update(self):
        if self._due:
            self._due = False  # one update measured a step
            self._updating = True
            self._inst.before_update()

    def _update_ends(self, _optimizer, _args, _kwargs):
        self._updates += 1
        if self._updating:
            self._updating = False
            self._inst.after_update()

    def _settle(self, tensors, facts, finish, counts=0):
        self._logging.owe(tensors, facts, finish)


def nodes_of(module):
    """``(timed, measured, whole)``: ``timed``, ``(name, module)`` of each
    node hooked on a measured step; ``measured``, ``(name, parameters)`` of
    every node, in order (a parameter held by the module or a list it looks
    into is one of its own); ``whole``: the module's own name as its one
    node when it has no submodules, else None."""
    if next(module.children(), None) is None:
        name = type(module).__name__
        return [], [(name, list(module.parameters()))], name
    timed, measured, seen = [], [], set()

    def walk(prefix, m):
        for name, p in m.named_parameters(recurse=False):
            measured.append((prefix + name, [p]))
        for name, child in m.named_children():
            if id(child) in seen:
                continue
            seen.add(id(child))
            if isinstance(child, _LISTS) or (isinstance(child, torch.nn.Sequential)
                                             and type(child).forward is _SEQUENTIAL_FORWARD):
                walk(f"{prefix}{name}.", child)
            else:
                timed.append((prefix + name, child))
                measured.append((prefix + name, list(child.parameters())))

    walk("", module)
    return timed, measured, None
