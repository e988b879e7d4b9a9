"""A Trainer's state, kept in a store and resumed from it: a training run
survives its process.

The rule kept here: the state is everything the next step depends on, as
plain data the Store keeps without pickle: the weights (an export), the
optimizer's ``state_dict`` (its per-parameter state keyed by the parameter's
index as a str, since a name in a store is text), the gradients of an open
group, and the counters. A Trainer resumed from it takes the same steps as
one never stopped, bit for bit (given the same batches in the same order).
It also holds how many forwards each Recorder watching the Trainer held when
the state was kept (each is flushed first), so that a resume rewinds the
record there and the steps done again are recorded once.
"""

from __future__ import annotations

import torch

from .._base.errors import SomatizeTypeError, SomatizeValueError
from .._store.store import as_store
from ..record._recorder import Recorder
from ._weights import export
from ._weights import load as load_weights

FORMAT = 1
_FIELDS = ("format", "steps", "updates", "group", "weights", "optimizer", "grads", "records")


def checked(store, name, every):
    """The state's name, after checking the Trainer's ``state=`` and ``keep_every=``."""
    if name is None:
        if every is not None:
            raise SomatizeValueError(
                f"keep_every={every!r} keeps the Trainer's state, under a name: write "
                f"Trainer(..., store=store, state='a-run/state', keep_every={every!r})"
            )
        return None
    if not isinstance(name, str) or not name:
        raise SomatizeTypeError(f"state= takes the name to keep the Trainer's state under, like "
                                f"state='a-run/state'; got {name!r:.60}")
    if store is None:
        raise SomatizeValueError(f"state={name!r} keeps the Trainer's state in a store: give store= too")
    return name


def where(trainer, store, name):
    store = trainer.store if store is None else store
    name = trainer._state_name if name is None else name
    if store is None or name is None:
        raise SomatizeValueError(
            "keep_state/load_state need a store and a name: write trainer.keep_state(store, 'a-run/state'), "
            "or make the Trainer with store= and state="
        )
    return as_store(store), name


def keep(trainer, store, name):
    records = {}
    for watcher in trainer._watchers.all:
        if isinstance(watcher, Recorder):
            watcher.flush()  # the record holds what the state has done, durably, before the state says so
            records[watcher.run] = watcher.forwards
    optimizer = trainer.optimizer.state_dict()
    value = {
        "format": FORMAT,
        "steps": trainer.steps,
        "updates": trainer.updates,
        "group": {"open": trainer._open, "examples": trainer._group_n, "first": trainer._first_n},
        "weights": export(trainer.g),
        "optimizer": {"state": {str(k): v for k, v in optimizer["state"].items()},
                      "param_groups": optimizer["param_groups"]},
        "grads": {str(i): p.grad.detach().clone() for i, p in enumerate(trainer._params) if p.grad is not None},
        "records": records,
    }
    return store.keep(name, value)


def load(trainer, store, name):
    if store.lookup(name) is None:
        return False
    value = store.recall(name)
    if not isinstance(value, dict) or set(value) != set(_FIELDS) or value["format"] != FORMAT:
        raise SomatizeValueError(
            f"{name!r} in the store at {store.path} is not a Trainer's state (kept by keep_state, "
            f"format {FORMAT}); give the name the Trainer's state was kept under, or another name to start afresh"
        )
    params = trainer._params
    grads = value["grads"]
    if any(not k.isdigit() or int(k) >= len(params) for k in grads):
        raise SomatizeValueError(f"the state {name!r} holds gradients of {len(grads)} parameters the "
                                 f"optimizer does not have ({len(params)}): it was kept by another Trainer")
    load_weights(trainer.g, value["weights"])
    kept = value["optimizer"]
    try:
        trainer.optimizer.load_state_dict(
            {"state": {int(k): v for k, v in kept["state"].items()}, "param_groups": kept["param_groups"]}
        )
    except (ValueError, KeyError, TypeError) as e:
        raise SomatizeValueError(
            f"the optimizer's state kept under {name!r} does not fit this optimizer ({e}); resume with "
            f"the optimizer the state was kept with ({type(trainer.optimizer).__name__} here)"
        ) from None
    with torch.no_grad():
        for i, p in enumerate(params):
            g = grads.get(str(i))
            p.grad = None if g is None else g.to(device=p.device, dtype=p.dtype).clone()
    group = value["group"]
    trainer.steps, trainer.updates = value["steps"], value["updates"]
    trainer._open, trainer._group_n, trainer._first_n = group["open"], group["examples"], group["first"]
    trainer._resumed_steps = trainer.steps
    for watcher in trainer._watchers.all:
        if isinstance(watcher, Recorder) and watcher.run in value["records"]:
            watcher.rewind(value["records"][watcher.run])
    return True

