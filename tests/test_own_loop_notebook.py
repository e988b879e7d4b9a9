"""notebooks/08-your-own-loop.ipynb runs top to bottom in a real kernel: the
digits CNN trained by a hand-written loop (`rec.log`, `watch`), by Lightning
(`somatize.lightning.Logger`) and by the somatize Trainer (`Module(net)`)
into one store, each run read back as a Trainer's run by the table, the
curves, the explorer, the run browser, `spent` and `diagnose`.

The oracle for the three is each other: the notebook builds them from one
seed and one batch order, so the three records must hold the same losses,
bit for bit, and their evaluations at the same steps. Read from the store
the notebook wrote (it runs in a scratch folder here) and from its outputs
and pictures."""

import math
import re
from pathlib import Path

import nbformat
import pytest
from nbexec import execute

from somatize._server._browse import Browser
from somatize.record import curve, facts, runs, spent

from pictures import svg_markup

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "08-your-own-loop.ipynb"
RUNS = ("loop", "lightning", "trainer")
EPOCH = math.ceil(1437 / 64)  # training images, a batch: 23 steps an epoch
STEPS = 2 * EPOCH  # two epochs
# the watched net's parts, as named_modules() names them: lists looked into, every other module a node
PARTS = [f"features.{i}" for i in range(6)] + [f"classifier.{i}" for i in range(5)]
MEASURED = len([u for u in range(STEPS) if u < 10 or u % 40 == 0])  # the first 10 updates, then one in 40


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The notebook executed in a scratch folder (its store is written there): (nb, outputs by tag, folder)."""
    folder = tmp_path_factory.mktemp("own-loop")
    nb = execute(nbformat.read(NOTEBOOK, as_version=4), folder)
    by_tag = {tag: c.outputs for c in nb.cells for tag in c.metadata.get("tags", [])}
    return nb, by_tag, folder


def text(outputs, name="stdout"):
    return "".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == name)


def shown(outputs):
    return [o.data for o in outputs if o.output_type in ("execute_result", "display_data")]


def labels(bundle):
    """The text of every label in a static picture's SVGs."""
    return re.findall(r">([^<>]+)<", svg_markup(bundle["text/html"]))


def test_notebook_08_runs_without_an_error_and_says_nothing_on_stderr(run):
    nb, _, _ = run
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    # Lightning kept quiet: no banner, no progress bar, no summary, no warning
    assert [text(c.outputs, "stderr") for c in code if text(c.outputs, "stderr")] == []


def test_each_way_ran_its_steps_and_the_table_lists_three_finished_runs(run):
    _, out, folder = run
    assert text(out["loop"]).splitlines()[0] == f"loop: {STEPS} steps"
    assert text(out["lightning"]).strip() == f"lightning: {STEPS} steps"
    assert text(out["trainer"]).strip() == f"trainer: {STEPS} steps"

    rows = [line.split() for line in text(out["runs"]).strip().splitlines()[1:]]
    assert [r[:3] for r in rows] == [[name, "finished", str(STEPS)] for name in RUNS]
    table = runs(folder / "own-loop-store").set_index("run")
    assert sorted(table.index) == sorted(RUNS)
    assert table.loc[list(RUNS), "state"].tolist() == ["finished"] * 3
    assert table.loc[list(RUNS), "steps"].tolist() == [STEPS] * 3
    # the loop's and the Trainer's config as given, Lightning's from save_hyperparameters() and the Logger's own
    assert table.loc[list(RUNS), "config.way"].tolist() == ["torch loop", "lightning", "somatize Trainer"]
    assert table.loc[list(RUNS), "config.lr"].tolist() == [3e-3] * 3


def test_the_three_records_hold_the_same_losses_and_evaluations(run):
    """One seed, one batch order, one dropout stream: the same arithmetic, so the same record."""
    _, out, folder = run
    store = folder / "own-loop-store"
    loss = {name: curve(store, name, "loss") for name in RUNS}
    for name in RUNS:
        assert loss[name].index.tolist() == list(range(STEPS))  # one forward a step, numbered from 0
        assert loss[name].tolist() == loss["loop"].tolist()
        for metric in ("val_loss", "val_accuracy"):
            said = curve(store, name, metric)  # after each epoch, at its last step
            assert said.index.tolist() == [EPOCH - 1, STEPS - 1]
            # the loop and Lightning average in float32, the Trainer in float64
            assert said.tolist() == pytest.approx(curve(store, "loop", metric).tolist(), rel=1e-6)
    assert loss["loop"].iloc[-1] < loss["loop"].iloc[0] / 2  # it learned
    assert curve(store, "loop", "val_accuracy").iloc[-1] > 0.9
    said = text(out["same"]).strip().splitlines()
    assert said == [f"{name}: {STEPS} steps, largest difference from the loop's loss: 0.0"
                    for name in ("lightning", "trainer")]


def test_the_curves_and_the_explorer_show_the_three_runs(run):
    _, out, _ = run
    (progress,) = shown(out["progress"])
    assert all(f"'{name}': {STEPS} steps" in progress["text/plain"] for name in RUNS)
    drawn = labels(progress)
    assert set(RUNS) <= set(drawn)  # the legend
    assert {f"{name} {metric}" for name in RUNS for metric in ("val_loss", "val_accuracy")} <= set(drawn)

    (explorer,) = shown(out["compare"])
    assert explorer["text/plain"].startswith("compare(3 runs, metric 'val_accuracy.last', axes ['config.way']")
    drawn = labels(explorer)
    assert {"way", "val_accuracy.last", "torch loop", "lightning", "somatize Trainer"} <= set(drawn)


def test_the_run_browser_lists_the_store_beside_the_notebook_with_its_three_runs(run):
    _, _, folder = run
    browser = Browser(folder)  # what the sidebar lists under a JupyterLab started in the notebook's folder
    (store,) = [s for s in browser.stores() if s["path"] == "own-loop-store"]
    assert store["runs"] == 3
    rows = {r["run"]: r for r in browser.runs(store["id"])["runs"]}
    assert sorted(rows) == sorted(RUNS)
    assert {(r["state"], r["steps"]) for r in rows.values()} == {("finished", STEPS)}


def test_spent_names_the_nets_parts_for_the_watched_runs_and_the_graphs_node_for_the_trainer(run):
    _, out, _ = run
    assert text(out["loop"]).splitlines()[1].split() == ["nodes:", *PARTS]
    want = {"spent-loop": set(PARTS), "spent-lightning": {f"net.{p}" for p in PARTS},
            "spent-trainer": {"cnn", "Trainer", "evaluation"}}
    for tag, parts in want.items():
        (bundle,) = shown(out[tag])
        said = bundle["text/plain"].splitlines()
        # a watched net's forwards say their time on the measured steps only
        assert said[0].endswith(f": {STEPS} forwards" + (f", {MEASURED} measured" if tag != "spent-trainer" else ""))
        named = {line.split()[0] for line in said[1:] if line.startswith("  ")}
        assert parts <= named, tag
        # each part's bar in the picture, with its time; a watched part's over the instruments' steps
        bars = [label for label in labels(bundle) if " in all, " in label]
        for part in parts - {"Trainer", "evaluation"}:
            (bar,) = [b for b in bars if b.startswith(f"{part}: ")]
            if tag != "spent-trainer":
                assert f" a forward over {MEASURED} calls" in bar, bar


def test_spent_shows_the_instruments_measuring_apart_from_the_engine_as_the_facts_say(run):
    """The watch's reading of each part's output (instruments_us) is its own
    row, not the engine's; the rows are the facts' sums over the forwards
    that said their time, read from the store the notebook wrote."""
    _, _, folder = run
    store = folder / "own-loop-store"
    for name in RUNS:
        said = facts(store, run=name)
        took = sum(f["took_us"] for f in said if f["fact"] == "finished")
        ran = sum(f["took_us"] for f in said if f["fact"] == "ran")
        reads = [f["value"] for f in said if f["fact"] == "instruments_us"]
        timed = sum(f["fact"] == "finished" for f in said)
        assert len(reads) == MEASURED and timed == (STEPS if name == "trainer" else MEASURED)
        rows = {r["label"]: r for r in spent(store, run=name).rows}
        engine, measuring = rows["engine (outside nodes)"], rows["instruments (measuring)"]
        assert (measuring["total_us"], measuring["count"]) == (sum(reads), MEASURED)
        assert (engine["total_us"], engine["count"]) == (took - ran - sum(reads), timed)
        assert engine["mean_us"] == pytest.approx((took - ran - sum(reads)) / timed)


def test_diagnose_answers_for_each_run(run):
    _, out, _ = run
    said = [bundle["text/plain"] for bundle in shown(out["diagnose"])]
    assert said == [f"diagnose(run='{name}'): no finding" for name in RUNS]
