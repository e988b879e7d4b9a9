"""notebooks/05-diagnosis.ipynb runs top to bottom in a real kernel, and its
diagnosis cells, which use only the store, say what its text promises."""

import functools
from pathlib import Path

import nbformat
from nbexec import execute

from pictures import parse, text_of

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "05-diagnosis.ipynb"


@functools.lru_cache(maxsize=1)
def executed():
    nb = execute(nbformat.read(NOTEBOOK, as_version=4), NOTEBOOK.parent)
    by_tag = {tag: cell.outputs for cell in nb.cells for tag in cell.metadata.get("tags", [])}
    return nb, by_tag


def result(outputs):
    (data,) = [o.data for o in outputs if o.output_type == "execute_result"]
    return data


def text(outputs):
    return "".join(o.get("text", "") for o in outputs if o.output_type == "stream")


def test_notebook_05_diagnoses_a_healthy_run_and_sick_ones_from_the_store():
    nb, out = executed()
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    healthy = result(out["healthy"])
    assert "no finding" in healthy["text/plain"] and "healthy" in text_of(parse(healthy["text/html"]))

    forgotten = result(out["forgotten"])["text/plain"].splitlines()
    assert len(forgotten) == 2 and "node 'out': not updated in steps 0-199" in forgotten[1]
    assert "optimizer does not hold" in forgotten[1]

    hot = result(out["too-hot"])["text/plain"]
    assert "diverged" in hot.splitlines()[1] and "exploding" in hot
    dead = result(out["dead"])["text/plain"].splitlines()
    assert "node 'hidden': dying in steps 0-199" in dead[1]

    assert "ratio low" in text(out["strict"])
    said = text(out["fresh"])
    assert "torch imported there: False" in said and "same findings: True" in said


def test_notebook_05_is_committed_executed_without_widget_state():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert "widgets" not in nb.metadata
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code) and any(c.outputs for c in code)
