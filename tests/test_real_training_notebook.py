"""notebooks/06-real-training.ipynb runs top to bottom in a real kernel: a CNN
on scikit-learn's digits with a schedule, bf16, an evaluation each epoch, a
process killed by SIGKILL and the run resumed from its checkpoint, ending
exactly where the run never stopped does; and its pictures say so."""

import functools
import re
from pathlib import Path

import nbformat
from nbexec import execute

from pictures import SVG, curve, parse, svg_markup

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "06-real-training.ipynb"


@functools.lru_cache(maxsize=1)  # one run of the notebook serves every test here
def executed():
    nb = execute(nbformat.read(NOTEBOOK, as_version=4), NOTEBOOK.parent)
    by_tag = {}
    for cell in nb.cells:
        for tag in cell.metadata.get("tags", []):
            by_tag[tag] = cell.outputs
    return nb, by_tag


def text(outputs):
    return "".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == "stdout")


def shown(outputs):
    (bundle,) = [o.data for o in outputs if o.output_type in ("execute_result", "display_data")]
    return bundle


def test_notebook_06_runs_without_an_error():
    nb, _ = executed()
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]


def test_the_killed_run_resumes_and_ends_exactly_as_the_run_never_stopped():
    _, out = executed()
    assert "1437 training images, 360 held out, 23 batches an epoch" in text(out["data"])
    killed = text(out["killed"])
    assert "exited with -9" in killed
    row = killed.strip().splitlines()[-1].split()
    assert row[:2] == ["digits", "interrupted"]
    # The checkpoint at step 60 flushed the record; what the Recorder flushed on its own after it (at most the
    # 75 steps run before the kill) depends on the machine's pace; resuming rewinds the record to step 60.
    assert 60 <= int(row[2]) <= 75
    assert "resumed: 138 steps, 138 updates" in text(out["resumed"])  # 6 epochs of 23
    assert text(out["exact"]).strip().endswith("weights: 0.0")


def test_the_curves_show_the_evaluations_and_the_schedule_as_the_updates_used_it():
    _, out = executed()
    progress = shown(out["progress"])
    assert "'digits': 138 steps" in progress["text/plain"]
    labels = re.findall(r">([^<>]+)<", svg_markup(progress["text/html"]))
    assert "val_loss" in labels and "val_accuracy" in labels  # drawn beside the loss, unasked

    accuracy = shown(out["accuracy"])
    picture = parse(accuracy["text/html"])
    points, (dx, dy) = curve(picture.find(f"{SVG}svg"), log="log scale" in accuracy["text/html"])
    assert [round(x) for x, _ in points] == [22, 45, 68, 91, 114, 137]  # each epoch's last step
    assert points[-1][1] > 0.9

    lr = shown(out["lr"])
    picture = parse(lr["text/html"])
    points, (dx, dy) = curve(picture.find(f"{SVG}svg"), log="log scale" in lr["text/html"])
    steps = [round(x) for x, _ in points]
    assert steps[:10] == list(range(10)) and steps[-1] >= 120  # on the steps that said their clocks
    for step, value in points:  # StepLR(step_size=46, gamma=0.5) from 3e-3, stepped once per update
        assert abs(value - 3e-3 * 0.5 ** (round(step) // 46)) <= dy


def test_spent_shows_the_evaluations_apart_and_diagnose_is_quiet():
    _, out = executed()
    bars = shown(out["spent"])["text/plain"].splitlines()[1:-1]  # the last: how an export shows the picture
    parts = {line.split()[0] for line in bars}
    assert {"features", "classifier", "evaluation", "Trainer"} <= parts
    assert shown(out["diagnose"])["text/plain"] == "diagnose(run='digits'): no finding"
