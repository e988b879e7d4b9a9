"""One owner per concept: a run's name, a store's root, the runs of a store,
a series' bytes are each decided in one place, and every part of the package
asks it, so they cannot drift (docs/ARCHITECTURE.md, "Store")."""

import ast
import pathlib

import pytest

import somatize
from somatize import Recorder, Store
from somatize._base.errors import SomatizeValueError
from somatize._server._browse import Browser
from somatize._server._public import NotFound
from somatize._store.names import RUN_NAME_LIMIT, is_run_name
from somatize.record import runs

ROOT = pathlib.Path(somatize.__file__).parent
OWNERS = {  # concept -> the one module that defines it
    "store_root": "_store/names.py",
    "run_names": "_store/names.py",
    "is_run_name": "_store/names.py",
    "points_bytes": "record/_log.py",
    "trash_name": "_base/files.py",
}


def definitions():
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef):
                yield node.name, path.relative_to(ROOT).as_posix()


def test_each_concept_is_defined_once():
    found = {}
    for name, where in definitions():
        if name in OWNERS:
            found.setdefault(name, []).append(where)
    assert found == {name: [where] for name, where in OWNERS.items()}


def test_the_run_name_pattern_is_read_only_by_its_owner():
    users = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py") if "RUN_NAME.fullmatch" in p.read_text())
    assert users == ["_store/names.py"]


NAMES = ["a-run", "a" * RUN_NAME_LIMIT, "a" * (RUN_NAME_LIMIT + 1), "..", "a b", "é"]


@pytest.mark.parametrize("name", NAMES)
def test_recording_listing_and_the_run_browser_agree_on_a_run_name(tmp_path, name):
    """A folder under runs/ with a summary: the Store lists it, runs() lists
    it, the run browser finds it, and a Recorder may record it, all or none."""
    store = Store(tmp_path / "store")
    with Recorder(store, run="model") as r:
        r({"fact": "updated"})
    if name not in ("..",):
        folder = store.path / "runs" / name
        folder.mkdir()
        (folder / "summary.json").write_bytes((store.path / "runs" / "model" / "summary.json").read_bytes())
    try:
        Recorder(tmp_path / "other", run=name).close()
        recordable = True
    except SomatizeValueError:
        recordable = False
    browser = Browser(tmp_path)
    sid = next(s["id"] for s in browser.stores() if s["path"] == "store")
    try:
        browser.run_folder(sid, name)
        found = True
    except NotFound:
        found = False
    said = [is_run_name(name), name in store.runs(), name in list(runs(store)["run"]), found, recordable]
    assert said in ([True] * 5, [False] * 5), said
