"""A Trainer's schedule: stepped once per update, or once per evaluation on
a value the evaluation measured.

The rule kept here: a schedule is stepped where what its ``step`` needs is
known, and one that needs what the Trainer cannot give is refused when the
Trainer is made, not halfway through an update. A scheduler whose ``step()``
needs no argument (StepLR, OneCycleLR, ...) is stepped once per update. One
whose ``step`` needs the value it watches (``ReduceLROnPlateau``, or any
``step(self, metrics, ...)`` whose one required argument is ``metrics``) is
stepped once per evaluation, on the evaluation's value that ``schedule_on=``
names (``"val_loss"`` by default, or ``"val_<metric>"``), and never per
update. Its state is its ``state_dict``, plain data, kept in the Trainer's
checkpoint like any schedule's.
"""

from __future__ import annotations

import inspect

import torch

from .._base.errors import SomatizeTypeError, SomatizeValueError

MEASURED = "metrics"  # the name of the one argument a step stepped on an evaluation's value takes
DEFAULT_ON = "val_loss"


def checked(schedule, optimizer, on):
    """The name of the evaluation's value ``schedule`` is stepped on, or
    None when it is stepped once per update; refuses a schedule over another
    optimizer, one whose ``step`` needs what the Trainer cannot give, and an
    ``on`` that does not fit the schedule."""
    if schedule is None:
        if on is not None:
            raise SomatizeValueError(
                f"schedule_on={on!r:.60} names the evaluation's value a schedule is stepped on, but there is "
                "no schedule=: give one, like schedule=torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer), "
                "or leave schedule_on out"
            )
        return None
    name = type(schedule).__name__
    if getattr(schedule, "optimizer", None) is not optimizer:
        raise SomatizeValueError(
            f"schedule={name} does not schedule the Trainer's optimizer: build it over "
            "the same one, e.g. schedule=torch.optim.lr_scheduler.StepLR(optimizer, step_size=100)"
        )
    needs = _required(schedule)
    if not needs:
        if on is not None:
            raise SomatizeValueError(
                f"schedule_on={on!r:.60} steps a schedule on an evaluation's value, but {name}.step() takes "
                f"none: {name} is stepped once per update. Leave schedule_on out, or give a schedule that "
                "watches a value, like ReduceLROnPlateau(optimizer)"
            )
        return None
    plateau = isinstance(schedule, torch.optim.lr_scheduler.ReduceLROnPlateau)
    if len(needs) != 1 or needs[0].kind is needs[0].KEYWORD_ONLY or not (needs[0].name == MEASURED or plateau):
        raise SomatizeTypeError(
            f"schedule={name}: its step{_signature(schedule)} needs {', '.join(p.name for p in needs)}, "
            f"which the Trainer cannot give. The Trainer steps a schedule with step() once per update, or "
            f"with step({MEASURED}) once per evaluation, on the value schedule_on= names (val_loss by "
            f"default), as ReduceLROnPlateau. Give {name}.step one of those forms, or leave schedule= out "
            "and call its step(...) yourself in your loop, after trainer.step or trainer.evaluate"
        )
    return DEFAULT_ON if on is None else _checked_on(on)


def check_measured(schedule, on, metrics):
    """Before an evaluation: refuses one that will not measure ``on``, the
    value ``schedule`` is stepped on. ``metrics``: the evaluation's {name: fn}."""
    measured = ["val_loss", *("val_" + m for m in metrics)]
    if on is not None and on not in measured:
        metric = on.removeprefix("val_")
        raise SomatizeValueError(
            f"the Trainer steps {type(schedule).__name__} on each evaluation's {on}, but this evaluation "
            f"measures {', '.join(measured)}: name {metric!r} in its metrics (evaluate(batches, "
            f"metrics={{{metric!r}: fn}}), or fit(..., evaluate=held_out, metrics=...)), or make the "
            f"Trainer with schedule_on= one of those"
        )


def _checked_on(on):
    if not isinstance(on, str) or not on.startswith("val_") or on == "val_":
        hint = f"schedule_on='val_{on}'" if isinstance(on, str) and on else "schedule_on='val_accuracy'"
        raise SomatizeValueError(
            f"schedule_on={on!r:.60}: name a value an evaluation returns, 'val_loss' or 'val_<metric>' for "
            f"a metric named in its metrics=, like {hint}"
        )
    return on


def _required(schedule):
    """The parameters ``schedule.step`` cannot be called without."""
    try:
        parameters = inspect.signature(schedule.step).parameters.values()
    except (TypeError, ValueError):  # a step without a signature Python can read: called as step()
        return []
    return [p for p in parameters if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _signature(schedule):
    try:
        return str(inspect.signature(schedule.step))
    except (TypeError, ValueError):
        return "(...)"
