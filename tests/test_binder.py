"""binder/: a venv built only from its files, by its steps in order; every
notebook 01-06 and 08 runs on that venv's kernel, both extensions are enabled, and
the lab it configures opens on notebooks/ with the demo store's runs. (In a
file of its own so that it runs beside test_ship.py, not after it.)"""

import os
import re
import sys

import nbformat
import pytest
from labtools import ROOT, serving_lab
from nbexec import execute
from shiptools import (
    Venv,
    assert_both_extensions_enabled_and_ok,
    fresh_copy,
    get,
    outside_env,
    run,
)

NOTEBOOKS = [*sorted(p.name for p in (ROOT / "notebooks").glob("0[1-6]-*.ipynb")), "08-your-own-loop.ipynb"]

# ---- binder/ --------------------------------------------------------------------------------

PYTORCH_CPU = "https://download.pytorch.org/whl/cpu"


@pytest.fixture(scope="module")
def binder(tmp_path_factory):
    """A venv built only from binder/'s files, by repo2docker's steps in order,
    in a fresh copy of the repository (postBuild runs there, with node, as in
    repo2docker's image)."""
    repo = fresh_copy(tmp_path_factory.mktemp("binder-repo"))
    spec = repo / "binder"
    assert (spec / "runtime.txt").read_text().split() == ["python-3.11"]
    assert sys.version_info[:2] == (3, 11)  # the venv below is this Python's
    venv = Venv(tmp_path_factory.mktemp("binder") / "venv")
    lines = [line.strip() for line in (spec / "requirements.txt").read_text().splitlines()]
    wanted = [line for line in lines if line and not line.startswith("#")]
    assert f"--extra-index-url {PYTORCH_CPU}" in wanted
    (torch,) = [line for line in wanted if line.startswith("torch")]
    assert re.fullmatch(r"torch==\d+\.\d+\.\d+\+cpu", torch), f"{torch}: not pinned to a CPU build"
    # that index is out of reach here; this machine's own index has the same CPU build
    reachable = venv.home / "requirements-here.txt"
    reachable.write_text("\n".join(line for line in wanted if PYTORCH_CPU not in line) + "\n")
    venv.install("-r", reachable)
    env = outside_env(PATH=f"{venv.path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    run(["bash", spec / "postBuild"], env, cwd=repo)
    return repo, venv


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_binder_runs_every_notebook(binder, name):
    repo, venv = binder
    nb = nbformat.read(repo / "notebooks" / name, as_version=4)
    execute(nb, repo / "notebooks", timeout=900, python=venv.python, env=venv.no_build_tools_env())
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []


def test_binder_enables_both_extensions_and_opens_on_the_notebooks_with_the_demo_runs(binder, tmp_path):
    repo, venv = binder
    assert_both_extensions_enabled_and_ok(venv.jupyter)
    # started in the repository with no root given: the lab's own config must make notebooks/ its root
    with serving_lab([venv.path / "bin" / "jupyter-lab"], repo, venv.no_build_tools_env(), tmp_path / "lab.log",
                     root_dir=False) as url:
        top = {item["name"] for item in get(url, "/api/contents")["content"]}
        assert set(NOTEBOOKS) <= top and "demo-store" in top
        stores = {s["path"]: s for s in get(url, "/somatize/stores")["stores"]}
        # notebook 08, when it ran above in this copy, left its store beside itself: the sidebar lists it too
        assert "demo-store" in stores and set(stores) <= {"demo-store", "own-loop-store"}
        store = stores["demo-store"]
        rows = get(url, f"/somatize/stores/{store['id']}/runs")["runs"]
    assert {row["run"]: row["state"] for row in rows} == {
        "demo-smooth": "finished", "demo-noisy": "finished", "demo-interrupted": "interrupted",
        "demo-damaged": "damaged"}
