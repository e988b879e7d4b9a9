"""progress(..., color_by=key): runs of a sweep coloured by what each run was
(its recorded config), read from the picture a person sees: the legend's
text and the colour of the line beside it."""

import pytest

from somatize import Recorder, SomatizeError, Store
from somatize.record import progress

from pictures import SVG, fill_of, parse, text_of


def sweep(tmp_path, configs):
    store = Store(tmp_path / "s")
    for run, config in configs.items():
        with Recorder(store, run=run, config=config) as rec:
            for i in range(20):
                rec.forward_began()
                rec({"fact": "loss", "value": 1.0 / (i + 1)})
    return store


def legend(picture):
    """{legend text: colour of its swatch}, as drawn."""
    svg = parse(picture.to_html()).find(f".//{SVG}svg")
    rects = [r for r in svg.iter(f"{SVG}rect") if r.get("height") == "3"]
    texts = [t for t in svg.iter(f"{SVG}text") if t.get("class") != "tick"][-len(rects):]
    return {text_of(t): fill_of(r) for t, r in zip(texts, rects)}


def test_numbers_go_from_dark_to_light_by_rank_and_the_legend_says_each_value(tmp_path):
    store = sweep(tmp_path, {"fast": {"lr": 0.1}, "slow": {"lr": 0.001}, "mid": {"lr": 0.01}})
    shown = legend(progress(store, run=["fast", "slow", "mid"], color_by="lr"))
    assert set(shown) == {"fast (lr=0.1)", "slow (lr=0.001)", "mid (lr=0.01)"}
    ramp = ["#440154", "#3b528b", "#21918c", "#5ec962", "#b5a000"]
    assert [ramp.index(shown[k]) for k in ("slow (lr=0.001)", "mid (lr=0.01)", "fast (lr=0.1)")] == [0, 2, 4]


def test_other_values_share_a_colour_when_they_are_equal(tmp_path):
    store = sweep(tmp_path, {"a": {"opt": "adam"}, "b": {"opt": "sgd"}, "c": {"opt": "adam"}, "d": {}})
    shown = legend(progress(store, run=["a", "b", "c", "d"], color_by="opt"))
    assert shown["a (opt=adam)"] == shown["c (opt=adam)"] != shown["b (opt=sgd)"]
    assert shown["d (opt=—)"] not in {shown["a (opt=adam)"], shown["b (opt=sgd)"]}  # no value: muted


def test_a_key_no_run_recorded_is_refused_naming_those_recorded(tmp_path):
    store = sweep(tmp_path, {"a": {"lr": 0.1, "seed": 1}})
    with pytest.raises(SomatizeError, match=r"no run of this store has 'batch'.*\['lr', 'seed'\]"):
        progress(store, run=["a"], color_by="batch")
