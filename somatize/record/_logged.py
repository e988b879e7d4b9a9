"""A loop's own values written into a run: what ``Recorder.log`` does.

The rule kept here: a logged run is recorded as a Trainer's is, so every
reader (``curve``, ``progress``, ``runs``, ``compare``, the run browser,
``somatize runs``) reads it as one. A step is one forward: at each new step
``log`` marks a forward's beginning, as the engine does (the Recorder
numbers forwards on its flush), and hands each value over as
``{"fact": key, "value": v}``, the shape of the Trainer's ``loss``, ``lr``
and ``val_*``. On the steps the Trainer says its clocks (``CLOCKS_*``: the
first ten, every 20th, and at least once a second) a step also says
``{"fact": "wall_s", "value": time.time()}``, the clock as its first values
were logged, so ``progress(x="wall")`` draws it over time. Forwards count
the steps logged, from 0; a step whose number is not its forward's (a loop
counting from 1, or logging every 10th step) also says ``{"fact": "step",
"value": n}``, so the loop's own numbers are kept.

Values read in bulk (``_base/bulk``: a 0-d tensor, once ``somatize.torch``
is imported) are held as they are handed over, and so is every fact logged
after the first of them, in order, until they are read: one read call per
kind for everything held (one host sync for tensors), after which the facts
go to the Recorder at once. When they are read, on the thread that logged
them: at a step that begins ``READ_EVERY`` steps or ``READ_AT_MOST_NS``
after the first value held since the last read (the Trainer's rule, before
that step's own values, so the device has had a step to finish them), and
whenever the Recorder is flushed, closed or queried from that thread (it
holds this as a producer, ``Recorder.held_by``'s ``Holders``, as it holds a
Trainer). Never on the background flusher's thread: it writes what was read
(a CUDA tensor could be read from there, but the read would wait for the
device in the middle of the training's work, and the values' facts would
then reach the record in another order than the loop's). So a kill -9 loses
what was held since the last read, as it does a Trainer's unread losses, on
top of what the background flush had not written yet. Without values read in
bulk (Python numbers only), every fact goes to the Recorder as it is logged.

A watch (``somatize.torch.watch``: hooks on a module) hands its facts to the
same ``Logging``, so they keep the loop's order: ``began()`` as its module's
forward begins a step, ``said(fact)`` for each fact, ``owe(values, facts,
finish)`` for facts whose values are read in bulk with the loop's own. A
step's forward is begun by whichever comes first: the watched forward opens
it and the loop's next ``log()`` numbers it (``step=None`` or a step after
the last logged: that forward is the step's), or ``log()`` opens it and the
watched forward joins it. One watch a Recorder (``attach``).
"""

from __future__ import annotations

import numbers
import re
import warnings
from time import perf_counter_ns, time

from .._base.bulk import kind_of
from .._base.errors import SomatizeKeyError, SomatizeTypeError, SomatizeValueError
from .._graph.watchers import ENGINE_FACTS, RESERVED
from ._columns import refused_fact
from ._log import fits_a_file

# The Trainer's rules (CLOCKS_* in torch/_trainer.py, READ_EVERY and
# READ_AT_MOST_NS in torch/_reading.py), which this layer cannot import;
# tests/test_log.py holds them equal.
CLOCKS_FIRST, CLOCKS_EVERY, CLOCKS_AT_MOST_NS = 10, 20, 1_000_000_000
READ_EVERY, READ_AT_MOST_NS = 32, 250_000_000

STEP, WALL = "step", "wall_s"  # the facts log() says itself
# Reserved names (_graph/watchers.RESERVED) a loop logs with the Trainer's own meaning.
AS_THE_TRAINER = frozenset(("loss", "lr"))
# A logged fact's name: a node's (ctx.fact) and "/", which a loop uses to group its values ("train/loss").
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]{0,127}")


class Logging:
    """A Recorder's ``log``: where the loop stands (its last step, that
    step's forward), the keys already checked, and what is held until read
    (``held``: facts, a new step as ``None``; ``owed``: the values they wait
    for, ``(kind, held value, fact, step)``). ``clock``: what the dues of
    ``wall_s`` and of a read are told by (``perf_counter_ns``; a test sets
    its own)."""

    __slots__ = ("recorder", "step", "forward", "known", "held", "owed", "clock", "clocks_due", "read_due",
                 "held_steps", "groups", "open", "watched", "watch", "quiet", "__weakref__")

    def __init__(self, recorder, by="log()"):
        if recorder._holders:
            raise SomatizeValueError(
                f"run {recorder.run!r}: a Trainer watches this Recorder and records its steps as forwards; "
                f"{by} numbers forwards by the loop's steps, and the two would be mixed. Log into a Recorder "
                f"of its own, e.g. Recorder(store, run={recorder.run + '-log'!r}), or say a value from a node "
                f"(ctx.fact) or from trainer.evaluate"
            )
        self.recorder = recorder
        self.step = None  # the last step logged (the loop's number), None before any
        self.forward = None  # that step's forward (-1 before any); None: asked of the Recorder at the next log()
        self.known: set = set()
        self.held: list = []
        self.owed: list = []
        self.clock = perf_counter_ns
        self.clocks_due = 0
        self.read_due = 0
        self.held_steps = 0
        self.groups: list = []  # a watch's values owed: (kind, [held], facts, finish)
        self.open = False  # the current forward was begun by a watch and no log() has numbered it yet
        self.watched = True  # a watch saw the current forward (False: log() began it, unseen): began() opens the next
        self.watch = None  # what watches this Recorder (attach), or None
        self.quiet = None  # the clock as the current forward began, while a watch began it and it holds no fact
        recorder._holders.add(self.read)  # a flush, close or query from this thread reads first

    def log(self, values, step):
        if values.__class__ is not dict or not values:
            values = _mapping(values)
        if self.forward is None:
            self._place()
        last = self.step
        self.quiet = None  # the current forward is the step's (or one log() began): it holds these values
        if step is None:
            step = 0 if last is None else last + 1
            new = True
        elif step.__class__ is int and (last is None or step > last) and step >= 0:
            new = True
        elif step.__class__ is int and step == last:
            new = False
        else:
            step, new = _checked_step(step, last)
        add: list = []
        owed = None
        if new and self.open:  # the forward a watch began: this step's, numbered now
            new = self.open = False
            if step != self.forward:
                add.append({"fact": STEP, "value": step})
            self.step = step
        elif new:
            forward = self.forward + 1
            add.append(None)  # a forward begins
            if step != forward:
                add.append({"fact": STEP, "value": step})
        known = self.known
        for key, value in values.items():
            if key not in known:
                self._check(key)
            cls = value.__class__
            if cls is float or cls is int:
                add.append({"fact": key, "value": value})
                continue
            kind = kind_of(value)
            if kind is None:
                add.append({"fact": key, "value": _number(key, value)})
                continue
            try:
                held = kind.hold(value)
            except ValueError as e:
                raise SomatizeValueError(f"log(): values[{key!r}] is {e}") from None
            fact = {"fact": key, "value": None}  # its value written in when read
            add.append(fact)
            if owed is None:
                owed = []
            owed.append((kind, held, fact, step))
        if new:
            now = self.clock()
            if forward < CLOCKS_FIRST or forward % CLOCKS_EVERY == 0 or now >= self.clocks_due:
                self.clocks_due = now + CLOCKS_AT_MOST_NS
                add.append({"fact": WALL, "value": time()})
            if self.owed or self.groups:  # the steps before this one, read when due
                self.held_steps += 1
                if self.held_steps >= READ_EVERY or now >= self.read_due:
                    self.read()
            self.step, self.forward = step, forward
            self.watched = False
        if owed is not None:
            if not (self.owed or self.groups):
                self.read_due = self.clock() + READ_AT_MOST_NS
                self.held_steps = 0
            self.owed += owed
        if self.owed or self.groups:
            self.held += add
        else:
            self.recorder._pending.extend(add)

    # -- a watch's facts (somatize.torch.watch) ---------------------------

    def attach(self, what):
        """A watch of ``what`` (a module's description) hands its facts here
        from now on; a second is refused, naming the first."""
        if self.watch is not None:
            raise SomatizeValueError(
                f"run {self.recorder.run!r} is watched already ({self.watch}): one watch a Recorder, whose "
                f"module's forwards begin its steps. Take that one off first (handle.remove()), watch the one "
                f"module that holds both, or give each its own Recorder"
            )
        self.watch = what
        self.watched = True  # what was logged before is past: the watched forward begins a step of its own

    def detach(self):
        self.watch = None

    def began(self) -> bool:
        """The watched module's forward begins a step: the forward that
        ``log()`` began and no watched forward has joined yet, or else a new
        one (said as ``log()`` says a new step: ``wall_s`` on the steps that
        say their clock, and a read of what is held when due), which the
        loop's next ``log()`` numbers. False, nothing done, once the
        Recorder is closed (a failed flush raises, as ``log()`` does)."""
        recorder = self.recorder
        if recorder._closed:
            recorder._raise_if_unusable(closed_ok=True)
            return False
        if self.forward is None:
            self._place()
        if not self.watched:  # log() began this step's forward: the watched forward is its
            self.watched = True
            return True
        forward = self.forward + 1
        add: list = [None]  # a forward begins
        if self.quiet is not None:  # the last step said nothing: its clock, or it would be no forward
            add.insert(0, {"fact": WALL, "value": self.quiet})
            self.quiet = None
        now = self.clock()
        if forward < CLOCKS_FIRST or forward % CLOCKS_EVERY == 0 or now >= self.clocks_due:
            self.clocks_due = now + CLOCKS_AT_MOST_NS
            add.append({"fact": WALL, "value": time()})
            quiet = None
        else:
            quiet = time()  # said only if this step says nothing else
        if self.owed or self.groups:
            self.held_steps += 1
            if self.held_steps >= READ_EVERY or now >= self.read_due:
                self.read()
        self.forward, self.open, self.quiet = forward, True, quiet
        if self.owed or self.groups:
            self.held += add
        else:
            recorder._pending.extend(add)
        return True

    def said(self, fact):
        """A watch's fact, in the current step's forward, after what was
        handed over before it (nothing once the Recorder is closed)."""
        self.quiet = None
        if self.owed or self.groups:
            self.held.append(fact)
        elif not self.recorder._closed:
            self.recorder._pending.append(fact)

    def owe(self, values, facts, finish):
        """A watch's ``facts`` (said next, with ``said``) take their values
        from ``values``, of one kind read in bulk, read with everything else
        held: ``finish`` turns the list of their values (floats, in order)
        into one value per fact."""
        if self.recorder._closed:
            return
        kind = kind_of(values[0])
        held = [kind.hold(v) for v in values]
        if not (self.owed or self.groups):
            self.read_due = self.clock() + READ_AT_MOST_NS
            self.held_steps = 0
        self.groups.append((kind, held, facts, finish))

    def read(self):
        """Read every value held, one call per kind, write each into its
        fact and hand the facts held over to the Recorder, in order. A value
        its kind could not read as it was logged (None: a tensor changed in
        place since) is kept as None, and a RuntimeWarning names it."""
        if self.quiet is not None:  # a step a watch began that said nothing yet: its clock, so it is a forward
            self.said({"fact": WALL, "value": self.quiet})
        owed, groups = self.owed, self.groups
        if not owed and not groups:
            return
        by_kind: dict = {}
        for entry in owed:
            by_kind.setdefault(entry[0], ([], []))[0].append(entry)
        for group in groups:
            by_kind.setdefault(group[0], ([], []))[1].append(group)
        lost = []
        for kind, (entries, of_groups) in by_kind.items():
            held = [held for _, held, _, _ in entries]
            for _, more, _, _ in of_groups:
                held += more
            got = kind.read(held)  # one read a kind: the loop's values and the watch's together
            for (_, _, fact, step), value in zip(entries, got):
                fact["value"] = value
                if value is None:
                    lost.append((fact["fact"], step))
            at = len(entries)
            for _, more, facts, finish in of_groups:
                values = got[at:at + len(more)]
                at += len(more)
                # a watch's own tensors are new, never changed in place; None is kept as None all the same
                for fact, value in zip(facts, finish(values) if None not in values else [None] * len(facts)):
                    fact["value"] = value
        taken = self.held[:]
        self.held.clear()
        owed.clear()
        groups.clear()
        self.recorder._pending.extend(taken)
        if lost:  # after the facts are handed over: a warning raised as an error loses none of them
            shown = ", ".join(f"{key!r} of step {step}" for key, step in lost[:5])
            warnings.warn(
                f"run {self.recorder.run!r}: {shown}{' …' if len(lost) > 5 else ''} changed in place after "
                f"log() and before it was read, so its value as logged is gone: recorded as None. Log a value "
                f"that stays: a new tensor (t.clone()) or float(t)",
                RuntimeWarning, stacklevel=2)

    def _place(self):
        """Where the run stands: the forward of its last step and that
        step's number (its ``step`` fact, else its forward), for a run
        resumed or rewound."""
        forward = self.recorder._next_forward() - 1
        step = None
        if forward >= 0:
            from ._queries import curve

            step = forward
            try:
                said = curve(self.recorder.root, self.recorder.run, STEP)
            except SomatizeKeyError:
                said = None
            if said is not None and len(said) and said.index[-1] == forward:
                step = int(said.iloc[-1])
        self.forward, self.step = forward, step
        self.open, self.watched, self.quiet = False, True, None

    def _check(self, key):
        why = refused_key(key)
        if why is not None:
            raise (SomatizeTypeError if not isinstance(key, str) else SomatizeValueError)(f"log(): {why}")
        self.known.add(key)


def logging_of(recorder, by) -> Logging:
    """``recorder``'s ``Logging`` (made here or by its first ``log()``), for
    ``by`` (what asks, named in a refusal); a closed Recorder is refused,
    as ``log()`` refuses it."""
    if recorder._closed:
        recorder._raise_if_unusable()
    logging = recorder._logging
    if logging is None:
        logging = recorder._logging = Logging(recorder, by)
    return logging


def refused_key(key) -> str | None:
    """Why ``key`` cannot name a logged value, or None."""
    if not isinstance(key, str):
        return f"a key is a fact's name, a str; got {key!r:.60} ({type(key).__name__}): write {str(key)!r:.60}"
    if not NAME.fullmatch(key):
        return (f"{key!r:.80} is not a fact's name (letters, digits, '_', '.', '-' and '/', starting with a "
                f"letter or '_', at most 128): write {_plain(key)!r:.80}")
    head = key.partition("/")[0]
    if key == STEP:
        return "'step' is the step log() is given: write log(values, step=n), not a value named 'step'"
    if key == WALL:
        return ("'wall_s' is the clock log() says itself, on the steps the Trainer says it: name yours "
                "otherwise, e.g. 'my_wall_s'")
    if key not in AS_THE_TRAINER and head in RESERVED:
        owner = "engine" if head in ENGINE_FACTS else "Trainer"
        return (f"{key!r} is named as one of the {owner}'s own facts, which the record, spent and the diagnosis "
                f"read with the {owner}'s meaning; a loop logs 'loss' and 'lr' as the Trainer does, and names its "
                f"other values otherwise, e.g. {'my_' + key.replace('/', '_')!r}")
    refused = refused_fact(key)
    if refused is not None:
        return refused
    if not fits_a_file(key):
        return f"{key!r:.60}… is too long to name a curve: shorten it"
    return None


def _plain(key) -> str:
    """``key`` turned into a fact's name, for an error to suggest."""
    text = re.sub(r"[^A-Za-z0-9_.\-/]+", "_", str(key))[:128] or "value"
    return text if re.match(r"[A-Za-z_]", text) else "_" + text[:127]


def _mapping(values) -> dict:
    """``values`` as a dict: a mapping taken as one, anything else refused."""
    from collections.abc import Mapping

    if isinstance(values, Mapping):
        values = dict(values)
        if values:
            return values
        raise SomatizeValueError("log() takes at least one value, like rec.log({'loss': loss}); got none")
    raise SomatizeTypeError(f"log() takes a dict of values, like rec.log({{'loss': loss, 'lr': lr}}); got a "
                            f"{type(values).__name__}: write rec.log({{'loss': value}})")


def _checked_step(step, last) -> tuple[int, bool]:
    """``(step, whether it is a new one)`` for a ``step=`` the hot path did
    not take: a whole number of another type, or one refused."""
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise SomatizeTypeError(f"log(values, step=...) takes the loop's step, a whole number >= 0; got "
                                f"{step!r:.40} ({type(step).__name__})")
    step = int(step)
    if step < 0:
        raise SomatizeValueError(f"log(values, step={step}): steps count from 0; give a step >= 0")
    if last is not None and step < last:
        raise SomatizeValueError(
            f"log(values, step={step}) after step {last}: steps never go back. Give step={last} again to "
            f"log more of that step (an evaluation), or a later one (or none: the next, {last + 1})"
        )
    return step, last is None or step > last


def _number(key, value):
    """``value`` (not a float, an int or a value read in bulk) as a number
    the record keeps: a numpy scalar or any other real number, converted;
    anything else refused, naming ``key``."""
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        value = value.item()  # a numpy scalar or 0-d array
        if value.__class__ is float or value.__class__ is int:
            return value
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        return int(value) if isinstance(value, numbers.Integral) else float(value)
    what = type(value)
    if isinstance(value, bool):
        fix = "log it as a number: int(x)"
    elif what.__module__.split(".")[0] == "torch":
        fix = "import somatize.torch first, which lets log() hold 0-d tensors and read them in bulk; or log float(t)"
    else:
        fix = "log a Python int or float (float(x)), a numpy scalar, or a 0-d tensor (with somatize.torch imported)"
    name = what.__qualname__ if what.__module__ == "builtins" else f"{what.__module__}.{what.__qualname__}"
    raise SomatizeTypeError(f"log(): values[{key!r}] is a {name}, not a number: {fix}")
