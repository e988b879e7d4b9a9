"""What people install works as it says, each in a fresh venv made here.

- The wheel (`pip wheel . --no-deps`, built once from a copy of this
  checkout's files, as a fresh clone has them) holds the prebuilt lab
  extension, the widgets' modules and the server config.
- One venv takes it step by step, as users add extras: the core alone
  (imports, a Graph run recorded into a Store; `somatize.torch` and the panels
  fail naming their extra), then `[lab]` (with no node on PATH: both
  extensions listed enabled and OK, and a real JupyterLab from that venv shows
  the sidebar's runs and draws a panel in Chromium), then `[torch]` (the
  README's tour), then `[dask]`.
- binder/: a venv built only from its files, by its steps in order; every
  notebook 01-05 runs on that venv's kernel, both extensions are enabled, and
  the lab it configures opens on notebooks/ with the demo store's runs.

The tests share the venvs through module fixtures and run in file order
(each stage only adds). Every subprocess has a generous timeout: a guard
against a hang, not a measurement. pip's cache keeps the installs short.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import nbformat
import pytest
from labtools import ARTIFACTS, CHROMIUM, FLAGS, ROOT, TOKEN, accept_kernel_dialog, serving_lab
from nbexec import execute

GUARD_S = 1200  # pip on a busy machine; a guard against a hang, not a measurement
ANSI = re.compile(r"\x1b\[[0-9;]*m")
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("0[1-5]-*.ipynb"))
# what only a build needs, and what a lab installed from a wheel must not find
BUILD_TOOLS = {"node", "nodejs", "npm", "npx", "yarn", "jlpm"}


def run(argv, env, cwd=None, timeout=GUARD_S):
    done = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    out = ANSI.sub("", done.stdout + done.stderr)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} failed ({done.returncode}):\n{out[-6000:]}"
    return out


def outside_env(**extra):
    """This process's environment without what points Python at this checkout
    or at another venv; pip's own settings (indexes, cache) stay."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, **extra}


def fresh_copy(dest):
    """This checkout's files as a fresh clone has them (tracked, and new ones
    git does not ignore; no .venv, node_modules or built extension)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True, timeout=120).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():  # a file deleted but not yet committed is listed and absent
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


class Venv:
    """A fresh venv, and a PATH for it that holds no build tool: a folder of
    links to its commands but node, npm, jlpm and the like (and no python:
    every call names the venv's own)."""

    def __init__(self, path):
        run([sys.executable, "-m", "venv", path], outside_env())
        self.path = path
        self.python = path / "bin" / "python"
        self.home = path.parent / f"{path.name}-home"
        self.home.mkdir()
        self.extras = []

    def install(self, *requirements):
        run([self.python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *requirements], outside_env())

    def no_build_tools_env(self):
        tools = self.path.parent / f"{self.path.name}-path"
        shutil.rmtree(tools, ignore_errors=True)
        tools.mkdir()
        for command in (self.path / "bin").iterdir():
            if command.name not in BUILD_TOOLS and not command.name.startswith(("python", "activate")):
                (tools / command.name).symlink_to(command)
        j = self.home / "jupyter"
        return {"PATH": str(tools), "HOME": str(self.home), "LANG": "C.UTF-8",
                "JUPYTER_CONFIG_DIR": str(j / "config"), "JUPYTER_DATA_DIR": str(j / "data"),
                "JUPYTER_RUNTIME_DIR": str(j / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(j / "settings"),
                "JUPYTERLAB_WORKSPACES_DIR": str(j / "workspaces"), "IPYTHONDIR": str(self.home / "ipython")}

    def py(self, code, cwd=None):
        """Run `code` on the venv's Python with no build tool on PATH; its stdout's last line, as JSON."""
        out = run([self.python, "-c", code], self.no_build_tools_env(), cwd=cwd)
        return json.loads(out.strip().splitlines()[-1])

    def jupyter(self, *args):
        return run([self.path / "bin" / "jupyter", *args], self.no_build_tools_env())


def extension_listings(jupyter):
    """(our line of `jupyter labextension list`, `jupyter server extension list`)."""
    labs = jupyter("labextension", "list")
    ours = [line for line in labs.splitlines() if line.split()[:1] == ["somatize"]]
    assert ours, f"`jupyter labextension list` does not list somatize:\n{labs}"
    return ours[0], jupyter("server", "extension", "list")


def assert_both_extensions_enabled_and_ok(jupyter):
    lab, server = extension_listings(jupyter)
    assert "enabled" in lab and "OK" in lab, lab
    assert re.search(r"somatize\._server\s+enabled", server), server
    assert re.search(r"somatize\._server\s+OK", server), server


def get(url, path):
    with urllib.request.urlopen(urllib.request.Request(f"{url}{path}", headers={"Authorization": f"token {TOKEN}"}),
                                timeout=60) as r:
        return json.load(r)


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
print(json.dumps(said))
"""


def test_the_core_alone_names_the_extra_that_torch_and_the_panels_need(core):
    said = core.py(MISSING)
    assert set(said) == {"somatize.torch", "Live", "progress", "spent"}, said
    ours, message = said.pop("somatize.torch")
    assert ours and 'pip install "somatize[torch]"' in message and "torch" in message.split(" needs ")[1]
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
        (store,) = get(url, "/somatize/stores")["stores"]
        assert store["path"] == "demo-store"
        rows = get(url, f"/somatize/stores/{store['id']}/runs")["runs"]
    assert {row["run"]: row["state"] for row in rows} == {
        "demo-smooth": "finished", "demo-noisy": "finished", "demo-interrupted": "interrupted",
        "demo-damaged": "damaged"}
