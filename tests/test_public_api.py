"""The public errors, and that every error the package raises on purpose is
one of them: a user catches `SomatizeError` and catches everything somatize
means to raise."""

import ast
import builtins
import importlib
import pathlib

import pytest

import somatize

PUBLIC_ERRORS = ["SomatizeError", "NodeError", "WatcherError", "DamagedError", "StoreNotWritable", "QueryError"]
ROOT = pathlib.Path(somatize.__file__).parent


@pytest.mark.parametrize("name", PUBLIC_ERRORS)
def test_each_public_error_is_importable_from_somatize_and_is_a_somatize_error(name):
    error = getattr(somatize, name)
    assert isinstance(error, type) and issubclass(error, somatize.SomatizeError)
    assert name in somatize.__all__ and name in dir(somatize)


def _handled(tree):
    """Names every `except` clause of a module catches."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            for t in node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]:
                out.add(ast.unparse(t).rsplit(".", 1)[-1])
    return out


def _orjson_defaults(tree):
    """Functions handed to orjson as `default=`: orjson asks them to raise TypeError."""
    return {k.value.id for node in ast.walk(tree) if isinstance(node, ast.Call)
            for k in node.keywords if k.arg == "default" and isinstance(k.value, ast.Name)}


def raised(tree, namespace):
    """(line, class, enclosing function, caught where raised) for every
    `raise X(...)` or `raise X` whose X names a class; a bare `raise`, a
    re-raise of a caught exception (a local name) and a function's result
    are not classes and are left out."""
    def walk(node, function, catching):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(child, child.name, set())
            elif isinstance(child, ast.Try):
                names = _handled(ast.Module(body=[*child.handlers], type_ignores=[]))
                for part in child.body:
                    walk(ast.Module(body=[part], type_ignores=[]), function, catching | names)
                for part in [*child.handlers, *child.orelse, *child.finalbody]:
                    walk(part, function, catching)
            else:
                if isinstance(child, ast.Raise) and child.exc is not None:
                    target = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                    value = namespace
                    for part in ast.unparse(target).split("."):
                        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
                    if isinstance(value, type) and issubclass(value, BaseException):
                        found.append((child.lineno, value, function, value.__name__ in catching))
                walk(child, function, catching)

    found = []
    walk(tree, None, set())
    return found


def stray_errors(tree, namespace, handled_anywhere):
    """What `raised` finds that a user could meet and not catch as SomatizeError."""
    defaults = _orjson_defaults(tree)
    for line, cls, function, caught_here in raised(tree, namespace):
        if issubclass(cls, somatize.SomatizeError) or caught_here or cls is NotImplementedError:
            continue
        if cls is AttributeError and function == "__getattr__":
            continue  # a module's __getattr__ must raise AttributeError
        if cls is TypeError and function in defaults:
            continue  # orjson's default= protocol
        if cls.__module__.startswith("somatize.") and cls.__name__ in handled_anywhere:
            continue  # a private signal between two functions of the package, caught inside it
        yield f"line {line}: raise {cls.__name__} in {function}()"


def test_every_error_the_package_raises_on_purpose_is_a_somatize_error():
    trees = {p: ast.parse(p.read_text(), str(p)) for p in ROOT.rglob("*.py")}
    handled_anywhere = set().union(*map(_handled, trees.values()))
    found = []
    for path, tree in trees.items():
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        namespace = {**vars(builtins), **vars(module)}
        found += [f"{path.relative_to(ROOT)}: {s}" for s in stray_errors(tree, namespace, handled_anywhere)]
    assert found == []


def test_the_scan_finds_what_it_looks_for():
    source = (
        "class Private(Exception): pass\n"
        "def f(x):\n"
        "    if x: raise ValueError('bare builtin')\n"  # found
        "    raise Private('never caught')\n"  # found
        "def g():\n"
        "    try:\n"
        "        raise TypeError\n"  # caught where raised: not found
        "    except TypeError as e:\n"
        "        raise e\n"  # a re-raise: not found
        "def __getattr__(name):\n"
        "    raise AttributeError(name)\n"  # the module protocol: not found
        "def h():\n"
        "    raise KeyError('x')\n"  # found
    )
    namespace = dict(vars(builtins))
    exec(compile(source, "<scan>", "exec"), namespace)
    namespace["Private"].__module__ = "somatize.fake"
    found = list(stray_errors(ast.parse(source), namespace, handled_anywhere=set()))
    assert [f.split(":")[0] for f in found] == ["line 3", "line 4", "line 13"]
    # a private class of the package, caught somewhere in it, is a signal, not an error a user meets
    assert len(list(stray_errors(ast.parse(source), namespace, handled_anywhere={"Private"}))) == 2
