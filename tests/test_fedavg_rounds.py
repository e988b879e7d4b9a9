"""Federated averaging as rounds of a ``for``: clients train from the round's
global export, kept in the store and recalled by name; ``fedavg`` averages
what they return. Checked against hand computations and digests."""

import torch

from somatize import Store
from somatize.torch import Trainer, export, fedavg, load, parameters

from torch_models import batches, built

MSE = torch.nn.functional.mse_loss


def local(store, global_name, data, frozen_body=False, dtype=torch.float64):
    """One client's round: start from the kept global export, train on its data."""
    g = built(dtype=dtype, frozen_body=frozen_body)
    load(g, store.recall(global_name))
    started = store.digest_of(export(g))
    trainer = Trainer(g, MSE, torch.optim.SGD(parameters(g), lr=0.05))
    for b in data:
        trainer.step(b)
    return export(g), started


def test_clients_with_identical_data_average_to_one_clients_weights(tmp_path):
    store = Store(tmp_path / "s")
    store.keep("fed/0", export(built(dtype=torch.float64)))
    data = batches(5, n=16, dtype=torch.float64)
    exports = [local(store, "fed/0", data)[0] for _ in range(3)]
    averaged = fedavg(exports, weights=[16, 32, 48])
    for node in exports[0]:
        for k, t in exports[0][node].items():
            assert torch.equal(averaged[node][k], t)


def test_a_weighted_average_matches_the_hand_computation():
    gen = torch.Generator().manual_seed(3)
    exports = [{"n": {"w": torch.randn(4, 5, generator=gen), "b": torch.randn(5, generator=gen)}} for _ in range(3)]
    weights = [10, 30, 60]
    averaged = fedavg(exports, weights=weights)
    for k in ("w", "b"):
        by_hand = sum(w * e["n"][k].double() for w, e in zip(weights, exports)) / sum(weights)
        assert averaged["n"][k].dtype == torch.float32
        torch.testing.assert_close(averaged["n"][k].double(), by_hand, atol=1e-6, rtol=0)  # float32's rounding
    doubles = [{"n": {k: t.double() for k, t in e["n"].items()}} for e in exports]
    averaged = fedavg(doubles, weights=weights)
    for k in ("w", "b"):
        by_hand = sum(w * e["n"][k] for w, e in zip(weights, doubles)) / sum(weights)
        torch.testing.assert_close(averaged["n"][k], by_hand, atol=1e-14, rtol=0)


def test_frozen_nodes_stay_bit_identical_across_rounds(tmp_path):
    store = Store(tmp_path / "s")
    first = export(built(dtype=torch.float64, frozen_body=True))
    store.keep("fed/0", first)
    for r in range(1, 4):
        exports = [local(store, f"fed/{r - 1}", batches(3, n=16, dtype=torch.float64, seed=10 * r + c),
                         frozen_body=True)[0] for c in range(3)]
        averaged = fedavg(exports, weights=[1, 2, 3])
        store.keep(f"fed/{r}", averaged)
        for k, t in first["body"].items():
            assert torch.equal(averaged["body"][k], t)
        assert not torch.equal(averaged["head"]["out.weight"], first["head"]["out.weight"])


def test_each_round_starts_from_the_previous_rounds_kept_export(tmp_path):
    store = Store(tmp_path / "s")
    kept = [store.keep("fed/0", export(built(dtype=torch.float64)))]
    for r in range(1, 4):
        results = [local(store, f"fed/{r - 1}", batches(2, n=16, dtype=torch.float64, seed=10 * r + c))
                   for c in range(2)]
        assert [started for _, started in results] == [kept[-1]] * 2  # what each client began from
        kept.append(store.keep(f"fed/{r}", fedavg([e for e, _ in results])))
    assert len(set(kept)) == 4  # each round moved the weights
    assert [store.lookup(f"fed/{r}") for r in range(4)] == kept
