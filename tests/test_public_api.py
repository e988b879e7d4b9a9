"""The public errors, and that every error the package raises on purpose is
one of them: a user catches `SomatizeError` and catches everything somatize
means to raise, and can name each error it raises (`except somatize.CodecError:`)."""

import ast
import builtins
import importlib
import pathlib

import pytest

import somatize

PUBLIC_ERRORS = ["SomatizeError", "NodeError", "WatcherError", "DamagedError", "StoreNotWritable",
                 "CodecError", "MissingExtra", "NonFiniteLoss", "SomatizeKeyError", "SomatizeTypeError",
                 "SomatizeValueError", "QueryError", "RankLost", "LaunchError", "LoaderNotResumable",
                 "BucketError", "Fenced"]
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


def imported_anywhere(tree, module):
    """Names bound by a `from … import …` anywhere in a module, inside
    functions too (a module importing an error where it raises it), resolved."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            try:
                source = importlib.import_module(("." * node.level) + (node.module or ""), module.__package__
                                                 if node.level else None)
            except ImportError:
                continue
            for alias in node.names:
                if hasattr(source, alias.name):
                    out[alias.asname or alias.name] = getattr(source, alias.name)
    return out


def raised(tree, namespace):
    """(line, class, enclosing function, caught where raised) for every
    `raise X(...)` or `raise X` whose X names a class, and every `raise e`
    where the function made `e = X(...)`; a bare `raise`, a re-raise of a
    caught exception (a local name) and a function's result are not classes
    and are left out."""
    def made(function):
        """Local name -> the class expression it was made from (`e = X(...)`)."""
        return {a.targets[0].id: a.value.func for a in ast.walk(function)
                if isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
                and isinstance(a.value, ast.Call)}

    def walk(node, function, catching, local=None):
        local = local or {}
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(child, child.name, set(), made(child))
            elif isinstance(child, ast.Try):
                names = _handled(ast.Module(body=[*child.handlers], type_ignores=[]))
                for part in child.body:
                    walk(ast.Module(body=[part], type_ignores=[]), function, catching | names, local)
                for part in [*child.handlers, *child.orelse, *child.finalbody]:
                    walk(part, function, catching, local)
            else:
                if isinstance(child, ast.Raise) and child.exc is not None:
                    target = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                    if isinstance(target, ast.Name) and target.id in local:
                        target = local[target.id]
                    value = namespace
                    for part in ast.unparse(target).split("."):
                        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
                    if isinstance(value, type) and issubclass(value, BaseException):
                        found.append((child.lineno, value, function, value.__name__ in catching))
                walk(child, function, catching, local)

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


def _modules():
    """(path, parsed module, namespace: builtins, the module's names and every
    name it imports anywhere) for each module of the package."""
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        tree = ast.parse(path.read_text(), str(path))
        yield path, tree, {**vars(builtins), **imported_anywhere(tree, module), **vars(module)}


def test_every_error_the_package_raises_on_purpose_is_a_somatize_error():
    modules = list(_modules())
    handled_anywhere = set().union(*(_handled(tree) for _, tree, _ in modules))
    found = []
    for path, tree, namespace in modules:
        found += [f"{path.relative_to(ROOT)}: {s}" for s in stray_errors(tree, namespace, handled_anywhere)]
    assert found == []


def unreachable_errors(tree, namespace, answered):
    """The SomatizeErrors a module raises that a user cannot name from
    ``somatize`` (``except somatize.CodecError:``). ``answered``: the classes
    the server's handlers catch, turning each into an HTTP status; no Python
    caller meets those."""
    for line, cls, function, caught_here in raised(tree, namespace):
        if not issubclass(cls, somatize.SomatizeError) or caught_here or cls in answered:
            continue
        if getattr(somatize, cls.__name__, None) is not cls or cls.__name__ not in somatize.__all__:
            yield f"line {line}: raise {cls.__name__} in {function}() ({cls.__module__})"


def test_every_error_the_package_raises_on_purpose_can_be_caught_by_its_public_name():
    """Issue 22: CodecError, MissingExtra, SomatizeKeyError, SomatizeTypeError
    and SomatizeValueError were raised but lived only in a private module."""
    modules = list(_modules())
    handlers = importlib.import_module("somatize._server._handlers")
    handled = _handled(ast.parse(pathlib.Path(handlers.__file__).read_text()))
    answered = {getattr(handlers, n) for n in handled if isinstance(getattr(handlers, n, None), type)}
    answered = {c for c in answered if c.__module__.startswith("somatize._server")}
    assert answered  # NotFound, Bad, Busy: not vacuous
    found, seen = [], set()
    for path, tree, namespace in modules:
        found += [f"{path.relative_to(ROOT)}: {s}" for s in unreachable_errors(tree, namespace, answered)]
        seen |= {cls.__name__ for _, cls, _, _ in raised(tree, namespace)}
    assert found == []
    assert {"CodecError", "MissingExtra", "SomatizeValueError", "NonFiniteLoss", "DamagedError"} <= seen


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
        "def k():\n"
        "    e = LookupError('made first')\n"
        "    raise e\n"  # found: made here, then raised
    )
    namespace = dict(vars(builtins))
    exec(compile(source, "<scan>", "exec"), namespace)
    namespace["Private"].__module__ = "somatize.fake"
    found = list(stray_errors(ast.parse(source), namespace, handled_anywhere=set()))
    assert [f.split(":")[0] for f in found] == ["line 3", "line 4", "line 13", "line 16"]
    # a private class of the package, caught somewhere in it, is a signal, not an error a user meets
    assert len(list(stray_errors(ast.parse(source), namespace, handled_anywhere={"Private"}))) == 3
