"""Caching: frozen, cached nodes keep their outputs in the Store, keyed by content."""

import numpy as np
import pytest

from somatize import Graph, Node, Opaque, Store, register_codec
from somatize._graph.engine import set_weights

CALLS = {}  # node -> runs; held by the node itself, so no id is ever reused


@pytest.fixture(autouse=True)
def _fresh_counts():
    CALLS.clear()
    yield
    CALLS.clear()


class Scale(Node):
    """Counts its runs outside itself: a frozen node's data attributes are
    part of its fingerprint, so a counter inside would change its identity."""

    def __init__(self, k):
        self.k = k

    @property
    def calls(self):
        return CALLS.get(self, 0)

    def forward(self, x, ctx):
        CALLS[self] = CALLS.get(self, 0) + 1
        return np.sin(x) * self.k


class Head(Node):
    def forward(self, x, ctx):
        return x.sum()


def said(seen):
    return [(f["fact"], f.get("node")) for f in seen]


def test_same_input_is_recalled_a_different_one_runs(tmp_path):
    body = Scale(3.0).named("body").frozen().cached()
    g = Graph.somatize(body >> Head().named("head"))
    x = np.linspace(0, 1, 1000)
    first, again, other = [], [], []
    out1 = g.forward(x, store=tmp_path, watching=first.append)
    out2 = g.forward(x.copy(), store=tmp_path, watching=again.append)
    g.forward(x + 1, store=tmp_path, watching=other.append)
    assert said(first) == [("ran", "body"), ("kept", "body"), ("ran", "head"), ("finished", None)]
    assert said(again) == [("recalled", "body"), ("ran", "head"), ("finished", None)]
    assert said(other) == said(first)
    assert body.calls == 2
    assert out1 == out2


def test_a_cache_hit_is_bit_identical_to_running_the_node(tmp_path):
    g = Graph.somatize(Scale(1.7).named("body").frozen().cached())
    x = np.random.default_rng(1).standard_normal((64, 33)).astype(np.float32)
    ran = g.forward(x, store=Store(tmp_path))
    recalled = g.forward(x, store=Store(tmp_path))
    assert ran.dtype == recalled.dtype and ran.shape == recalled.shape
    assert ran.tobytes() == recalled.tobytes()


def test_the_cache_survives_a_new_graph_and_store_object(tmp_path):
    x = np.arange(10.0)
    Graph.somatize(Scale(2.0).named("body").frozen().cached()).forward(x, store=str(tmp_path))
    body = Scale(2.0).named("body").frozen().cached()
    seen = []
    Graph.somatize(body).forward(x, store=Store(tmp_path), watching=seen.append)
    assert said(seen)[0] == ("recalled", "body") and body.calls == 0


def test_changing_a_frozen_nodes_data_attribute_changes_its_key(tmp_path):
    body = Scale(2.0).named("body").frozen().cached()
    g = Graph.somatize(body)
    x = np.arange(4.0)
    g.forward(x, store=tmp_path)
    body.k = 3.0
    assert np.array_equal(g.forward(x, store=tmp_path), np.sin(x) * 3.0)
    assert body.calls == 2


def test_other_settings_of_the_same_code_do_not_share_a_cache(tmp_path):
    x = np.arange(10.0)
    a = Graph.somatize(Scale(2.0).named("body").frozen().cached()).forward(x, store=tmp_path)
    b = Graph.somatize(Scale(5.0).named("body").frozen().cached()).forward(x, store=tmp_path)
    assert not np.array_equal(a, b)


def test_without_a_store_a_cached_node_simply_runs():
    seen = []
    Graph.somatize(Scale(1.0).frozen().cached()).forward(np.ones(3), watching=seen.append)
    assert said(seen) == [("ran", "scale"), ("finished", None)]


class Weighted(Node):
    def __init__(self):
        self.w = [1.0]

    def forward(self, x, ctx):
        return x * self.w[0]

    def parameters(self):
        return self.w


def test_a_frozen_cached_node_with_weights_needs_their_digest_first(tmp_path):
    ran = []

    class First(Node):
        def forward(self, x, ctx):
            ran.append(1)
            return x

    g = Graph.somatize(First() >> Weighted().named("body").frozen().cached())
    with pytest.raises(ValueError, match=r"'body'.*freeze\(g\)"):
        g.forward(np.ones(2), store=tmp_path)
    assert ran == []


def test_weights_changed_after_the_digest_are_refused_not_served_stale(tmp_path):
    node = Weighted().named("body").frozen().cached()
    set_weights(node, "sha256:" + "0" * 64, lambda: node.w == [1.0])
    g = Graph.somatize(node)
    assert g.forward(np.ones(2), store=tmp_path).tolist() == [1.0, 1.0]
    node.w[0] = 2.0
    with pytest.raises(ValueError, match=r"changed after freeze\(g\)"):
        g.forward(np.ones(2), store=tmp_path)


def test_the_weights_digest_enters_the_fingerprint():
    node = Weighted().named("body").frozen()
    g = Graph.somatize(node)
    before = g.fingerprints()["body"]
    set_weights(node, "sha256:" + "1" * 64, lambda: True)
    after = g.fingerprints()["body"]
    set_weights(node, "sha256:" + "2" * 64, lambda: True)
    assert len({before, after, g.fingerprints()["body"]}) == 3


def test_a_cached_node_whose_input_is_not_data_is_refused(tmp_path):
    class Any(Node):
        def forward(self, x, ctx):
            return 1

    g = Graph.somatize(Any().named("body").frozen().cached())
    with pytest.raises(TypeError, match=r"'body' is cached.*input must be data"):
        g.forward(Opaque(object()), store=tmp_path)


def test_a_wrong_store_argument_is_refused_even_when_nothing_caches():
    with pytest.raises(TypeError, match="store= takes a Store or a path"):
        Graph.somatize(Scale(1.0)).forward(np.ones(2), store=42)


# --- what the fingerprint reaches -----------------------------------------------------


def test_a_helper_the_node_calls_is_part_of_its_fingerprint():
    # as in a notebook: the helper is a global of the cell's module, redefined later
    space = {"Node": Node, "__name__": "notebook_cell"}
    exec("def helper(x):\n    return x + 1\n", space)
    exec("class Uses(Node):\n    def forward(self, x, ctx):\n        return helper(x)\n", space)
    g = Graph.somatize(space["Uses"]().named("u").frozen())
    before = g.fingerprints()["u"]
    assert g.fingerprints()["u"] == before
    exec("def helper(x):\n    return x + 100\n", space)
    assert g.fingerprints()["u"] != before


class Apply(Node):
    def __init__(self, f):
        self.f = f

    def forward(self, x, ctx):
        return self.f(x)


def test_a_function_held_as_an_attribute_counts_by_what_it_is(tmp_path):
    def fp(f):
        return Graph.somatize(Apply(f).named("a").frozen()).fingerprints()["a"]

    assert len({fp(np.sqrt), fp(np.log), fp(lambda x: x * 100), fp(lambda x: x * 2)}) == 4
    assert fp(np.sqrt) == fp(np.sqrt)
    x = np.array([4.0])
    first = Graph.somatize(Apply(np.sqrt).named("a").frozen().cached()).forward(x, store=tmp_path)
    second = Graph.somatize(Apply(np.log).named("a").frozen().cached()).forward(x, store=tmp_path)
    assert (first[0], second[0]) == (2.0, np.log(4.0))


class Table:
    """Not data: no codec knows it."""

    def __init__(self, rows):
        self.rows = rows


class Lookup(Node):
    def __init__(self, rows):
        self.table = Table(rows)

    def forward(self, x, ctx):
        return self.table.rows[x]


def test_a_cached_node_holding_state_seen_by_type_only_needs_freeze_first(tmp_path):
    node = Lookup([10, 20]).named("look").frozen().cached()
    g = Graph.somatize(node)
    with pytest.raises(ValueError, match=r"'look'.*table \(.*Table\) by type only.*freeze\(g\)"):
        g.forward(1, store=tmp_path)
    set_weights(node, "sha256:" + "3" * 64, lambda: True)  # what freeze(g) does: the promise
    assert g.forward(1, store=tmp_path) == 20


def test_a_big_data_attribute_is_digested_once_not_every_forward():
    encoded = []

    class Counted:
        def __init__(self, n):
            self.n = n

    class CountedCodec:
        name = "test-counted"
        types = (Counted,)
        explicit = False

        def encode(self, value):
            encoded.append(value.n)
            return {"n": value.n}, []

        def decode(self, meta, buffers):
            return Counted(meta["n"])

    register_codec(CountedCodec())

    class Holds(Node):
        def __init__(self):
            self.big = Counted(1)

        def forward(self, x, ctx):
            return x

    node = Holds().named("h").frozen()
    g = Graph.somatize(node)
    first = g.fingerprints()["h"]
    for _ in range(3):
        assert g.fingerprints()["h"] == first
    assert encoded == [1]
    node.big = Counted(2)  # a new object: digested again
    assert g.fingerprints()["h"] != first and encoded == [1, 2]


@pytest.mark.parametrize("what", ["the whole store", "its cache folder", "its tmp folder"])
def test_deleting_the_store_between_two_cached_forwards_runs_the_node_again(tmp_path, what):
    """Issue 7: the process-wide cache of opened stores went stale: after a
    notebook deleted the folder, the next cached forward raised a bare
    FileNotFoundError. Now the node runs again and its output is kept anew."""
    import shutil

    body = Scale(2.0).named("body").frozen().cached()
    g = Graph.somatize(body >> Head().named("head"))
    x = np.linspace(0, 1, 100)
    store = tmp_path / "store"
    out1 = g.forward(x, store=store)
    shutil.rmtree({"the whole store": store, "its cache folder": store / "names" / "cache",
                   "its tmp folder": store / "tmp"}[what])
    seen = []
    out2 = g.forward(x, store=str(store), watching=seen.append)
    assert out2 == out1
    assert said(seen)[:2] == ([("ran", "body"), ("kept", "body")] if what != "its tmp folder"
                              else [("recalled", "body"), ("ran", "head")])
    again = []
    g.forward(x, store=store, watching=again.append)
    assert said(again)[0] == ("recalled", "body")


def test_a_fingerprint_is_the_same_in_every_process_with_a_set_in_the_code():
    """``x in {"a", "b", ...}`` compiles to a frozenset constant, whose repr
    follows str hashing, seeded anew in each process: the fingerprint (and so
    the cache key) must not follow it, or a cache would never hit again after
    a restart."""
    import os
    import subprocess
    import sys

    code = (
        "from somatize import Graph, Node\n"
        "class Pick(Node):\n"
        "    def forward(self, x, ctx):\n"
        "        return x if x in {'alpha', 'beta', 'gamma', 'delta', 'epsilon'} else ((1, frozenset('xyzw')),)\n"
        "print(Graph.somatize(Pick().named('p').frozen()).fingerprints()['p'])\n"
    )
    got = {
        subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": str(seed)},
                       capture_output=True, text=True, check=True).stdout
        for seed in range(6)
    }
    assert len(got) == 1, got
