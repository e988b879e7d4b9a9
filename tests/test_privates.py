"""The Trainer and its parts use each other's public faces: the evaluation,
launch, the front class and every part read no private attribute of a value
they did not import (``trainer._modes``, ``getattr(trainer, "_pair")``) and
take no private name of another somatize package (``from ..record import
_flusher``, ``_flusher._close_all()``). Read from the code, an AST walk."""

import ast
import pathlib

import pytest

import somatize

ROOT = pathlib.Path(somatize.__file__).parent
EXCUSED = {  # modules of somatize/torch that reach for a private name, each with its reason
    "_bulk.py": "torch's version counter of a tensor logged (t._version): one changed in place before its read",
    "_cursor.py": "the one place a DataLoader iterator's private cursor is read (_sampler_iter, _num_yielded)",
    "_weights.py": "torch's version counter of a tensor (t._version) and the weights digest the engine keeps on a "
                   "node (_sz_weights)",
}
CHECKED = sorted(p.name for p in (ROOT / "torch").glob("*.py") if p.name not in EXCUSED)
NAMED = {"getattr", "setattr", "hasattr", "delattr"}


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _bound(tree, package):
    """Each name the module binds by an import: "own" (a module or name of
    its own package), "other" (of another somatize package) or "outside"
    (not somatize)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                where = "outside" if parts[0] != "somatize" else "own" if parts[1:2] == list(package[:1]) else "other"
                out[a.asname or parts[0]] = where
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                out[a.asname or a.name] = _from(node, package)
    return out


def _from(node, package):
    """Where ``from <module> import ...`` takes its names from: own, other or outside."""
    if node.level:
        base = list(package[: len(package) - (node.level - 1)])
        target = base + (node.module.split(".") if node.module else [])
    elif node.module.split(".")[0] == "somatize":
        target = node.module.split(".")[1:]
    else:
        return "outside"
    return "own" if target[:1] == list(package[:1]) else "other"


def reaches(source, package=("torch",), path="<source>"):
    """``'line: what'`` for each private name the module reaches for: an
    attribute of a value it did not import, or a name of another package."""
    tree = ast.parse(source, path)
    bound = _bound(tree, package)
    wrong = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _from(node, package) == "other":
            for a in node.names:
                if _private(a.name):
                    wrong.append(f"{node.lineno}: imports {a.name} from {'.' * node.level}{node.module or ''}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue  # its own
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and (bound.get(root.id) == "outside" or bound.get(root.id) == "own"
                                               and root is node.value):
                continue  # not somatize's (os._exit, torch._C._set_grad_enabled), or a module of its own package
            wrong.append(f"{node.lineno}: reads {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) in NAMED and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value)):
            wrong.append(f"{node.lineno}: reads {ast.unparse(node)}")
    return wrong


def test_evaluate_launch_and_the_trainers_parts_are_checked():
    assert {"_evaluate.py", "_launch.py", "_trainer.py"} <= set(CHECKED)


@pytest.mark.parametrize("name", CHECKED)
def test_the_torch_layer_reaches_for_no_private_name(name):
    path = ROOT / "torch" / name
    assert reaches(path.read_text(), ("torch",), str(path)) == []


@pytest.mark.parametrize("name", sorted(EXCUSED))
def test_every_module_excused_still_needs_it(name):
    path = ROOT / "torch" / name
    assert reaches(path.read_text(), ("torch",), str(path)) != []


@pytest.mark.parametrize("source", [
    "def evaluate(trainer, batches):\n    return trainer._modes.evaluating()\n",
    "def evaluate(trainer, batch):\n    return trainer._pair(batch)\n",
    "def evaluate(trainer):\n    modes = trainer.parts\n    return modes._flat\n",
    "def evaluate(trainer):\n    return getattr(trainer, '_emitting')\n",
    "class Trainer:\n    def step(self):\n        return self._ranks._collective\n",
    "from ..record import _flusher\n",
    "from ..record._flusher import _close_all\n",
    "from somatize.record._flusher import _close_all\n",
    "import somatize.record._flusher as flusher\nflusher._close_all()\n",
    "from ..record import _flusher as flusher\n",
])
def test_a_private_name_reached_for_is_caught(source):
    assert len(reaches(source)) == 1, reaches(source)


@pytest.mark.parametrize("source", [
    "import os\nos._exit(1)\n",
    "import torch\ntorch._foreach_mul_([], 2.0)\n",
    "import torch\ntorch._C._set_grad_enabled(False)\n",
    "from . import _cursor\n_cursor.skip([], iter([]), 0)\n",
    "class A:\n    def f(self):\n        return self._x\n",
    "from ..record._flusher import close_all\nclose_all()\n",
    "from .._base.errors import RankLost\n",
    "def evaluate(modes):\n    return modes.evaluating()\n",
])
def test_a_public_face_or_a_name_of_its_own_is_not_caught(source):
    assert reaches(source) == []
