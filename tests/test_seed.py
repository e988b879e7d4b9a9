"""Every call of the reference notebook, made the way it shows them, with
what each one should give checked. The reference notebook lives outside
this repository, with the team's shared files. Where the reference printed
strings (fact values) or ``{}`` (fingerprints) we check the typed values and
the frozen node's fingerprint instead, as the team's design notes (kept with
those shared files) say."""

import torch

import somatize.torch  # noqa: F401  (registers the tensor codec)
from somatize import Graph, Opaque, Recorder, Store
from somatize._graph.watchers import INSTRUMENT_FACTS
from somatize.record import Live, curve, facts, forwards, nodes, progress, spent
from somatize.torch import Trainer, freeze, parameters

from pictures import svg_markup
from torch_models import Body, Head


def built(width=32, lr=1e-2):
    g = Graph.somatize(Body(width).named("body") >> Head(width).named("head"))
    return g, torch.optim.Adam(parameters(g), lr=lr)


truth = torch.randn(8, 1)


def batch(how_many=64):
    x = torch.randn(how_many, 8)
    return x, x @ truth + 0.1 * torch.randn(how_many, 1)


WIDGET = "application/vnd.jupyter.widget-view+json"


def shown(obj):
    """What a notebook displays for ``obj``: its bundle, which must carry the
    widget and the static picture that readers without widgets see."""
    bundle = obj._repr_mimebundle_()
    if isinstance(bundle, tuple):
        bundle = bundle[0]
    # the picture is an SVG image: JupyterLab's sanitiser keeps it where it strips an inline <svg>
    assert WIDGET in bundle and "data:image/svg+xml;base64," in bundle["text/html"], sorted(bundle)
    return bundle


def test_the_reference_training_run(tmp_path):
    torch.manual_seed(0)
    g, optimizer = built()
    store = Store(tmp_path / "store")
    live = Live(title="training")
    recorder = Recorder(store, run="a-run", summarising=["loss"])
    trainer = Trainer(g, objective=torch.nn.functional.mse_loss, optimizer=optimizer, watching=[recorder, live])
    first = None
    for _ in range(300):
        value = trainer.step(batch())
        first = value if first is None else first
    assert trainer.updates == 300
    assert "300" in shown(live)["text/html"]  # the steps it counted, in the picture

    zero = facts(store, run="a-run", forward=0)
    assert {(f["fact"], f.get("node")) for f in zero if f["fact"] in INSTRUMENT_FACTS} >= {
        ("grad_norm", "body"), ("update_norm", "head"), ("out_zeros", "head"),
    }  # recorded by default (the first updates always), for somatize.diagnose
    ten = [f for f in facts(store, run="a-run", forward=20) if f["fact"] not in INSTRUMENT_FACTS]
    assert [(f["fact"], f.get("node")) for f in ten] == [
        ("ran", "body"), ("ran", "head"), ("finished", None), ("updated", None), ("loss", None),
        ("wall_s", None), ("objective_us", None), ("backward_us", None), ("update_us", None), ("lr", None),
        ("trainer_us", None),
    ]  # forward 20: an update the instruments do not record (so no node's backward_us), whose clocks are said
    assert all(isinstance(f[k], int) for f in ten for k in ("began_us", "took_us") if k in f)
    assert isinstance(ten[4]["value"], float) and isinstance(ten[-1]["value"], int) and ten[-1]["value"] > 0
    assert isinstance(ten[5]["value"], float)  # wall_s: when the step began, seconds since 1970
    assert all(isinstance(f["value"], int) for f in ten[6:9] + ten[10:])  # the step's time and its parts, in µs
    assert ten[9]["value"] == optimizer.param_groups[0]["lr"]  # the learning rate its update used

    losses = curve(store, run="a-run", name="loss")
    assert len(losses) == 300 and float(losses.iloc[-1]) < first / 10  # it learned
    assert len(forwards(store, run="a-run")) == 300
    assert set(nodes(store, run="a-run")["node"]) == {"body", "head"}
    assert "polyline" in svg_markup(shown(progress(store, run="a-run"))["text/html"])  # a drawn curve
    where = spent(store, run="a-run")
    assert {r["kind"] for r in where.rows} == {"node", "engine", "instruments", "trainer"}
    picture = svg_markup(shown(where)["text/html"])
    assert ">body<" in picture and ">head<" in picture  # a labelled bar for each node

    digest = store.keep("a-run/weights", trainer.export())
    assert digest.startswith("sha256:") and len(digest) == 7 + 64
    kept = store.recall("a-run/weights")
    assert sorted(kept) == ["body", "head"]
    for node, named in trainer.export().items():
        for k, t in named.items():
            assert torch.equal(kept[node][k], t)


def test_a_group_of_four_steps_makes_one_update():
    g, optimizer = built()
    seen = []
    grouped = Trainer(g, objective=torch.nn.functional.mse_loss, optimizer=optimizer, every=4, watching=seen.append)
    for _ in range(8):
        grouped.step(batch())
    said = [one["fact"] for one in seen]
    assert (said.count("loss"), said.count("updated")) == (8, 2)


def test_a_frozen_cached_body_runs_once_per_batch(tmp_path):
    frozen_g = Graph.somatize(Body().named("body").frozen().cached() >> Head().named("head"))
    freeze(frozen_g)
    prints = frozen_g.fingerprints()
    assert list(prints) == ["body"] and prints["body"].startswith("sha256:")

    kept = tmp_path / "kept"
    told = []
    said = lambda f: told.append((f["fact"], f.get("node", "")))  # noqa: E731

    same = Opaque(torch.randn(4, 8))
    outs = []
    for _ in ("first time", "same batch again"):
        told.clear()
        outs.append(frozen_g.forward(same, store=kept, watching=said))
        if len(outs) == 1:
            assert told == [("ran", "body"), ("kept", "body"), ("ran", "head"), ("finished", "")]
    assert told == [("recalled", "body"), ("ran", "head"), ("finished", "")]
    assert torch.equal(outs[0], outs[1])
    assert outs[1].grad_fn is not None and outs[1].shape == (4, 1)

    told.clear()
    frozen_g.forward(Opaque(torch.randn(4, 8)), store=kept, watching=said)
    assert told == [("ran", "body"), ("kept", "body"), ("ran", "head"), ("finished", "")]
