"""somatize.transformers: a Hugging Face ``Trainer``'s training recorded as a run.

``trainer = Trainer(..., callbacks=[Callback(store)])``: the run is written
by a ``Recorder`` through ``Recorder.log``, so every reader (``runs``,
``curve``, ``progress``, ``compare``, the run browser, ``somatize runs``)
reads it as a somatize Trainer's run. A step is HF's ``state.global_step``
(the updates done); each step logged is one forward of the run.

What a log becomes is said where a reader of the API looks: the names in
``fact_name``'s docstring, what is left out in ``Callback``'s. The rule kept
here: a fact of the run means what a somatize Trainer's fact of that name
means, so an HF name that would say something else is renamed
(``grad_norm``) and a time is never a ``val_`` fact.

The run ends finished at ``on_train_end``. HF calls no callback when
``train()`` raises, so the run is ended by whoever sees the exception: in
a notebook, the end of the cell (an IPython ``post_run_cell`` hook,
registered while a training runs) marks it interrupted with the cell's
exception as its ``cause``; in a script, the Recorder's exit handling does
(the exception that ended the script is the cause); an exception caught by
the caller leaves the run open until this Callback's next ``train()``
(interrupted, no cause) or the process's exit.

Resume: the Callback is an ``ExportableState``, so each checkpoint's
``trainer_state.json`` holds where the run stood when it was saved (its
name and forwards, flushed durably first). ``trainer.train(
resume_from_checkpoint=...)`` continues that run, rewound to the
checkpoint's step, so no step is recorded twice.

transformers is imported here and nowhere else in somatize; without it (or
accelerate, which its Trainer needs) importing this module raises
``MissingExtra`` naming ``somatize[transformers]``.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from importlib.util import find_spec as _find_spec

from ._base.errors import MissingExtra as _MissingExtra

for _package in ("transformers", "accelerate"):
    if _find_spec(_package) is None:
        raise _MissingExtra("somatize.transformers", "transformers", _package)

# after the check above, so that a missing transformers is named, not met deep inside
from transformers import TrainerCallback  # noqa: E402
from transformers.trainer_callback import ExportableState  # noqa: E402

from ._base.errors import SomatizeError, SomatizeTypeError, SomatizeValueError  # noqa: E402
from ._store.store import as_store  # noqa: E402
from .record._outside import config_value, recorded_number, same_value  # noqa: E402
from .record._recorder import Recorder  # noqa: E402
from .record._summary import config_json  # noqa: E402

__all__ = ["Callback", "fact_name"]

AS_SOMATIZE = {"learning_rate": "lr", "grad_norm": "grad_norm_total"}
# HF's timings and memory of a call (trainer_utils.speed_metrics, TrainerMemoryTracker): not a model's metric
CALL_MEASURE = re.compile(r".*_(runtime|samples_per_second|steps_per_second|tokens_per_second"
                          r"|model_preparation_time|jit_compilation_time)|.*_mem_.*")
CALL_TOTALS = ("train_loss", "total_flos")  # together: the log train() says once as it ends


def fact_name(key: str) -> str:
    """The fact an HF log's ``key`` is recorded as.

    - ``loss`` is ``loss``, ``learning_rate`` is ``lr``, ``epoch`` is
      ``epoch``;
    - ``grad_norm`` (HF's norm of all the gradients) is ``grad_norm_total``:
      ``grad_norm`` is the somatize Trainer's norm of one node's gradients,
      which ``somatize.diagnose`` reads with that meaning;
    - an evaluation's ``eval_<metric>`` is ``val_<metric>`` (``eval_loss``
      is ``val_loss``), as the somatize Trainer names an evaluation's
      values; HF's timings and memory of a call (``*_runtime``,
      ``*_samples_per_second``, ``*_steps_per_second``,
      ``*_tokens_per_second``, ``*_model_preparation_time``,
      ``*_jit_compilation_time``, ``*_mem_*``) keep their name
      (``eval_runtime``), so that no ``val_`` fact is a time;
    - any other key is itself (a metric of another prefix,
      ``test_accuracy``; one of your own)."""
    said = AS_SOMATIZE.get(key)
    if said is not None:
        return said
    if key.startswith("eval_") and not CALL_MEASURE.fullmatch(key):
        return "val_" + key[5:]
    return key


class Callback(TrainerCallback, ExportableState):
    """``Callback(store, run=None, config=None, summarising=("loss", "val_loss"))``:
    a ``transformers.TrainerCallback`` that records each ``trainer.train()``
    as a run of ``store`` (a ``Store`` or a path):
    ``Trainer(..., callbacks=[Callback(store)])``.

    ``run``: the run's name; None draws one as ``Recorder`` does
    (``callback.run`` says it once training began). A name already in the
    store is refused, unless the training resumes from a checkpoint that
    was recorded into it. ``config``: your own keys (a dict of JSON-like
    values), added to the run's config over what the Callback puts there:
    every value of ``args.to_dict()`` (``config.learning_rate``,
    ``config.per_device_train_batch_size``, …) and the model's
    ``model.config.to_dict()`` under ``model`` (``config.model.hidden_size``),
    values JSON cannot hold kept as their ``str``. ``summarising``: the
    facts ``runs(store)`` summarises (``loss.last``, ``val_loss.best``).

    Each log (``on_log``) and evaluation (``on_evaluate``) becomes
    ``Recorder.log(values, step=state.global_step)``, each key named by
    ``somatize.transformers.fact_name`` (``loss``, ``lr``,
    ``grad_norm_total``, ``epoch``, ``val_*``). Left out: a value that is
    not one number (a str, a bool, a list); a key ``Recorder.log`` refuses
    (a ``RuntimeWarning`` names it, once); the totals ``train()`` logs once
    as it ends (the log holding both ``train_loss`` and ``total_flos``:
    the call's mean loss, runtime, speeds, flos and memory), as the record
    holds each step's loss and its own clock (``wall_s``) already; a value
    said again at the same step (the ``epoch`` of an evaluation's log,
    ``on_evaluate``'s metrics, which ``on_log`` was handed first), recorded
    once. An evaluation after ``train()`` (``trainer.evaluate()``)
    is recorded into the run at its last step, the run opened and closed
    again around it; one before any ``train()`` is not recorded. Only the
    world's process zero (``state.is_world_process_zero``) writes.

    The run ends finished at ``on_train_end``; when ``train()`` raises, it
    ends interrupted with the exception as its cause at the end of the
    notebook cell, or at the script's exit (an exception you caught: at
    this Callback's next ``train()``, or the exit, with no cause). ``trainer.train(
    resume_from_checkpoint=...)`` continues the run the checkpoint was
    recorded into, rewound to the checkpoint's step (no step twice); that
    run keeps the config it was recorded with. The position is kept in the
    checkpoint's ``trainer_state.json`` (``state()``), so with
    ``restore_callback_states_from_checkpoint=True`` HF makes this Callback
    anew from it (the same store, run, config and summarising)."""

    def __init__(self, store, run=None, config=None, summarising=("loss", "val_loss")):
        if config is not None:
            config = config_json(config)  # refused here, before a training starts, naming the key
        if isinstance(summarising, str):
            summarising = [summarising]
        if isinstance(store, (str, os.PathLike)):  # opened (made) by the process that writes, when it does
            self._store_text = os.fspath(store)
        else:
            store = as_store(store)  # a Store as it is; anything else refused here, saying what store= takes
            self._store_text = str(store.path)
        self._store_given = store
        self.run = run
        self._named = run is not None
        self._config = config
        self._summarising = list(summarising)
        self._store = None  # the Store, opened as the first training begins on the world's process zero
        self._recorder = None  # the Recorder of the training under way (world process zero only)
        self._ended = None  # the run of the last training that ended as it should, for a later evaluation
        self._step = None  # the step of the values in _said
        self._said: dict = {}  # fact -> value recorded at _step, so a value said again is recorded once
        self._refused: set = set()  # keys Recorder.log refused, warned of once
        self._hooked = None  # the IPython shell whose cells end a failed training

    def __repr__(self):
        how = "recording" if self._recorder is not None else "idle"
        return f"Callback(store={self._store_text!r}, run={self.run!r}, {how})"

    # -- HF's events ---------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        """Open the run: a new one holding the training's config, or, for a
        training resumed from a checkpoint recorded into a run, that run
        rewound to the checkpoint. A run a ``train()`` before left open
        (it raised, and the exception was caught) is ended interrupted
        first."""
        if self._recorder is not None:
            self._let_go("interrupted")
        self._ended, self._step, self._said = None, None, {}
        if not state.is_world_process_zero:
            return
        recorded = self._checkpointed(state) if state.global_step > 0 else None
        run = self.run if self._named else (recorded or {}).get("run")
        self._store = as_store(self._store_given)
        names = set(self._store.runs())
        if recorded is not None and run == recorded["run"] and run in names:
            recorder = Recorder(self._store, run=run, summarising=self._summarising, resume=True)
            try:
                recorder.rewind(recorded)
            except BaseException as e:
                recorder.__exit__(type(e), e, e.__traceback__)
                raise
        else:
            if run is not None and run in names:
                raise SomatizeValueError(self._taken(run, names, recorded))
            config = self._run_config(args, model)
            recorder = Recorder(self._store, run=run, summarising=self._summarising, config=config)
        self._recorder, self.run = recorder, recorder.run
        self._hook()

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Record a log's numbers at ``state.global_step`` (``fact_name``)."""
        if not logs or not state.is_world_process_zero:
            return
        if all(key in logs for key in CALL_TOTALS):
            return  # the totals of the train() call, said once as it ends
        self._record(logs, state.global_step)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        """Record an evaluation's metrics at ``state.global_step``; those
        its log already said there are not recorded again."""
        if metrics and state.is_world_process_zero:
            self._record(metrics, state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        """Mark the run finished."""
        if self._recorder is not None:
            run = self.run
            self._let_go("finished")
            self._ended = run

    # -- the checkpoint's part (ExportableState) --------------------------------

    def state(self) -> dict:
        """What a checkpoint keeps of this Callback (HF calls it as it saves
        one): ``args``, what makes it again (its store, run, config and
        summarising), and ``attributes["recorded"]``, where its run stood:
        ``{"run": name, "forwards": n}``, flushed first, so the record holds
        durably what the checkpoint says was done."""
        recorder = self._recorder
        recorded = recorder.checkpoint() if recorder is not None and recorder.recording else None
        return {"args": {"store": self._store_text, "run": self.run if self._named or recorded else None,
                         "config": self._config, "summarising": list(self._summarising)},
                "attributes": {"recorded": recorded}}

    def _checkpointed(self, state):
        """Where the run stood when the checkpoint being resumed was saved
        (``state()``'s ``recorded``, read back from its trainer_state.json),
        or None when it holds none. Read as anything read from disk is:
        a position that is not one this Callback writes is refused."""
        kept = getattr(state, "stateful_callbacks", None)
        entries = kept.get(type(self).__name__) if isinstance(kept, dict) else None
        entries = entries if isinstance(entries, list) else [entries]
        ours = [e for e in entries if isinstance(e, dict) and isinstance(e.get("attributes"), dict)
                and e["attributes"].get("recorded") is not None]
        if not ours:
            return None
        mine = [e for e in ours if isinstance(e.get("args"), dict) and e["args"].get("store") == self._store_text]
        recorded = (mine or ours)[0]["attributes"]["recorded"]
        if not (isinstance(recorded, dict) and isinstance(recorded.get("run"), str)
                and recorded.get("forwards").__class__ is int and recorded["forwards"] >= 0):
            raise SomatizeValueError(
                f"the checkpoint's trainer_state.json holds {recorded!r:.120} as this Callback's position "
                f"(stateful_callbacks[{type(self).__name__!r}]), which is not one it writes "
                f"({{'run': name, 'forwards': n}}): resume from a checkpoint this Callback saved, or record the "
                f"resumed training as a new run with Callback(store, run='a-new-name')"
            )
        return recorded

    # -- inside ------------------------------------------------------------

    def _record(self, logs, step):
        """Hand ``logs``' numbers to the run at ``step``: the one training,
        or the last one ended (opened and closed again around them)."""
        if self._step is not None and step < self._step:
            warnings.warn(f"run {self.run!r}: a log at step {step}, after step {self._step}, is not recorded: "
                          f"a run's steps never go back", RuntimeWarning, stacklevel=3)
            return
        if step != self._step:
            self._step, self._said = step, {}
        said = self._said
        values, keys = {}, {}
        for key, value in logs.items():
            if not isinstance(key, str) or key in self._refused:
                continue
            number = recorded_number(value)
            if number is None:
                continue
            name = fact_name(key)
            if name in said and same_value(said[name], number):
                continue
            values[name], keys[name] = number, key
        if not values:
            return
        if self._recorder is not None:
            self._log(self._recorder, values, keys, step)
        elif self._ended is not None:
            with Recorder(self._store, run=self._ended, summarising=self._summarising, resume=True) as recorder:
                self._log(recorder, values, keys, step)

    def _log(self, recorder, values, keys, step):
        """``recorder.log(values, step)``; where it refuses, each value
        alone, the refused ones left out (named once by a warning)."""
        try:
            recorder.log(values, step=step)
            self._said.update(values)
            return
        except (SomatizeValueError, SomatizeTypeError) as e:
            if len(values) == 1:
                self._refuse(keys, values, e)
                return
        for name, value in values.items():
            try:
                recorder.log({name: value}, step=step)
                self._said[name] = value
            except (SomatizeValueError, SomatizeTypeError) as e:
                self._refuse(keys, {name: value}, e)

    def _refuse(self, keys, values, error):
        (name,) = values
        self._refused.add(keys[name])
        warnings.warn(
            f"run {self.run!r}: the logged key {keys[name]!r:.80} is not recorded, and will not be: {error}",
            RuntimeWarning, stacklevel=4)

    def _run_config(self, args, model) -> dict:
        config = config_value(args.to_dict(), 0) if hasattr(args, "to_dict") else {}
        model_config = getattr(model, "config", None)
        if callable(getattr(model_config, "to_dict", None)):
            config["model"] = config_value(model_config.to_dict(), 0)
        config.update(self._config or {})
        return config

    def _taken(self, run, names, recorded) -> str:
        n = 2
        while f"{run}-{n}" in names:
            n += 1
        why = ("" if recorded is None else
               f" (the checkpoint resumed was recorded into run {recorded['run']!r}, not this one)")
        return (f"run {run!r} is already in the store at {self._store_text}{why}: a training records a new run, "
                f"e.g. Callback(store, run={f'{run}-{n}'!r}), or continues the run a checkpoint was recorded into "
                f"(trainer.train(resume_from_checkpoint=...), with Callback(store) or that run's name)")

    def _let_go(self, state, error=None):
        """End the training's run: ``state`` finished or interrupted, with
        ``error`` as its cause when one is known."""
        recorder, self._recorder = self._recorder, None
        self._unhook()
        if error is not None:
            recorder.__exit__(type(error), error, error.__traceback__)
        else:
            recorder.close(state)

    # -- a notebook's cell that ends with the training's exception ---------------

    def _hook(self):
        """While a training runs in an IPython shell, the end of its cell
        (``post_run_cell``) ends the run if ``train()`` raised."""
        ipython = sys.modules.get("IPython")  # only a running IPython has cells; a script never imports it
        shell = ipython.get_ipython() if ipython is not None else None
        if shell is not None and self._hooked is None:
            shell.events.register("post_run_cell", self._cell_ended)
            self._hooked = shell

    def _unhook(self):
        shell, self._hooked = self._hooked, None
        if shell is not None:
            try:
                shell.events.unregister("post_run_cell", self._cell_ended)
            except ValueError:
                pass  # already gone

    def _cell_ended(self, result=None):
        """The cell that ran ``train()`` ended: if it ended by an exception
        while the run is still open, ``train()`` raised it, and the run ends
        interrupted with it as its cause. A cell that ended without one
        leaves the run to its training (a thread's)."""
        error = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        if self._recorder is None:
            self._unhook()
        elif isinstance(error, BaseException):
            try:
                self._let_go("interrupted", error)
            except SomatizeError as e:  # nobody to raise to at a cell's end: say it where a person looks
                print(f"somatize: {e}", file=sys.stderr)
