"""Evaluation: the graph run on held-out batches, measured, and nothing else moved.

The rule kept here: an evaluation leaves training exactly as it found it.
It runs under ``torch.no_grad()`` with every module in eval mode (each given
back its own mode after, ``_modes``), and torch's random streams (the CPU's
and, where present, each CUDA device's) are put back as they were, so the
next training steps are those of a run that never evaluated, whatever the
batches' loader or the graph drew. Its forwards are not watched: a watcher
hears no ``forward_began()`` and no engine fact from them, so the training
run's forwards keep their numbers.

What it says, to the Trainer's watchers, after the facts of the last step
(so they belong to that step's forward; before any step, to forward 0):
``{"fact": "val_loss", "value": <float>}`` (the objective), one
``{"fact": "val_<name>", "value": <float>}`` per metric, each the mean over
the examples of every batch (a batch's value weighted by its examples), and
last ``{"fact": "eval_us", "value": <int>}``, the µs the whole evaluation took
(its forwards, the objective and the metrics), which ``spent`` shows apart
from the training's time. Data parallel, each rank evaluates the batches it
is given (its share, as a DistributedSampler deals them) and the sums are
all-reduced: the values said are over every rank's examples.
"""

from __future__ import annotations

from time import perf_counter_ns

import torch

from .._base.errors import SomatizeTypeError, SomatizeValueError
from .._base.values import Opaque
from ._batch import taken

PREFIX = "val_"  # every fact an evaluation says but its time; what Live and progress draw beside the loss
TIME = "eval_us"


def accuracy(output, target):
    """The share of examples whose highest score is their class: ``output``
    of shape (examples, classes), ``target`` the class indexes (examples,)."""
    if not isinstance(output, torch.Tensor) or output.ndim != 2 or not isinstance(target, torch.Tensor) \
            or target.shape != output.shape[:1] or target.is_floating_point():
        got = (f"output {_shape(output)} and target {_shape(target)}")
        raise SomatizeValueError(
            f"metric 'accuracy' takes class scores of shape (examples, classes) and integer class "
            f"indexes of shape (examples,); got {got}. Name a function of your own instead, e.g. "
            "metrics={'accuracy': lambda out, y: ((out > 0).float() == y).float().mean()}"
        )
    return (output.argmax(dim=1) == target).double().mean()


BUILT_IN = {"accuracy": accuracy}


def checked_metrics(metrics):
    """{name: fn} from ``metrics=``: names of built-in metrics, or a dict of
    name -> fn(output, target) returning the batch's mean as a number or a
    0-d tensor."""
    if metrics is None:
        return {}
    if isinstance(metrics, str):
        metrics = (metrics,)
    if isinstance(metrics, dict):
        out = dict(metrics)
    else:
        try:
            names = list(metrics)
        except TypeError:
            raise SomatizeTypeError(
                f"metrics={metrics!r:.60}: give names of metrics, like metrics=('accuracy',), or a dict "
                "of name -> fn(output, target), like metrics={'mae': lambda out, y: (out - y).abs().mean()}"
            ) from None
        out = {}
        for name in names:
            if name not in BUILT_IN:
                raise SomatizeValueError(
                    f"metrics=: {name!r:.60} is not a metric somatize knows (it knows "
                    f"{', '.join(map(repr, BUILT_IN))}); name your own with a dict: "
                    f"metrics={{{str(name)!r:.40}: lambda out, y: ...}}"
                )
            out[name] = BUILT_IN[name]
    for name, fn in out.items():
        if not isinstance(name, str) or not name or "/" in name:
            raise SomatizeValueError(f"metrics=: a metric's name is a str without '/', like 'accuracy'; "
                                     f"got {name!r:.60}")
        if name == "loss":
            raise SomatizeValueError("metrics=: 'loss' is the objective's, said as val_loss; name the metric "
                                     "otherwise")
        if not callable(fn):
            raise SomatizeTypeError(f"metrics=: {name!r} maps to {fn!r:.60}, which is not callable; give a "
                                    "function of (output, target)")
    return out


def evaluate(batches, metrics, *, g, store, objective, modes, keys, device, ranks, emit):
    """The body of ``Trainer.evaluate``: returns {"val_loss": v, "val_<name>": v, ...}.

    ``g`` run on each batch (taken apart by ``keys``, moved to ``device``:
    ``_batch.taken``) with ``store``, ``objective`` and the metrics measured
    on its output, every module in eval mode inside ``modes.evaluating()``;
    data parallel (``ranks``), the sums all-reduced; said to ``emit``, or to
    nobody when it is None."""
    metrics = checked_metrics(metrics)
    began = perf_counter_ns()
    measures = (("loss", objective), *metrics.items())
    values = {name: [] for name, _ in measures}  # each batch's value, left on its device until the end
    sizes = []
    rng = _rng_state()
    try:
        with modes.evaluating(), torch.no_grad():
            for batch in batches:
                x, y = taken(batch, keys, device)
                n = _examples(x, y)
                out = g.forward(Opaque(x), store)
                for name, fn in measures:
                    values[name].append(_batch_value(fn(out, y), name, sum(sizes)))
                sizes.append(n)
    finally:
        _put_back(rng)
    examples = sum(sizes)
    totals = {}
    for name, batch_values in values.items():
        total = 0.0  # in order, in float64: the sum a loop adding value * n batch by batch makes
        for v, n in zip(_floats(batch_values), sizes):
            total += v * n
        totals[name] = total
    if ranks is not None:  # data parallel: over every rank's held-out examples
        *summed, examples = ranks.summed([*totals.values(), float(examples)], "the evaluation's all-reduce")
        totals = dict(zip(totals, summed))
    if not examples:
        raise SomatizeValueError("evaluate(batches): the batches held no example; give a list of (x, y), "
                                 "or a DataLoader over the validation set")
    said = {PREFIX + name: total / examples for name, total in totals.items()}
    if emit is not None:  # after the facts the Trainer holds back, so at the current step
        for name, value in said.items():
            emit({"fact": name, "value": value})
        emit({"fact": TIME, "value": (perf_counter_ns() - began) // 1000})
    return said


def _batch_value(v, name, seen):
    """A batch's value: a 0-d tensor (left on its device) or a float."""
    if isinstance(v, torch.Tensor) and v.ndim == 0:
        return v.detach()
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    what = "objective" if name == "loss" else f"metric {name!r}"
    raise SomatizeTypeError(
        f"evaluate: the {what} returned {_shape(v)} on the batch after {seen} examples; it must return "
        "the batch's mean as a number or a 0-d tensor (a loss with reduction='mean')"
    )


def _floats(values):
    """The batches' values as floats, the tensors read off their device in one go."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not tensors:
        return values
    read = iter(torch.stack([t.to(tensors[0].device) for t in tensors]).tolist())
    return [next(read) if isinstance(v, torch.Tensor) else v for v in values]


def _examples(x, y):
    for t in (x, y):
        if isinstance(t, torch.Tensor) and t.ndim:
            return t.shape[0]
    raise SomatizeValueError("evaluate: a batch's x is a 0-d tensor; a batch holds its examples along dim 0")


def _shape(v):
    return f"a tensor of shape {list(v.shape)}" if isinstance(v, torch.Tensor) else f"a {type(v).__name__}"


def _rng_state():
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _put_back(state):
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
