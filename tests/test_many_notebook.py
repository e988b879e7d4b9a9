"""notebooks/04-many-runs.ipynb runs top to bottom in a real kernel, on a
real Dask cluster, and what its tagged cells show is what it says."""

import re
from pathlib import Path

import nbformat
from nbexec import execute

from pictures import SVG, parse, svg_markup, text_of

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "04-many-runs.ipynb"


def executed():
    nb = execute(nbformat.read(NOTEBOOK, as_version=4), NOTEBOOK.parent)
    return nb, {tag: cell.outputs for cell in nb.cells for tag in cell.metadata.get("tags", [])}


def text(outputs, name="stdout"):
    return "".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == name)


def shown(outputs):
    return "".join(o.data["text/plain"] for o in outputs if o.output_type == "execute_result")


def test_notebook_04_sweeps_on_a_cluster_and_averages_rounds_as_it_says():
    nb, out = executed()
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]

    table = shown(out["sweep-table"]).splitlines()[1:]
    assert [row.split()[1:4] for row in table] == [["lr-0.001", "finished", "200"], ["lr-0.003", "finished", "200"],
                                                    ["lr-0.01", "finished", "200"], ["lr-0.03", "finished", "200"]]
    overlay = "".join(o.get("data", {}).get("text/html", "") for o in out["sweep-progress"])
    assert 'src="data:image/svg+xml;base64,' in overlay  # the picture a reader without a kernel sees
    legend = svg_markup(overlay)
    assert all(f"(lr={lr})" in legend for lr in ("0.001", "0.003", "0.01", "0.03"))  # coloured by config
    cli = text(out["sweep-cli"]).splitlines()
    assert cli[0].split()[:6] == ["run", "state", "forwards", "facts", "config.lr", "config.steps"]

    explorer = parse("".join(o.get("data", {}).get("text/html", "") for o in out["sweep-compare"]))
    labels = [text_of(t) for t in explorer.iter(f"{SVG}text") if t.get("class") == "axis-label"]
    assert labels == ["loss.best", "lr"]  # steps is the same in every run: no axis
    big = "".join(o.get("data", {}).get("text/html", "") for o in out["big-compare"])
    root = parse(big)
    labels = [text_of(t) for t in root.iter(f"{SVG}text") if t.get("class") == "axis-label"]
    notes = [text_of(t) for t in root.iter(f"{SVG}text") if t.get("class") == "axis-note"]
    assert labels[0] == "loss.best" and sorted(labels[1:]) == ["lr", "optimizer", "seed", "width"]
    rho = [float(n.split()[-1]) for n in notes[1:]]
    assert labels[1] == "width" and rho == sorted(rho, reverse=True) and rho[0] > rho[1]  # 4 / width: monotonic
    assert "300 runs by loss.best" in big
    said = text(out["big-where"]).splitlines()
    assert said[0] == "config.lr >= 0.001 and config.lr <= 0.01 and config.width >= 64"
    chosen, asked = map(int, re.findall(r"\d+", said[1])[:1] + re.findall(r"has (\d+)", said[1]))
    assert chosen == asked > 0
    assert "100% Completed" in text(out["dask-sweep"])  # Dask's own progress bar
    same = text(out["dask-same"])
    difference = re.search(r"4 runs on the cluster; largest difference in final loss from the for loop: (\S+)", same)
    assert float(difference.group(1)) < 1e-9  # the same runs, on other processes

    rounds = [float(x) for x in re.findall(r"held-out loss ([0-9.]+)", text(out["fedavg"]))]
    assert len(rounds) == 4 and all(b < a for a, b in zip(rounds, rounds[1:]))  # each round improves
    fed = text(out["fed-runs"]).splitlines()[1:]
    assert len(fed) == 9 and all(row.split()[1:3] == ["finished", "40"] for row in fed)
