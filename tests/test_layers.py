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


# Inside the package, layers go one way too (docs/ARCHITECTURE.md): each layer
# is one folder (or module) under somatize/, and a module imports its own layer
# or those below, never one above.
RANK = {
    "_base": 0,
    "_store": 1,
    "_graph": 2,
    "record": 3,
    "torch": 4, "_diagnose": 4,
    "_widgets": 5, "_server": 5, "cli": 5, "demo": 5, "__init__": 5,
}
UPWARD = {  # lazy imports for display, each with its reason
    ("_graph", "_widgets"): "a Graph shows its panel when displayed in a notebook",
    ("_diagnose", "_widgets"): "a run's findings show their panel when displayed in a notebook",
}


def top_of(rel_module):
    """'record._runs' -> 'record'; 'cli' -> 'cli'."""
    return rel_module.split(".")[0] or "__init__"


def somatize_imports(path):
    """Every somatize module ``path`` imports, as a top name under somatize/
    ("__init__" for the package itself)."""
    package = path.parent.relative_to(ROOT).parts  # () for somatize/, ("record",) for somatize/record/
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(package[: len(package) - (node.level - 1)])
            if node.module:
                targets = [base + node.module.split(".")]
            else:
                targets = [base + [a.name] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            targets = [node.module.split(".")[1:]] if node.module.split(".")[0] == "somatize" else []
        elif isinstance(node, ast.Import):
            targets = [a.name.split(".")[1:] for a in node.names if a.name.split(".")[0] == "somatize"]
        else:
            continue
        for t in targets:
            yield (t[0] if t else "__init__"), node.lineno


def test_inside_the_package_imports_go_down_the_layers():
    wrong = []
    for path in ROOT.rglob("*.py"):
        here = top_of(path.relative_to(ROOT).with_suffix("").as_posix().replace("/", "."))
        for there, line in somatize_imports(path):
            there = top_of(there)
            if there in RANK and RANK[there] > RANK[here] and (here, there) not in UPWARD:
                wrong.append(f"somatize/{path.relative_to(ROOT)}:{line} ({here}) imports {there}")
    assert wrong == []
    assert set(RANK) >= {top_of(p.relative_to(ROOT).with_suffix("").parts[0]) for p in ROOT.rglob("*.py")}
