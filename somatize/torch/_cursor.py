"""Where a resumed epoch goes on: the batches it had done, skipped. The one
place the Trainer reads torch's private names of a DataLoader's iterator.

The rule kept here: a resumed epoch yields the batches a run never stopped
would have yielded after the ones done, or the resume is refused; it never
goes on from another place. A ``DataLoader`` loading in this process
(``num_workers=0``) over a map-style dataset skips them by its sampler
alone, loading none: its iterator's ``_sampler_iter`` is advanced past their
indexes and its ``_num_yielded`` count moved on, as loading them would have.
Those names are torch's own, not its API; an iterator that lacks them
(another torch, or a DataLoader subclass with an iterator of its own) is
refused with ``LoaderNotResumable`` before anything is advanced. Anything
else (a list, a generator, a DataLoader with workers or over an
IterableDataset, whose sampler does not say which examples come next) loads
the batches done and drops them.
"""

from __future__ import annotations

import torch

from .._base.errors import LoaderNotResumable

CURSOR = ("_sampler_iter", "_num_yielded")  # what a DataLoader's iterator must hold to be skipped by its sampler


def skip(batches, it, k):
    """Skip the first ``k`` batches of ``it``, a fresh iterator over ``batches``."""
    if k and _by_sampler(batches):
        indexes, yielded = _cursor(batches, it)
        for _ in range(k):
            next(indexes)
        it._num_yielded = yielded + k
        return
    for _ in range(k):
        next(it)


def _by_sampler(batches):
    """Whether ``batches`` is a DataLoader whose sampler alone says which
    examples each batch holds: it loads in this process, from a map-style dataset."""
    return (isinstance(batches, torch.utils.data.DataLoader) and batches.num_workers == 0
            and not isinstance(batches.dataset, torch.utils.data.IterableDataset))


def _cursor(batches, it):
    """``(the iterator's iterator of batch indexes, the batches it has yielded)``,
    read before anything is advanced; refused when ``it`` lacks either."""
    indexes, yielded = (getattr(it, name, None) for name in CURSOR)
    missing = [name for name, ok in zip(CURSOR, (hasattr(indexes, "__next__"), isinstance(yielded, int))) if not ok]
    if missing:
        raise LoaderNotResumable(
            f"fit resumed in the middle of an epoch skips the batches done by advancing the iterator of "
            f"{type(batches).__name__} (a DataLoader, num_workers=0), but its iterator, a "
            f"{type(it).__name__}, has no {' and no '.join(missing)} under torch {torch.__version__}, so "
            "where the epoch stood cannot be set. Nothing was moved. Resume with a plain torch "
            "DataLoader on the torch somatize supports, or hand fit an iterable of your own over the same "
            "batches (a class whose __iter__ yields them, or a list of batches: the batches done are "
            "loaded again and dropped), or a loader that keeps its own place (state_dict/load_state_dict, "
            "as torchdata's StatefulDataLoader)."
        )
    return indexes, yielded
