"""notebooks/07-data-parallel.ipynb runs top to bottom in a real kernel:
launch forks two ranks from the kernel (its own functions, never pickled),
a rank killed is named, the job relaunched resumes, and spent names the
straggler."""

import functools
import os
from pathlib import Path

import nbformat
from nbexec import execute

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "07-data-parallel.ipynb"


@functools.lru_cache(maxsize=1)
def executed():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(NOTEBOOK.parent.parent), os.environ.get("PYTHONPATH", "")])}
    nb = execute(nbformat.read(NOTEBOOK, as_version=4), NOTEBOOK.parent, env=env)
    return nb, {tag: c.outputs for c in nb.cells for tag in c.metadata.get("tags", [])}


def text(outputs):
    return "".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == "stdout")


def test_notebook_07_runs_without_an_error():
    nb, _ = executed()
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]


def test_a_rank_lost_from_the_notebook_is_named_and_the_relaunch_finishes_one_run():
    _, out = executed()
    lost = text(out["lost"])
    assert lost.startswith("rank 1 of 2 (pid ") and "was killed by SIGKILL" in lost
    assert lost.strip().splitlines()[-1].split() == ["digits-2-ranks", "interrupted", "25"]
    resumed = text(out["resumed"])
    assert "'steps': 92" in resumed  # 718 images a rank, 32 a batch: 23 steps an epoch, 4 epochs
    assert resumed.strip().splitlines()[-1].split() == ["digits-2-ranks", "finished", "92"]


def test_spent_shows_both_ranks_and_names_the_straggler():
    _, out = executed()
    (shown,) = [o.data for o in out["spent"] if o.output_type == "execute_result"]
    said = shown["text/plain"]
    assert "rank 0 " in said and "rank 1 " in said and " is the straggler: its steps take " in said
