"""An evaluation in the panels, read from what is rendered: Live and
progress draw val_* beside the loss with no extra argument, each point at the
step it was said at; spent shows the evaluations' time apart."""

import pytest
from test_trainer_evaluate import data, graph, trainer

from somatize import Recorder, Store
from somatize.record import Live, curve, progress, spent

from pictures import PIXEL, SVG, _scale, durations, fill_of, parse, text_of, ticks

EVALUATED_AFTER = (4, 9)  # step indexes after which the run evaluates (and once before any step)


def run(tmp_path, *watchers, name="r"):
    """A recorded run of 12 steps evaluated before training and after steps 4 and 9."""
    store = Store(tmp_path / "s")
    val = data([8, 8], seed=4)
    said = []
    with Recorder(store, run=name) as rec:
        t = trainer(graph(), watching=[rec, *watchers])
        said.append(t.evaluate(val, metrics=("accuracy",)))
        for i, batch in enumerate(data([16] * 12)):
            t.step(batch)
            if i in EVALUATED_AFTER:
                said.append(t.evaluate(val, metrics=("accuracy",)))
    return store, said


def legend(svg):
    """The legend's names: each text drawn right after its colour's swatch."""
    items = list(svg)
    return [text_of(e) for a, e in zip(items, items[1:])
            if a.tag == f"{SVG}rect" and a.get("height") == "3" and e.tag == f"{SVG}text"]


def dots(svg, color):
    """The (x, y) data values of the dots of one colour, read through the axes' tick labels."""
    x_of, _ = _scale(ticks(svg, "middle"), False)
    y_of, _ = _scale(ticks(svg, "end"), False)
    return [(x_of(float(c.get("cx"))), y_of(float(c.get("cy")))) for c in svg.iter(f"{SVG}circle")
            if c.get("class") == "dot" and fill_of(c) == color]


def color_of(svg, name):
    """The colour of a legend entry: the swatch drawn just before its label."""
    items = list(svg)
    (i,) = [i for i, e in enumerate(items) if e.tag == f"{SVG}text" and text_of(e) == name]
    return fill_of(items[i - 1])


def x_step(svg):
    """How far apart two step readings must be to differ by a pixel."""
    _, per = _scale(ticks(svg, "middle"), False)
    return PIXEL / per


def check_drawn(svg, said):
    assert {"loss", "val_loss", "val_accuracy"} <= set(legend(svg))
    steps = [0, *EVALUATED_AFTER]  # before any step: at step 0
    _, dy = _scale(ticks(svg, "end"), False)
    for name in ("val_loss", "val_accuracy"):
        read = dots(svg, color_of(svg, name))
        assert [x for x, _ in read] == pytest.approx(steps, abs=x_step(svg))
        assert [y for _, y in read] == pytest.approx([s[name] for s in said], abs=PIXEL / dy)


def test_live_draws_an_evaluation_beside_the_loss_unasked_each_at_its_step(tmp_path):
    live = Live()
    _, said = run(tmp_path, live)
    check_drawn(parse(live.to_html()).find(f".//{SVG}svg"), said)


def test_progress_draws_an_evaluation_beside_the_loss_unasked_each_at_its_step(tmp_path):
    store, said = run(tmp_path)
    svg = parse(progress(store, run="r").to_html()).find(f".//{SVG}svg")
    check_drawn(svg, said)
    assert len(svg.findall(f".//{SVG}polyline[@class='curve']")) == 3


def test_progress_of_another_fact_draws_no_evaluation(tmp_path):
    store, _ = run(tmp_path)
    svg = parse(progress(store, run="r", name="trainer_us").to_html()).find(f".//{SVG}svg")
    assert not any("val_" in t for t in legend(svg))


def test_progress_over_several_runs_names_each_runs_evaluation(tmp_path):
    store, _ = run(tmp_path)
    with Recorder(store, run="plain") as rec:
        t = trainer(graph(), watching=rec)
        for batch in data([16] * 3):
            t.step(batch)
    chart = progress(store, run=["r", "plain"]).chart()
    assert [s["name"] for s in chart["series"]] == ["r", "plain", "r val_loss", "r val_accuracy"]


def test_spent_shows_the_evaluations_time_apart_from_training(tmp_path):
    store, _ = run(tmp_path)
    took = curve(store, run="r", name="eval_us")
    assert len(took) == 3
    s = spent(store, run="r")
    (row,) = [r for r in s.rows if r["kind"] == "evaluation"]
    assert (row["total_us"], row["count"]) == (float(took.sum()), 3)
    svg = parse(s.to_html()).find(f".//{SVG}svg")
    items = list(svg)
    bars = {e.get("data-kind"): (i, e) for i, e in enumerate(items) if e.get("class") == "bar"}
    i, bar = bars["evaluation"]
    assert text_of(items[i - 1]).startswith("evaluation")
    assert durations(text_of(items[i + 1])) == pytest.approx([row["total_us"], row["mean_us"]], rel=0.005)
    assert "an evaluation" in text_of(items[i + 1]) and "3 evaluations" in text_of(bar.find(f"{SVG}title"))
    assert fill_of(bar) not in (fill_of(bars["trainer"][1]), fill_of(bars["engine"][1]))
    assert "green: evaluation" in text_of(svg)


def test_a_run_that_never_evaluated_shows_no_evaluation_in_spent(tmp_path):
    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as rec:
        t = trainer(graph(), watching=rec)
        t.step(data([16])[0])
    assert "evaluation" not in [r["kind"] for r in spent(store, run="r").rows]


def test_with_micro_steps_an_evaluation_is_drawn_at_its_step_not_its_forward(tmp_path):
    store = Store(tmp_path / "s")
    with Recorder(store, run="r") as rec:
        t = trainer(graph(), watching=rec, micro=2)  # two forwards a step
        for i, batch in enumerate(data([16] * 5)):
            t.step(batch)
            if i == 2:
                t.evaluate(data([8], seed=4))
    assert curve(store, run="r", name="val_loss").index.tolist() == [5]  # step 2's last forward
    (val,) = [s for s in progress(store, run="r").chart()["series"] if s["name"] == "val_loss"]
    assert [x for x, _ in val["points"]] == [2]
