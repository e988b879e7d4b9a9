"""Layers go one way: the core never imports torch or Jupyter."""

import ast
import pathlib
import subprocess
import sys

import somatize

ROOT = pathlib.Path(somatize.__file__).parent
HEAVY = {"torch", "ipywidgets", "anywidget", "bqplot", "jupyter_server", "tornado", "IPython", "ipykernel"}
# where each heavy import is allowed (a module path prefix under somatize/)
ALLOWED = {
    "torch": ("torch/",),
    "ipywidgets": ("_widgets/",),
    "anywidget": ("_widgets/",),
    "bqplot": ("_widgets/",),
    "IPython": ("_widgets/",),
    "ipykernel": ("_widgets/",),
    "jupyter_server": ("_server/",),
    "tornado": ("_server/",),
}


def imported_tops(path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node.lineno


def test_heavy_imports_live_only_in_their_layer():
    wrong = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        for top, line in imported_tops(path):
            if top in HEAVY and not rel.startswith(ALLOWED[top]):
                wrong.append(f"somatize/{rel}:{line} imports {top}")
    assert wrong == []


def test_importing_the_core_loads_neither_torch_nor_jupyter():
    code = (
        "import sys, somatize, somatize.record, somatize.cli\n"
        f"print(sorted(m for m in {sorted(HEAVY)!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
