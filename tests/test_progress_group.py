"""progress(store, where=..., group="config.lr"): seeds of one configuration
drawn as one line (their mean) in a band from their min to their max, read
off the static picture through its axes' tick labels and compared with the
runs' own curves."""

import math

import numpy as np
import pytest

from somatize import QueryError, Recorder, SomatizeError, Store
from somatize.record import curve, progress

from pictures import SVG, _scale, parse, text_of, ticks

SWEEP = {  # run: (lr, seed, steps)
    "lr0.01-s0": (0.01, 0, 30), "lr0.01-s1": (0.01, 1, 30), "lr0.01-s2": (0.01, 2, 20),
    "lr0.1-s0": (0.1, 0, 30), "lr0.1-s1": (0.1, 1, 30),
    "lr1-s0": (1.0, 0, 30),
}


def loss(lr, seed, i):
    return 2.0 / (1 + lr * 10 * i) + 0.3 * math.sin(seed * 2.1 + i / 3) ** 2


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "s")
    for run, (lr, seed, steps) in SWEEP.items():
        with Recorder(s, run=run, config={"lr": lr, "seed": seed}) as r:
            for i in range(steps):
                r.forward_began()
                r({"fact": "loss", "value": float("nan") if (run, i) == ("lr0.1-s1", 7) else loss(lr, seed, i)})
    return s


def bands(picture):
    """[(legend text, [(step, low, high)], [(step, mean)])] read off the
    picture, y in the axis's own space (log10 of the loss on a log axis),
    with that space's function and what a reading may be off by (0.2 px)."""
    svg = parse(picture.to_html()).find(f".//{SVG}svg")
    log = any("(log scale)" in text_of(t) for t in svg.iter(f"{SVG}text"))
    x_of, _ = _scale(ticks(svg, "middle"), False)
    y_of, per = _scale(ticks(svg, "end"), log)
    polygons = list(svg.iter(f"{SVG}polygon"))
    lines = [p for p in svg.iter(f"{SVG}polyline") if p.get("class") == "curve"]
    rects = [r for r in svg.iter(f"{SVG}rect") if r.get("height") == "3"]
    names = [text_of(t) for t in svg.iter(f"{SVG}text") if t.get("class") != "tick"][-len(rects):]
    out = []
    for name, polygon, line in zip(names, polygons, lines):
        points = [tuple(map(float, p.split(","))) for p in polygon.get("points").split()]
        half = len(points) // 2
        upper, lower = points[:half], points[half:][::-1]
        band = [(x_of(ux), y_of(ly), y_of(uy)) for (ux, uy), (_, ly) in zip(upper, lower)]
        drawn = (tuple(map(float, p.split(","))) for p in line.get("points").split())
        mean = [(x_of(px), y_of(py)) for px, py in drawn]
        out.append((name, band, mean))
    return out, (math.log10 if log else float), 0.2 / per


def test_each_group_is_its_runs_mean_in_a_band_from_their_min_to_their_max(store):
    picture = progress(store, where="config.lr < 0.5", group="config.lr")
    got, f, off = bands(picture)
    assert [name for name, _, _ in got] == ["config.lr=0.01 (lr0.01-s0, lr0.01-s1, lr0.01-s2)",
                                            "config.lr=0.1 (lr0.1-s0, lr0.1-s1)"]
    for (name, band, mean), members in zip(got, (["lr0.01-s0", "lr0.01-s1", "lr0.01-s2"], ["lr0.1-s0", "lr0.1-s1"])):
        curves = [curve(store, run).to_numpy() for run in members]
        assert len(band) == 30 and len(mean) == 30, name  # the longest run's steps
        for (x, low, high), (mx, m) in zip(band, mean):
            step = round(x)
            assert abs(x - step) < 0.05 and abs(mx - x) < 0.05
            at = [c[step] for c in curves if step < len(c) and np.isfinite(c[step])]
            assert abs(low - f(min(at))) <= off and abs(high - f(max(at))) <= off, (name, step)
            assert abs(m - f(sum(at) / len(at))) <= off, (name, step)
    assert len(got) == 2  # lr=1 is not asked for


def test_a_group_of_one_run_is_its_curve_and_a_run_without_the_key_is_a_group_of_its_own(store):
    with Recorder(store, run="plain") as r:
        for _ in range(30):
            r.forward_began()
            r({"fact": "loss", "value": 1.0})
    got, f, off = bands(progress(store, run=["lr1-s0", "plain"], group="config.lr"))
    assert [name for name, _, _ in got] == ["config.lr=1 (lr1-s0)", "config.lr=— (plain)"]
    c = curve(store, "lr1-s0").to_numpy()
    assert all(abs(low - f(c[round(x)])) <= off and abs(high - f(c[round(x)])) <= off for x, low, high in got[0][1])


def test_where_chooses_the_runs_without_group(store):
    picture = progress(store, where='config.seed == 0 and config.lr >= 0.1')
    assert list(picture.curves) == ["lr0.1-s0", "lr1-s0"]


def test_what_cannot_be_drawn_is_refused_saying_what_to_write(store):
    with pytest.raises(SomatizeError, match="no run of the store matches"):
        progress(store, where="config.lr > 5")
    with pytest.raises(SomatizeError, match="group="):
        progress(store, where="config.lr < 0.5", group="config.lr", color_by="seed")
    with pytest.raises(SomatizeError, match="config.lr.*config.seed"):
        progress(store, where="config.lr < 0.5", group="config.batch")
    with pytest.raises(SomatizeError, match="run="):
        progress(store)
    with pytest.raises(QueryError):
        progress(store, where="config.lr <")
