"""``Trainer.fit``: epochs of steps over batches, and where they stand.

The rule kept here: a fit resumed from a checkpoint takes the batches a fit
never stopped would have taken, in the same order. Where a fit stands is
its epoch, the batches of it done and the RNG streams as that epoch drew
its order (torch's, and a DataLoader's ``generator``); a checkpoint keeps
it (``position``), and a resumed fit goes on from there (``resumed``): the
epochs before are not run again, that epoch's order is drawn again from the
streams as they were, and the batches done are skipped (``_cursor``), or
put back by a loader that keeps its own place (``state_dict`` /
``load_state_dict``, as torchdata's StatefulDataLoader). A checkpoint kept
outside fit (a loop of ``step``) counts its steps as batches done.

The loop uses the Trainer's public face only: ``step``, ``close_group``,
``evaluate``, ``loss`` and ``steps``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import torch

from .._base.errors import LoaderNotResumable, SomatizeTypeError, SomatizeValueError
from . import _cursor


def check(batches, epochs, evaluate, metrics):
    """Refuse what fit cannot run: a one-shot iterator for more than one
    epoch or for ``evaluate=``, ``metrics`` without ``evaluate``."""
    if epochs > 1 and _one_shot(batches):
        raise SomatizeTypeError(
            f"fit(batches, epochs={epochs}) got a one-shot iterator, which the second epoch "
            "would find empty. Give something that can be iterated again: a list, a "
            "DataLoader, or list(batches)."
        )
    if evaluate is None and metrics is not None:
        raise SomatizeValueError(
            f"fit(..., metrics={metrics!r:.60}) names metrics of an evaluation, but no batches to "
            "evaluate on: write fit(batches, evaluate=held_out, metrics=...)"
        )
    if evaluate is not None and _one_shot(evaluate):
        raise SomatizeTypeError(
            "fit(..., evaluate=...) got a one-shot iterator, which the second evaluation would "
            "find empty. Give something that can be iterated again: a list, a DataLoader, or list(...)."
        )


class Fit:
    """Where one Trainer's fit stands: ``at`` inside a fit ([epoch, batches
    done, the RNG as that epoch drew its order]), the loader under way when
    it keeps its own place, and where a resumed fit goes on from."""

    __slots__ = ("at", "loader", "resume_at")

    def __init__(self):
        self.at = None
        self.loader = None
        self.resume_at = None  # [epoch or None, batches done, the RNG then, the loader's state]

    def position(self):
        """Where fit stands, as a checkpoint keeps it, or None outside fit."""
        if self.at is None:
            return None
        epoch, done, (cpu, gen) = self.at
        loader = None if self.loader is None else self.loader.state_dict()
        return {"epoch": epoch, "batches": done, "rng": cpu, "generator": gen, "loader": loader}

    def rng(self):
        """The RNG streams as the epoch under way drew its order ([cpu, generator]), or None outside fit."""
        return None if self.at is None else self.at[2]

    def resumed(self, kept, steps):
        """The next fit goes on from ``kept`` (what ``position`` gave, or None
        when the checkpoint was kept outside fit, after ``steps`` steps)."""
        self.resume_at = ([None, steps, None, None] if kept is None
                          else [kept["epoch"], kept["batches"], (kept["rng"], kept["generator"]), kept["loader"]])

    def run(self, trainer, batches, epochs, progress, evaluate, metrics):
        """The loop: ``trainer.step`` over every batch, ``epochs`` times, the
        group closed at the end of each epoch, then the evaluation if asked;
        a progress bar (tqdm's text bar on stderr) when ``progress``."""
        total = _length(batches)
        at, self.resume_at = self.resume_at, None
        resumed = at  # put back when the loader cannot go on from there (_cursor), nothing moved
        if at is not None and at[0] is None:  # a checkpoint kept outside fit: the steps done are batches done
            at = [trainer.steps // total, trainer.steps % total, None, None] if total else [0, trainer.steps, None,
                                                                                            None]
        keeps_place = callable(getattr(batches, "state_dict", None)) and callable(
            getattr(batches, "load_state_dict", None))
        self.loader = batches if keeps_place else None
        bar = None
        if progress:
            from tqdm.std import tqdm

            bar = tqdm(total=total * epochs if total is not None else None, unit="step", leave=True, file=sys.stderr)
            if at is not None:
                bar.update(at[0] * (total or 0) + at[1])
        generator = getattr(batches, "generator", None)
        generator = generator if isinstance(generator, torch.Generator) else None
        first = at[0] if at is not None else 0
        shown = None
        try:
            for epoch in range(first, epochs):
                it = self._epoch(batches, epoch, at if epoch == first else None, generator)
                for batch in it:
                    self.at[1] += 1
                    trainer.step(batch)
                    if bar is not None:
                        bar.update(1)
                        if trainer.loss is not shown:
                            shown = trainer.loss
                            bar.set_postfix(epoch=epoch, loss=f"{shown:.4g}", refresh=False)
                trainer.close_group()
                if evaluate is not None:
                    trainer.evaluate(evaluate, metrics)
        except LoaderNotResumable:
            self.resume_at = resumed  # so that a fit over a loader that can go on from there resumes
            raise
        finally:
            self.at = self.loader = None
            if bar is not None:
                bar.close()

    def _epoch(self, batches, epoch, at, generator):
        """An iterator over the batches of ``epoch`` still to do; ``at``:
        where a resumed run stood in it ([epoch, batches done, the RNG as the
        epoch drew its order, the loader's state])."""
        skip, drawn, loader = (0, None, None) if at is None else at[1:]
        now = None if at is None else _rng_of(generator)  # the RNG as the checkpoint left it
        if drawn is not None:
            _put_rng(drawn, generator)  # the order this epoch drew
        sampler = getattr(batches, "sampler", None)
        if callable(getattr(sampler, "set_epoch", None)):  # a DistributedSampler draws each epoch's order anew
            sampler.set_epoch(epoch)
        self.at = [epoch, skip, _rng_of(generator)]
        if loader is not None:  # a loader that keeps its own place (torchdata's StatefulDataLoader)
            batches.load_state_dict(loader)
            skip = 0
        it = iter(batches)
        if skip:
            try:
                _cursor.skip(batches, it, skip)  # all of them too: the epoch draws what it draws to its end (see below)
            except LoaderNotResumable:
                _put_rng(now, generator)  # as the checkpoint left them
                raise
        if now is not None:
            # Torch's RNG goes back to where the checkpoint left it; the loader's
            # generator stays where drawing this epoch's order left it, as it
            # was then: a fresh process's loader holds a generator seeded anew,
            # and a sampler draws from it again as its epoch ends (RandomSampler
            # asks for one more permutation), so the next epoch's order depends on it.
            _put_rng(now, None)
        return it


def _one_shot(batches):
    """Whether ``batches`` is an iterator, empty once iterated. Asked of its
    type: calling ``iter()`` on a DataLoader to find out would draw a seed
    from its generator (or torch's RNG), a draw a hand-written loop does not make."""
    return isinstance(batches, Iterator)


def _rng_of(generator):
    return [torch.get_rng_state(), generator.get_state() if generator is not None else None]


def _put_rng(kept, generator):
    torch.set_rng_state(kept[0])
    if generator is not None and kept[1] is not None:
        generator.set_state(kept[1])


def _length(batches):
    """How many batches an epoch has, or None where the loader cannot say: a
    DataLoader always has ``__len__``, and over an IterableDataset without
    one it raises TypeError."""
    try:
        return len(batches)
    except TypeError:
        return None
