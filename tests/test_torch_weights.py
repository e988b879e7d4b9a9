"""Weights node by node: parameters, freeze (digest in the fingerprint,
changes caught), export and load, fedavg, and what a Store keeps of them."""

import os

import pytest
import torch

import somatize.torch  # noqa: F401
from somatize import Data, Graph, Node, Opaque, SomatizeError, Store
from somatize.torch import Trainer, export, fedavg, freeze, load, parameters

from torch_models import Body, Head, batches, built

MSE = torch.nn.functional.mse_loss


def test_parameters_leave_frozen_nodes_out():
    g = built(frozen_body=True)
    got = parameters(g)
    assert [id(p) for p in got] == [id(p) for p in g.node("head").out.parameters()]
    assert len(parameters(built())) == 6


def test_freeze_stops_gradients_of_frozen_nodes_only():
    g = built(frozen_body=True)
    assert freeze(g) is g
    assert not any(p.requires_grad for p in g.node("body").net.parameters())
    assert all(p.requires_grad for p in g.node("head").out.parameters())


def test_the_weights_digest_enters_the_fingerprint():
    a, b, c = built(seed=0, frozen_body=True), built(seed=0, frozen_body=True), built(seed=1, frozen_body=True)
    before = a.fingerprints()["body"]
    for g in (a, b, c):
        freeze(g)
    assert a.fingerprints()["body"] != before  # the digest is in it now
    assert a.fingerprints() == b.fingerprints()  # same code, same weights
    assert a.fingerprints()["body"] != c.fingerprints()["body"]  # other weights


def cached_graph(width=32):
    torch.manual_seed(0)
    return Graph.somatize(Body(width).named("body").frozen().cached() >> Head(width).named("head"))


def test_a_frozen_cached_node_without_freeze_is_refused_naming_freeze(tmp_path):
    g = cached_graph()
    with pytest.raises(SomatizeError, match=r"freeze\(g\)"):
        g.forward(Opaque(torch.randn(4, 8)), store=tmp_path)


def test_a_cache_hit_is_bit_identical_to_running_the_node(tmp_path):
    g = freeze(cached_graph())
    x = torch.randn(16, 8)
    facts = []
    g.forward(Opaque(x), store=tmp_path, watching=facts.append)
    assert ("kept", "body") in [(f["fact"], f.get("node")) for f in facts]

    hits = []

    class Catch(Node):
        def forward(self, v, ctx):
            hits.append(v)
            return Opaque(v)

    probe = Graph.somatize(g.node("body") >> Catch().named("catch"))
    facts.clear()
    probe.forward(Opaque(x), store=tmp_path, watching=facts.append)
    assert ("recalled", "body") in [(f["fact"], f.get("node")) for f in facts]
    with torch.no_grad():
        ran = g.node("body").net(x)
    assert hits[0].dtype == ran.dtype and torch.equal(hits[0], ran)


def _mutations():
    def optimizer_step(g):
        opt = torch.optim.SGD(g.node("body").net.parameters(), lr=0.1)
        for p in g.node("body").net.parameters():
            p.grad = torch.ones_like(p)
        opt.step()

    def data_swap(g):
        w = g.node("body").net[0].weight
        w.data = w.data + 1

    def data_inplace(g):  # bypasses torch's version counter
        g.node("body").net[2].bias.data.add_(1)

    def module_swap(g):
        g.node("body").net[2] = torch.nn.Linear(32, 32)

    return [optimizer_step, data_swap, data_inplace, module_swap]


@pytest.mark.parametrize("change", _mutations(), ids=lambda f: f.__name__)
def test_weights_changed_after_freeze_are_refused_then_taken_by_freeze_again(tmp_path, change):
    g = freeze(cached_graph())
    x = Opaque(torch.randn(4, 8))
    g.forward(x, store=tmp_path)
    change(g)
    with pytest.raises(SomatizeError, match=r"changed after freeze\(g\)"):
        g.forward(x, store=tmp_path)
    freeze(g)
    said = []
    g.forward(x, store=tmp_path, watching=said.append)
    # new weights, new key: it ran again rather than serving the old output
    assert [f["fact"] for f in said if f.get("node") == "body"] == ["ran", "kept"]


@pytest.mark.parametrize("change", [f for f in _mutations() if f.__name__ != "data_inplace"], ids=lambda f: f.__name__)
def test_big_weights_changed_after_freeze_are_refused_too(tmp_path, change):
    # past 4 MiB freeze keeps no checksum of the bytes: torch's version
    # counters, the tensors' memory and parameters() itself must catch these
    g = freeze(cached_graph(width=1100))
    assert sum(t.numel() * t.element_size() for t in export(g)["body"].values()) > 4 << 20
    x = Opaque(torch.randn(4, 8))
    g.forward(x, store=tmp_path)
    change(g)
    with pytest.raises(SomatizeError, match=r"changed after freeze\(g\)"):
        g.forward(x, store=tmp_path)


def test_export_names_tensors_by_node_and_copies_them():
    g = built()
    got = export(g)
    assert {k: sorted(v) for k, v in got.items()} == {
        "body": ["net.0.bias", "net.0.weight", "net.2.bias", "net.2.weight"],
        "head": ["out.bias", "out.weight"],
    }
    before = {k: t.clone() for k, t in got["head"].items()}
    trainer = Trainer(g, objective=MSE, optimizer=torch.optim.SGD(parameters(g), lr=0.1))
    trainer.step(batches(1)[0])
    for k in before:
        assert torch.equal(got["head"][k], before[k])  # training did not move the export
        assert not torch.equal(g.node("head").out.state_dict()[k.removeprefix("out.")], before[k])
        assert not got["head"][k].requires_grad


class Normed(Node):
    def __init__(self):
        self.norm = torch.nn.BatchNorm1d(8)
        self.scale = torch.nn.Parameter(torch.ones(8))

    def forward(self, x, ctx):
        return Opaque(self.norm(x) * self.scale)

    def parameters(self):
        return [*self.norm.parameters(), self.scale]


def test_export_includes_buffers_and_bare_parameters():
    g = Graph.somatize(Normed().named("n"))
    g.forward(Opaque(torch.randn(16, 8)))
    got = export(g)["n"]
    assert {"norm.running_mean", "norm.running_var", "norm.num_batches_tracked", "scale"} <= set(got)
    assert got["norm.num_batches_tracked"].item() == 1


def test_load_puts_an_export_back_in_place():
    a, b = built(seed=0), built(seed=1)
    kept_ref = b.node("head").out.weight
    load(b, export(a))
    assert b.node("head").out.weight is kept_ref  # an optimizer's reference stays valid
    x = torch.randn(5, 8)
    assert torch.equal(a.forward(Opaque(x)), b.forward(Opaque(x)))


@pytest.mark.parametrize(
    "spoil,match",
    [
        (lambda e: e.pop("head"), "missing"),
        (lambda e: e.update(extra={}), "extra"),
        (lambda e: e["head"].pop("out.bias"), "out.bias"),
        (lambda e: e["head"].update({"out.weight": torch.zeros(2, 32)}), r"\[1, 32\].*\[2, 32\]"),
        (lambda e: e["head"].update({"out.bias": torch.zeros(1, dtype=torch.float64)}), "float64"),
    ],
)
def test_load_refuses_a_mismatch_before_writing_anything(spoil, match):
    a, b = built(seed=0), built(seed=1)
    e = export(a)
    spoil(e)
    before = export(b)
    with pytest.raises(SomatizeError, match=match):
        load(b, e)
    after = export(b)
    assert all(torch.equal(after[n][k], before[n][k]) for n in before for k in before[n])


def test_loading_into_a_frozen_node_takes_its_digest_again():
    a, b = freeze(built(seed=0, frozen_body=True)), freeze(built(seed=1, frozen_body=True))
    assert a.fingerprints() != b.fingerprints()
    load(b, export(a))
    assert a.fingerprints() == b.fingerprints()


def test_fedavg_of_identical_exports_is_that_export():
    for dtype in (torch.float32, torch.float64):
        e = export(built(dtype=dtype))
        avg = fedavg([e, e, e], weights=[1, 2, 3.5])
        assert all(torch.equal(avg[n][k], e[n][k]) for n in e for k in e[n])


def test_fedavg_of_two_is_their_mean_and_weights_weigh():
    a, b = export(built(seed=0, dtype=torch.float64)), export(built(seed=1, dtype=torch.float64))
    mean, weighted = fedavg([a, b]), fedavg([a, b], weights=[3, 1])
    for n in a:
        for k in a[n]:
            torch.testing.assert_close(mean[n][k], (a[n][k] + b[n][k]) / 2, rtol=0, atol=1e-12)
            torch.testing.assert_close(weighted[n][k], 0.75 * a[n][k] + 0.25 * b[n][k], rtol=0, atol=1e-12)
    assert mean["head"]["out.weight"].dtype == torch.float64


def test_fedavg_refuses_exports_that_differ_naming_the_difference():
    a = export(built(seed=0))
    b = export(built(seed=1))
    b["head"]["out.weight"] = torch.zeros(2, 32)
    with pytest.raises(SomatizeError, match="out.weight"):
        fedavg([a, b])
    with pytest.raises(SomatizeError, match="body"):
        fedavg([a, {"head": a["head"]}])
    with pytest.raises(SomatizeError, match="one weight per export"):
        fedavg([a, a], weights=[1])
    with pytest.raises(SomatizeError):
        fedavg([])


def test_fedavg_keeps_counts_that_agree_and_refuses_counts_that_do_not():
    g = Graph.somatize(Normed().named("n"))
    g.forward(Opaque(torch.randn(16, 8)))
    a = export(g)
    assert torch.equal(fedavg([a, a])["n"]["norm.num_batches_tracked"], a["n"]["norm.num_batches_tracked"])
    g.forward(Opaque(torch.randn(16, 8)))
    with pytest.raises(SomatizeError, match="num_batches_tracked"):
        fedavg([a, export(g)])


def _bytes_on_disk(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root / "objects") for f in fs)


def test_checkpoints_that_share_a_frozen_body_store_it_once(tmp_path):
    torch.manual_seed(0)
    g = freeze(Graph.somatize(Body(256).named("body").frozen() >> Head(256).named("head")))
    body_bytes = sum(t.numel() * t.element_size() for t in export(g)["body"].values())
    store = Store(tmp_path / "s")
    trainer = Trainer(g, objective=MSE, optimizer=torch.optim.Adam(parameters(g), lr=1e-2))
    sizes = []
    for i, b in enumerate(batches(10)):
        trainer.step(b)
        store.keep(f"run/checkpoint-{i}", trainer.export())
        sizes.append(_bytes_on_disk(tmp_path / "s"))
    assert sizes[0] > body_bytes
    # each later checkpoint adds the head and a manifest, never the body again
    assert sizes[-1] - sizes[0] < body_bytes / 10
    back = store.recall("run/checkpoint-9")
    assert torch.equal(back["head"]["out.weight"], g.node("head").out.weight.detach())
    assert not torch.equal(store.recall("run/checkpoint-0")["head"]["out.weight"], back["head"]["out.weight"])


class Embed(Node):
    """Weights held in a torch module, and no parameters() method."""

    def __init__(self, seed):
        torch.manual_seed(seed)
        self.table = torch.nn.Embedding(4, 2)

    def forward(self, x, ctx):
        return Data(self.table(x))


def test_a_node_holding_a_module_without_parameters_is_keyed_by_its_weights(tmp_path):
    ids = Opaque(torch.tensor([1]))
    one = Graph.somatize(Embed(0).named("emb").frozen().cached())
    with pytest.raises(ValueError, match=r"'emb'.*by type only.*freeze\(g\)"):
        one.forward(ids, store=tmp_path)
    other = Graph.somatize(Embed(1).named("emb").frozen().cached())
    freeze(one), freeze(other)
    a, b = one.forward(ids, store=tmp_path), other.forward(ids, store=tmp_path)
    assert not torch.equal(a, b)
    assert torch.equal(b, other.node("emb").table(torch.tensor([1])).detach())
