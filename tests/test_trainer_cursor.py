"""A resumed fit goes on where its epoch stood in a DataLoader, or refuses:
an iterator without torch's internals that a skip advances (another torch's)
is refused, naming the loader, before anything moves; a DataLoader over an
IterableDataset loads the batches done again and drops them."""

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset
from torch.utils.data import dataloader as torch_dataloader

from somatize import LoaderNotResumable, Store
from somatize.torch import Trainer, parameters

from torch_models import built

MSE = torch.nn.functional.mse_loss


class _SingleProcessDataLoaderIter(torch_dataloader._SingleProcessDataLoaderIter):
    """torch's own iterator as a torch that counts its batches under another
    name would have it: no ``_num_yielded``."""

    def __init__(self, loader):
        super().__init__(loader)
        self.yielded = self.__dict__.pop("_num_yielded")

    def __next__(self):
        data = self._next_data()
        self.yielded += 1
        return data


class Renamed(DataLoader):
    """A DataLoader whose iterator lacks ``_num_yielded``."""

    def _get_iterator(self):
        return _SingleProcessDataLoaderIter(self)


class Stop(Exception):
    pass


def examples():
    x = torch.randn(80, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    return x, x.sum(1, keepdim=True)


def shuffled(kind=DataLoader):
    return kind(TensorDataset(*examples()), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(7))


def trainer(store=None, stop_at=None):
    calls = [0]

    def objective(out, y):
        if calls[0] == stop_at:
            raise Stop
        calls[0] += 1
        return MSE(out, y)

    g = built(dtype=torch.float64)
    return Trainer(g, objective, torch.optim.Adam(parameters(g), lr=1e-2), store=store,
                   checkpoint="t/c" if store else None, checkpoint_every=4 if store else None)


def same_weights(a, b):
    ea, eb = a.export(), b.export()
    for node in eb:
        for k in eb[node]:
            assert torch.equal(ea[node][k], eb[node][k]), (node, k)


def stopped_in_epoch_1(store, kind):
    """A fit over 2 epochs of 10 batches, kept at step 12 (epoch 1, 2 batches
    done) and stopped at step 14; then the Trainer that resumes from it."""
    with pytest.raises(Stop):
        trainer(store, stop_at=14).fit(shuffled(kind), epochs=2, progress=False)
    again = trainer(store)
    assert again.steps == 12
    return again


def test_a_dataloader_whose_iterator_lacks_the_count_is_refused_naming_it(tmp_path):
    again = stopped_in_epoch_1(Store(tmp_path / "s"), Renamed)
    with pytest.raises(LoaderNotResumable) as refused:
        again.fit(shuffled(Renamed), epochs=2, progress=False)
    said = str(refused.value)
    assert "Renamed" in said and "_SingleProcessDataLoaderIter" in said and "_num_yielded" in said
    assert f"torch {torch.__version__}" in said and "list of batches" in said
    assert again.steps == 12


def test_a_refused_resume_moves_nothing_and_a_plain_dataloader_then_goes_on_exactly(tmp_path):
    whole = trainer().fit(shuffled(), epochs=2, progress=False)
    again = stopped_in_epoch_1(Store(tmp_path / "s"), Renamed)
    with pytest.raises(LoaderNotResumable):
        again.fit(shuffled(Renamed), epochs=2, progress=False)
    again.fit(shuffled(), epochs=2, progress=False)
    assert (again.steps, again.updates) == (whole.steps, whole.updates) == (20, 20)
    same_weights(again, whole)


class Stream(IterableDataset):
    """An iterable dataset: its loader's sampler says nothing of which examples come next."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __iter__(self):
        return zip(self.x, self.y)


def test_a_dataloader_over_an_iterable_dataset_resumed_goes_on_after_the_batches_done(tmp_path):
    def streamed():
        return DataLoader(Stream(*examples()), batch_size=8)

    whole = trainer().fit(streamed(), epochs=2, progress=False)
    store = Store(tmp_path / "s")
    with pytest.raises(Stop):
        trainer(store, stop_at=14).fit(streamed(), epochs=2, progress=False)
    again = trainer(store)
    again.fit(streamed(), epochs=2, progress=False)
    assert (again.steps, again.updates) == (whole.steps, whole.updates) == (20, 20)
    same_weights(again, whole)


class Unsized(IterableDataset):
    """An iterable dataset with no length: its DataLoader's ``len`` raises TypeError."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __iter__(self):
        return zip(self.x, self.y)


@pytest.mark.parametrize("progress", [False, True])
def test_a_dataloader_over_an_iterable_dataset_without_a_length_fits_and_resumes(tmp_path, progress):
    def streamed():
        return DataLoader(Unsized(*examples()), batch_size=8)

    with pytest.raises(TypeError):
        len(streamed())
    whole = trainer().fit(streamed(), epochs=2, progress=progress)
    store = Store(tmp_path / "s")
    with pytest.raises(Stop):
        trainer(store, stop_at=14).fit(streamed(), epochs=2, progress=progress)
    again = trainer(store)
    again.fit(streamed(), epochs=2, progress=progress)
    assert (again.steps, again.updates) == (whole.steps, whole.updates) == (20, 20)
    same_weights(again, whole)


class _NoSamplerIter(torch_dataloader._SingleProcessDataLoaderIter):
    """torch's own iterator as a torch that keeps its batch indexes under
    another name would have it: no ``_sampler_iter``."""

    def __init__(self, loader):
        super().__init__(loader)
        self.indexes = self.__dict__.pop("_sampler_iter")

    def _next_index(self):
        return next(self.indexes)

    def __next__(self):
        data = self._next_data()
        self._num_yielded += 1
        return data


class NoSamplerIter(DataLoader):
    """A DataLoader whose iterator lacks ``_sampler_iter``."""

    def _get_iterator(self):
        return _NoSamplerIter(self)


def test_a_dataloader_whose_iterator_lacks_the_indexes_is_refused_naming_them_and_moves_nothing(tmp_path):
    whole = trainer().fit(shuffled(), epochs=2, progress=False)
    again = stopped_in_epoch_1(Store(tmp_path / "s"), NoSamplerIter)
    rng = torch.get_rng_state()
    with pytest.raises(LoaderNotResumable) as refused:
        again.fit(shuffled(NoSamplerIter), epochs=2, progress=False)
    said = str(refused.value)
    assert "NoSamplerIter" in said and "_sampler_iter" in said and "_num_yielded" not in said
    assert again.steps == 12 and torch.equal(torch.get_rng_state(), rng)
    again.fit(shuffled(), epochs=2, progress=False)
    assert (again.steps, again.updates) == (whole.steps, whole.updates) == (20, 20)
    same_weights(again, whole)


def test_the_torch_the_package_admits_has_the_cursor_a_resumed_fit_advances():
    """pyproject.toml admits one torch minor version, this one
    (tests/test_install.py keeps it so): its DataLoader's iterator over a
    map-style dataset in this process holds both names the skip reads, so a
    plain DataLoader resumes exactly rather than being refused."""
    from somatize.torch._cursor import CURSOR

    it = iter(shuffled())
    indexes, yielded = (getattr(it, name) for name in CURSOR)
    assert hasattr(indexes, "__next__") and yielded == 0
    next(it)
    assert it._num_yielded == 1
