"""The engine: composing nodes, validating graphs, one forward and its facts."""

import numpy as np
import pytest

from somatize import Data, Graph, Node, Opaque, SomatizeError, register_codec
from somatize._base.errors import WatcherError
from somatize._graph.engine import NodeError


class Add(Node):
    def __init__(self, k=1):
        self.k = k

    def forward(self, x, ctx):
        return x + self.k


class Double(Node):
    def forward(self, x, ctx):
        return x * 2


class Sum(Node):
    def forward(self, x, ctx):
        return sum(x.values()) if isinstance(x, dict) else sum(x)


class Bare(Node):  # no __init__ at all
    def forward(self, x, ctx):
        return x


def test_node_features_work_without_super_init():
    n = Bare().named("b").frozen().cached()
    assert (n.name, n.is_frozen, n.is_cached) == ("b", True, True)
    g = Graph.somatize(n)
    assert g.forward(5) == 5


def test_chain_runs_in_order_and_names_default_from_class():
    g = Graph.somatize(Add(1) >> Double() >> Add(3))
    assert g.forward(2) == (2 + 1) * 2 + 3
    assert [n.name for n in g.nodes] == ["add", "double", "add_2"]
    assert g.edges == [("input", "add"), ("add", "double"), ("double", "add_2")]


def test_diamond_fans_out_and_merges_as_a_tuple():
    g = Graph.somatize(Add(1).named("a") >> [Double().named("b"), Add(10).named("c")] >> Sum().named("d"))
    # a: 3 -> b: 6, c: 13 -> d: 19
    assert g.forward(2) == 19
    assert sorted(g.edges) == sorted([("input", "a"), ("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])


def test_dict_fan_in_hands_the_merging_node_a_dict():
    seen = {}

    class Look(Node):
        def forward(self, x, ctx):
            seen.update(x)
            return x["left"] - x["right"]

    g = Graph.somatize(Add(0) >> {"left": Add(5), "right": Double()} >> Look())
    assert g.forward(3) == 8 - 6
    assert seen == {"left": 8, "right": 6}


def test_a_twenty_node_graph_with_branches_matches_plain_python():
    def branch(i):
        return Add(i).named(f"l{i}") >> Double().named(f"d{i}")

    expr = (
        Add(1).named("stem")
        >> [branch(1), branch(2), branch(3) >> [Add(7).named("x1"), Add(8).named("x2")] >> Sum().named("m3"),
            branch(4) >> Add(1).named("e4")]
        >> Sum().named("m")
        >> [Add(100).named("p"), Double().named("q"), Add(0).named("r") >> Double().named("r2")]
        >> Sum().named("m2")
        >> Add(-1).named("out")
    )
    g = Graph.somatize(expr)
    assert len(g.nodes) == 20

    def oracle(x):
        s = x + 1
        b1 = (s + 1) * 2
        b2 = (s + 2) * 2
        b3 = (s + 3) * 2
        m3 = (b3 + 7) + (b3 + 8)
        b4 = (s + 4) * 2 + 1
        m = b1 + b2 + m3 + b4
        m2 = (m + 100) + (m * 2) + (m * 2)
        return m2 - 1

    for x in (0, 1, 5, -3):
        assert g.forward(x) == oracle(x)
    seen = []
    g.forward(1, watching=seen.append)
    assert [f["node"] for f in seen if f["fact"] == "ran"] == [n.name for n in g.nodes]


def test_graph_output_from_a_final_fan_is_a_tuple():
    g = Graph.somatize(Add(1) >> [Double(), Add(2)])
    assert g.forward(1) == (4, 4)
    assert g.outputs == ["double", "add_2"]


def test_facts_of_a_forward_are_typed_and_in_order():
    seen = []
    g = Graph.somatize(Add(1).named("body") >> Double().named("head"))
    g.forward(1, watching=seen.append)
    assert [(f["fact"], f.get("node")) for f in seen] == [("ran", "body"), ("ran", "head"), ("finished", None)]
    for f in seen:
        for k, v in f.items():
            if k.endswith("_us"):
                assert type(v) is int and v >= 0
    assert seen[0]["began_us"] <= seen[1]["began_us"] <= seen[2]["took_us"]


def test_watching_takes_one_callable_or_a_list_and_forward_began_is_called_first():
    order = []

    class W:
        def __init__(self, tag):
            self.tag = tag

        def forward_began(self):
            order.append((self.tag, "began"))

        def __call__(self, fact):
            order.append((self.tag, fact["fact"]))

    g = Graph.somatize(Bare())
    g.forward(1, watching=W("one"))
    assert order == [("one", "began"), ("one", "ran"), ("one", "finished")]
    order.clear()
    g.forward(1, watching=[W("a"), W("b")])
    assert order[:2] == [("a", "began"), ("b", "began")]
    assert order[2:4] == [("a", "ran"), ("b", "ran")]


def test_ctx_gives_the_name_and_adds_facts():
    class Talk(Node):
        def forward(self, x, ctx):
            ctx.fact("norm", value=float(x))
            return ctx.name

    seen = []
    assert Graph.somatize(Talk().named("talker")).forward(3, watching=seen.append) == "talker"
    assert seen[0] == {"fact": "norm", "node": "talker", "value": 3.0}


def test_opaque_is_unwrapped_on_the_way_in_and_out():
    got = []

    class Wrap(Node):
        def forward(self, x, ctx):
            return Opaque(object())

    class Look(Node):
        def forward(self, x, ctx):
            got.append(type(x))
            return Opaque(x)

    out = Graph.somatize(Wrap() >> Look()).forward(Opaque(object()))
    assert got == [object] and type(out) is object


def test_numpy_and_containers_cross_as_data():
    class Arr(Node):
        def forward(self, x, ctx):
            return {"a": np.arange(3) + x, "b": [b"raw", 1.5, None]}

    out = Graph.somatize(Arr()).forward(1)
    assert out["a"].tolist() == [1, 2, 3] and out["b"] == [b"raw", 1.5, None]


class Thing:
    def __init__(self, v):
        self.v = v


def test_a_value_with_no_codec_is_refused_naming_the_fix():
    class Make(Node):
        def forward(self, x, ctx):
            return Thing(x)

    with pytest.raises(TypeError) as e:
        Graph.somatize(Make().named("maker")).forward(1)
    msg = str(e.value)
    assert "'maker'" in msg and "Thing" in msg and "register_codec" in msg and "Opaque" in msg


class Explicit:
    def __init__(self, v):
        self.v = v
        self.cut = False


class _ExplicitCodec:
    name = "test-explicit"
    types = (Explicit,)
    explicit = True

    def encode(self, value):
        return {"v": value.v}, []

    def decode(self, meta, buffers):
        return Explicit(meta["v"])

    def as_data(self, value):
        cut = Explicit(value.v)
        cut.cut = True
        return cut


register_codec(_ExplicitCodec())


def test_an_explicit_codec_value_is_refused_bare_and_names_both_answers():
    class Make(Node):
        def forward(self, x, ctx):
            return Explicit(x)

    with pytest.raises(TypeError) as e:
        Graph.somatize(Make().named("maker")).forward(1)
    assert "Opaque(value)" in str(e.value) and "Data(value)" in str(e.value) and "'maker'" in str(e.value)
    with pytest.raises(TypeError, match="the graph's input"):
        Graph.somatize(Bare()).forward(Explicit(1))


def test_data_applies_the_codecs_cut_and_opaque_does_not():
    class Send(Node):
        def __init__(self, wrap):
            self.wrap = wrap

        def forward(self, x, ctx):
            return self.wrap(Explicit(x))

    assert Graph.somatize(Send(Data)).forward(1).cut is True
    assert Graph.somatize(Send(Opaque)).forward(1).cut is False


# --- refusals when building -------------------------------------------------------


def test_cached_without_frozen_is_refused_when_the_graph_is_built():
    # refused by Graph.somatize, so no forward (and no node) can ever run
    with pytest.raises(ValueError) as e:
        Graph.somatize(Add().named("first") >> Double().named("body").cached())
    assert "'body'" in str(e.value) and ".frozen().cached()" in str(e.value)


def test_two_nodes_with_one_name_are_refused():
    with pytest.raises(ValueError, match=r"two nodes are named 'x'.*rename one with \.named\(\.\.\.\)"):
        Graph.somatize(Add().named("x") >> Double().named("x"))


def test_a_cycle_is_refused():
    a = Add()
    with pytest.raises(ValueError, match=r"cycle.*use a second instance"):
        Graph.somatize(a >> Double() >> a)


def test_one_node_in_two_branches_is_refused():
    a = Add()
    with pytest.raises(ValueError, match="appears twice"):
        Graph.somatize(Bare() >> [a, Double() >> a])


def test_a_node_without_forward_is_refused():
    class Empty(Node):
        pass

    with pytest.raises(TypeError, match=r"Empty has no forward.*def forward\(self, x, ctx\)"):
        Graph.somatize(Empty())


def test_a_forward_with_the_wrong_arguments_is_refused():
    class OneArg(Node):
        def forward(self, x):
            return x

    with pytest.raises(TypeError, match=r"def forward\(self, x, ctx\)"):
        Graph.somatize(OneArg())


def test_composing_something_that_is_not_a_node_is_refused():
    with pytest.raises(TypeError, match="Node subclass"):
        Graph.somatize(Add() >> (lambda x: x))
    with pytest.raises(TypeError, match=r"write Add\(\)"):
        Graph.somatize(Add)


def test_bad_node_names_are_refused():
    with pytest.raises(ValueError, match="cannot name a node"):
        Add().named("a b/c")


def test_a_failing_node_is_named_and_leaves_a_failed_fact():
    class Boom(Node):
        def forward(self, x, ctx):
            raise ValueError("shapes do not match")

    seen = []
    with pytest.raises(NodeError) as e:
        Graph.somatize(Add().named("ok") >> Boom().named("head")).forward(1, watching=seen.append)
    assert "'head'" in str(e.value) and "shapes do not match" in str(e.value)
    assert isinstance(e.value.__cause__, ValueError)
    assert [f["fact"] for f in seen] == ["ran", "failed"]
    assert seen[1]["node"] == "head" and "shapes do not match" in seen[1]["error"]


def test_a_node_fails_alike_cached_or_not_and_unwatched(tmp_path):
    # One function runs a node: the plain path, the cached path and a
    # forward nobody watches fail the same way.
    class Boom(Node):
        def forward(self, x, ctx):
            raise ValueError("shapes do not match")

    for node in (Boom(), Boom().frozen().cached()):
        seen = []
        with pytest.raises(NodeError, match="'boom'.*shapes do not match"):
            Graph.somatize(node.named("boom")).forward(1, store=tmp_path, watching=seen.append)
        assert [f["fact"] for f in seen] == ["failed"] and "shapes do not match" in seen[0]["error"]
        with pytest.raises(NodeError, match="'boom'.*shapes do not match"):
            Graph.somatize(node).forward(1, store=tmp_path)


def test_a_raising_watcher_is_named_and_earlier_facts_were_delivered():
    seen = []

    def picky(fact):
        if fact["fact"] == "finished":
            raise RuntimeError("disk full")

    with pytest.raises(WatcherError) as e:
        Graph.somatize(Add().named("a") >> Add().named("b")).forward(1, watching=[seen.append, picky])
    assert "picky" in str(e.value) and "disk full" in str(e.value)
    assert "fix the watcher or take it out of watching=" in str(e.value)
    assert [f["fact"] for f in seen] == ["ran", "ran", "finished"]


def test_watching_something_not_callable_is_refused():
    with pytest.raises(TypeError, match="watching="):
        Graph.somatize(Add()).forward(1, watching=[print, 3])


def test_all_errors_are_somatize_errors():
    with pytest.raises(SomatizeError):
        Graph.somatize(Add().named("x") >> Add().named("x"))


# --- fingerprints -------------------------------------------------------------------------


def test_fingerprints_cover_frozen_nodes_and_change_with_attributes_and_code():
    g = Graph.somatize(Add(1).named("a").frozen() >> Double().named("b"))
    fp = g.fingerprints()
    assert list(fp) == ["a"] and fp["a"].startswith("sha256:") and len(fp["a"]) == 71
    assert Graph.somatize(Add(1).named("a").frozen()).fingerprints() == fp
    assert Graph.somatize(Add(2).named("a").frozen()).fingerprints() != fp

    class Add2(Node):  # same shape, other code
        def __init__(self, k=1):
            self.k = k

        def forward(self, x, ctx):
            return x - self.k

    assert Graph.somatize(Add2(1).named("a").frozen()).fingerprints() != fp


def test_an_opaque_inside_a_structure_is_refused_naming_the_fix():
    class Mixed(Node):
        def forward(self, x, ctx):
            return [Opaque(object()), x]

    with pytest.raises(TypeError, match=r"output of node 'mixed' holds an Opaque inside.*Opaque\(whole_structure\)"):
        Graph.somatize(Mixed()).forward(1)
    with pytest.raises(TypeError, match="the graph's input holds an Opaque inside"):
        Graph.somatize(Bare()).forward({"a": Opaque(1)})


def test_a_dict_with_a_key_that_is_not_a_string_is_refused_naming_the_fix():
    class Keys(Node):
        def forward(self, x, ctx):
            return {1: x}

    with pytest.raises(TypeError, match=r"non-string key 1.*str\(k\).*Opaque\(d\)"):
        Graph.somatize(Keys()).forward(1)
    with pytest.raises(TypeError, match=r"fan-out dict keys must be strings.*\{'name': node"):
        Graph.somatize(Add() >> {1: Double()})


def test_a_watcher_failing_inside_ctx_fact_is_a_watcher_error_not_the_nodes(tmp_path):
    class Talk(Node):
        def forward(self, x, ctx):
            ctx.fact("norm", value=1.0)
            return x

    def refuse(fact):
        raise OSError("no space left")

    for node in (Talk(), Talk().frozen().cached()):  # a cached node runs on its own path
        with pytest.raises(WatcherError, match="refuse.*no space left"):
            Graph.somatize(node).forward(1, store=tmp_path, watching=refuse)


def test_a_fact_value_that_is_a_0d_array_becomes_its_number():
    class Norm(Node):
        def forward(self, x, ctx):
            ctx.fact("norm", value=np.linalg.norm(x), scale=np.float32(2.0), shape=[1, 2])
            return x

    seen = []
    Graph.somatize(Norm()).forward(np.array([3.0, 4.0]), watching=seen.append)
    fact = seen[0]
    assert fact["value"] == 5.0 and type(fact["value"]) is float
    assert type(fact["scale"]) is float and fact["shape"] == [1, 2]


def test_a_fact_name_that_could_not_name_a_curve_is_refused():
    class Loud(Node):
        def forward(self, x, ctx):
            ctx.fact("é" * 90, value=1.0)

    with pytest.raises(NodeError, match="short name"):
        Graph.somatize(Loud()).forward(1, watching=print)


RECORDS_OWN = ["ran", "recalled", "kept", "finished", "failed", "updated", "loss", "trainer_us", "wall_s",
               "objective_us", "backward_us", "update_us"]


@pytest.mark.parametrize("name", RECORDS_OWN)
def test_a_node_may_not_say_a_fact_the_record_counts_runs_and_times_by(name):
    # ctx.fact("ran", took_us=10**6) made nodes() report two runs and a
    # second of time for one forward; ctx.fact("loss", ...) fed the loss curve.
    class Liar(Node):
        def forward(self, x, ctx):
            ctx.fact(name, took_us=10**6, value=1.0)
            return x

    seen = []
    with pytest.raises(NodeError, match=f"'{name}' is one of the (engine|Trainer)'s own facts") as e:
        Graph.somatize(Liar().named("liar")).forward(1, watching=seen.append)
    assert f"ctx.fact('liar_{name}', ...)" in str(e.value)  # what to write instead
    assert [f["fact"] for f in seen] == ["failed"]  # nothing of the node's reached the watchers
    with pytest.raises(NodeError, match="own facts"):
        Graph.somatize(Liar()).forward(1)  # refused with no watchers too: the code is wrong either way


def test_a_node_may_not_put_its_fact_under_another_nodes_name():
    class Other(Node):
        def forward(self, x, ctx):
            ctx.fact("norm", node="head", value=1.0)
            return x

    with pytest.raises(NodeError, match="'node' is filled in by the engine.*'body'"):
        Graph.somatize(Other().named("body")).forward(1, watching=print)


def test_a_codec_found_along_the_mro_and_one_registered_later_wins_its_type():
    from somatize._base.codecs import codec_for

    class Base:
        pass

    class Child(Base):
        pass

    class ForBase:
        name, types, explicit = "test-base", (Base,), False

        def encode(self, v):
            return {}, []

        def decode(self, meta, buffers):
            return Base()

    class ForChild(ForBase):
        name, types = "test-child", (Child,)

    base = register_codec(ForBase())
    assert codec_for(Child()) is base  # found through the MRO, before any codec for Child
    child = register_codec(ForChild())  # registered at run time: the lookup sees it at once
    assert codec_for(Child()) is child and codec_for(Base()) is base
    class Other:
        pass

    again = register_codec(type("ForBaseAgain", (ForBase,), {"types": (Other,)})())  # name "test-base" again
    assert codec_for(Base()) is None and codec_for(Child()) is child  # the replaced codec's types go with it
    assert codec_for(Other()) is again


def test_a_codec_whose_types_are_not_classes_is_refused_naming_it():
    class Wrong:
        name, types = "test-wrong", ("numpy.ndarray",)

        def encode(self, v):
            return {}, []

        def decode(self, meta, buffers):
            return None

    with pytest.raises(SomatizeError, match="'test-wrong' lists 'numpy.ndarray' in `types`, which is not a class"):
        register_codec(Wrong())
