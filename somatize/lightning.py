"""somatize.lightning: a Lightning fit recorded as a run.

``L.Trainer(logger=Logger(store))``: the run is written by a ``Recorder``
through ``Recorder.log``, so every reader (``runs``, ``curve``,
``progress``, ``compare``, the run browser, ``somatize runs``) reads it as
a somatize Trainer's run. ``Logger``'s docstring says when the run opens,
resumes and ends, and how a step is numbered; ``fact_name``'s what each of
Lightning's metric names becomes.

How the Logger hears of the fit: Lightning hands a logger the
LightningModule in ``log_graph`` as a fit, a validation or a test begins,
after the hyperparameters (``log_hyperparams``) and after a checkpoint's
weights and callbacks were put back, before the training's loops are. The
run opens there, and the Logger puts a Callback of its own (``_Hooks``) in
``trainer.callbacks``, which Lightning calls from then on: as training
starts (the loops put back: a resumed run is rewound to
``trainer.global_step``), when an exception ends the fit (the run's
``cause``), as a checkpoint is saved (the run flushed first). Lightning
touches ``logger.experiment`` earlier still, as it sets a fit up, before
the run can be known (a resumed fit's name, the hyperparameters): so
``experiment`` opens nothing, and is None until the run is open.

lightning is imported here and nowhere else in somatize; without it,
importing this module raises ``MissingExtra`` naming ``somatize[lightning]``.
"""

from __future__ import annotations

import re
import sys
import warnings
from importlib.util import find_spec as _find_spec

from ._base.errors import MissingExtra as _MissingExtra

if _find_spec("lightning") is None:
    raise _MissingExtra("somatize.lightning", "lightning", "lightning")

# after the check above, so that a missing lightning is named, not met deep inside
import numpy as np  # noqa: E402
from lightning.pytorch.callbacks import Callback as _Callback  # noqa: E402
from lightning.pytorch.loggers import Logger as _LightningLogger  # noqa: E402
from lightning.pytorch.loggers.logger import rank_zero_experiment  # noqa: E402
from lightning.pytorch.utilities.rank_zero import rank_zero_only  # noqa: E402

from ._base.errors import SomatizeKeyError, SomatizeValueError  # noqa: E402
from ._store.store import as_store  # noqa: E402
from .record._logged import refused_key  # noqa: E402
from .record._outside import config_value, recorded_number, same_value  # noqa: E402
from .record._recorder import Recorder, default_name  # noqa: E402
from .record._runs import checked_name  # noqa: E402
from .record._summary import config_json  # noqa: E402

__all__ = ["Logger", "fact_name"]

TRAIN = re.compile(r"(?:train|training)[_/](.+)")
VALIDATION = re.compile(r"(?:val|valid|validation)[_/](.+)")
TEST = re.compile(r"test[_/](.+)")
LEARNING_RATE = re.compile(r"lr-[A-Za-z_][A-Za-z0-9_]*")  # LearningRateMonitor's lr-<Optimizer>
AS_SOMATIZE = {"grad_norm": "grad_norm_total"}


def fact_name(key: str) -> str:
    """The fact a Lightning metric named ``key`` is recorded as, so the
    record reads as a Trainer's, whose loss is ``loss`` and whose
    evaluations say ``val_*``:

    - the training's own values lose their prefix: ``train_loss`` and
      ``train/loss`` are ``loss``, ``train_acc`` is ``acc`` (``training_``
      too); a value logged with ``on_step`` and ``on_epoch`` both is the
      step's without Lightning's ``_step`` suffix (``train_loss_step`` is
      ``loss``) and keeps ``_epoch`` (``loss_epoch``);
    - a validation's are ``val_<metric>``: ``val_loss``, ``val/acc`` is
      ``val_acc``, ``valid_`` and ``validation_`` too, without Lightning's
      ``_epoch`` suffix (``val_loss_epoch`` is ``val_loss``); a test's are
      ``test_<metric>`` the same way;
    - ``LearningRateMonitor``'s ``lr-<Optimizer>`` is ``lr``, as the Trainer
      says its learning rate; ``grad_norm`` is ``grad_norm_total`` (the
      Trainer's ``grad_norm`` is one node's, which ``somatize.diagnose``
      reads with that meaning);
    - any other name is itself: ``epoch`` (which Lightning adds to the
      training's values), ``loss``, ``my_metric``.
    """
    found = TRAIN.fullmatch(key)
    if found:
        rest = found[1]
        rest = rest[:-5] if rest.endswith("_step") and len(rest) > 5 else rest
        return AS_SOMATIZE.get(rest, rest)
    for pattern, prefix in ((VALIDATION, "val_"), (TEST, "test_")):
        found = pattern.fullmatch(key)
        if found:
            rest = found[1]
            return prefix + (rest[:-6] if rest.endswith("_epoch") and len(rest) > 6 else rest)
    if key.endswith("_step") and len(key) > 5:
        key = key[:-5]
    if LEARNING_RATE.fullmatch(key):
        return "lr"
    return AS_SOMATIZE.get(key, key)


class Logger(_LightningLogger):
    """``Logger(store, run=None, config=None, watch=False, summarising=("loss", "val_loss"))``:
    a Lightning logger (``lightning.pytorch.loggers.Logger``) that records
    each fit as a run of ``store`` (a ``Store`` or a path):
    ``L.Trainer(logger=Logger(store))``.

    ``run``: the run's name; None draws one as ``Recorder`` does, as the
    Logger is made (``logger.version`` says it). ``config``: your own keys
    (a dict of JSON-like values), added to the run's config over the
    hyperparameters Lightning logs (``save_hyperparameters()``:
    ``config.lr``, nested ones as ``config.optim.lr``; see
    ``log_hyperparams``). ``watch``: True (or a dict of its keyword
    arguments) records what a Trainer records for ``spent`` and
    ``diagnose`` of the LightningModule while it fits
    (``somatize.torch.watch``; it watches the module's ``forward``: a
    ``training_step`` that calls ``self(x)``), its hooks taken off as the
    fit ends. It is not handed the optimizer (a LightningModule may have
    several, or none Lightning steps): the gradients are read as the
    backward ends and the update as what changed the weights by the next
    step.
    ``summarising``: the facts ``runs(store)`` summarises (``loss.last``,
    ``val_loss.best``).

    The run opens as the fit begins (Lightning hands the Logger the
    LightningModule, after the hyperparameters and a checkpoint's weights;
    with ``enable_autolog_hparams``, its default, else at the first
    metrics): a new run, holding the hyperparameters as its config. A name
    already in the store is refused for a fit that does not resume, before
    anything is written. A fit resumed from a checkpoint
    (``trainer.fit(model, ckpt_path=...)``) by a Logger of the run's name
    (``Logger(store, run=name)``, or the same Logger) continues that run:
    as training starts, the steps it recorded from the checkpoint's
    (``trainer.global_step``, put back from the checkpoint) on are dropped
    (``Recorder.rewind``), so no step is recorded twice, and the steps go on
    from there; the run keeps the config it was recorded with. A Logger of
    another name records the resumed fit as a new run, from the
    checkpoint's step. Each checkpoint flushes the run first, so the record
    holds durably what the checkpoint says was done. A validation or a test
    (``trainer.validate``, ``trainer.test``) adds its values to the run of
    this name, after the fit or later.

    A step is Lightning's own, the one it hands ``log_metrics`` (the
    optimizer steps done before the batch); each step logged is one
    forward of the run, and a step numbered otherwise than its forward is
    also kept as the fact ``step``.

    The run ends finished when Lightning finalizes it ``"success"`` (or
    ``"finished"``), else interrupted, with the exception that ended the
    fit as its ``cause`` (``KeyboardInterrupt`` for ctrl-C). Only the
    process of rank 0 writes (Lightning's ``rank_zero_only``): under a
    data-parallel strategy one run is recorded.
    """

    def __init__(self, store, run=None, config=None, watch=False, summarising=("loss", "val_loss")):
        if config is not None:
            config = config_json(config)  # refused here, before a fit starts, naming the key
        if run is not None:
            checked_name(run)
        if isinstance(summarising, str):
            summarising = [summarising]
        if not isinstance(watch, (bool, dict)):
            raise SomatizeValueError(
                f"Logger(watch=...) takes True, False or a dict of somatize.torch.watch's keyword arguments "
                f"(watch={{'optimizer': opt}}); got a {type(watch).__name__}")
        super().__init__()
        self._store = as_store(store)
        self._run = run if run is not None else default_name()
        self._config = config
        self._summarising = list(summarising)
        self._watching = watch
        self._hyperparameters: dict = {}  # what log_hyperparams was handed, as a config holds it
        self._recorder = None  # the open Recorder (rank 0 only)
        self._written = None  # the config the open run was written with; None: resumed, the one recorded
        self._ended = None  # the last Recorder closed, which ``experiment`` still gives
        self._opened = False  # this Logger opened its run once: a validation or test after goes on in it
        self._fitting = None  # what Lightning runs: a fit (True), another stage (False), unknown (None)
        self._resuming = False  # the fit resumes a checkpoint: rewind as training starts
        self._last = None  # the last step logged into the open run
        self._said: dict = {}  # fact -> value logged at that step, so a value said again is recorded once
        self._names: dict = {}  # a metric's name -> its fact's, or None (not recorded)
        self._warned: set = set()  # the metrics' names said to be left out
        self._error = None  # the exception that ended the fit (the Callback's on_exception)
        self._hooks = _Hooks(self)
        self._watch = None  # the watch's handle while the fit runs

    # -- what Lightning asks of a logger -------------------------------------

    @property
    def name(self) -> str:
        """``"lightning_logs"``, as Lightning's own loggers say: with
        ``version`` (the run), where its ModelCheckpoint puts its files by
        default, ``<default_root_dir>/lightning_logs/<run>/checkpoints``
        (never inside the store, wherever the store is)."""
        return "lightning_logs"

    @property
    def version(self) -> str:
        """The run's name (given, or drawn as the Logger was made)."""
        return self._run

    @property
    @rank_zero_experiment
    def experiment(self):
        """The ``Recorder`` writing the run: None until the fit opens it (as
        it begins), the last one closed after the fit; in a process of
        another rank, Lightning's stand-in that does nothing."""
        return self._recorder if self._recorder is not None else self._ended

    @rank_zero_only
    def log_hyperparams(self, params, *args, **kwargs) -> None:
        """Take the hyperparameters (a dict, nested or not, or an
        ``argparse.Namespace``, as a dict) into the run's config, written
        when the run opens: JSON's values as they are, a tuple as a list,
        an enum as its value, a class or a function by its qualified name,
        a 0-d tensor as its number; anything else (a path, an int past 64
        bits, a NaN) as its ``str``, without any object's address. Handed
        once the run is open, a key that would change its config is not
        recorded, and a ``RuntimeWarning`` names it."""
        params = config_value(params, 0)
        if not isinstance(params, dict):
            params = {"hparams": params}
        if self._recorder is None:
            self._hyperparameters.update(params)
            return
        written = self._written
        changed = sorted(k for k, v in params.items() if written is None or k not in written or written[k] != v)
        if changed:
            warnings.warn(
                f"run {self._run!r}: its config was written when it opened; {changed[:5]} "
                f"{'…' if len(changed) > 5 else ''}not recorded. Give hyperparameters before the fit "
                f"(save_hyperparameters() in the LightningModule, or Logger(config=...))",
                RuntimeWarning, stacklevel=2)

    @rank_zero_only
    def log_graph(self, model, input_array=None) -> None:
        """Lightning hands the LightningModule over as a fit, a validation,
        a test or a prediction begins: this Logger's Callback joins the
        Trainer's callbacks; a fit's run opens here (a resumed fit continues
        its run) and with ``watch=`` the module is watched while it fits;
        another stage's opens at its first metrics (a prediction, which has
        none, records nothing)."""
        try:
            trainer = model.trainer
        except RuntimeError:  # a module no Trainer holds: there is no fit to open a run for
            return
        if trainer is None:
            return
        fitting = self._fitting = trainer.state.fn == "fit"
        if all(callback is not self._hooks for callback in trainer.callbacks):
            trainer.callbacks.append(self._hooks)
        if not fitting:  # a validation, a test, a prediction: the run opens at its first metrics, if any
            return
        self._resuming = trainer.ckpt_path is not None
        self._open(True, self._resuming)
        if self._watching is not False and self._recorder.recording:
            self._watch_module(model)

    @rank_zero_only
    def log_metrics(self, metrics, step=None) -> None:
        """Record the metrics at Lightning's ``step``, each as the fact
        ``fact_name`` says:

        - a name ``Recorder.log`` refuses (one of the engine's or the
          Trainer's own facts, ``wall_s``, a name with a space) is not
          recorded, and a ``RuntimeWarning`` says so once; nor is a value
          that is not one number;
        - two names of one call that become the same fact: a name that is
          its fact's as it is (``loss``) takes it, else the first; the other
          keeps its own name (``train_loss``);
        - a value said again at the same step (the ``epoch`` Lightning adds
          to a validation's values as well as to the training's) is
          recorded once;
        - a step before the last one logged (a validation's per-batch
          values, which Lightning numbers from 0 in each validation; a test
          in a new Trainer) is recorded at the last step."""
        named = []
        for key, value in metrics.items():
            name = self._name_of(key)
            if name is None:
                continue
            number = recorded_number(value)
            if number is None:
                self._not_recorded(key, f"its value {value!r:.40} is not one number")
            else:
                named.append((key, name, number))
        kept = {name for key, name, _ in named if name == key}  # names kept as they are keep their fact
        values: dict = {}
        for key, name, number in named:
            if name != key and (name in kept or name in values):  # this one keeps its own name
                name = key if key not in kept and key not in values and refused_key(key) is None else None
            if name is not None:
                values[name] = number
        if not values:
            return
        recorder = self._recorder if self._recorder is not None else self._open(self._fitting, False)
        last = self._last
        if step is None:
            step = 0 if last is None else last + 1
        elif last is not None and step < last:
            step = last
        if step != last:
            self._said = {}
        said = self._said
        values = {name: v for name, v in values.items() if not (name in said and same_value(said[name], v))}
        if values:
            recorder.log(values, step=step)
            said.update(values)
        self._last = step

    @rank_zero_only
    def save(self) -> None:
        """Nothing to do: each value is handed to the Recorder as it is
        logged, and its background flush writes it within a quarter of a
        second. (Lightning calls ``save()`` after every ``log_metrics``; a
        durable flush each time would wait on the disk each time.)
        ``finalize`` and each checkpoint flush durably."""

    @rank_zero_only
    def after_save_checkpoint(self, checkpoint_callback) -> None:
        """Flush the run durably (the Callback flushed it before the file
        was written; this catches what came since)."""
        if self._recorder is not None:
            self._recorder.flush()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """End the run: finished for Lightning's ``"success"`` (and
        ``"finished"``), else interrupted, its ``cause`` the exception that
        ended the fit (KeyboardInterrupt for ctrl-C). The watch's hooks
        come off first. A validation or test after it opens the run again."""
        self._unwatch()
        recorder, error = self._recorder, self._error
        self._recorder, self._error, self._fitting = None, None, None
        if recorder is None:
            return
        self._ended = recorder
        if status in ("success", "finished"):
            recorder.close()
            return
        if error is None:
            error = sys.exc_info()[1]  # Lightning finalizes a failed fit while it handles the exception
        if error is not None:
            recorder.__exit__(type(error), error, error.__traceback__)
        else:
            recorder.close("interrupted")

    def __getstate__(self):
        """What a spawned process gets (a ``ddp_spawn`` strategy sends the
        Logger to each): the Logger as made, no Recorder."""
        state = dict(self.__dict__)
        state.update(_recorder=None, _ended=None, _watch=None, _error=None, _fitting=None, _resuming=False,
                     _last=None, _said={})
        return state

    def __repr__(self):
        how = "recording" if self._recorder is not None else "idle"
        return f"Logger(store={str(self._store.path)!r}, run={self._run!r}, {how})"

    # -- inside ------------------------------------------------------------

    def _open(self, fitting, resuming):
        """Open the run: a new one, or the one of this name continued, as
        the class's docstring says. ``fitting``: False for another stage
        (a validation, a test: a run of this name goes on); None when no
        Trainer was seen (a metric logged first), then a run this Logger
        opened before goes on and another is refused."""
        if self._recorder is not None:
            return self._recorder
        run = self._run
        exists = run in self._store.runs()
        if exists and (fitting and not resuming or fitting is None and not self._opened):
            raise SomatizeValueError(self._taken(run, fitting))
        if exists:  # it keeps the config it was recorded with
            written = None
            recorder = Recorder(self._store, run=run, summarising=self._summarising, resume=True)
        else:
            written = {**self._hyperparameters, **(self._config or {})}
            recorder = Recorder(self._store, run=run, summarising=self._summarising, config=written)
        self._recorder, self._written, self._opened, self._error = recorder, written, True, None
        self._last, self._said = _last_step(self._store, recorder), {}
        return recorder

    def _rewind_to(self, step: int) -> None:
        """Drop the run's steps from ``step`` on (a resumed fit does them
        again): called as the training of a resumed fit starts."""
        recorder = self._recorder
        if recorder is None or not recorder.recording:
            return
        steps = _steps(self._store, recorder)
        keep = int(np.searchsorted(steps, step, side="left"))  # the forwards of the steps before it
        if keep < len(steps):
            recorder.rewind(keep)
        self._last, self._said = (int(steps[keep - 1]) if keep else None), {}

    def _name_of(self, key):
        """The fact ``key`` is recorded as (``fact_name``), or None when it
        cannot name one (warned once)."""
        cache = self._names
        if key in cache:
            return cache[key]
        if not isinstance(key, str):
            name, why = None, f"a metric's name is a str, not a {type(key).__name__}"
        else:
            name = fact_name(key)
            why = refused_key(name)
        if why is not None:
            name = None
            self._not_recorded(key, why)
        cache[key] = name
        return name

    def _not_recorded(self, key, why):
        """Say once a metric's name that is left out, and why."""
        if key in self._warned:
            return
        self._warned.add(key)
        warnings.warn(f"run {self._run!r}: the metric {key!r:.80} is not recorded: {why}",
                      RuntimeWarning, stacklevel=4)

    def _taken(self, run, fitting) -> str:
        names = set(self._store.runs())
        n = 2
        while f"{run}-{n}" in names:
            n += 1
        unseen = ("" if fitting is not None else
                  "; the Logger hears of a resumed fit as Lightning hands it the module, which it does with "
                  "enable_autolog_hparams=True, its default")
        return (f"run {run!r} is already in the store at {self._store.path}: a fit records a new run, e.g. "
                f"Logger(store, run={f'{run}-{n}'!r}), or continues this one by resuming the checkpoint it "
                f"saved (trainer.fit(model, ckpt_path=...) with Logger(store, run={run!r})){unseen}")

    def _watch_module(self, model):
        from .torch import watch

        options = dict(self._watching) if isinstance(self._watching, dict) else {}
        self._watch = watch(model, self._recorder, **options)

    def _unwatch(self):
        handle, self._watch = self._watch, None
        if handle is not None:
            handle.remove()


class _Hooks(_Callback):
    """The Logger's part among the Trainer's callbacks: the rewind of a
    resumed run as its training starts, the exception that ends a fit,
    and a durable flush as each checkpoint is saved."""

    def __init__(self, logger):
        self.logger = logger

    def on_train_start(self, trainer, pl_module):
        logger = self.logger
        if logger._resuming:
            logger._resuming = False
            logger._rewind_to(trainer.global_step)

    def on_exception(self, trainer, pl_module, exception):
        self.logger._error = exception

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        recorder = self.logger._recorder
        if recorder is not None:
            recorder.flush()


def _steps(store, recorder) -> np.ndarray:
    """Each forward's step, from the first: its ``step`` fact (said where
    the loop's number is not the forward's), else the forward itself."""
    from .record import curve

    steps = np.arange(recorder.forwards, dtype=np.int64)
    try:
        said = curve(store, recorder.run, "step")
    except SomatizeKeyError:
        return steps
    at = said.index.to_numpy(dtype=np.int64)
    inside = at < len(steps)
    steps[at[inside]] = said.to_numpy()[inside].astype(np.int64)
    return steps


def _last_step(store, recorder):
    """The step of the run's last forward, or None for a run with none."""
    if not recorder.recording or recorder.forwards == 0:
        return None
    return int(_steps(store, recorder)[-1])
