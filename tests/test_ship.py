"""What people install works as it says: the wheel, in a fresh venv made here.

- The wheel (`pip wheel . --no-deps`, built once from a copy of this
  checkout's files, as a fresh clone has them) holds the prebuilt lab
  extension, the widgets' modules and the server config.
- One venv takes it step by step, as users add extras: the core alone
  (imports, a Graph run recorded into a Store; `somatize.torch` and the panels
  fail naming their extra), then `[lab]` (with no node on PATH: both
  extensions listed enabled and OK, and a real JupyterLab from that venv shows
  the sidebar's runs and draws a panel in Chromium), then `[torch]` (the
  README's tour), then `[dask]`.

binder/'s recipe is tests/test_binder.py; the helpers both use (a fresh venv
with no build tool on its PATH, a fresh copy of the checkout) are
tests/shiptools.py. The tests share the venv through module fixtures and run
in file order (each stage only adds). Every subprocess has a generous
timeout: a guard against a hang, not a measurement. pip's cache keeps the
installs short.
"""

import re
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from labtools import ARTIFACTS, CHROMIUM, FLAGS, ROOT, TOKEN, accept_kernel_dialog, serving_lab
from shiptools import (
    BUILD_TOOLS,
    Venv,
    assert_both_extensions_enabled_and_ok,
    extension_listings,
    fresh_copy,
    outside_env,
    run,
)

# ---- the wheel ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    tree = fresh_copy(tmp_path_factory.mktemp("clone"))
    dist = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", tree, "--no-deps", "--disable-pip-version-check", "-w", dist],
        outside_env())
    (built,) = dist.glob("somatize-*.whl")
    return built


def test_the_wheel_holds_the_lab_extension_the_widget_modules_and_the_server_config(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    data = "somatize-0.1.0.data/data/"
    lab = data + "share/jupyter/labextensions/somatize/"
    assert lab + "package.json" in names and lab + "install.json" in names
    assert any(re.fullmatch(re.escape(lab) + r"static/remoteEntry\.[0-9a-f]+\.js", n) for n in names)
    assert data + "etc/jupyter/jupyter_server_config.d/somatize.json" in names
    shipped = {n.rsplit("/", 1)[1] for n in names if n.startswith("somatize/_widgets/static/")}
    assert {p.name for p in (ROOT / "js" / "widgets").glob("*.js")} | {"panel.css"} <= shipped
    assert not [n for n in names if n.startswith(("js/", "tests/", "notebooks/", "node_modules/"))]


# ---- one venv, extra by extra -------------------------------------------------------------

@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    return Venv(tmp_path_factory.mktemp("extras") / "venv")


@pytest.fixture(scope="module")
def core(venv, wheel):
    venv.install(wheel)
    return venv


def stage(venv, wheel, extra, *pins):
    """Add `extra` to the venv (once); the stages before it come first."""
    if extra not in venv.extras:
        venv.install(f"{wheel}[{extra}]", *pins)
        venv.extras.append(extra)
    return venv


@pytest.fixture(scope="module")
def lab(core, wheel):
    return stage(core, wheel, "lab")


@pytest.fixture(scope="module")
def with_torch(lab, wheel):
    # pinned: PyPI's newest torch for Linux is a CUDA build of several GB; this one is the CPU build
    return stage(lab, wheel, "torch", "torch==2.13.0")


@pytest.fixture(scope="module")
def with_dask(with_torch, wheel):
    return stage(with_torch, wheel, "dask")


INSTALLED = "import importlib.metadata as m, json; print(json.dumps([d.metadata['Name'] for d in m.distributions()]))"


def test_the_core_install_pulls_neither_torch_nor_jupyter(core):
    assert core.extras == [], "the core stage runs first (tests in this module run in file order)"
    installed = {re.sub(r"[-_.]+", "-", name).lower() for name in core.py(INSTALLED)}
    assert {"somatize", "numpy", "pandas", "orjson", "xxhash"} <= installed
    heavy = {"torch", "tqdm", "jupyterlab", "jupyter-server", "notebook", "anywidget", "ipywidgets", "ipykernel",
             "ipython", "traitlets", "bqplot", "dask", "distributed", "pytest", "playwright"}
    assert installed & heavy == set()


def test_an_answer_is_read_from_stdout_alone(core):
    # CI once failed here: Dask's cluster printed its answer, then logged a
    # TimeoutError to stderr as it shut down on a busy machine, and exited 0
    assert core.py("import json, sys\nprint(json.dumps([1]))\nprint('TimeoutError: Timeout', file=sys.stderr)") == [1]


CORE_RUN = r"""
import json, pathlib, sys, numpy as np
import somatize
from somatize import Graph, Node, Recorder, Store
from somatize.record import curve, runs

class Double(Node):
    def forward(self, x, ctx):
        ctx.fact("size", value=float(len(x)))
        return x * 2

class Total(Node):
    def forward(self, x, ctx):
        return float(x.sum())

g = Graph.somatize(Double().named("double") >> Total().named("total"))
store = Store("store")
with Recorder(store, run="first") as recorder:
    outs = [g.forward(np.arange(i + 1.0), watching=recorder) for i in range(5)]
table = runs(store)
print(json.dumps({"where": somatize.__file__, "outs": outs, "runs": list(table["run"]),
                  "state": table["state"].iloc[0], "size": list(curve(store, run="first", name="size/double")),
                  "kept": store.keep("answer", 42), "recalled": store.recall("answer"),
                  "findings": len(somatize.diagnose(store, run="first"))}))
"""


def test_the_core_alone_runs_a_graph_into_a_store_with_its_record(core, tmp_path):
    got = core.py(CORE_RUN, cwd=tmp_path)
    assert Path(got["where"]).is_relative_to(core.path), f"imported {got['where']}, not the venv's somatize"
    assert got["outs"] == [0.0, 2.0, 6.0, 12.0, 20.0]  # twice the sum of 0..i
    assert got["runs"] == ["first"] and got["state"] == "finished"
    assert got["size"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert got["kept"].startswith("sha256:") and got["recalled"] == 42 and got["findings"] == 0
    listed = run([core.path / "bin" / "somatize", "runs", tmp_path / "store"], core.no_build_tools_env())
    assert "first" in listed and "finished" in listed


MISSING = r"""
import json
import somatize, somatize.record
said = {}
try:
    import somatize.torch
except ImportError as e:
    said["somatize.torch"] = [isinstance(e, somatize.SomatizeError), str(e)]
for name in ("Live", "progress", "spent"):
    try:
        getattr(somatize.record, name)
    except ImportError as e:
        said[name] = [isinstance(e, somatize.SomatizeError), str(e)]
for module in ("somatize.lightning", "somatize.transformers"):
    try:
        __import__(module)
    except ImportError as e:
        said[module] = [isinstance(e, somatize.SomatizeError), str(e)]
try:
    somatize.import_tensorboard("logs", "store")
except ImportError as e:
    said["tensorboard"] = [isinstance(e, somatize.SomatizeError), str(e)]
try:
    somatize.Store("memory://team/runs")
except ImportError as e:
    said["cloud"] = [isinstance(e, somatize.SomatizeError), str(e)]
print(json.dumps(said))
"""


def test_the_core_alone_names_the_extra_that_torch_the_panels_the_frameworks_and_buckets_need(core):
    said = core.py(MISSING)
    extras = {"somatize.torch": "torch", "somatize.lightning": "lightning", "somatize.transformers": "transformers",
              "tensorboard": "tensorboard", "cloud": "cloud"}
    assert set(said) == {*extras, "Live", "progress", "spent"}, said
    for name, extra in extras.items():
        ours, message = said.pop(name)
        assert ours and f'pip install "somatize[{extra}]"' in message, message
        if name == "somatize.torch":
            assert "torch" in message.split(" needs ")[1], message
    for name, (ours, message) in said.items():
        assert ours and f"somatize.record.{name}" in message and 'pip install "somatize[lab]"' in message, message


PANEL = r"""
import json, sys
import anywidget, ipywidgets, jupyterlab
from somatize import Recorder, Store
from somatize.record import Live, progress, spent
from somatize._widgets import _views
store = Store("store")
with Recorder(store, run="a") as r:
    for i in range(50):
        r.forward_began()
        r({"fact": "ran", "node": "body", "began_us": 0, "took_us": 40})
        r({"fact": "finished", "took_us": 50})
        r({"fact": "loss", "value": 1.0 / (i + 1)})
bundle = progress(store, run="a")._repr_mimebundle_()
print(json.dumps({"static": str(_views.STATIC), "files": sorted(p.name for p in _views.STATIC.iterdir()),
                  "mimes": sorted(bundle)}))
"""


def test_the_lab_extra_brings_the_panels_with_the_wheels_widget_modules(lab, tmp_path):
    got = lab.py(PANEL, cwd=tmp_path)
    assert Path(got["static"]).is_relative_to(lab.path)  # the wheel's copy of js/widgets, not this checkout's
    assert {"chart.js", "live.js", "progress.js", "spent.js", "graph.js", "panel.css"} <= set(got["files"])
    assert "application/vnd.jupyter.widget-view+json" in got["mimes"] and "text/html" in got["mimes"]


def test_the_wheel_with_no_node_on_path_lists_both_extensions_enabled_and_ok(lab):
    where = lab.py("import json, shutil; print(json.dumps({t: shutil.which(t) for t in "
                   f"{sorted(BUILD_TOOLS)!r}}}))")
    assert where == dict.fromkeys(BUILD_TOOLS), where
    assert_both_extensions_enabled_and_ok(lab.jupyter)
    ours, _ = extension_listings(lab.jupyter)
    listing = lab.jupyter("labextension", "list")
    folder = [line for line in listing[:listing.index(ours)].splitlines() if line.startswith("/")][-1].strip()
    assert Path(folder).is_relative_to(lab.path), f"somatize is listed from {folder}, not the venv"


def record_runs(venv, root):
    venv.py("import json\nfrom somatize import Recorder, Store\nstore = Store('runs/store')\n"
            "for scale, name in enumerate(('alpha', 'beta'), 1):\n"
            "    with Recorder(store, run=name) as r:\n"
            "        for i in range(40):\n"
            "            r.forward_began()\n"
            "            r({'fact': 'finished', 'took_us': 50})\n"
            "            r({'fact': 'loss', 'value': scale / (i + 1)})\n"
            "print(json.dumps(sorted(store.runs())))", cwd=root)


def test_the_wheel_with_no_node_serves_the_sidebar_and_draws_a_panel_in_chromium(lab, tmp_path):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    root = tmp_path / "root"
    root.mkdir()
    record_runs(lab, root)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(nbformat.v4.new_code_cell('from somatize.record import progress\n'
                                              'progress("runs/store", run=["alpha", "beta"])'))
    nbformat.write(nb, root / "panel.ipynb")
    env = lab.no_build_tools_env()
    with serving_lab([lab.path / "bin" / "jupyter-lab"], root, env, tmp_path / "lab.log") as url, \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(f"{url}/lab/tree/panel.ipynb?token={TOKEN}&reset")
            page.wait_for_selector(".jp-Notebook", timeout=90_000)
            page.add_style_tag(content=".Toastify { display: none !important; }")
            accept_kernel_dialog(page)
            page.locator(".lm-TabBar-tab[data-id='somatize-sidebar']").click()
            side = page.locator("#somatize-sidebar")
            for run_name in ("alpha", "beta"):
                side.locator(f"tr.smz-row[data-run='{run_name}']").wait_for(timeout=60_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
            page.locator(".jp-Notebook .jp-Cell").first.click()
            page.keyboard.press("Shift+Enter")
            # drawn by the widget's module (the static picture is an <img>, not an <svg>)
            chart = page.locator(".jp-OutputArea svg.somatize-chart").first
            chart.wait_for(timeout=120_000)
            assert chart.locator("polyline.curve").count() == 2
        finally:
            (ARTIFACTS / "ship").mkdir(parents=True, exist_ok=True)
            page.screenshot(path=ARTIFACTS / "ship" / "no-node-lab.png")
            browser.close()


TOUR = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)


def test_the_torch_extra_runs_the_readme_tour_on_the_cpu_build(with_torch, tmp_path):
    got = with_torch.py(TOUR + "\nimport json\nprint(json.dumps({'torch': torch.__version__, "
                        "'steps': len(curve(store, run='first', name='loss'))}))", cwd=tmp_path)
    assert got["torch"].endswith("+cpu") and got["steps"] == 300


def test_the_dask_extra_brings_a_cluster(with_dask):
    got = with_dask.py("import json\nfrom distributed import Client\n"
                       "with Client(processes=False, dashboard_address=None) as c:\n"
                       "    print(json.dumps(c.gather(c.map(lambda x: x * x, range(4)))))")
    assert got == [0, 1, 4, 9]
