"""A Trainer's checkpoint: what a training run needs to go on as if never
stopped, as plain data a Store keeps without pickle.

The rule kept here: the checkpoint is everything the next step depends on.
The weights (an export), the optimizer's ``state_dict`` (its per-parameter
state keyed by the parameter's index as a str, since a name in a store is
text), the gradients of an open group, the counters, the schedule's and
the gradient scaler's ``state_dict``, torch's RNG streams (CPU, and CUDA
where it is in use), the state of each further object the user hands in
(``checkpoint_also=``), where ``fit`` stood (epoch, batches done, and the RNG
streams as they were when that epoch drew its batch order), and the
position of each watcher that can resume (a watcher that defines
``checkpoint()`` and ``rewind(position)``, as the Recorder does). A Trainer
resumed from it takes the same steps as one never stopped, bit for bit.

A data-parallel job keeps one checkpoint, written by rank 0: the weights,
the optimizer's state and the counters are the same on every rank; what is
each rank's own (its RNG streams, its open group's gradients, the RNG its
epoch drew its order with) is gathered to rank 0 and kept as ``ranks``, a
list in rank order (``per_rank``); every rank reads the checkpoint and takes
its own part (``own_part``). It resumes on the same number of ranks only.

``Checkpoints`` keeps and puts back everything but the Trainer's counters
and where ``fit`` stands, which the Trainer hands in and is handed back.
"""

from __future__ import annotations

import torch

from .._base.errors import SomatizeTypeError, SomatizeValueError
from .._store.store import as_store
from ._group import positive_int
from ._weights import export, load

FORMAT = 2
FIELDS = frozenset(("format", "counters", "fit", "weights", "optimizer", "grads", "schedule", "scaler", "rng",
                    "also", "watchers"))


class Checkpoints:
    """A Trainer's checkpoints: the name (``checkpoint=``) and how often
    (``every``, steps) they are kept in the Trainer's store, and what goes in
    beside the counters and where ``fit`` stands: the weights of ``g``,
    ``optimizer``'s state, the gradients of ``params``, the schedule's and
    fp16's scaler's state (the Trainer's, handed in), torch's RNG streams,
    the states of ``also`` (``checkpoint_also=``), the positions of the
    ``watchers`` that can resume (``checkpoint()`` and ``rewind(position)``);
    data parallel (``ranks``), each rank's own part."""

    def __init__(self, store, name, every, also, watchers, g, optimizer, params, ranks):
        self.also = checked_also(also)
        self.name = checked_name(store, name, every)
        self.every = None if every is None else positive_int("checkpoint_every", every)
        self.watchers = [w for w in watchers if callable(getattr(w, "checkpoint", None))
                         and callable(getattr(w, "rewind", None))]
        self.g, self.optimizer, self.params, self.ranks = g, optimizer, params, ranks

    def where(self, default, store, name):
        """``(the Store, the name)`` a checkpoint is kept under or resumed
        from: ``store`` and ``name``, or the Trainer's (``default`` and
        ``checkpoint=``)."""
        store = default if store is None else store
        name = self.name if name is None else name
        if store is None or name is None:
            raise SomatizeValueError(
                "checkpoint()/resume() need a store and a name: write trainer.checkpoint(store, "
                "'a-run/checkpoint'), or make the Trainer with store= and checkpoint="
            )
        return as_store(store), name

    def keep(self, store, name, counters, fit, fit_rng, schedule, scaler):
        """Keep a checkpoint in ``store`` under ``name``: ``counters`` and
        ``fit`` (where fit stands, or None) as given, ``fit_rng`` the RNG as
        fit's epoch drew its order (each rank's own), ``schedule`` and
        ``scaler`` the Trainer's. Returns the digest; data parallel, every
        rank calls it (a collective) and rank 0 alone writes and returns it,
        the others None."""
        value = {
            "format": FORMAT,
            "counters": counters,
            "fit": fit,
            "weights": export(self.g),
            "optimizer": optimizer_state(self.optimizer),
            "grads": grads(self.params),
            "schedule": None if schedule is None else schedule.state_dict(),
            "scaler": None if scaler is None else scaler.state_dict(),
            "rng": rng(),
            "also": [state_of(obj) for obj in self.also],
            "watchers": [w.checkpoint() for w in self.watchers],
        }
        ranks = self.ranks
        if ranks is not None:  # one checkpoint for the job, written by rank 0
            value["ranks"] = per_rank(ranks, self.params, fit_rng)
            if ranks.rank != 0:
                return None
        return store.keep(name, value)

    def put_back(self, store, name, schedule, scaler):
        """Put back everything the checkpoint kept under ``name`` holds but
        the counters and where fit stood, which it returns: ``(counters,
        fit)``; each watcher that can resume is rewound to its position.
        Returns None, changing nothing, when nothing is kept under the name."""
        if store.lookup(name) is None:
            return None
        value = checked(store.recall(name), name, store, self.params, schedule, scaler, self.also, self.watchers)
        mine = own_part(value, self.ranks, name)
        if mine is not None:  # this rank's own streams and gradients
            value["rng"], value["grads"] = mine["rng"], mine["grads"]
            if value["fit"] is not None and mine["fit"] is not None:
                value["fit"]["rng"], value["fit"]["generator"] = mine["fit"]
        load(self.g, value["weights"])
        load_optimizer(self.optimizer, value["optimizer"], name)
        put_grads(self.params, value["grads"])
        if schedule is not None:
            schedule.load_state_dict(value["schedule"])
        if scaler is not None:
            scaler.load_state_dict(value["scaler"])
        for obj, state in zip(self.also, value["also"]):
            put_state(obj, state)
        set_rng(value["rng"])
        if value["watchers"]:
            for w, position in zip(self.watchers, value["watchers"]):
                w.rewind(position)
        return value["counters"], value["fit"]


def checked_name(store, name, every):
    """The checkpoint's name, after checking the Trainer's ``checkpoint=`` and ``checkpoint_every=``."""
    if name is None:
        if every is not None:
            raise SomatizeValueError(
                f"checkpoint_every={every!r} keeps a checkpoint, under a name: write "
                f"Trainer(..., store=store, checkpoint='a-run/checkpoint', checkpoint_every={every!r})"
            )
        return None
    if not isinstance(name, str) or not name:
        raise SomatizeTypeError(f"checkpoint= takes the name to keep the Trainer's checkpoint under, like "
                                f"checkpoint='a-run/checkpoint'; got {name!r:.60}")
    if store is None:
        raise SomatizeValueError(f"checkpoint={name!r} keeps the Trainer's checkpoint in a store: give store= too")
    return name


def checked_also(also):
    """``checkpoint_also=``: objects with ``state_dict``/``load_state_dict``
    (a sampler of one's own, a counter) or ``torch.Generator``s."""
    also = list(also or ())
    for i, obj in enumerate(also):
        if isinstance(obj, torch.Generator):
            continue
        if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
            raise SomatizeTypeError(
                f"checkpoint_also[{i}] is a {type(obj).__name__}, which has no state_dict()/load_state_dict(): "
                "hand in objects that do (a sampler, a counter of your own) or a torch.Generator"
            )
    return also


def state_of(obj):
    return obj.get_state() if isinstance(obj, torch.Generator) else obj.state_dict()


def put_state(obj, state):
    if isinstance(obj, torch.Generator):
        obj.set_state(state)
    else:
        obj.load_state_dict(state)


def rng():
    """torch's RNG streams: the CPU's, and each CUDA device's once CUDA is in use."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return {"cpu": torch.get_rng_state(), "cuda": list(cuda)}


def set_rng(kept):
    torch.set_rng_state(kept["cpu"])
    if kept["cuda"]:
        torch.cuda.set_rng_state_all(kept["cuda"])


def optimizer_state(optimizer):
    kept = optimizer.state_dict()
    return {"state": {str(k): v for k, v in kept["state"].items()}, "param_groups": kept["param_groups"]}


def load_optimizer(optimizer, kept, name):
    try:
        optimizer.load_state_dict(
            {"state": {int(k): v for k, v in kept["state"].items()}, "param_groups": kept["param_groups"]}
        )
    except (ValueError, KeyError, TypeError) as e:
        raise SomatizeValueError(
            f"the optimizer's state kept under {name!r} does not fit this optimizer ({e}); resume with "
            f"the optimizer the checkpoint was kept with ({type(optimizer).__name__} here)"
        ) from None


def grads(params):
    return {str(i): p.grad.detach().clone() for i, p in enumerate(params) if p.grad is not None}


def put_grads(params, kept):
    with torch.no_grad():
        for i, p in enumerate(params):
            g = kept.get(str(i))
            p.grad = None if g is None else g.to(device=p.device, dtype=p.dtype).clone()


def checked(value, name, store, params, schedule, scaler, also, watchers):
    """``value`` recalled from ``store`` under ``name``, checked to be a
    checkpoint this Trainer can resume from; the error names what differs."""
    if not isinstance(value, dict) or set(value) - {"ranks"} != FIELDS or value["format"] != FORMAT:
        raise SomatizeValueError(
            f"{name!r} in the store at {store.path} is not a Trainer's checkpoint (kept by "
            f"Trainer.checkpoint, format {FORMAT}); give the name the checkpoint was kept under, "
            "or another name to start afresh"
        )
    kept = value["grads"]
    if any(not k.isdigit() or int(k) >= len(params) for k in kept):
        raise SomatizeValueError(f"the checkpoint {name!r} holds gradients of {len(kept)} parameters the "
                                 f"optimizer does not have ({len(params)}): it was kept by another Trainer")
    for what, mine, theirs in (("schedule=", schedule is not None, value["schedule"] is not None),
                               ("precision='fp16' (a gradient scaler)", scaler is not None,
                                value["scaler"] is not None)):
        if mine != theirs:
            raise SomatizeValueError(
                f"the checkpoint {name!r} was kept by a Trainer {'with' if theirs else 'without'} {what}, "
                f"and this one is {'with' if mine else 'without'}: resume with the Trainer's arguments as "
                "they were when it was kept"
            )
    for what, n, k in (("checkpoint_also=", len(also), len(value["also"])),
                       ("watchers that resume (a Recorder)", len(watchers), len(value["watchers"]))):
        # a record kept, or resumed, without a Recorder: nothing to rewind
        if n != k and (what == "checkpoint_also=" or n and k):
            raise SomatizeValueError(
                f"the checkpoint {name!r} holds the state of {k} {what}, this Trainer has {n}: resume with "
                "the same ones, in the same order"
            )
    return value


def per_rank(ranks, params, fit_rng):
    """Each rank's own part of a data-parallel checkpoint, gathered from
    every rank (a collective: every rank calls it) in rank order:
    ``[{"rng", "grads", "fit"}, ...]``. ``fit_rng``: [cpu, generator] as the
    epoch under way drew its order, or None."""
    what = "gathering the checkpoint's per-rank state"
    cpu = ranks.gather(torch.get_rng_state(), what)
    cuda = ([ranks.gather(torch.cuda.get_rng_state(), what)]
            if torch.cuda.is_available() and torch.cuda.is_initialized() else [])
    flags = ranks.gather(torch.tensor([p.grad is not None for p in params], dtype=torch.uint8), what)
    grads = {i: ranks.gather(p.grad if p.grad is not None else torch.zeros_like(p), what)
             for i, p in enumerate(params) if any(f[i] for f in flags)}
    fit = None
    if fit_rng is not None:
        fit = [ranks.gather(fit_rng[0], what),
               None if fit_rng[1] is None else ranks.gather(fit_rng[1], what)]
    return [{"rng": {"cpu": cpu[r], "cuda": [c[r] for c in cuda]},
             "grads": {str(i): g[r] for i, g in grads.items() if flags[r][i]},
             "fit": None if fit is None else [fit[0][r], None if fit[1] is None else fit[1][r]]}
            for r in range(ranks.size)]


def own_part(value, ranks, name):
    """This rank's part of a kept checkpoint, after checking that it was kept
    by a job of as many ranks as this one (or by one process, when this is one)."""
    kept = value.get("ranks")
    size = 1 if ranks is None else ranks.size
    if (len(kept) if kept is not None else 1) != size or (kept is None) != (ranks is None):
        was = "one process" if kept is None else f"{len(kept)} ranks"
        now = "one process" if ranks is None else f"{size} ranks"
        raise SomatizeValueError(
            f"the checkpoint {name!r} was kept by a job of {was}, and this one runs on {now}: each rank's "
            "random streams and open gradients are its own, so resume on as many ranks as it was kept with"
        )
    return None if kept is None else kept[ranks.rank]
