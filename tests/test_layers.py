"""Layers go one way: the core never imports torch or Jupyter."""

import ast
import pathlib
import subprocess
import sys

import pytest

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
    "_pictures": 4,
    "torch": 5, "_diagnose": 5,
    "_import": 5,  # runs written elsewhere brought into a store (TensorBoard event files)
    "_widgets": 6, "_server": 6, "cli": 6, "demo": 6, "__init__": 6,
    # a loop somatize did not write, recorded from its framework's hooks
    "lightning": 7, "transformers": 7,
}
IMPORTERS = {"import_module", "__import__"}  # importlib.import_module(name, package), __import__(name)


def top_of(rel_module):
    """'record._runs' -> 'record'; 'cli' -> 'cli'."""
    return rel_module.split(".")[0] or "__init__"


def _string_targets(tree, node, anchor):
    """The modules a call of import_module / __import__ loads, as lists of
    parts under somatize/; a name held in a variable is read from the
    module's lazy table ``_WHERE = {attribute: "module"}``; ``[None]`` when
    the name cannot be read (the test then says so)."""
    arg = node.args[0] if node.args else None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        names = [arg.value]
    else:
        tables = [a.value for a in tree.body if isinstance(a, ast.Assign) and isinstance(a.value, ast.Dict)
                  and any(isinstance(t, ast.Name) and t.id == "_WHERE" for t in a.targets)]
        names = [v.value for t in tables for v in t.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
        if not names:
            return [None]
    out = []
    for name in names:
        if name.startswith("."):  # relative to the package it is given (``anchor``)
            level = len(name) - len(name.lstrip("."))
            base = list(anchor[: len(anchor) - (level - 1)])
            out.append(base + [p for p in name.lstrip(".").split(".") if p])
        elif name.split(".")[0] == "somatize":
            out.append(name.split(".")[1:])
    return out


def somatize_imports(path, root=ROOT):
    """Every somatize module ``path`` imports, as a top name under somatize/
    ("__init__" for the package itself): import statements, and calls of
    importlib.import_module or __import__ with the module's name as a string.
    An import whose module cannot be read from the code yields None."""
    package = path.parent.relative_to(root).parts  # () for somatize/, ("record",) for somatize/record/
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
        elif isinstance(node, ast.Call) and (getattr(node.func, "id", None) in IMPORTERS
                                             or getattr(node.func, "attr", None) in IMPORTERS):
            given = node.args[1] if len(node.args) > 1 else None  # import_module(name, __name__ | __package__)
            own = path.stem != "__init__" and getattr(given, "id", None) == "__name__"
            targets = _string_targets(tree, node, package + ((path.stem,) if own else ()))
        else:
            continue
        for t in targets:
            yield (None if t is None else t[0] if t else "__init__"), node.lineno


def upward_imports(root):
    """'somatize/<file>:<line> (<layer>) imports <layer>' for each import
    under ``root`` that goes up the layers, or whose module cannot be read.
    None is excused: a lower layer reaches a panel through _base/panels,
    which the package's __init__ fills from above."""
    wrong = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        here = top_of(path.relative_to(root).with_suffix("").as_posix().replace("/", "."))
        for there, line in somatize_imports(path, root):
            if there is None:
                wrong.append(f"somatize/{rel}:{line} ({here}) imports a module named by a variable: "
                             f"write its name as a string, or list it in a _WHERE table")
                continue
            there = top_of(there)
            if there in RANK and RANK[there] > RANK[here]:
                wrong.append(f"somatize/{rel}:{line} ({here}) imports {there}")
    return wrong


def test_inside_the_package_imports_go_down_the_layers():
    assert upward_imports(ROOT) == []
    assert set(RANK) >= {top_of(p.relative_to(ROOT).with_suffix("").parts[0]) for p in ROOT.rglob("*.py")}


@pytest.mark.parametrize("line", [
    'importlib.import_module("somatize._widgets")',
    'import_module(".._widgets._live", __package__)',
    '__import__("somatize._server._browse")',
    'import_module(chosen)',
])
def test_an_import_written_as_a_string_is_seen(tmp_path, line):
    """A record module loading the widget layer by a string is caught as an
    import upward, as an import statement is; a name the code cannot show is
    caught too."""
    (tmp_path / "record").mkdir()
    (tmp_path / "record" / "_sneaky.py").write_text(f"import importlib\nfrom importlib import import_module\n\n\n"
                                                    f"def later(chosen):\n    return {line}\n")
    (tmp_path / "record" / "_plain.py").write_text('import_module("somatize._base.errors")\n')
    wrong = upward_imports(tmp_path)
    assert len(wrong) == 1 and wrong[0].startswith("somatize/record/_sneaky.py:6 (record) imports"), wrong


def reached_privates(root):
    """'somatize/<file>:<line> ... ' for each underscore name of another
    package that a module imports (``from ..record._queries import _Run``)
    or reads off a module of another package it imported
    (``_svg._text(...)``). A package's private modules are its own business;
    a name one package offers another is public (no underscore)."""
    wrong = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        here = rel.parts[0] if len(rel.parts) > 1 else "__init__"
        tree = ast.parse(path.read_text(), str(path))
        modules = {}  # a name bound to another package's module -> that module
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                parts = list(rel.parts[:-1])[: len(rel.parts) - node.level] + (node.module or "").split(".")
            elif (node.module or "").split(".")[0] == "somatize":  # written whole: somatize.record._queries
                parts = node.module.split(".")[1:]
            else:
                continue
            parts = [p for p in parts if p]
            if (parts[0] if parts else "__init__") == here:
                continue
            for a in node.names:
                if a.name.startswith("_") and len(parts) > 1:
                    wrong.append(f"somatize/{rel.as_posix()}:{node.lineno} imports {'.'.join(parts)}.{a.name}")
                modules[a.asname or a.name] = ".".join([*parts, a.name])
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                wrong.append(f"somatize/{rel.as_posix()}:{node.lineno} reads {modules[node.value.id]}.{node.attr}")
    return wrong


def test_no_module_reaches_for_another_packages_private_name():
    assert reached_privates(ROOT) == []


def test_a_private_name_of_another_package_is_seen(tmp_path):
    (tmp_path / "_widgets").mkdir()
    (tmp_path / "_widgets" / "_sneaky.py").write_text(
        "from .._pictures import _svg\nfrom ..record._queries import _Run\nfrom . import _own\n\n\n"
        "def draw():\n    from somatize.record._queries import _rows\n\n"
        "    return _svg._text(0, 0, 'x'), _own._fine, _svg.public\n")
    assert sorted(reached_privates(tmp_path)) == [
        "somatize/_widgets/_sneaky.py:2 imports record._queries._Run",
        "somatize/_widgets/_sneaky.py:7 imports record._queries._rows",
        "somatize/_widgets/_sneaky.py:9 reads _pictures._svg._text",
    ]


def module_imports(root):
    """{module: the somatize modules it imports}, every import read (lazy
    ones inside functions too), a module named by the dotted path under
    ``root`` ("record._queries"; a package by its folder, "record")."""
    def name_of(path):
        parts = list(path.relative_to(root).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name_of(p): p for p in root.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - (node.level - 1)] + (node.module or "").split(".")
                elif (node.module or "").split(".")[0] == "somatize":
                    base = node.module.split(".")[1:]
                else:
                    continue
                base = [p for p in base if p]
                for a in node.names:
                    whole = ".".join([*base, a.name])
                    found.add(whole if whole in modules else ".".join(base))
        # a module's own package (its __init__) runs first whatever it imports: not a circle
        graph[name] = {m for m in found if m in modules and m != name and not name.startswith(f"{m}.")
                       and m != ""}
    return graph


def circles(graph):
    """The import circles of ``graph``: each a sorted list of the modules in
    one strongly connected part of it (Tarjan's, without recursion)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            here, targets = work[-1]
            for there in targets:
                if there not in index:
                    index[there] = low[there] = counter
                    counter += 1
                    stack.append(there)
                    on.add(there)
                    work.append((there, iter(sorted(graph[there]))))
                    break
                if there in on:
                    low[here] = min(low[here], index[there])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[here])
                if low[here] == index[here]:
                    part = []
                    while True:
                        m = stack.pop()
                        on.discard(m)
                        part.append(m)
                        if m == here:
                            break
                    if len(part) > 1:
                        found.append(sorted(part))
    return found


def test_no_import_circle():
    assert circles(module_imports(ROOT)) == []


def test_an_import_circle_is_seen(tmp_path):
    (tmp_path / "record").mkdir()
    (tmp_path / "record" / "_a.py").write_text("from . import _b\n")
    (tmp_path / "record" / "_b.py").write_text("def later():\n    from ._c import x\n")
    (tmp_path / "record" / "_c.py").write_text("from somatize.record._a import y\n")
    (tmp_path / "record" / "_d.py").write_text("from . import _a\n")
    assert circles(module_imports(tmp_path)) == [["record._a", "record._b", "record._c"]]
