"""compare(store, where=, metric=): the explorer's brushes are a query and
its selection that query's answer. Brushes are moved as the front end moves
them (bqplot's selector traits: `brushing`, then `selected`), and what the
explorer says is checked against runs(store, where=explorer.where) and
against the runs' own config; its static picture is read off its SVG."""

import json
import math
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from somatize import QueryError, Recorder, SomatizeError, Store
from somatize.record import compare, runs

from pictures import SVG, parse, svg_markup, text_of

ROOT = Path(__file__).resolve().parents[1]
OPTS = ("adam", "sgd", "rmsprop")


def final_loss(lr):
    """The metric of the sweep: decided by lr alone (lower lr, lower loss)."""
    return 0.05 + (math.log10(lr) + 4)  # 1e-4 -> 0.05, 1e-1 -> 3.05


def sweep(path, count, seed=0, missing_batch=()):
    """``count`` runs: lr decides the loss; opt and seed are drawn at random;
    ``steps`` is the same in every run (so it is no axis); the runs named in
    ``missing_batch`` have no batch key."""
    store = Store(path)
    rng = random.Random(seed)
    for k in range(count):
        run = f"r{k:04d}"
        lr = 10 ** rng.uniform(-4, -1)
        config = {"lr": lr, "opt": rng.choice(OPTS), "seed": rng.randrange(5), "steps": 4}
        if run not in missing_batch:
            config["batch"] = rng.choice([16, 32, 64])
        with Recorder(store, run=run, config=config) as r:
            for i in range(4):
                r.forward_began()
                r({"fact": "loss", "value": final_loss(lr) + 1.0 / (i + 1) - 0.25})
    return store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return sweep(tmp_path_factory.mktemp("sweep") / "s", 40, missing_batch={"r0003", "r0007"})


def brush(explorer, column, extent):
    """Drag a brush on ``column``'s axis as the page does: brushing, the
    extent, brushing done (bqplot's BrushIntervalSelector traits)."""
    view = explorer._view
    selector = view.selectors[explorer.axes.index(column)]
    selector.brushing = True
    selector.selected = np.array(extent, dtype=np.float64)
    selector.brushing = False


def config(store):
    table = runs(store).set_index("run")
    return {run: row for run, row in table.iterrows()}


def place_log(v, lo, hi):
    return (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))


def test_axes_are_the_keys_that_vary_ordered_by_rank_correlation_with_the_metric(store):
    explorer = compare(store, metric="loss.best")
    assert explorer.axes[0] == "loss.best"
    assert set(explorer.axes[1:]) == {"config.lr", "config.opt", "config.seed", "config.batch"}  # not steps
    assert explorer.axes[1] == "config.lr"  # it decides the loss
    assert explorer.importance["config.lr"] == pytest.approx(1.0)
    values = list(explorer.importance.values())
    assert values == sorted(values, reverse=True)
    assert all(v < 0.6 for k, v in explorer.importance.items() if k != "config.lr")


def test_ordering_follows_the_key_that_decides_the_metric(tmp_path):
    s = Store(tmp_path / "s")
    rng = random.Random(3)
    for k in range(30):
        width = rng.choice([8, 16, 32, 64])
        with Recorder(s, run=f"r{k}", config={"lr": 10 ** rng.uniform(-4, -1), "width": width,
                                              "act": rng.choice(["relu", "tanh"])}) as r:
            r.forward_began()
            r({"fact": "loss", "value": 100.0 / width + rng.random() * 1e-3})
    explorer = compare(s)
    assert explorer.axes[1] == "config.width"
    assert explorer.importance["config.width"] > 0.95 > max(explorer.importance["config.lr"],
                                                            explorer.importance["config.act"])


def test_a_brush_on_an_axis_is_a_query_whose_answer_is_the_selection(store):
    explorer = compare(store)
    explorer.widget()
    lrs = {run: row["config.lr"] for run, row in config(store).items()}
    lo, hi = min(lrs.values()), max(lrs.values())
    brush(explorer, "config.lr", [0.25, 0.6])
    assert explorer.where.startswith("config.lr >= ") and " and config.lr <= " in explorer.where
    chosen = set(explorer.selected["run"])
    assert chosen == set(runs(store, where=explorer.where)["run"])
    inside = {run for run, lr in lrs.items() if 0.25 <= place_log(lr, lo, hi) <= 0.6}
    assert inside and inside <= chosen  # the bounds are rounded outward, never in
    assert all(0.25 - 1e-3 <= place_log(lrs[run], lo, hi) <= 0.6 + 1e-3 for run in chosen)
    assert list(explorer.selected.columns) == list(runs(store, where=explorer.where).columns)


def test_two_brushes_intersect_and_a_set_of_values_is_asked_with_in(store):
    explorer = compare(store)
    explorer.widget()
    brush(explorer, "config.lr", [0.0, 0.7])
    axis = explorer.axis_list[explorer.axes.index("config.opt")]
    spots = dict(zip(axis.categories, np.linspace(0, 1, len(axis.categories))))
    brush(explorer, "config.opt", [spots["adam"] - 0.1, spots["adam"] + 0.1])
    assert 'config.opt in ["adam"]' in explorer.where
    chosen = set(explorer.selected["run"])
    assert chosen == set(runs(store, where=explorer.where)["run"])
    table = config(store)
    assert chosen and all(table[run]["config.opt"] == "adam" for run in chosen)
    assert chosen < set(runs(store, where='config.opt == "adam"')["run"])  # lr cut some adam runs out


def test_clearing_a_brush_drops_its_part_of_the_query(store):
    explorer = compare(store)
    explorer.widget()
    brush(explorer, "config.lr", [0.1, 0.5])
    brush(explorer, "config.seed", [0.0, 0.3])
    view = explorer._view
    view.selectors[explorer.axes.index("config.lr")].selected = None  # a click beside the brush
    assert "config.lr" not in explorer.where and "config.seed" in explorer.where
    assert set(explorer.selected["run"]) == set(runs(store, where=explorer.where)["run"])
    view.selectors[explorer.axes.index("config.seed")].selected = None
    assert explorer.where is None and len(explorer.selected) == len(runs(store))


def test_a_run_without_the_key_is_below_the_axis_and_no_brush_selects_it(store):
    explorer = compare(store)
    explorer.widget()
    axis = explorer.axis_list[explorer.axes.index("config.batch")]
    names = [r["run"] for r in explorer.rows]
    assert [names[i] for i in np.flatnonzero(axis.places < 0)] == ["r0003", "r0007"]
    brush(explorer, "config.batch", [-0.2, 1.0])  # the whole axis and the runs below it
    assert {"r0003", "r0007"}.isdisjoint(explorer.selected["run"])
    assert len(explorer.selected) == 38


def test_setting_where_moves_the_brushes_and_keeps_the_text(store):
    explorer = compare(store)
    explorer.widget()
    view = explorer._view
    lrs = [row["config.lr"] for row in config(store).values()]
    lo, hi = min(lrs), max(lrs)
    explorer.where = 'config.lr >= 0.001 and config.lr < 0.01 and config.opt in ["sgd", "rmsprop"]'
    assert explorer.where == 'config.lr >= 0.001 and config.lr < 0.01 and config.opt in ["sgd", "rmsprop"]'
    extent = view.selectors[explorer.axes.index("config.lr")].selected
    assert list(extent) == pytest.approx([place_log(0.001, lo, hi), place_log(0.01, lo, hi)])
    axis = explorer.axis_list[explorer.axes.index("config.opt")]
    spots = dict(zip(axis.categories, np.linspace(0, 1, 3)))
    foot, top = view.selectors[explorer.axes.index("config.opt")].selected
    assert foot < spots["rmsprop"] and spots["sgd"] < top and not foot < spots["adam"] < top
    assert view.selectors[0].selected is None  # the metric is not asked
    assert set(explorer.selected["run"]) == set(runs(store, where=explorer.where)["run"])
    explorer.where = None
    assert all(s.selected is None for s in view.selectors) and len(explorer.selected) == 40


def test_where_that_brushes_cannot_draw_is_refused_naming_what_to_write(store):
    explorer = compare(store)
    with pytest.raises(SomatizeError, match="joined by 'and'"):
        explorer.where = "config.lr < 0.01 or config.seed == 1"
    with pytest.raises(SomatizeError, match="config.steps is not an axis"):
        explorer.where = "config.steps == 4"
    with pytest.raises(SomatizeError, match="cannot be drawn as a brush"):
        explorer.where = "config.lr != 0.01"
    with pytest.raises(QueryError, match="character 10"):
        explorer.where = "config.lr = 0.01"
    assert explorer.where is None


def test_compare_where_begins_every_query_and_the_answer_stays_runs_where(store):
    explorer = compare(store, where='config.opt != "sgd"')
    explorer.widget()
    assert set(explorer.selected["run"]) == set(runs(store, where='config.opt != "sgd"')["run"])
    brush(explorer, "loss.best", [0.0, 0.5])
    assert explorer.where.startswith('(config.opt != "sgd") and loss.best >= ')
    assert set(explorer.selected["run"]) == set(runs(store, where=explorer.where)["run"])
    explorer.where = '(config.opt != "sgd") and config.seed <= 2'
    assert set(explorer.selected["run"]) == set(runs(store, where=explorer.where)["run"])
    explorer.where = "config.seed <= 2"  # the explorer's own where is kept in front
    assert explorer.where == '(config.opt != "sgd") and config.seed <= 2'


def test_lines_are_one_a_run_up_to_the_threshold_and_sent_as_such(store):
    explorer = compare(store)
    explorer.widget()
    gaps = explorer.lines()
    assert len(gaps) == len(explorer.axes) - 1 and all(len(g[0]) == 40 for g in gaps)
    view = explorer._view
    mark = view.marks[0][0]
    assert np.asarray(mark.y).shape == (40, 2)
    # the stroke width is the page's CSS, for this view alone: to bqplot it is 0, so no plot area is inset
    assert all(m.stroke_width == 0 for marks in view.marks for m in marks.values())
    assert view._class in view.box._dom_classes
    assert (f".{view._class} .somatize-explorer-axis path.line {{ stroke-width: {explorer.picture_width():g}px "
            "!important; }") in view.head.value
    other = compare(store)
    other.widget()
    assert other._view._class != view._class  # two explorers in one notebook keep their own widths


def test_above_the_threshold_lines_are_binned_densities(tmp_path):
    from somatize._widgets._compare import BINS, DENSE_ABOVE

    s = sweep(tmp_path / "s", DENSE_ABOVE + 50, seed=1)
    explorer = compare(s)
    explorer.widget()
    first = explorer.axis_list[0].places
    second = explorer.axis_list[1].places
    pairs = {(min(int(a * BINS), BINS - 1), min(int(b * BINS), BINS - 1)) for a, b in zip(first, second)}
    foot, top, color, opacity = explorer.lines()[0]
    assert len(foot) == len(pairs) < DENSE_ABOVE  # one line a pair of bins holding runs
    assert opacity.max() == pytest.approx(0.9) and opacity.min() < 0.5  # by count
    assert np.asarray(explorer._view.marks[1][0].y).shape == (len(pairs), 2)  # what the page is sent
    brush(explorer, "config.lr", [0.0, 0.3])
    assert set(explorer.selected["run"]) == set(runs(s, where=explorer.where)["run"])
    foot, top, color, opacity = explorer.lines()[0]
    assert (color == "#9ca3af").any() and (color != "#9ca3af").any()  # outside the selection, and inside


def test_the_static_picture_shows_the_axes_ticks_brushes_and_curves(store):
    explorer = compare(store)
    explorer.widget()
    brush(explorer, "config.lr", [0.2, 0.5])
    html = explorer._repr_mimebundle_()["text/html"]
    assert "<script" not in html and 'src="data:image/svg+xml;base64,' in html
    root = parse(html)
    labels = [text_of(t) for t in root.iter(f"{SVG}text") if t.get("class") == "axis-label"]
    assert labels == ["loss.best", "lr", *[a.split(".", 1)[1] for a in explorer.axes[2:]]]
    notes = [text_of(t) for t in root.iter(f"{SVG}text") if t.get("class") == "axis-note"]
    assert notes[0] == "metric" and notes[1] == "|ρ| 1.00"
    ticks = [text_of(t) for t in root.iter(f"{SVG}text") if t.get("class") == "tick"]
    assert {"adam", "rmsprop", "sgd", "no value"} <= set(ticks)
    assert len([r for r in root.iter(f"{SVG}rect") if r.get("class") == "brush"]) == 1
    curves = [p for p in root.iter(f"{SVG}polyline") if p.get("class") == "curve"]
    assert len(curves) == min(20, len(explorer.selected))
    markup = svg_markup(html)
    assert f"loss of the {len(explorer.selected)} selected runs" in html or "selected runs with the lowest" in html
    assert "run-lines" in markup


def test_a_metric_no_run_has_is_refused_naming_the_columns(store):
    with pytest.raises(SomatizeError, match=r"metric='acc.best'.*loss\.best"):
        compare(store, metric="acc.best")


def test_a_dense_set_of_values_labels_every_kth_tick_and_long_values_are_cut(tmp_path):
    """The page's tick labels have room one above the other (a set of 40
    values labels every k-th, each label a tick's height apart at least) and
    a long value is cut with an ellipsis; every value keeps its tick, and
    the columns are one width, enough for the longest label kept."""
    from somatize._widgets._compare_view import HEIGHT, LABEL_MOST, TICK_FONT, _key

    store = Store(tmp_path / "s")
    for k in range(80):
        with Recorder(store, run=f"d{k:02d}", config={"data": f"shard-{k % 40:02d}-of-a-long-name",
                                                      "lr": 0.01 * (k + 1)}) as r:
            r.forward_began()
            r({"fact": "loss", "value": float(k)})
    explorer = compare(store)
    explorer.widget()
    view = explorer._view
    i = explorer.axes.index("config.data")
    axis = view.columns[i].axes[0]
    ticks = explorer.axis_list[i].ticks
    assert len(axis.tick_values) == 40 and set(axis.tick_labels) == {_key(p) for p, _ in ticks}
    assert set(axis.tick_labels.values()) == {""}  # the axis draws ticks; their labels are a mark over the lines
    (labels,) = view.ticks[i].marks  # a figure of their own, laid over the lines' (drawn over them)
    shown = sorted(float(p) for p in labels.y)
    assert set(shown) <= {float(p) for p, _ in ticks} and set(labels.x) == {float(i)}
    pixels = int(HEIGHT[:-2]) - 16
    assert 2 <= len(shown) <= pixels // (TICK_FONT + 4)
    assert min(b - a for a, b in zip(shown, shown[1:])) * pixels >= TICK_FONT + 4  # no two labels overlap
    texts = list(labels.text)
    assert all(len(t) <= LABEL_MOST and t.endswith("…") for t in texts)
    widths = {stack.layout.min_width for stack in view.stacks}
    assert len(widths) == 1 and int(widths.pop()[:-2]) >= LABEL_MOST * 0.58 * TICK_FONT / 0.6


def test_a_brush_over_a_whole_log_axis_of_large_integers_keeps_its_ends(tmp_path):
    """A brush from the foot to the top of an axis selects every run with a
    value: on a log axis of whole numbers, 10 ** log10(n) is not n for a
    large n, and the bound written must still hold n."""
    store = Store(tmp_path / "s")
    widths = [3, 40, 500, 7_000, 12_345_678, 99_999_999, 123_456_789_012]
    for i, w in enumerate(widths):
        with Recorder(store, run=f"r{i}", config={"width": w}) as r:
            r.forward_began()
            r({"fact": "loss", "value": 1.0 / (i + 1)})
    explorer = compare(store)
    axis = explorer.axis_list[explorer.axes.index("config.width")]
    assert axis.log and axis.whole
    for extent in ([0.0, 1.0], [-0.2, 1.3]):
        explorer.brush(explorer.axes.index("config.width"), extent)
        assert explorer.where == "config.width >= 3 and config.width <= 123456789012"
        assert sorted(explorer.selected["run"]) == sorted(runs(store, where=explorer.where)["run"]) == \
            [f"r{i}" for i in range(len(widths))]
    explorer.brush(explorer.axes.index("config.width"), [axis.place(40), axis.place(99_999_999)])
    assert sorted(explorer.selected["run"]) == ["r1", "r2", "r3", "r4", "r5"]


def test_a_where_that_reads_otherwise_with_the_base_in_parentheses_is_refused(store):
    """compare(where=A or B): a where set as "A or B and C" means A or (B and
    C), not (A or B) and C; it is refused (the brushes draw no 'or'), never
    answered as the other query."""
    base = 'config.opt == "adam" or config.opt == "sgd"'
    explorer = compare(store, where=base)
    text = f"{base} and config.seed <= 1"
    with pytest.raises(SomatizeError, match="joined by 'and'"):
        explorer.where = text
    assert explorer.where is None or explorer.where == base
    assert set(explorer.selected["run"]) == set(runs(store, where=base)["run"])
    # the base in parentheses, or a base with no 'or', is still taken off the front
    explorer.where = f"({base}) and config.seed <= 1"
    assert explorer.where == f"({base}) and config.seed <= 1"
    assert set(explorer.selected["run"]) == set(runs(store, where=explorer.where)["run"])
    plain = compare(store, where='config.opt != "sgd"')
    plain.where = 'config.opt != "sgd" and config.seed <= 1'
    assert plain.where == '(config.opt != "sgd") and config.seed <= 1'


def test_a_brush_over_an_axis_of_uint64_seeds_reads_and_selects(tmp_path):
    """Seeds recorded as uint64 (up to 2**64 - 1, as a Recorder takes them):
    a brush up to the top of their axis wrote a query that did not read."""
    store = Store(tmp_path / "s")
    for i, seed in enumerate([5, (1 << 63) + 7, (1 << 64) - 1]):
        with Recorder(store, run=f"r{i}", config={"seed": seed}) as r:
            r.forward_began()
            r({"fact": "loss", "value": 1.0 + i})
    explorer = compare(store)
    explorer.brush(explorer.axes.index("config.seed"), [0.0, 1.0])
    assert explorer.where == f"config.seed >= 5 and config.seed <= {(1 << 64) - 1}"
    assert sorted(explorer.selected["run"]) == sorted(runs(store, where=explorer.where)["run"]) == ["r0", "r1", "r2"]
    explorer.brush(explorer.axes.index("config.seed"), [0.5, 1.0])
    assert sorted(explorer.selected["run"]) == sorted(runs(store, where=explorer.where)["run"]) == ["r1", "r2"]


def test_a_config_key_no_query_can_name_is_no_axis(tmp_path):
    """A key with a backtick or a tab, or a part of over 200 characters that
    is not a bare name, cannot be written in a query: its axis's brush raised
    QueryError, and left every later brush (on any axis) raising too."""
    store = Store(tmp_path / "s")
    long = "y" * 201 + " z"
    for i in range(4):
        with Recorder(store, run=f"r{i}", config={"a`b": i, "tab\there": i, long: i, "ok key": i, "lr": i}) as r:
            r.forward_began()
            r({"fact": "loss", "value": 1.0 + i})
    explorer = compare(store)
    assert explorer.axes[0] == "loss.best" and set(explorer.axes[1:]) == {"config.ok key", "config.lr"}
    for column in explorer.axes:
        explorer.brush(explorer.axes.index(column), [0.0, 0.5])
        assert sorted(explorer.selected["run"]) == sorted(runs(store, where=explorer.where)["run"])
    assert sorted(explorer.selected["run"]) == ["r0", "r1"]


def test_compare_own_where_is_the_explorers_where_before_any_brush(store):
    """compare(store, where=q).where is q until a brush moves (the docstring
    says every brush's query begins with it; no brush, it is the query)."""
    query = 'config.opt != "sgd" and config.seed <= 3'
    explorer = compare(store, where=query)
    assert explorer.where == query
    assert set(explorer.selected["run"]) == set(runs(store, where=explorer.where)["run"])
    assert f"where={query!r}" in repr(explorer)
    explorer.brush(explorer.axes.index("loss.best"), [0.0, 0.5])
    explorer.brush(explorer.axes.index("loss.best"), None)  # cleared: back to compare's own
    assert explorer.where == query


# Past 2**53 a float's spacing is wider than a tick's step: a tick stepped by
# `t += step` stood still, and compare() never returned while its memory grew.
# Each case runs in a child whose memory is bounded (an unbounded list ends in
# MemoryError) and guarded against a hang, so a failure fails the test and not
# the suite.
GUARD_S = 120  # a guard against hangs, not a measurement
MEMORY_CAP = 1 << 30  # RLIMIT_AS of the child: four times what compare() takes

BOUNDED = textwrap.dedent(r"""
    import json, resource, sys
    cap = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    exec(sys.argv[2])
""")


def bounded(code, *args):
    """What ``code`` prints as JSON, run in a child under ``MEMORY_CAP``
    (``args`` in its ``sys.argv[3:]``)."""
    try:
        done = subprocess.run([sys.executable, "-c", BOUNDED, str(MEMORY_CAP), textwrap.dedent(code), *args],
                              capture_output=True, text=True, timeout=GUARD_S, check=False,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"no answer in {GUARD_S} s: a loop without bound")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


BIG = [(2**53 + 1, 2**53 + 3), (2**60, 2**60 + 64 * 3), (2**60, 2**60 + 64 * 9), (-(2**60) - 192, -(2**60)),
       (2**63 - 1, 2**63 + 2000), (1e17, 1e17 + 16), (1e300, 1e300 * (1 + 4e-16))]


def test_ticks_past_2_53_are_few_and_increasing():
    got = bounded("""
        from somatize._pictures import _chart
        print(json.dumps([[_chart.ticks(float(lo), float(hi), count, whole=whole) for count in (4, 5, 6)
                           for whole in (True, False)] for lo, hi in json.loads(sys.argv[3])]))
    """, json.dumps(BIG))
    for (lo, hi), lists in zip(BIG, got):
        lo, hi = float(lo), float(hi)
        for values in lists:
            assert 1 <= len(values) <= 8, (lo, hi, values)
            assert all(a < b for a, b in zip(values, values[1:])), (lo, hi, values)
            assert all(lo - (hi - lo) <= t <= hi for t in values), (lo, hi, values)
            if hi > lo:
                assert len(values) >= 2, (lo, hi, values)


@pytest.mark.parametrize("seeds", [[2**53 + 1, 2**53 + 3], [2**60 + 64 * k for k in range(4)],
                                   [2**63 - 1, 2**63 + 1000, 2**63 + 2000]])
def test_compare_over_config_ints_past_2_53_returns_and_draws_them_at_their_float_place(tmp_path, seeds):
    store = Store(tmp_path / "s")
    for i, seed in enumerate(seeds):
        with Recorder(store, run=f"r{i}", config={"seed": seed}) as r:
            r.forward_began()
            r({"fact": "loss", "value": 1.0 + i})
    got = bounded("""
        from somatize.record import compare
        explorer = compare(sys.argv[3])
        i = explorer.axes.index("config.seed")
        axis = explorer.axis_list[i]
        picture = explorer.to_html()
        explorer.brush(i, [0.0, 1.0])
        print(json.dumps({"ticks": axis.ticks, "places": axis.places.tolist(), "where": explorer.where,
                          "selected": sorted(explorer.selected["run"]), "picture": picture}))
    """, str(store.path))
    lo, hi = float(min(seeds)), float(max(seeds))
    assert got["places"] == [(float(s) - lo) / (hi - lo) for s in seeds]  # each at its float's place
    places = [p for p, _ in got["ticks"]]
    labels = [label for _, label in got["ticks"]]
    assert 2 <= len(places) <= 6 and all(a < b for a, b in zip(places, places[1:]))
    assert all(-1e-9 <= p <= 1 + 1e-9 for p in places) and len(set(labels)) == len(labels)
    assert got["where"] == f"config.seed >= {min(seeds)} and config.seed <= {max(seeds)}"  # exact ends
    assert got["selected"] == [f"r{i}" for i in range(len(seeds))]
    shown = [text_of(t) for t in parse(got["picture"]).iter(f"{SVG}text") if t.get("class") == "tick"]
    assert set(labels) <= set(shown)
