"""Facts and the watchers they are handed to: one owner for the engine and
the Trainer.

The rule kept here: the record's own vocabulary is reserved. The names the
engine and the Trainer give their facts (``RESERVED``) are what the record
counts runs and times by, and what ``loss``, ``forwards()`` and ``nodes()``
read; a node's ``ctx.fact`` may not use one, so one forward is never counted
twice and a user's number never lands in the series of a reserved fact.
A user fact always carries its ``node``, so its series is ``<fact>/<node>``;
the only reserved series with a ``/`` in its name, ``finished/took_us``, is
reserved with ``finished``.
"""

from __future__ import annotations

import threading
import weakref

from .._base.errors import SomatizeTypeError, WatcherError

ENGINE_FACTS = ("ran", "recalled", "kept", "finished", "failed")
# trainer_us is a step's whole time outside its forwards; objective_us, backward_us and update_us are
# its parts (the rest is the Trainer's bookkeeping). backward_us with a node: that node's part of the backward.
# wall_s: the clock (time.time()) when a step began, what progress(x="relative" | "wall") draws over.
# lr: the learning rate of the optimizer's first parameter group (with "group": i, of group i, in the
# series lr/group<i>), said on the steps that say their clocks.
# ranks: how many ranks a data-parallel job's loss is the mean over (said once); rank_us with "rank": i, rank
# i's own work in a step (its forwards, objective and backward, before it waits for the others), in the
# series rank_us/rank<i>; rank_before_us with "rank": i, rank i's time before that step (from its last
# collective's return to the step's start: loading its data), in the series rank_before_us/rank<i>
# (torch/_distributed.py).
TRAINER_FACTS = ("updated", "loss", "wall_s", "trainer_us", "objective_us", "backward_us", "update_us", "lr",
                 "ranks", "rank_us", "rank_before_us")
# The Trainer's instruments (somatize/torch/_instruments.py), read by somatize.diagnose; instruments_us:
# the µs a forward spent inside its time (finished) in the instruments' reading of its nodes' outputs, said
# on the steps they record, which spent shows apart from the engine's.
INSTRUMENT_FACTS = (
    "grad_norm", "weight_norm", "update_norm", "grad_zeros", "out_zeros", "out_saturated", "not_optimized",
    "instruments_us",
)
# An evaluation's time (somatize/torch/_evaluate.py). Its values, val_loss and val_<metric>, are not
# reserved: a node may say its own (ctx.fact("val_loss", ...) lands in the series val_loss/<node>).
EVALUATION_FACTS = ("eval_us",)
RESERVED = frozenset(ENGINE_FACTS + TRAINER_FACTS + INSTRUMENT_FACTS + EVALUATION_FACTS)


class Watchers:
    """The watchers of a forward (or of a Trainer's steps), checked once.

    ``emit(fact)`` hands a fact to each, in order; one that raises becomes a
    ``WatcherError`` naming it (``where`` says which ``watching=`` to take it
    out of). ``forward_began()`` tells each watcher that defines it that a
    forward begins. Every watcher is handed the same dict, which it must not
    change.

    ``output``: None, or a callable ``output(node_name, value)`` the engine
    calls with each node's output as it hands it on (after the edge's check),
    in a forward that is watched. The Trainer sets it on the steps its
    instruments record; unset, it costs one test per node.

    ``replay(items)`` hands over facts held back (the Trainer's, see
    ``held``) in the order they happened, ``None`` marking where a forward
    began; a watcher that defines ``take(items)`` (the Recorder) takes them
    in one call.

    ``began()``: ``forward_began()`` as one function made once, the only
    watcher's own when one defines it (one call a forward, not two).
    ``ctxs``: the engine's ``Ctx`` of each node name handing facts to
    ``emit``, made once (a Ctx is its name and ``emit``, nothing else).
    """

    __slots__ = ("all", "_began", "began", "emit", "output", "_takes", "_where", "ctxs")

    def __init__(self, watching, where="watching="):
        self.output = None
        self.ctxs = {}  # node name -> its Ctx handing facts to emit, made on its first watched forward
        self.all = _checked(watching)
        self._began = tuple(b for b in (getattr(w, "forward_began", None) for w in self.all) if b is not None)
        self.began = _beginning(self._began)  # forward_began() in one call (what the engine calls)
        self.emit = _emitter(self.all, where)
        self._takes = tuple(getattr(w, "take", None) for w in self.all)
        self._where = where

    def __bool__(self):
        return bool(self.all)

    def forward_began(self):
        for began in self._began:
            began()

    def replay(self, items):
        for w, take in zip(self.all, self._takes):
            try:
                if take is not None:
                    take(items)
                    continue
                began = getattr(w, "forward_began", None)
                for fact in items:
                    if fact is not None:
                        w(fact)
                    elif began is not None:
                        began()
            except Exception as e:
                raise _refused(w, f"{len(items)} facts held back", e, self._where) from e

    def __repr__(self):
        return f"Watchers({list(self.all)!r:.200})"


class Holders:
    """The producers that hold facts back from a watcher (``held_by``):
    each is called, from the thread that registered it, before the watcher
    writes or shows what it holds, so that what was done is there. Held
    weakly: a Trainer gone holds nothing."""

    __slots__ = ("_all",)

    def __init__(self):
        self._all = []

    def add(self, hand_over):
        self._all.append((threading.get_ident(), weakref.WeakMethod(hand_over)))

    def __bool__(self):
        return bool(self._all)

    def __call__(self):
        me = threading.get_ident()
        for thread, ref in self._all:
            if thread == me:
                f = ref()
                if f is not None:
                    f()


def held(into):
    """Watchers that hold every fact back in the list ``into`` (a forward's
    beginning as ``None``), for the Trainer to ``replay`` to the real ones
    later: its steps then hand nothing over while they run."""
    w = Watchers(None)
    w.all = (into.append,)
    w.emit = into.append
    w._began = (_marker(into),)
    w.began = w._began[0]
    return w


def _beginning(befores):
    """One function calling each of ``befores`` (a tuple); it holds the
    tuple, not the Watchers, so it makes no reference cycle."""
    if len(befores) == 1:
        return befores[0]

    def began():
        for b in befores:
            b()

    return began


def _marker(into):
    def began():
        into.append(None)

    return began


def _emitter(all_, where):
    """``emit(fact)``: a function made once (no bound method to build per
    fact, no loop for the usual single watcher; it holds the watchers, not
    the Watchers, so it makes no reference cycle)."""

    if len(all_) == 1:
        (only,) = all_

        def emit(fact):
            try:
                only(fact)
            except Exception as e:
                raise _refused(only, fact, e, where) from e

        return emit

    def emit(fact):
        for w in all_:
            try:
                w(fact)
            except Exception as e:
                raise _refused(w, fact, e, where) from e

    return emit


def _refused(w, fact, e, where):
    return WatcherError(
        f"watcher {_describe(w)} raised {type(e).__name__}: {e} when handed "
        f"{fact!r:.200}. What it was handed before was delivered and the run "
        f"stopped there; fix the watcher or take it out of {where}."
    )


def _checked(watching):
    if watching is None:
        return ()
    if callable(watching):
        return (watching,)
    if isinstance(watching, (list, tuple)):
        for w in watching:
            if not callable(w):
                raise SomatizeTypeError(
                    f"watching= holds {w!r:.60}, which is not callable; a watcher is a "
                    "callable taking one fact (a dict)"
                )
        return tuple(watching)
    raise SomatizeTypeError(
        f"watching= takes a callable or a list of callables; got {type(watching).__name__} {watching!r:.60}"
    )


def _describe(w):
    name = getattr(w, "__qualname__", None) or type(w).__qualname__
    return f"{name} ({w!r:.80})"


NONE = Watchers(None)


def watchers(watching, where="watching="):
    """``watching`` as Watchers: a Watchers is taken as it is (the Trainer
    hands the graph the ones it checked once)."""
    if watching.__class__ is Watchers:
        return watching
    if watching is None:
        return NONE
    return Watchers(watching, where)
