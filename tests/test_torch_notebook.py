"""notebooks/03-training.ipynb runs top to bottom in a real kernel, and what
its tagged cells print is what the library promises."""

import ast
import functools
import re
from pathlib import Path

import nbformat
from nbexec import execute

from somatize._widgets._views import EXPORT_HINT

from pictures import SVG, curve, parse, stats, svg_markup

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "03-training.ipynb"


@functools.lru_cache(maxsize=1)  # one run of the notebook serves every test here
def executed():
    nb = execute(nbformat.read(NOTEBOOK, as_version=4), NOTEBOOK.parent)
    by_tag = {}
    for cell in nb.cells:
        for tag in cell.metadata.get("tags", []):
            by_tag[tag] = cell.outputs
    return nb, by_tag


def text(outputs):
    return "".join(o.get("text", "") for o in outputs if o.output_type == "stream")


def shown(outputs):
    return [o.data["text/plain"] for o in outputs if o.output_type == "execute_result"]


def displayed(outputs):
    """The bundles a cell displayed (as its result or through display())."""
    return [o.data for o in outputs if o.output_type in ("execute_result", "display_data")]


def test_notebook_03_runs_and_shows_what_it_says():
    nb, out = executed()
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]

    first = text(out["first-run"])
    assert first.startswith("300 steps, 300 updates")
    assert float(re.search(r"last loss ([0-9.]+)", first).group(1)) < 0.05  # near the noise floor, 0.01

    (said,) = shown(out["facts"])
    ten = ast.literal_eval(said)
    assert [(f["fact"], f.get("node")) for f in ten] == [
        ("ran", "body"), ("ran", "head"), ("finished", None), ("updated", None), ("loss", None),
        ("wall_s", None), ("objective_us", None), ("backward_us", None), ("update_us", None), ("lr", None),
        ("trainer_us", None),
    ]
    assert isinstance(ten[0]["took_us"], int) and isinstance(ten[4]["value"], float)
    assert isinstance(ten[-1]["value"], int) and ten[-1]["value"] > 0

    (graph,) = displayed(out["graph"])
    assert graph["text/plain"] == f"Graph(body >> head)\n{EXPORT_HINT}"  # and how an export shows the picture
    assert 'data-node="body"' in svg_markup(graph["text/html"]) and 'data-node="head"' in svg_markup(graph["text/html"])
    (live,) = displayed(out["live"])
    picture = parse(live["text/html"])
    assert stats(picture)["steps"] == "300 of 300" and "300 steps" in live["text/plain"]
    read, (dx, _) = curve(picture.find(f"{SVG}svg"), log="log scale" in live["text/html"])
    assert [round(x) for x, _ in read] == list(range(300)) and all(abs(x - round(x)) <= dx for x, _ in read)
    (progress,) = displayed(out["progress"])
    assert "'a-run': 300 steps" in progress["text/plain"] and "text/html" in progress
    (spent,) = displayed(out["spent"])
    bars = spent["text/plain"].splitlines()[1:-1]  # the last: EXPORT_HINT
    assert {line.split()[0] for line in bars} == {"body", "head", "engine", "instruments", "Trainer"}

    grouped = text(out["grouped"])
    assert "forwards: 16" in grouped and "losses  : 8" in grouped and "updates : 2" in grouped
    assert "before close_group: 2" in text(out["close-group"]) and "after close_group : 3" in text(out["close-group"])

    assert re.search(r"\{'body': 'sha256:[0-9a-f]{13}…'\}", text(out["fingerprints"]))

    lines = [line.split() for line in text(out["cache"]).strip().splitlines()]
    assert lines == [
        ["batch", "A"], ["ran", "body"], ["kept", "body"], ["ran", "head"], ["finished"],
        ["batch", "A", "again"], ["recalled", "body"], ["ran", "head"], ["finished"],
        ["batch", "B"], ["ran", "body"], ["kept", "body"], ["ran", "head"], ["finished"],
    ]
    assert "grad_fn=" in shown(out["cache"])[0]

    stale = text(out["stale"])
    assert "changed after freeze(g)" in stale
    assert stale.split("new digest:")[1].split() == ["ran", "body", "kept", "body", "ran", "head", "finished"]

    assert "nodes  : ['body', 'head']" in text(out["export"])
    assert "same predictions: True" in text(out["load"])
    assert float(text(out["fedavg"]).rsplit(" ", 1)[1]) < 0.05
    assert re.match(r"step \d+: the loss is nan", text(out["nan"]))


def test_spent_on_the_graph_after_training_carries_the_runs_times():
    _, out = executed()
    (before,) = displayed(out["graph"])
    (after,) = displayed(out["graph-timed"])
    assert 'data-node="body"' in svg_markup(before["text/html"])
    assert "timing" not in svg_markup(before["text/html"])  # nothing had run yet
    assert "run 'a-run'" in after["text/html"].replace("&#x27;", "'")  # spent(store, run="a-run", graph=g)
    html = svg_markup(after["text/html"])
    assert len(re.findall(r'class="timing">[^<]* a forward', html)) == 2  # on body and on head


def test_live_is_shown_before_the_loop_it_watches_and_ends_with_its_numbers():
    """Issue 9, item 4: notebook 03 displays `live` in a cell before the training loop; the
    picture it left is brought up to date (300 steps, finished) when the loop's cell ends."""
    nb, out = executed()
    tagged = [c.metadata.get("tags", []) for c in nb.cells]
    assert tagged.index(["live"]) < tagged.index(["first-run"])
    (live,) = displayed(out["live"])
    picture = parse(live["text/html"])
    assert stats(picture)["steps"].startswith("300") and "finished" in "".join(picture.itertext())


def test_the_committed_fit_cell_shows_its_bar_finished_not_as_it_began():
    """Issue 9, item 10: a widget bar was saved as "0% 0/100" after a finished
    fit; the text bar on stderr keeps its last state in the saved notebook."""
    nb = nbformat.read(Path(__file__).parent.parent / "notebooks" / "03-training.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and ".fit(" in c.source and "epochs" in c.source]
    assert not [o for o in cell.outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    bar = "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stderr")
    assert bar.rstrip().split("\r")[-1].lstrip().startswith("100%|") and "100/100" in bar.split("\r")[-1]
